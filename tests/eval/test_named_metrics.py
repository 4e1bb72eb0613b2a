"""Named metrics beside the primary score (``generate.metrics``): GSM8K's lm-eval
``strict_match`` and ``flexible_extract``, each its own extraction and comparison, recorded
per item; lm-eval's ``exact_match`` preprocessing reproduced exactly."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from test_runner import ScriptedBackend, _gen_spec

from pytest_llmeval.dataset import Item, load_items
from pytest_llmeval.eval import TaskRunner
from pytest_llmeval.scorer import extract, lmeval_exact_match
from pytest_llmeval.task import ExactMatchOptions, load_task_spec

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
GSM8K = load_task_spec(BENCHMARKS / "gsm8k.yaml")
LMEVAL_GSM8K = ExactMatchOptions(
    regexes_to_ignore=(",", "\\$", "(?s).*#### ", "\\.$"), ignore_case=True
)


def _item(answer: str) -> Item:
    return Item(id="gsm8k-0000", index=0, doc={"question": "How many?", "answer": answer})


def _gsm8k_scores(output: str, target: str, finish: str = "stop") -> tuple[bool, dict[str, float]]:
    """Our primary correctness and the named metrics of the real GSM8K spec on one output."""
    item = _item(f"... #### {target}")
    runner = TaskRunner(GSM8K, [])
    (result,) = runner.run([item], ScriptedBackend(text=lambda r: (output, finish)))
    assert result.metrics is not None
    return result.correct, {k: v["score"] for k, v in result.metrics.items()}


@pytest.mark.parametrize(
    ("output", "target", "correct", "strict", "flexible"),
    [
        (" Ann has 3 + 15 = 18. The answer is 18.", "18", True, 1.0, 1.0),
        # lm-eval's strict pattern needs a character after the number ("." is any character):
        # at the very end of the output it takes "1" of "18".
        (" 3 + 15 = 18. The answer is 18", "18", True, 0.0, 1.0),
        (" The answer is $1,234.", "1234", True, 0.0, 1.0),  # strict: "$" is not in [0-9.,]
        (" The answer is 1,234.", "1234", True, 1.0, 1.0),
        (" So 5 + 13 = 18 apples in all.", "18", True, 0.0, 1.0),
        (" The answer is 18. Then 2 more.", "18", True, 1.0, 0.0),  # flexible: the last number
        (" The answer is -7.", "-7", True, 1.0, 1.0),
        # Ours compares numbers (18.00 is 18); lm-eval compares text ("18.00" vs "18").
        (" It costs 18.00 dollars.", "18", True, 0.0, 0.0),
        (" no number at all", "18", False, 0.0, 0.0),
    ],
)
def test_gsm8k_named_metrics(
    output: str, target: str, correct: bool, strict: float, flexible: float
) -> None:
    assert _gsm8k_scores(output, target) == (
        correct,
        {"strict_match": strict, "flexible_extract": flexible},
    )


def test_named_metrics_ignore_if_finished_and_are_recorded(tmp_path: Path) -> None:
    """A cut-off output: the primary chain skips its last-number fallback; lm-eval's
    flexible filter has no such rule and takes it. Tasks without metrics record none."""
    assert _gsm8k_scores(" 3 + 15 = 18", "18", finish="length") == (
        False,
        {"strict_match": 0.0, "flexible_extract": 1.0},
    )
    spec = _gen_spec(tmp_path)
    (result,) = TaskRunner(spec, [tmp_path]).run(
        load_items(spec, [tmp_path])[:1], ScriptedBackend(text=lambda r: "The answer is 7.")
    )
    assert result.metrics is None and "metrics" not in result.to_dict()


def test_gsm8k_metrics_record_their_answers() -> None:
    item = _item("#### 18")
    (result,) = TaskRunner(GSM8K, []).run(
        [item], ScriptedBackend(text=lambda r: " The answer is 18. Then 2.")
    )
    assert result.metrics == {
        # lm-eval's strict pattern takes "18." (its exact_match drops a final ".").
        "strict_match": {"score": 1.0, "extracted": "18."},
        "flexible_extract": {"score": 0.0, "extracted": "2."},
    }
    again = type(result).from_dict(result.to_dict())
    assert again.metrics == result.metrics


@pytest.mark.parametrize(
    ("prediction", "reference", "expected"),
    [
        ("$1,234.", "1234", True),
        ("18", "#### 18", True),
        ("ABC", "abc", True),
        ("18.0", "18", False),
        (None, "[invalid]", False),
    ],
)
def test_lmeval_exact_match_cases(prediction: str | None, reference: str, expected: bool) -> None:
    assert lmeval_exact_match(prediction, reference, LMEVAL_GSM8K) is expected


def test_lmeval_exact_match_agrees_with_lm_eval() -> None:
    """Against lm-eval's own function, on random strings of digits, punctuation, NULs and
    letters whose lower case changes length or depends on context (NumPy's fixed-width
    strings: trailing NULs lost, a longer lower case cut)."""
    metrics = pytest.importorskip("lm_eval.api.metrics")
    options = [
        LMEVAL_GSM8K,
        ExactMatchOptions(),
        ExactMatchOptions(("a",), ignore_case=True, ignore_punctuation=True, ignore_numbers=True),
        ExactMatchOptions(ignore_case=True),
    ]
    alphabet = [*"128,.$# \nAa-Q", "İ", "ß", "\x00", "Σ", "ς"]
    rnd = random.Random(7)
    for _ in range(5000):
        o = rnd.choice(options)
        p = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 8)))
        r = p.upper() if rnd.random() < 0.3 else "".join(rnd.choice(alphabet) for _ in range(6))
        want = metrics.exact_match_hf_evaluate(
            predictions=[p],
            references=[r],
            regexes_to_ignore=list(o.regexes_to_ignore) or None,
            ignore_case=o.ignore_case,
            ignore_punctuation=o.ignore_punctuation,
            ignore_numbers=o.ignore_numbers,
        )["exact_match"]
        assert lmeval_exact_match(p, r, o) is bool(want), (p, r, o)


def test_gsm8k_filters_agree_with_lm_eval() -> None:
    """Our strict/flexible extraction equals lm-eval's regex + take_first filters (with its
    "[invalid]" fallback read as no answer) on outputs with and without matches."""
    extraction = pytest.importorskip("lm_eval.filters.extraction")
    assert GSM8K.generate is not None
    outputs = [
        " The answer is 18.",
        " The answer is 18",
        " The answer is $18. Or 19, 20",
        "-5 and 6. The answer is -5.5, I think",
        "$$ 3 $",
        "nothing",
        "1.",
        "",
    ]
    filters = {
        "strict_match": extraction.RegexFilter("The answer is (\\-?[0-9\\.\\,]+).", 0),
        "flexible_extract": extraction.RegexFilter("(-?[$0-9.,]{2,})|(-?[0-9]+)", -1),
    }
    for metric in GSM8K.generate.metrics:
        lm = filters[metric.name]
        for out in outputs:
            (theirs,) = list(lm.apply([[out]], [{}]))
            ours = extract(out, metric.extract).answer
            assert (ours if ours is not None else "[invalid]") == theirs[0], (metric.name, out)


def test_an_items_description_shows_its_named_metrics() -> None:
    """What a failing item's report shows: each named metric with its own answer."""
    from pytest_llmeval.plugin._collect import describe

    (result,) = TaskRunner(GSM8K, []).run(
        [_item("#### 18")], ScriptedBackend(text=lambda r: " 9 * 2 = 18. The answer is 18. Q")
    )
    text = describe(result.to_dict())
    assert "strict_match: 1.0 (answer '18.')" in text
    assert "flexible_extract: 1.0 (answer '18.')" in text
