"""Contamination checks: cheap probes that run as tests, and a corpus n-gram scan.

Plain Python (no torch, no pytest wiring): the probes take a
:class:`~pytest_llmeval.model.Backend` and task items; the scan streams a corpus against a
benchmark's n-grams (``llmeval-contamination scan``, see ``docs/CONTAMINATION.md``).

- probes (``_probes``, ``_rewrite``): option shuffling, the canonical-order test, number
  rewrites, with paired statistics;
- membership scores (``_membership``): Min-K%, Min-K%++ against rewritten references;
- behavioural cues (``_cues``): recall cues in generations, guided completion;
- TS-Guessing (``_guessing``): fill in a masked wrong option, generation only;
- CircularEval (``_circular``): every cyclic rotation of the options, the published order
  tested against chance or against a reference model (``_reference``);
- the n-gram scan (``_ngram``, ``_corpus``, ``_scan``): normalisation, hashing, sharded
  corpus streaming, local processes or Dask;
- ``experiment``: the planted-contamination experiment (needs torch).
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
    MembershipReport,
    MembershipScore,
    membership_probe,
    membership_scores,
    min_k,
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
    option_shuffle_probe,
)
from pytest_llmeval.contamination._reference import ReferenceComparison, compare_indicator
from pytest_llmeval.contamination._rewrite import (
    CITIES,
    FIRST_NAMES,
    CalculationError,
    EntityRewrite,
    NumberRewrite,
    calculations,
    evaluate,
    option_orders,
    permute_options,
    recheck,
    rewrite_entities,
    rewrite_numbers,
)
from pytest_llmeval.contamination._scan import DEFAULT_THRESHOLD, load_benchmark

__all__ = [
    "BENCHMARK_NAMES",
    "CITIES",
    "DEFAULT_N",
    "DEFAULT_THRESHOLD",
    "FIRST_NAMES",
    "BenchmarkIndex",
    "CalculationError",
    "CircularItem",
    "CircularReport",
    "Cue",
    "CueReport",
    "Document",
    "Documents",
    "EntityRewrite",
    "FileRange",
    "GuessingItem",
    "GuessingReport",
    "GuidedReport",
    "HubShard",
    "ItemHits",
    "ItemReport",
    "Location",
    "MembershipReport",
    "MembershipScore",
    "NumberRewrite",
    "OrderTestReport",
    "PairedItem",
    "PairedReport",
    "ParquetRows",
    "ReferenceComparison",
    "ScanReport",
    "Shard",
    "ShardResult",
    "behavioural_cues",
    "calculations",
    "canonical_order_test",
    "circular_probe",
    "circular_vs_reference",
    "compare_indicator",
    "entity_rewrite_probe",
    "evaluate",
    "guessing_prompt",
    "guessing_vs_reference",
    "guided_completion_probe",
    "iter_documents",
    "load_benchmark",
    "longest_shared_run",
    "maskable",
    "masked_option",
    "membership_probe",
    "membership_scores",
    "merge",
    "min_k",
    "ngram_hash",
    "normalize",
    "normalize_guess",
    "number_rewrite_probe",
    "option_orders",
    "option_shuffle_probe",
    "permute_options",
    "plan_shards",
    "poisson_binomial_upper_tail",
    "recheck",
    "resolve_corpus",
    "rewrite_entities",
    "rewrite_numbers",
    "rotation_orders",
    "rouge_l",
    "scan_local",
    "scan_output",
    "scan_shard",
    "scan_with_dask",
    "ts_guessing_probe",
]
