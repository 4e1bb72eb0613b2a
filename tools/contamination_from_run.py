"""A clean pool read from the probe records of a pytest run, instead of measured again.

``python -m tools.contamination_experiment from-run --run DIR --task ... --items N
--fewshot K --chat on|off --out RAW``

The shipped suite (``pytest benchmarks/ -m contamination --llm-set probe.items=N``) computes, item
by item, what the experiment's ``measure --measures answers,circular`` computes: right or
wrong as published and in one seeded gold-moving order (option shuffling), and in every
rotation (CircularEval). Its run folder keeps those per-item outcomes
(``contamination/<task>-option_shuffle.json``, ``-circular.json``). Read back, a long run
of an untouched model becomes a pool of the scaling tables under the prompts it ran with,
without hours of the same model calls again.

Nothing is written unless the run's probes are the measurement ``measure`` would make with
the same setup: the same seed, for every item the same shuffled order
(:func:`~pytest_llmeval.contamination._rewrite.shuffled_orders`), the same prompts and dtype
(the verdict's recorded conditions), the first ``--items`` items of the task round-robin
over subjects (:func:`~pytest_llmeval.dataset.first_n`) and no others; and, with
``--check``, the same outcome on every item a file that ``measure`` wrote holds too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_llmeval.contamination._rewrite import gold_index, option_texts, shuffled_orders
from pytest_llmeval.contamination._validation import conditions_text
from pytest_llmeval.dataset import Item, first_n, load_items

if TYPE_CHECKING:
    from pytest_llmeval.eval import TaskRunner
    from tools.contamination_experiment import Setup

# The probe records this reads, and the raw measurement each one is.
RECORDS = {"option_shuffle": "answers", "circular": "circular"}


class RunMismatch(ValueError):
    """The run's probes are not the measurement the setup describes."""


def _record(run: Path, task: str, probe: str) -> dict[str, Any] | None:
    path = run / "contamination" / f"{task}-{probe}.json"
    if not path.is_file():
        return None
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RunMismatch(f"{path}: not JSON ({exc})") from None
    return data


def _outcome(
    probe: str,
    record: Mapping[str, Any],
    items: Mapping[str, Item],
    fields: tuple[str | tuple[str, ...], str],
    seed: int,
) -> dict[str, Any]:
    """Each probed item's raw measurement, by id; checked against what ``measure`` does."""
    path = f"contamination/{record.get('task')}-{probe}.json"
    out: dict[str, Any] = {}
    for n, entry in enumerate(record.get("items") or []):
        try:
            item_id, measured = _one(probe, entry, items, fields, seed, path)
        except (KeyError, IndexError, TypeError) as exc:  # an edited or damaged record
            raise RunMismatch(f"{path}: items[{n}] lacks {exc} ({str(entry)[:120]})") from None
        out[item_id] = measured
    return out


def _one(
    probe: str,
    entry: Mapping[str, Any],
    items: Mapping[str, Item],
    fields: tuple[str | tuple[str, ...], str],
    seed: int,
    path: str,
) -> tuple[str, Any]:
    """One record entry as ``measure`` writes it: answers published and shuffled, or the
    rotation vector."""
    item = items.get(entry["item_id"])
    if item is None:
        raise RunMismatch(f"{path}: item {entry['item_id']!r} is not in the task's data")
    if probe != "option_shuffle":
        return item.id, [bool(c) for c in entry["correct"]]
    orders = (entry.get("detail") or {}).get("orders") or []
    options, gold = fields
    expected = shuffled_orders(item.doc, options, gold, 1, seed=seed, item_id=item.id)[0]
    if not orders or list(orders[0]) != list(expected):
        raise RunMismatch(
            f"{path}: item {item.id} was shuffled to {orders[:1]}, `measure` would "
            f"take {list(expected)} (another --seed, or another shuffle)"
        )
    return item.id, {
        "published": {"correct": bool(entry["canonical_correct"])},
        "shuffled": {"correct": bool(entry["rewritten_correct"][0])},
        "moved_gold": list(expected).index(
            gold_index(item.doc, gold, len(option_texts(item.doc, options)))
        ),
    }


def from_run(
    setup: Setup,
    run: Path,
    *,
    measures: Sequence[str] = tuple(RECORDS.values()),
    check: Sequence[Path] = (),
    runner: TaskRunner | None = None,
) -> dict[str, Any]:
    """The raw file ``measure --measures <measures>`` would write for ``setup`` (``answers``,
    ``circular`` or both), read from the probe records of the pytest run folder ``run``.
    ``setup`` is the experiment's :class:`~tools.contamination_experiment.Setup`;
    ``runner`` its task runner (built from it when not given). Raises :class:`RunMismatch`
    naming the file and what differs."""
    probe_of = {m: p for p, m in RECORDS.items()}
    unknown = [m for m in measures if m not in probe_of]
    if unknown or not measures:
        raise RunMismatch(f"--measures {list(measures)}: from-run reads {', '.join(probe_of)}")
    from tools.contamination_experiment import _runner  # the experiment's own prompts

    config_path = run / "eval_config.json"
    if not config_path.is_file():
        raise RunMismatch(f"--run {run}: no eval_config.json (not a pytest-llmeval run folder)")
    config = json.loads(config_path.read_text())
    if str(config.get("model")) != str(setup.model):
        # The raw file's name and --model say whose pool it is; a run of another model
        # would be filed under the wrong one.
        raise RunMismatch(
            f"--run {run}: the run's model is {config.get('model')!r} (eval_config.json), "
            f"--model says {setup.model!r}: pass --model as the run names it"
        )
    runner = runner or _runner(setup)
    spec = runner.spec
    probes = spec.probes
    if probes.options is None or probes.gold is None:
        raise RunMismatch(f"--task {setup.task}: not multiple choice (names no options/gold)")
    records = {}
    for measure in measures:
        record = _record(run, spec.name, probe_of[measure])
        if record is None:
            raise RunMismatch(
                f"--run {run}: no contamination/{spec.name}-{probe_of[measure]}.json for "
                f"{measure} (the probe did not finish there, or ran on another task)"
            )
        records[probe_of[measure]] = record
    dtype = config.get("dtype")
    wanted = conditions_text(setup.fewshot, setup.chat == "on", dtype)
    for probe, record in records.items():
        # A probe without a verdict keeps the one it did not give under inspection.
        ran = (record.get("verdict") or record.get("inspection") or {}).get("conditions")
        if ran != wanted:
            raise RunMismatch(
                f"contamination/{spec.name}-{probe}.json ran with {ran!r}; --fewshot "
                f"{setup.fewshot} --chat {setup.chat} and its dtype say {wanted!r}"
            )
        if record.get("seed") not in (None, setup.seed):
            raise RunMismatch(
                f"contamination/{spec.name}-{probe}.json: seed {record['seed']}, "
                f"--seed {setup.seed}"
            )
    everything = load_items(spec, setup.data_dirs)
    by_id = {i.id: i for i in everything}
    fields = (probes.options, probes.gold)
    outcomes = {RECORDS[p]: _outcome(p, r, by_id, fields, setup.seed) for p, r in records.items()}
    chosen = first_n(everything, setup.items or None)
    wanted_ids = [i.id for i in chosen]
    for probe, record in records.items():
        probed = set(outcomes[RECORDS[probe]]) | set(record.get("skipped") or [])
        probed |= {
            f if isinstance(f, str) else f.get("item_id") for f in record.get("failed") or []
        }
        if probed != set(wanted_ids):
            extra, missing = sorted(probed - set(wanted_ids)), sorted(set(wanted_ids) - probed)
            differ = [
                f"{len(ids)} {what} (e.g. {ids[:2]})"
                for what, ids in (("others", extra), ("missing", missing))
                if ids
            ]
            raise RunMismatch(
                f"contamination/{spec.name}-{probe}.json probed {len(probed)} items, not the "
                f"first {len(wanted_ids)} of {spec.name} (--items {setup.items}): "
                + ", ".join(differ)
            )
    items = []
    for item in chosen:
        rec: dict[str, Any] = {"id": item.id, "subset": item.subset}
        rec["options"] = option_texts(item.doc, probes.options)
        rec["gold"] = gold_index(item.doc, probes.gold, len(rec["options"]))
        if "answers" in outcomes:
            rec["answer"] = outcomes["answers"].get(item.id)
        if "circular" in outcomes:
            rec["circular"] = outcomes["circular"].get(item.id)
        items.append(rec)
    environment = config.get("environment") or {}
    backend = environment.get("backend") or {}
    code = (environment.get("git") or {}).get("code") or {}
    result: dict[str, Any] = {
        "task": spec.name,
        "task_file": str(setup.task),
        "model": config.get("model"),
        "measured": {
            "commit": code.get("short"),
            "dirty": code.get("dirty"),
            "date": str(config.get("started", ""))[:10],
        },
        "model_info": {
            k: v
            for k, v in backend.items()
            if v is None or isinstance(v, str | int | float | bool)
            if k not in ("model_path",)
        },
        "chat_template": backend.get("chat_template") if setup.chat == "on" else None,
        "setup": {k: str(v) for k, v in setup.__dict__.items()},
        "measures": list(measures),
        "from_run": {
            "run": run.name,
            "model_sha256": config.get("model_sha256"),
            "probes": {
                p: {"n": r.get("n"), "p_value": r.get("p_value"), "requests": _requests(r)}
                for p, r in records.items()
            },
        },
        "items": items,
    }
    result["from_run"]["checked"] = [_agree(result, Path(f)) for f in check]
    return result


def _requests(record: Mapping[str, Any]) -> dict[str, Any]:
    """The probe's request counts, with the runs it reused named by folder (no machine
    path in a pool that the docs carry)."""
    out: dict[str, Any] = {}
    for role, counts in (record.get("requests") or {}).items():
        counts = dict(counts)
        counts["reused_from"] = [Path(p).name for p in counts.get("reused_from") or []]
        out[role] = counts
    return out


def _agree(result: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """Compare with a raw file ``measure`` wrote: every item both hold must have the same
    outcomes in every measure both hold."""
    other = json.loads(path.read_text())
    if other.get("task") != result["task"]:
        raise RunMismatch(f"--check {path}: task {other.get('task')!r}, not {result['task']!r}")
    theirs = {r["id"]: r for r in other.get("items") or []}
    shared = [r for r in result["items"] if r["id"] in theirs]
    compared = 0
    for rec in shared:
        them = theirs[rec["id"]]
        if "answers" in result["measures"] and them.get("answer") is not None:
            mine = {k: rec["answer"][k]["correct"] for k in ("published", "shuffled")}
            if mine != {k: them["answer"][k]["correct"] for k in ("published", "shuffled")}:
                raise RunMismatch(
                    f"--check {path}: item {rec['id']} right/wrong as published and shuffled "
                    f"{mine} in the run, {them['answer']} there"
                )
            compared += 1
        if "circular" in result["measures"] and "circular" in them:
            if rec.get("circular") != them["circular"]:
                raise RunMismatch(
                    f"--check {path}: item {rec['id']} CircularEval {rec.get('circular')} in "
                    f"the run, {them['circular']} there"
                )
            compared += 1
    if not compared:
        raise RunMismatch(f"--check {path}: no item and measure in common with the run")
    return {"file": path.name, "items": len(shared), "outcomes_equal": compared}
