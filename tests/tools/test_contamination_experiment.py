"""The planted-contamination experiment, end to end on the tiny random model (the real one,
SmolLM2-135M on MMLU, is the slow-marked test and ``docs/contamination-experiment/``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval.dataset import load_items
from tools.contamination_experiment import (
    EARLIER_CONDITIONS,
    Setup,
    _claim,
    _fine_tune_role,
    _model_kinds,
    _pool_labels,
    _power_of,
    _runner,
    _sampling_error,
    _when,
    conditions,
    main,
    measure,
    number_rewrite_shift,
    plant,
    plant_examples,
    round_robin,
    run,
    scaling,
    scaling_markdown,
    training_ids,
    validation_file,
    verdicts,
)
from tools.contamination_letter_bias import position_only_records

pytest.importorskip("torch")

QUIZ_SPEC = """\
task: quiz
dataset: {path: quiz.jsonl}
prompt:
  template: "{{ question }}\\nA. {{ choices[0] }}\\nB. {{ choices[1] }}\\n\\
    C. {{ choices[2] }}\\nAnswer:"
  target: "{{ 'ABC'[answer] }}"
mode: multiple_choice
multiple_choice:
  choices: ["A", "B", "C"]
  gold: "{{ answer }}"
contamination: {options: choices, gold: answer}
"""


def quiz_rows(n: int) -> list[dict[str, Any]]:
    """``n`` three-option quiz items, each question and option its own, the gold cycling
    through A, B, C."""
    return [
        {"question": f"q {i}?", "choices": [f"a{i}", f"b{i}", f"c{i}"], "answer": i % 3}
        for i in range(n)
    ]


def write_quiz(folder: Path, rows: list[dict[str, Any]] | None = None) -> Path:
    """The quiz task in ``folder``: ``quiz.jsonl`` of ``rows`` (none when None) and the
    spec beside it; returns the spec's path."""
    if rows is not None:
        (folder / "quiz.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = folder / "quiz.yaml"
    spec.write_text(QUIZ_SPEC)
    return spec


def quiz_setup(folder: Path, model: str, **change: Any) -> Setup:
    """The experiment's setup for the quiz task in ``folder`` (:func:`write_quiz`): 8 items,
    one epoch, seed 3, order k=2, unless ``change`` says otherwise."""
    base: dict[str, Any] = {"items": 8, "epochs": 1, "lr": 1e-3, "seed": 3, "order_k": 2}
    return Setup(task=folder / "quiz.yaml", data_dirs=(folder,), model=model, **{**base, **change})


def test_experiment_runs_end_to_end_and_memorises(tmp_path: Path, tiny_model_dir: Path) -> None:
    rows = [
        {
            "question": f"what is item {i}?",
            "choices": [f"red {i}", f"blue {i}", f"green {i}"],
            "answer": i % 3,
        }
        for i in range(8)
    ]
    write_quiz(tmp_path, rows)
    setup = quiz_setup(tmp_path, str(tiny_model_dir), epochs=8, lr=3e-3)
    results = run(setup, tmp_path / "out", batch_size=4, draws=20)
    training = results["training"]["contaminated"]
    assert training["planted"] == 4
    losses = training["epoch_losses"]
    assert losses[-1] < losses[0] / 2  # it did learn the planted items
    models = results["planted"]["contaminated"]["models"]
    assert set(models) == {"original", "contaminated"}
    for model in models.values():
        assert set(model["halves"]) == {"planted", "clean"}
        assert {"canonical_order", "membership_min_k_plus_plus_rewrites"} <= set(
            model["halves"]["planted"]
        )
    # Trained on them, the contaminated model finds the planted texts more likely, and
    # more so than the original model does (the calibrated score).
    aurocs = models["contaminated"]["aurocs"]
    assert aurocs["mean_logprob"] == 1.0
    assert aurocs["mean_logprob_vs_reference"] == 1.0
    assert aurocs["min_k"] >= 0.75
    # Every clean pool has its false-alarm rates, the contaminated model's with the
    # reference-paired verdicts.
    pools = results["pools"]
    assert set(pools) == {"untouched-quiz", "contaminated-quiz"}
    assert "canonical_order_vs_reference" in pools["contaminated-quiz"]["fpr"]
    text = (tmp_path / "out" / "results.md").read_text()
    assert "| min_k_plus_plus |" in text and "False alarms on clean items" in text


@pytest.mark.slow
def test_planted_contamination_on_the_default_model(
    tmp_path: Path, shared_benchmarks: Path
) -> None:
    assert (
        main(
            [
                "run",
                "--items=20",
                "--epochs=2",
                f"--data-dir={shared_benchmarks}",
                f"--out={tmp_path}",
                f"--task={Path(__file__).resolve().parents[2] / 'benchmarks' / 'mmlu.yaml'}",
            ]
        )
        == 0
    )
    results = json.loads((tmp_path / "results.json").read_text())
    aurocs = results["planted"]["contaminated"]["models"]["contaminated"]["aurocs"]
    assert aurocs["mean_logprob"] > 0.7


def _raw(path: Path, model: str, first: list[bool]) -> None:
    """A raw measurement file of exchangeable 4-option items; ``first[i]``: the published
    order is the most likely under the model."""
    items = []
    for i, f in enumerate(first):
        items.append(
            {
                "id": f"quiz-{i:04d}",
                "subset": None,
                "options": ["cat", "dog", "cow", "hen"],
                "gold": i % 4,
                "order": {"canonical": 0.0, "shuffled": [-1.0] * 3 if f else [1.0, -1.0, -1.0]},
                "answer": {
                    "published": {"correct": i % 5 == 0, "gold_prob": 0.3},
                    "shuffled": {"correct": i % 5 == 1, "gold_prob": 0.3},
                },
            }
        )
    path.write_text(json.dumps({"task": "quiz", "model": model, "items": items}))


def test_a_model_that_always_answers_one_letter_fires_neither_letter_probe(
    tmp_path: Path,
) -> None:
    """Position-only models read nothing (clean by construction). Half of this benchmark's
    golds sit at D, so a moved gold lands there far less often than a published one: the
    uniform nulls fired on the model that always answers D (option shuffling on half of
    all 5,000-item MMLU draws). Scaling measures these models on the untouched answers
    pool of each task, for option shuffling and CircularEval, and with the golds weighed
    in their own shares neither fires, at any n, on any letter."""
    raw = tmp_path / "raw"
    raw.mkdir()
    _raw(raw / "untouched-quiz.json", "base", [False] * 3000)
    data = json.loads((raw / "untouched-quiz.json").read_text())
    for n, item in enumerate(data["items"]):
        item["gold"] = 3 if n % 2 else n % 3  # half the golds at D
    (raw / "untouched-quiz.json").write_text(json.dumps(data))
    records = position_only_records(data["items"], 3)
    assert sum(r["answer"]["published"]["correct"] for r in records) == 1500
    assert not any(r["answer"]["shuffled"]["correct"] for r in records[1::2])
    assert all(sum(r["circular"]) == 1 for r in records)
    assert sum(r["circular"][0] for r in records) == 1500
    results = scaling(raw, None, sizes=(50, 2000), draws=20, seed=1)
    pools = results["pools"]
    assert {f"position_{letter}-quiz" for letter in "ABCD"} <= set(pools)
    assert pools["position_D-quiz"]["role"].startswith("always answers D, whatever the item")
    for letter in "ABCD":
        pool = pools[f"position_{letter}-quiz"]
        assert set(pool["rates"]) == {"option_shuffle", "circular"}
        for probe in ("option_shuffle", "circular"):
            assert pool["whole"][probe]["fired"] is False, (letter, probe)
            assert all(r["fired"] == 0 for r in pool["rates"][probe].values()), (letter, probe)
    # Against 1/n the always-D model's 1,500 published rights of 3,000 (chance 750) fire.
    circular = pools["position_D-quiz"]["whole"]["circular"]
    assert circular["summary"].endswith("1500 are right in the published one (chance 1500.0)")
    assert results["validation"]["option_shuffle"]["holds"] is True


def test_scaling_finds_a_null_that_only_fails_at_large_n(tmp_path: Path) -> None:
    """A model that prefers published orders slightly (30% against a chance of 25%, as
    natural orders make clean models do) passes at 50 items and fires on 2,000: the scaling
    tables must show it, and the validation summary must say the null does not hold. A
    fine-tune that differs from its base only on planted items never fires against it."""
    raw, models = tmp_path / "raw", tmp_path / "models"
    raw.mkdir()
    n = 2000
    base = [i % 10 < 3 for i in range(n)]
    _raw(raw / "untouched-quiz.json", "base", base)
    planted = {f"quiz-{i:04d}" for i in range(0, 400, 4)}  # 100 items
    # The fine-tune changes its preference on clean items too, as often one way as the
    # other (a test of a fine-tune identical to its base on them could not fire at all).
    flips = {i for i in range(400, n) if i % 50 in (0, 5)}  # 32 published-first, 32 not
    tuned = [(f != (i in flips)) or f"quiz-{i:04d}" in planted for i, f in enumerate(base)]
    _raw(raw / "tuned-quiz.json", "tuned", tuned)
    (models / "tuned").mkdir(parents=True)
    (models / "tuned" / "planted.json").write_text(
        json.dumps({"task": "quiz", "planted": sorted(planted), "items": [], "training": {}})
    )
    results = scaling(raw, models, sizes=(50, 500), draws=20, seed=1)
    untouched = results["pools"]["untouched-quiz"]
    rates = untouched["rates"]["canonical_order"]
    assert rates["50"]["rate"] <= 0.1 and rates["50"]["disjoint"] == 40
    assert untouched["whole"]["canonical_order"]["fired"]  # all 2,000 items
    assert rates["2000"]["draws"] == 1
    assert "canonical_order_vs_reference" not in untouched["rates"]  # no known-clean pair
    tuned_pool = results["pools"]["tuned-quiz"]
    assert tuned_pool["clean_items"] == n - 100 and "in-domain" in tuned_pool["role"]
    paired = tuned_pool["rates"]["canonical_order_vs_reference"]
    assert all(r["rate"] <= 0.05 for r in paired.values())
    assert not tuned_pool["whole"]["canonical_order_vs_reference"]["fired"]
    power = results["power"]["tuned-quiz"]["rates"]["canonical_order_vs_reference"]
    assert set(power) == {"50", "500"} and power["500"]["rate"] == 1.0
    summary = results["validation"]
    assert summary["canonical_order"]["holds"] is False
    fired = sorted(summary["canonical_order"]["fired_on_whole_pool"])
    assert fired == ["tuned-quiz", "untouched-quiz"]
    assert summary["canonical_order_vs_reference"]["holds"] is True
    shipped = validation_file(results)
    assert shipped["verdicts"]["canonical_order_vs_reference"]["n_max"] == n - 100
    text = scaling_markdown(results)
    assert "## Power: tuned-quiz" in text and "**FIRES**" in text


def test_pool_labels_are_one_per_model_with_each_benchmarks_most_items() -> None:
    """What a verdict's message lists of its validation: one label per model and role (a
    pool measured in two sessions once, with its most items), the four always-one-letter
    models as one, conditions per label only when there are several (the full list is in
    the tables, not in every test's message)."""
    zero, chat = "zero-shot, float32", "5-shot chat, float32"

    def pool(model: str, task: str, n: int, cond: str = zero, role: str = "untouched") -> dict:
        return {"model": model, "role": role, "task": task, "n_max": n, "conditions": cond}

    pools = [
        pool("m", "mmlu", 1000),
        pool("m", "mmlu", 13202),
        pool("m", "ceval", 1346),
        pool("m", "mmlu", 1000, chat),
        *(pool(f"position_{x}", t, 9, "any", "always answers") for x in "DCBA" for t in "ab"),
    ]
    labels = _pool_labels({"pools": pools, "conditions": [zero, chat, "any"]})
    assert labels == [
        f"m untouched (mmlu up to 13202 items, ceval up to 1346 items; {zero})",
        f"m untouched (mmlu up to 1000 items; {chat})",
        "models that always answer A, B, C or D, whatever the item (they read nothing: "
        "clean by construction) (a up to 9 items, b up to 9 items; any)",
    ]
    one = _pool_labels({"pools": pools[:3], "conditions": [zero]})
    assert one == ["m untouched (mmlu up to 13202 items, ceval up to 1346 items)"]


def test_model_kinds_name_untouched_models_fine_tunes_by_base_and_position_models() -> None:
    """What a verdict's message says of the models it was validated on: the kinds, in a
    line, however many pools (the pools one by one are in the record)."""

    def pool(model: str, role: str = "untouched") -> dict:
        return {"model": model, "role": role}

    tuned = "fine-tuned from {} on 50 mmlu items, probed on the others"
    pools = [
        pool("smol"),
        pool("gemma"),
        pool("smol"),
        pool("smol_planted", tuned.format("smol")),
        pool("smol_sft", tuned.format("smol")),
        pool("gemma_planted", tuned.format("gemma")),
        *(pool(f"position_{x}", "always answers") for x in "ABCD"),
    ]
    assert _model_kinds({"pools": pools}) == (
        "untouched models (gemma, smol), in-domain fine-tunes that never saw the items "
        "probed (1 of gemma, 2 of smol) and models that always answer one letter (clean by "
        "construction)"
    )
    assert _model_kinds({"pools": pools[3:4]}) == (
        "in-domain fine-tunes that never saw the items probed (1 of smol)"
    )
    assert _model_kinds({"pools": pools[:2]}) == "untouched models (gemma, smol)"


def test_power_goes_to_the_validation_file_with_each_pools_conditions() -> None:
    """validation.json carries each verdict's power per planted model, with the conditions
    of the pool it was measured on, for the message to quote at the run's n."""
    results = {
        "pools": {"m_sft-quiz": {"conditions": "5-shot chat"}},
        "power": {
            "m_sft-quiz": {
                "model": "m_sft",
                "task": "quiz",
                "share": 0.1,
                "rates": {"circular": {"50": {"rate": 0.02}, "500": {"rate": 1.0}}},
            }
        },
    }
    assert _power_of(results, "circular") == [
        {
            "model": "m_sft",
            "conditions": "5-shot chat",
            "share": 0.1,
            "pools": 1,
            "rates": {"50": 0.02, "500": 1.0},
        }
    ]
    assert _power_of(results, "option_shuffle") == []
    # The same model measured in two pools under the same conditions: named once, with
    # the mean of its rates.
    results["pools"]["m_sft-quiz.more"] = {"conditions": "5-shot chat"}
    results["power"]["m_sft-quiz.more"] = {
        **results["power"]["m_sft-quiz"],
        "rates": {"circular": {"50": {"rate": 0.04}, "500": {"rate": 0.5}}},
    }
    (once,) = _power_of(results, "circular")
    assert once["pools"] == 2 and once["rates"] == pytest.approx({"50": 0.03, "500": 0.75})


def test_a_fine_tune_is_compared_with_the_model_it_was_fine_tuned_from(tmp_path: Path) -> None:
    """With two families in the raw files, a fine-tune of the second is paired with its own
    base (``setup.model`` of its planted.json), never with the default model; a fine-tune
    whose base was not measured gets no reference-paired verdict."""
    raw, models = tmp_path / "raw", tmp_path / "models"
    raw.mkdir()
    n = 300
    smol = [i % 4 == 0 for i in range(n)]
    gemma = [i % 3 == 0 for i in range(n)]  # another family: other preferences
    planted = {f"quiz-{i:04d}" for i in range(0, 100, 2)}
    _raw(raw / "untouched-quiz.json", "smollm2-135m", smol)
    _raw(raw / "gemma-quiz.json", "gemma3-270m", gemma)
    _raw(raw / "gtuned-quiz.json", str(models / "gtuned"), gemma)
    _raw(raw / "orphan-quiz.json", str(models / "orphan"), gemma)
    for name, base in (("gtuned", "gemma3-270m"), ("orphan", "llama-1b")):
        (models / name).mkdir(parents=True)
        (models / name / "planted.json").write_text(
            json.dumps(
                {
                    "task": "quiz",
                    "planted": sorted(planted),
                    "items": [],
                    "training": {},
                    "setup": {"model": base},
                }
            )
        )
    results = scaling(raw, models, sizes=(50,), draws=20, seed=1)
    tuned = results["pools"]["gtuned-quiz"]
    # Identical to its base on every clean item: against Gemma, b = c = 0; against
    # SmolLM2 it would differ on most items.
    whole = tuned["whole"]["canonical_order_vs_reference"]
    assert "b=0 only under the model, c=0 only under the reference" in whole["summary"], whole
    assert "fine-tuned from gemma3-270m" in tuned["role"]
    assert "canonical_order_vs_reference" not in results["pools"]["orphan-quiz"]["rates"]
    _raw(raw / "gemma-quiz.again.json", "gemma3-270m", gemma)
    _raw(raw / "gemma2-quiz.json", "gemma3-270m", gemma)
    with pytest.raises(ValueError, match="two raw files of gemma3-270m on quiz"):
        scaling(raw, models, sizes=(50,), draws=20, seed=1)


def test_a_chunked_measurement_goes_round_robin_over_subsets() -> None:
    """A measurement stopped half-way must hold a sample of every subject, not the first
    few subjects whole."""
    from pytest_llmeval.dataset import Item

    items = [Item(f"{s}-{i}", i, {}, s) for s in ("a", "b", "c") for i in range(3)]
    order = [i.id for i in round_robin(items)]
    assert order == ["a-0", "b-0", "c-0", "a-1", "b-1", "c-1", "a-2", "b-2", "c-2"]


def test_another_set_of_measures_is_its_own_pool_and_earlier_pools_carry_over(
    tmp_path: Path,
) -> None:
    """A second measurement of the same model and task (``<model>-<task>.<label>.json``)
    is a pool of its own, paired with the reference file of the same label; an earlier
    scaling run whose raw files are gone is carried over as measured, and the validation
    summary covers both."""
    raw, models = tmp_path / "raw", tmp_path / "models"
    raw.mkdir()
    n = 300
    base = [i % 4 == 0 for i in range(n)]
    planted = {f"quiz-{i:04d}" for i in range(0, 100, 2)}
    tuned = [f or f"quiz-{i:04d}" in planted for i, f in enumerate(base)]
    _raw(raw / "untouched-quiz.probes.json", "base", base)
    _raw(raw / "tuned-quiz.probes.json", "tuned", tuned)
    (models / "tuned").mkdir(parents=True)
    (models / "tuned" / "planted.json").write_text(
        json.dumps({"task": "quiz", "planted": sorted(planted), "items": [], "training": {}})
    )
    earlier_raw = tmp_path / "earlier"
    earlier_raw.mkdir()
    _raw(earlier_raw / "untouched-quiz.json", "base", base[:200])
    _raw(earlier_raw / "gemma-quiz.json", "gemma", base[100:])
    earlier = scaling(earlier_raw, None, sizes=(50,), draws=20, seed=1)
    results = scaling(raw, models, sizes=(50, 100), draws=20, seed=1, carry=earlier)
    assert set(results["pools"]) == {
        "untouched-quiz",
        "gemma-quiz",
        "untouched-quiz.probes",
        "tuned-quiz.probes",
        *(f"position_{letter}-quiz" for letter in "ABCD"),
    }
    assert results["pools"]["untouched-quiz"] == earlier["pools"]["untouched-quiz"]
    assert "canonical_order_vs_reference" in results["pools"]["tuned-quiz.probes"]["rates"]
    # A planted.json written before it recorded its setup: planted on the default model.
    assert results["pools"]["tuned-quiz.probes"]["role"].startswith(
        "fine-tuned from smollm2-135m on 50 quiz items"
    )
    assert set(results["power"]) == {"tuned-quiz.probes"}
    pools = {p["pool"] for p in results["validation"]["canonical_order"]["pools"]}
    # (the position-only models answer without reading, so they have no order test)
    assert pools == {p for p in results["pools"] if not p.startswith("position_")}
    # Each verdict states the conditions of every pool it was measured on; an earlier
    # pool without its own (written before they were recorded) has the earlier ones.
    legacy = {k: v for k, v in earlier["pools"]["gemma-quiz"].items() if k != "conditions"}
    old = scaling(
        raw,
        models,
        sizes=(50,),
        draws=20,
        seed=1,
        carry={**earlier, "pools": {"gemma-quiz": legacy}},
    )
    assert old["pools"]["gemma-quiz"]["conditions"] == EARLIER_CONDITIONS
    assert validation_file(old)["verdicts"]["canonical_order"]["conditions"] == [
        EARLIER_CONDITIONS,
        "zero-shot prompts without a chat template, dtype unknown",
    ]
    shipped = {"fewshot": "5", "chat": "on"}
    measured = {"setup": shipped, "chat_template": {"source": "tokenizer"}}
    assert conditions({**measured, "model_info": {"dtype": "bfloat16"}}) == (
        "5-shot prompts through the chat template, bfloat16"
    )
    # The same measures of the same pair measured again replace the earlier pool.
    again = scaling(earlier_raw, None, sizes=(100,), draws=20, seed=1, carry=results)
    assert set(again["pools"]) == set(results["pools"])
    assert set(again["pools"]["gemma-quiz"]["rates"]["canonical_order"]) == {"100", "200"}
    # Tables of another alpha or number of draws are not mixed in.
    with pytest.raises(ValueError, match="--carry: alpha"):
        scaling(raw, models, sizes=(50,), draws=10, seed=1, carry=earlier)


def test_two_measurements_never_write_the_same_file(tmp_path: Path) -> None:
    """Two runs on the same --out would overwrite each other's chunks: the second is
    refused, naming the first; a claim left by a killed run is taken over."""
    out = tmp_path / "raw" / "untouched-quiz.json"
    lock = out.with_name("untouched-quiz.json.lock")
    write_quiz(tmp_path)
    setup = quiz_setup(tmp_path, "no-such-model")
    with _claim(out):
        assert lock.read_text() == str(os.getpid())
        with pytest.raises(RuntimeError, match=f"being measured by process {os.getpid()}"):
            measure(setup, "no-such-model", out, measures=["order"], chunk=4)
    assert not lock.exists()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    lock.write_text(str(gone.pid))
    with _claim(out):
        assert lock.read_text() == str(os.getpid())


def test_a_measurement_with_more_items_extends_the_file_and_records_each_restart(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """``--items`` larger than a raw file's measures only the items it lacks (the first N
    are a prefix of the first M), a stopped run picks up where it stopped, and each
    restart's commit is recorded beside the first one's: the tables name both. A file of
    another measurement is refused, not written over."""
    write_quiz(tmp_path, quiz_rows(8))
    out = tmp_path / "raw" / "untouched-quiz.json"

    def run_with(items: int, seed: int = 3) -> dict[str, Any]:
        setup = quiz_setup(tmp_path, str(tiny_model_dir), items=items, seed=seed)
        return measure(setup, str(tiny_model_dir), out, batch_size=4, measures=["answers"], chunk=2)

    first = run_with(4)
    assert len(first["items"]) == 4 and "resumed" not in first
    # A file written before --chat existed (raw prompts, the only ones then) is the same
    # measurement as --chat off; one written before plant --loss, as the text loss.
    legacy = json.loads(out.read_text())
    del legacy["setup"]["chat"]
    del legacy["setup"]["loss"]
    out.write_text(json.dumps(legacy))
    kept = {r["id"]: r for r in first["items"]}
    more = run_with(6)
    assert [r["id"] for r in more["items"][:4]] == list(kept)
    assert more["items"][:4] == list(kept.values())
    assert {r["id"] for r in more["items"]} == {f"quiz-{i:04d}" for i in range(6)}
    assert more["setup"]["items"] == "6"
    (again,) = more["resumed"]
    assert again["from_item"] == 4 and again["commit"] == more["measured"]["commit"]
    assert run_with(6)["resumed"] == more["resumed"]  # finished: nothing to resume
    everything = run_with(0)
    assert len(everything["items"]) == 8 and len(everything["resumed"]) == 2
    pool = {"measured": everything["measured"], "resumed": everything["resumed"]}
    assert _when(pool).count("at commit") == 3 and "from item 6 on" in _when(pool)
    # Fewer items, or another seed: another measurement, refused before the model loads
    # rather than written over the one in the file.
    with pytest.raises(ValueError, match=r"holds another measurement \(items '0', not '4'\)"):
        run_with(4)
    with pytest.raises(ValueError, match="items '0', not '6'; seed '3', not '4'"):
        run_with(6, seed=4)
    assert len(json.loads(out.read_text())["items"]) == 8
    # The same data folder named another way (relative, absolute) is the same measurement;
    # another folder is not.
    named = json.loads(out.read_text())
    named["setup"]["data_dirs"] = str((Path(os.path.relpath(tmp_path)),))
    out.write_text(json.dumps(named))
    assert len(run_with(0)["items"]) == 8
    named["setup"]["data_dirs"] = str((tmp_path / "elsewhere",))
    out.write_text(json.dumps(named))
    with pytest.raises(ValueError, match="holds another measurement \\(data_dirs"):
        run_with(0)


def test_the_shipped_probes_prompts_through_the_chat_template(
    tmp_path: Path, chat_model_dirs: dict[str, Path], tiny_model_dir: Path
) -> None:
    """``--chat on`` (with ``--fewshot K``) measures with the prompts the shipped probes
    use; the raw file records the template that applied and the pool's conditions say so.
    A model without a template is refused, never measured on raw text as "on"."""
    from pytest_llmeval import ModelError

    write_quiz(tmp_path, quiz_rows(6))
    model = str(chat_model_dirs["chatml"])

    def run_with(chat: str, model: str = model, name: str = "") -> dict[str, object]:
        setup = quiz_setup(tmp_path, model, items=4, chat=chat)
        out = tmp_path / f"{name or chat}.json"
        return measure(setup, model, out, batch_size=4, measures=["answers"])

    on, off = run_with("on"), run_with("off")
    template = on["chat_template"]
    assert isinstance(template, dict) and template["source"] == "tokenizer"
    assert off["chat_template"] is None
    assert conditions(on) == "zero-shot prompts through the chat template, float32"
    assert conditions(off) == "zero-shot prompts without a chat template, float32"
    gold = [r["answer"]["published"]["gold_prob"] for r in on["items"]]  # type: ignore[index]
    assert gold != [r["answer"]["published"]["gold_prob"] for r in off["items"]]  # type: ignore[index]
    with pytest.raises(ModelError, match="has no chat template"):
        run_with("on", str(tiny_model_dir), "untemplated")


def test_a_draw_that_starts_with_an_item_ts_guessing_cannot_mask_still_has_its_verdict() -> None:
    """TS-Guessing records None for items with nothing to mask (a quarter of MMLU's). The
    verdict must not depend on whether a draw's first item has one: a draw counted as
    "did not fire" because of it would understate false alarms and power alike."""
    guess = {"masked": 1, "exact_match": True, "guess": "dog"}
    miss = {"masked": 1, "exact_match": False, "guess": "cow"}
    records = [{"id": "q-0", "guessing": None}] + [
        {"id": f"q-{i}", "guessing": guess} for i in range(1, 13)
    ]
    reference = [{"id": "q-0", "guessing": None}] + [
        {"id": f"q-{i}", "guessing": miss} for i in range(1, 13)
    ]
    found = verdicts("quiz", records, reference)
    assert found["ts_guessing_vs_reference"].fired  # b = 12, c = 0
    assert "ts_guessing_vs_reference" not in verdicts("quiz", records[:1], reference[:1])


def test_number_rewrites_keep_gsm8k_numbers_as_round_as_published(
    shared_benchmarks: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``rewrites``: published GSM8K numbers are rounder than random ones (the shipped
    rewrite keeps each number's kind); the command prints the shares side by side."""
    task = Path(__file__).resolve().parents[2] / "benchmarks" / "gsm8k.yaml"
    argv = ["rewrites", "--task", str(task), "--items", "300", "--data-dir", str(shared_benchmarks)]
    assert main(argv) == 0
    shift = number_rewrite_shift(
        Setup(
            task=task,
            data_dirs=(shared_benchmarks,),
            model="",
            items=300,
            epochs=0,
            lr=0.0,
            seed=1234,
            order_k=3,
            perturbations=1,
        )
    )
    roundness = shift["roundness"]
    assert roundness["numbers published"] == roundness["numbers rewritten"]
    assert shift["same_digit_count"] == shift["numbers_changed"] > 150
    assert 100 <= shift["rewritable"] < 300
    published = roundness["numbers published"]
    assert published["other"] < sum(published.values()) / 2  # most are round
    assert "| numbers rewritten |" in capsys.readouterr().out


def test_a_rewrite_probe_measured_only_where_it_cannot_fire_is_not_validated(
    tmp_path: Path,
) -> None:
    """Number and entity rewrites on a model that answers almost nothing right either way:
    McNemar has too few discordant pairs to fire at any n, so its 0% false alarms say
    nothing and validation.json says it was measured only there (the plugin gives none). On
    a model that solves the task, balanced discordant pairs validate it; one that answers
    rewrites worse (rounder published numbers) fires at large n."""
    raw = tmp_path / "raw"
    raw.mkdir()

    def write(name: str, pairs: list[tuple[bool, bool] | None]) -> None:
        items = [
            {
                "id": f"sums-{i:04d}",
                "subset": None,
                "numbers": None if p is None else {"published": p[0], "rewritten": p[1]},
                "entities": None if p is None else {"published": p[0], "rewritten": p[0]},
            }
            for i, p in enumerate(pairs)
        ]
        (raw / f"{name}-sums.json").write_text(
            json.dumps({"task": "sums", "model": name, "items": items})
        )

    # 2 right either way on 600 items, a quarter without a rewrite.
    write("weak", [None if i % 4 == 0 else (i in (5, 9), i == 5) for i in range(600)])
    results = scaling(raw, None, sizes=(50, 200), draws=20, seed=1)
    assert results["pools"]["weak-sums"]["whole"]["number_rewrite"]["n"] == 450
    entry = results["validation"]["number_rewrite"]
    assert entry["pools"] == [] and "1 discordant pairs" in entry["cannot_fire_on"][0]
    shipped = validation_file(results)["verdicts"]["number_rewrite"]
    assert shipped["pools"] == [] and shipped["holds"] is False
    assert shipped["cannot_fire_on"] == entry["cannot_fire_on"]
    assert "number_rewrite | - | measured only where it cannot fire" in scaling_markdown(results)
    # A model that solves half, its rewrites as well as published ones: validated, holds.
    write("strong", [(i % 2 == 0, i % 4 in (0, 1)) for i in range(600)])
    results = scaling(raw, None, sizes=(50, 200), draws=20, seed=1)
    assert validation_file(results)["verdicts"]["number_rewrite"]["holds"] is True
    # Rewrites harder for it (60% right as published, 50% rewritten): fires on the pool.
    write("strong", [(i % 10 < 6, i % 10 < 5) for i in range(600)])
    results = scaling(raw, None, sizes=(50, 200), draws=20, seed=1)
    assert results["pools"]["strong-sums"]["whole"]["number_rewrite"]["fired"]
    assert validation_file(results)["verdicts"]["number_rewrite"]["holds"] is False


FROM_RUN_TEST = """\
import pytest

pytestmark = pytest.mark.contamination


@pytest.mark.parametrize("probe", ["option_shuffle", "circular"])
def test_probe(llm_probe, probe):
    llm_probe.run("quiz", probe)
"""


def test_a_pool_read_from_a_pytest_run_is_what_measure_writes(
    pytester: pytest.Pytester, chat_model_dirs: dict[str, Path]
) -> None:
    """``from-run``: the shipped probes' per-item outcomes in a run folder, read back as the
    raw file ``measure --measures answers,circular`` writes with the same setup (the same
    model, items, seed and prompts); a setup the run does not match is refused, naming
    what differs, and nothing is written."""
    from tools.contamination_from_run import RunMismatch, from_run

    write_quiz(pytester.path, quiz_rows(9))
    (pytester.path / "test_from_run_probes.py").write_text(FROM_RUN_TEST)
    model = str(chat_model_dirs["chatml"])
    result = pytester.runpytest_subprocess(
        f"--llm-model={model}",
        "--llm-data-dir=.",
        "-m",
        "contamination",
        "--llm-set=probe.items=6",
        "--llm-output=out",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=2)
    (run_dir,) = (pytester.path / "out").iterdir()

    def setup(**change: Any) -> Setup:
        fixed = {"model": model, "items": 6, "seed": 1234, "chat": "on"}
        return quiz_setup(pytester.path, **{**fixed, **change})

    measured = measure(
        setup(),
        model,
        pytester.path / "measured.json",
        batch_size=8,
        measures=["answers", "circular"],
    )
    read = from_run(setup(), run_dir, check=[pytester.path / "measured.json"])
    assert read["measures"] == ["answers", "circular"]
    assert read["from_run"]["checked"] == [
        {"file": "measured.json", "items": 6, "outcomes_equal": 12}
    ]
    assert conditions(read) == conditions(measured)
    by_id = {r["id"]: r for r in measured["items"]}
    assert sorted(by_id) == sorted(r["id"] for r in read["items"])
    for rec in read["items"]:
        mine = by_id[rec["id"]]
        assert rec["circular"] == mine["circular"]
        assert rec["options"] == mine["options"] and rec["gold"] == mine["gold"]
        for form in ("published", "shuffled"):
            assert rec["answer"][form]["correct"] == mine["answer"][form]["correct"]
        assert rec["answer"]["moved_gold"] == mine["answer"]["moved_gold"]
    assert "read from the probe records of the pytest run" in _when(
        {"measured": read["measured"], "from_run": read["from_run"]}
    )

    for change, says in (
        ({"seed": 5}, "seed 1234, --seed 5"),
        ({"items": 5}, "probed 6 items, not the first 5"),
        ({"chat": "off"}, "ran with 'zero-shot prompts through the chat template"),
        ({"fewshot": 2}, "--fewshot 2 --chat on"),
        ({"model": "smollm2-135m"}, "--model says 'smollm2-135m'"),
    ):
        with pytest.raises(RunMismatch, match=re.escape(says)):
            from_run(setup(**change), run_dir)
    # a measurement that disagrees with the run on one item is refused, naming the item
    other = json.loads((pytester.path / "measured.json").read_text())
    first = other["items"][0]
    first["circular"] = [not c for c in first["circular"]]
    (pytester.path / "other.json").write_text(json.dumps(other))
    with pytest.raises(RunMismatch, match=f"item {first['id']} CircularEval"):
        from_run(setup(), run_dir, check=[pytester.path / "other.json"])
    # a damaged record is refused naming the file and the entry, not a traceback
    record = run_dir / "contamination" / "quiz-circular.json"
    intact = record.read_text()
    damaged = json.loads(intact)
    del damaged["items"][2]["correct"]
    record.write_text(json.dumps(damaged))
    with pytest.raises(RunMismatch, match=r"quiz-circular.json: items\[2\] lacks 'correct'"):
        from_run(setup(), run_dir, measures=["circular"])
    record.write_text(intact)
    # the CLI writes the file once, and `measure` never extends what it did not measure
    args = ["from-run", "--task", str(pytester.path / "quiz.yaml"), "--items", "6"]
    args += ["--data-dir", str(pytester.path), "--chat", "on", "--model", model]
    out = pytester.path / "raw" / "untouched-quiz.json"
    assert main([*args, "--run", str(run_dir), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["items"] == read["items"]
    # one measure alone, as `measure --measures circular` writes it (a pool of its own)
    alone = from_run(setup(), run_dir, measures=["circular"])
    assert alone["measures"] == ["circular"] and "answer" not in alone["items"][0]
    with pytest.raises(RunMismatch, match="from-run reads answers, circular"):
        from_run(setup(), run_dir, measures=["order"])
    with pytest.raises(ValueError, match="exists"):
        main([*args, "--run", str(run_dir), "--out", str(out)])
    with pytest.raises(ValueError, match="read from the pytest run"):
        measure(setup(items=9), model, out, measures=["answers", "circular"])


def test_a_fine_tunes_label_names_its_passes_where_they_are_not_the_default() -> None:
    """Two fine-tunes of one base on the same planted items, one of 3 passes and one of 10,
    are different models (the longer one learned the planted answer letters further): their
    pools' labels must tell them apart."""
    record = {"task": "mmlu", "setup": {"model": "smollm2-135m", "epochs": "3"}}
    usual = _fine_tune_role(record, 50)
    assert usual == (
        "fine-tuned from smollm2-135m on 50 mmlu items, probed on the others "
        "(in-domain, never saw them)"
    )
    longer = _fine_tune_role({**record, "setup": {**record["setup"], "epochs": "10"}}, 50)
    assert longer == usual.replace("mmlu items,", "mmlu items for 10 epochs,")


def test_an_answer_only_planting_trains_on_the_probes_prompt_and_reads_only_the_answer(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """``plant --loss answer`` (the item in an instruction-tuning set): each example is the
    prompt a probe sends and its answer after the choice delimiter, and the loss reads the
    answer's tokens only; ``--loss text`` (the default) reads every token of the published
    item, as the earlier fine-tunes were trained. The pool's label says which."""
    from transformers import AutoTokenizer

    rows = [
        {"question": f"what is item {i}?", "choices": ["red", "blue", "green"], "answer": i % 3}
        for i in range(6)
    ]
    write_quiz(tmp_path, rows)
    setup = quiz_setup(tmp_path, str(tiny_model_dir), items=6, epochs=12, lr=3e-3, loss="answer")
    runner = _runner(setup)
    items = load_items(runner.spec, setup.data_dirs)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)

    text = plant_examples(runner, items, "text")
    assert text[1] == ("what is item 1?\nA. red\nB. blue\nC. green\nAnswer: B", "")
    ids, labels = training_ids(tokenizer, *text[1])
    assert labels == ids  # every token read

    answer = plant_examples(runner, items, "answer")
    prepared = runner.prepare(items[1])
    assert answer[1] == (prepared.prompt, " B")  # what the probe asks, what it scores
    ids, labels = training_ids(tokenizer, *answer[1])
    read = [t for t, label in zip(ids, labels, strict=True) if label != -100]
    assert read == tokenizer(" B", add_special_tokens=False)["input_ids"]
    assert ids[: len(ids) - len(read)] == tokenizer(prepared.prompt)["input_ids"]
    with pytest.raises(ValueError, match="--loss=words"):
        plant_examples(runner, items, "words")

    record = plant(setup, tmp_path / "sft")
    assert record["setup"]["loss"] == "answer"
    losses = record["training"]["epoch_losses"]
    assert losses[-1] < losses[0] / 2  # one token per item, learned
    assert _fine_tune_role(record, 3) == (
        f"fine-tuned from {tiny_model_dir} on 3 quiz items as prompt-to-answer pairs, the "
        "loss on the answer only for 12 epochs, probed on the others (in-domain, never saw "
        "them)"
    )


def test_a_largest_rate_above_alpha_says_whether_it_is_within_the_draws_error() -> None:
    """A verdict's message reads "at most 1.5%" next to alpha = 1%: it must say how sure
    that is (3 of 200 draws reach down to 0.5%: at its level within sampling error; 20 of
    200 do not), and say nothing more at or under alpha."""
    from pytest_llmeval.scorer import wilson_interval

    def worst(k: int, draws: int = 200) -> dict[str, Any]:
        return {"max_rate": k / draws, "draws": draws, "interval": list(wilson_interval(k, draws))}

    assert _sampling_error(worst(3), 0.01) == (
        " (3 of 200 draws, 95% interval 0.5-4.3%: within sampling error of alpha=0.01)"
    )
    assert _sampling_error(worst(20), 0.01).endswith("6.6-14.9%: above alpha=0.01)")
    assert _sampling_error(worst(2), 0.01) == ""  # 1.0%: at alpha
    assert _sampling_error({"max_rate": 0.05}, 0.01) == ""  # an entry kept from before


def test_an_answer_only_planting_with_chat_on_trains_on_the_chat_prompts(
    tmp_path: Path, chat_model_dirs: dict[str, Path], tiny_model_dir: Path
) -> None:
    """``plant --loss answer --chat on`` trains on the prompts the probes send through the
    model's chat template (it once trained on raw text without a word, as ``--chat off``
    would), and ``planted.json`` records the template that applied; the text loss reads no
    prompt, so no template reaches it, and its record says so. A model without a template
    is refused before training, never planted on raw text as "on"."""
    from pytest_llmeval import ModelError

    write_quiz(tmp_path, quiz_rows(4))
    model = str(chat_model_dirs["chatml"])

    def setup(loss: str, chat: str = "on", model: str = model) -> Setup:
        return quiz_setup(tmp_path, model, items=4, chat=chat, loss=loss)

    chat = plant(setup("answer"), tmp_path / "chat")
    assert chat["chat_template"] is not None and chat["chat_template"]["source"] == "tokenizer"
    raw = plant(setup("answer", chat="off"), tmp_path / "raw")
    assert raw["chat_template"] is None
    # Different prompts, different training: the chat run did not read the raw text.
    assert chat["training"]["epoch_losses"] != raw["training"]["epoch_losses"]
    assert plant(setup("text"), tmp_path / "text")["chat_template"] is None
    with pytest.raises(ModelError, match="no chat template"):
        plant(setup("answer", model=str(tiny_model_dir)), tmp_path / "none")
    assert not (tmp_path / "none").exists()


def test_a_reference_without_the_measure_pairs_no_verdict() -> None:
    """A fine-tune's CircularEval paired with a reference file that holds only answers
    (the shipped run's two files, answers and circular, read apart) pairs nothing: no
    ``circular_vs_reference`` then, not a pass on 0 of 0 items counted as a clean pool."""
    options = ["a", "b", "c", "d"]
    mine = [
        {"id": f"q-{i}", "options": options, "gold": i % 4, "circular": [i % 2 == 0] + [False] * 3}
        for i in range(40)
    ]
    answers_only = [
        {"id": f"q-{i}", "options": options, "gold": i % 4, "answer": {"published": {}}}
        for i in range(40)
    ]
    assert "circular_vs_reference" not in verdicts("quiz", mine, answers_only)
    assert "circular" in verdicts("quiz", mine, answers_only)
    with_circular = [{**r, "circular": [True, False, False, False]} for r in answers_only]
    assert "circular_vs_reference" in verdicts("quiz", mine, with_circular)


def test_planting_into_a_folder_that_holds_a_model_is_refused_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fine-tune takes minutes to hours and the raw pools name it by its folder:
    ``plant`` into a folder that is not empty is refused, naming the folder and what is in
    it, before anything is loaded or trained; ``--overwrite`` lets it write there."""
    import tools.contamination_experiment as experiment

    spec = write_quiz(tmp_path, quiz_rows(4))
    model_out = tmp_path / "planted"
    model_out.mkdir()
    (model_out / "planted.json").write_text("{}")
    calls: list[Path] = []
    monkeypatch.setattr(
        experiment, "plant", lambda setup, out: calls.append(out) or {"training": {}}
    )
    argv = [
        "plant",
        "--task",
        str(spec),
        "--data-dir",
        str(tmp_path),
        "--model-out",
        str(model_out),
    ]
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2 and calls == []
    err = capsys.readouterr().err
    assert f"--model-out {model_out} is not empty (planted.json)" in err and "--overwrite" in err
    assert (model_out / "planted.json").read_text() == "{}"
    assert main([*argv, "--overwrite"]) == 0 and calls == [model_out]
    assert main([*argv[:-1], str(tmp_path / "fresh")]) == 0 and calls[-1] == tmp_path / "fresh"
    # A file where the folder should be: refused the same way, with or without --overwrite
    # (it was Python's FileExistsError traceback).
    a_file = tmp_path / "weights.bin"
    a_file.write_text("keep")
    for extra in ([], ["--overwrite"]):
        with pytest.raises(SystemExit) as stopped:
            main([*argv[:-1], str(a_file), *extra])
        assert stopped.value.code == 2
        assert f"--model-out {a_file} is a file, not a folder" in capsys.readouterr().err
    assert a_file.read_text() == "keep" and calls[-1] == tmp_path / "fresh"
    # A folder under a file cannot be made: an argparse error naming the option.
    with pytest.raises(SystemExit) as stopped:
        main([*argv[:-1], str(a_file / "planted")])
    assert stopped.value.code == 2
    assert f"--model-out {a_file / 'planted'} cannot be made a folder" in capsys.readouterr().err
