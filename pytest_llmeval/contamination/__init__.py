"""Contamination checks: cheap probes that run as tests, and a corpus n-gram scan.

Plain Python (no torch, no pytest wiring): the probes take a
:class:`~pytest_llmeval.model.Backend` and task items; the scan streams a corpus against a
benchmark's n-grams (``llmeval-contamination scan``, see ``docs/CONTAMINATION.md``).

- probes (``_probes``, ``_rewrite``): option shuffling, the canonical-order test, number
  rewrites, with paired statistics;
- membership scores (``_membership``): Min-K%, Min-K%++ against rewritten references;
- verdicts (``_verdicts``): every task-level test against a null that fits (a reference
  model, exchangeable items, the items' own rewrites), calibrated item flags, handling;
- behavioural cues (``_cues``): recall cues in generations, guided completion;
- resume (``_resume``): a probe's model calls in fixed chunks, each kept as computed;
- TS-Guessing (``_guessing``): fill in a masked wrong option, generation only;
- CircularEval (``_circular``): every cyclic rotation of the options, the published order
  tested against chance or against a reference model (``_reference``);
- the n-gram scan (``_ngram``, ``_corpus``, ``_scan``): normalisation, hashing, sharded
  corpus streaming, local processes or Dask.

The planted-contamination experiment and the scan's throughput benchmark are tools of the
repository, not of this package (``python -m tools.contamination_experiment``,
``python -m tools.contamination_bench``).
"""

from pytest_llmeval.contamination._circular import (
    CircularItem,
    CircularReport,
    circular_probe,
    circular_vs_reference,
    poisson_binomial_upper_tail,
    rotation_orders,
)
from pytest_llmeval.contamination._corpus import (
    Document,
    Documents,
    FileRange,
    HubShard,
    ParquetRows,
    Shard,
    iter_documents,
    plan_shards,
    resolve_corpus,
)
from pytest_llmeval.contamination._cues import (
    BENCHMARK_NAMES,
    Cue,
    CueReport,
    GuidedReport,
    behavioural_cues,
    guided_completion_probe,
    longest_shared_run,
    rouge_l,
    scan_output,
)
from pytest_llmeval.contamination._guessing import (
    GuessingItem,
    GuessingReport,
    guessing_prompt,
    guessing_vs_reference,
    maskable,
    masked_option,
    normalize_guess,
    ts_guessing_probe,
)
from pytest_llmeval.contamination._membership import (
    ItemMembership,
    MembershipReport,
    MembershipScore,
    membership_probe,
    membership_records,
    membership_scores,
    min_k,
    rewrite_kind,
    rewritten_docs,
)
from pytest_llmeval.contamination._ngram import (
    DEFAULT_N,
    BenchmarkIndex,
    ItemHits,
    ItemReport,
    Location,
    ScanReport,
    ShardResult,
    merge,
    ngram_hash,
    normalize,
    scan_local,
    scan_shard,
    scan_with_dask,
)
from pytest_llmeval.contamination._probes import (
    OrderTestReport,
    PairedItem,
    PairedReport,
    canonical_order_test,
    entity_rewrite_probe,
    number_rewrite_probe,
    option_fields,
    option_shuffle_probe,
)
from pytest_llmeval.contamination._reference import ReferenceComparison, compare_indicator
from pytest_llmeval.contamination._resume import (
    CHUNK_REQUESTS,
    ChunkCounts,
    ChunkedBackend,
    ChunkStore,
    NoStore,
    chunk_digest,
)
from pytest_llmeval.contamination._rewrite import (
    CITIES,
    FIRST_NAMES,
    CalculationError,
    EntityRewrite,
    NumberRewrite,
    calculations,
    evaluate,
    gold_index,
    option_orders,
    option_texts,
    permute_options,
    recheck,
    rewrite_entities,
    rewrite_numbers,
    shuffled_orders,
)
from pytest_llmeval.contamination._scan import DEFAULT_THRESHOLD, load_benchmark
from pytest_llmeval.contamination._validation import (
    Validation,
    conditions_text,
    validation,
    validation_note,
)
from pytest_llmeval.contamination._verdicts import (
    EXCHANGEABILITY_RULES,
    MEMBERSHIP_SCORES,
    ContaminationVerdict,
    FlagReport,
    Handling,
    SubsetScore,
    circular_verdict,
    exchangeability,
    guessing_verdict,
    handling,
    membership_flags,
    order_verdict,
)

__all__ = [
    "BENCHMARK_NAMES",
    "CHUNK_REQUESTS",
    "CITIES",
    "DEFAULT_N",
    "DEFAULT_THRESHOLD",
    "EXCHANGEABILITY_RULES",
    "FIRST_NAMES",
    "MEMBERSHIP_SCORES",
    "BenchmarkIndex",
    "CalculationError",
    "ChunkCounts",
    "ChunkStore",
    "ChunkedBackend",
    "CircularItem",
    "CircularReport",
    "ContaminationVerdict",
    "Cue",
    "CueReport",
    "Document",
    "Documents",
    "EntityRewrite",
    "FileRange",
    "FlagReport",
    "GuessingItem",
    "GuessingReport",
    "GuidedReport",
    "Handling",
    "HubShard",
    "ItemHits",
    "ItemMembership",
    "ItemReport",
    "Location",
    "MembershipReport",
    "MembershipScore",
    "NoStore",
    "NumberRewrite",
    "OrderTestReport",
    "PairedItem",
    "PairedReport",
    "ParquetRows",
    "ReferenceComparison",
    "ScanReport",
    "Shard",
    "ShardResult",
    "SubsetScore",
    "Validation",
    "behavioural_cues",
    "calculations",
    "canonical_order_test",
    "chunk_digest",
    "circular_probe",
    "circular_verdict",
    "circular_vs_reference",
    "compare_indicator",
    "conditions_text",
    "entity_rewrite_probe",
    "evaluate",
    "exchangeability",
    "gold_index",
    "guessing_prompt",
    "guessing_verdict",
    "guessing_vs_reference",
    "guided_completion_probe",
    "handling",
    "iter_documents",
    "load_benchmark",
    "longest_shared_run",
    "maskable",
    "masked_option",
    "membership_flags",
    "membership_probe",
    "membership_records",
    "membership_scores",
    "merge",
    "min_k",
    "ngram_hash",
    "normalize",
    "normalize_guess",
    "number_rewrite_probe",
    "option_fields",
    "option_orders",
    "option_shuffle_probe",
    "option_texts",
    "order_verdict",
    "permute_options",
    "plan_shards",
    "poisson_binomial_upper_tail",
    "recheck",
    "resolve_corpus",
    "rewrite_entities",
    "rewrite_kind",
    "rewrite_numbers",
    "rewritten_docs",
    "rotation_orders",
    "rouge_l",
    "scan_local",
    "scan_output",
    "scan_shard",
    "scan_with_dask",
    "shuffled_orders",
    "ts_guessing_probe",
    "validation",
    "validation_note",
]
