"""The planted-contamination experiment: do the verdicts catch a model trained on the test,
and do they stay silent on models that were not?

``python -m tools.contamination_experiment plant|measure|analyse|scaling|rewrites|run``

1. ``plant``: take the first ``--items`` items of a task (round-robin over subjects), split
   them at random (seeded) into a planted half and a clean half, and fine-tune the default
   model on the planted half (multiple choice: the item's text as published, question,
   options in their order and the answer; worked-solution tasks such as GSM8K: question
   and full solution), ``--epochs`` passes, AdamW, the loss on every token; with ``--loss
   answer`` the item as an instruction-tuning set carries it instead: the prompt the probes
   send, the loss on its answer only. The model and ``planted.json`` are kept.
2. ``measure``: the raw per-item measurements of one model on one task
   (:func:`measure_items`: canonical-order log-likelihoods, answers as published and
   shuffled, CircularEval, TS-Guessing, membership scores as published and rewritten),
   written as ``<model>-<task>.json``; zero-shot prompts without a chat template by
   default (``--fewshot``, ``--chat on`` for the prompts the shipped probes use). With
   ``--chunk``, a stopped run resumes when started again; a larger ``--items`` extends a
   finished file with the items it lacks; each restart's commit is kept beside the first
   one's; a file of another measurement is refused, never written over.
3. ``analyse``: every verdict of :mod:`pytest_llmeval.contamination._verdicts` on each half
   of each planted model, with the untouched model as reference; the item-level AUROCs and
   the flags' precision and recall; each verdict's power on draws of planted items and its
   false alarms on draws of clean items (:func:`fire_rates`); ``results.json`` and
   ``results.md``.

``from-run`` writes the raw file of ``measure --measures answers,circular`` from the probe
records of a pytest run of the shipped suite instead of measuring again
(:mod:`tools.contamination_from_run`). ``run`` does the three for one task. Needs torch and
transformers (the ``hf`` extra); nothing here runs in the test process's default path.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from pytest_llmeval import _json as strict_json
from pytest_llmeval._errors import SpecError
from pytest_llmeval.contamination._circular import CircularItem, CircularReport, circular_probe
from pytest_llmeval.contamination._guessing import (
    GuessingItem,
    GuessingReport,
    ts_guessing_probe,
)
from pytest_llmeval.contamination._membership import (
    ItemMembership,
    item_text,
    membership_records,
)
from pytest_llmeval.contamination._probes import (
    OrderTestReport,
    PairedReport,
    canonical_order_test,
    entity_rewrite_probe,
    number_rewrite_probe,
)
from pytest_llmeval.contamination._rewrite import (
    final_answer,
    gold_index,
    option_orders,
    option_texts,
    permute_options,
    rewrite_numbers,
    shuffled_orders,
)
from pytest_llmeval.contamination._validation import conditions_text
from pytest_llmeval.contamination._verdicts import (
    ContaminationVerdict,
    MovedAnswer,
    circular_verdict,
    guessing_verdict,
    membership_flags,
    option_shuffle_verdict,
    order_verdict,
)
from pytest_llmeval.dataset import Item, first_n, load_items
from pytest_llmeval.eval import ChatSettings, TaskRunner, true_probability_mass
from pytest_llmeval.model import Backend, ModelSettings, load_backend, resolve_model_path
from pytest_llmeval.record import git_info
from pytest_llmeval.record._rundir import _pid_alive
from pytest_llmeval.scorer import auroc, mcnemar_one_sided, wilson_interval
from pytest_llmeval.task import load_task_spec


@dataclass(frozen=True)
class Setup:
    task: Path
    data_dirs: tuple[Path, ...]
    model: str
    items: int
    epochs: int
    lr: float
    seed: int
    order_k: int
    perturbations: int = 3
    fewshot: int = 0
    chat: str = "off"  # "on": every prompt through the model's chat template
    loss: str = "text"  # "answer": the loss on the answer's tokens only (plant --loss)


LOSSES = ("text", "answer")


def fine_tune(
    model_path: Path, examples: Sequence[tuple[str, str]], out: Path, setup: Setup
) -> dict[str, Any]:
    """Train a copy of the model on ``examples`` and save it (:func:`plant_examples`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(setup.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=setup.lr, weight_decay=0.0)
    rng = random.Random(setup.seed)
    losses = []
    started = time.perf_counter()
    for _ in range(setup.epochs):
        order = list(range(len(examples)))
        rng.shuffle(order)
        epoch_loss = 0.0
        for i in order:
            ids, labels = training_ids(tokenizer, *examples[i])
            loss = model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels])).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            epoch_loss += float(loss.detach())
        losses.append(epoch_loss / len(examples))
    model.train(False)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {"epoch_losses": losses, "seconds": round(time.perf_counter() - started, 1)}


def _gold_probs(
    runner: TaskRunner, items: Sequence[Item], backend: Backend
) -> tuple[list[float], list[bool]]:
    probs, correct = [], []
    for r in runner.run(items, backend):
        probs.append(
            true_probability_mass(r.logprobs, [i == r.gold for i in range(len(r.logprobs))])
        )
        correct.append(r.correct)
    return probs, correct


def training_ids(tokenizer: Any, head: str, answer: str) -> tuple[list[int], list[int]]:
    """The token ids of one planted example and the labels its loss reads (-100: not read).

    No ``answer``: ``head`` is a text read whole, the loss on every token. With one: the
    prompt and the answer tokenized apart and joined (as a probe scores an answer after its
    prompt), the loss on the answer's tokens only."""
    ids = list(tokenizer(head)["input_ids"])
    if not answer:
        return ids, ids
    tail = list(tokenizer(answer, add_special_tokens=False)["input_ids"])
    if not tail:
        raise ValueError(f"an answer of no tokens after {head[-60:]!r}")
    return ids + tail, [-100] * len(ids) + tail


def plant_examples(runner: TaskRunner, items: Sequence[Item], loss: str) -> list[tuple[str, str]]:
    """What the contaminated model is trained on, as (text, answer) for :func:`training_ids`.

    ``text`` (a web copy read in pretraining): a worked-solution task's published record
    (question and full solution, as web copies of GSM8K carry it), else the item's text as
    the benchmark publishes it (question, options in their order, answer); no answer apart,
    the loss on every token. ``answer`` (the item in an instruction-tuning set): the prompt
    the probes send (:meth:`TaskRunner.prepare`) and its answer after the choice delimiter,
    or a worked-solution task's question and solution; the loss on the answer only."""
    if loss not in LOSSES:
        raise ValueError(f"--loss={loss}: expected one of {', '.join(LOSSES)}")
    probes = runner.spec.probes
    examples = []
    for item in items:
        if probes.question and probes.solution:
            question, solution = item.doc[probes.question], item.doc[probes.solution]
            examples.append(
                (f"{question}\n{solution}", "") if loss == "text" else (question, "\n" + solution)
            )
        elif loss == "text":
            examples.append((item_text(runner, item), ""))
        else:
            prepared = runner.prepare(item)
            examples.append((prepared.prompt, runner.choice_delimiter + prepared.target))
    return examples


def _runner(setup: Setup) -> TaskRunner:
    spec = load_task_spec(setup.task)
    if setup.fewshot != spec.fewshot.k:
        # Zero-shot by default: prompts 5x shorter, so models are probed in minutes on a
        # CPU; the planted texts are the zero-shot item texts either way.
        spec = replace(spec, fewshot=replace(spec.fewshot, k=setup.fewshot))
    # The mode as given wins over a spec's pin, so the conditions a pool records are the
    # ones it ran under; "on" with a model without a template is an error, not raw text.
    return TaskRunner(spec, setup.data_dirs, ChatSettings(mode=setup.chat, forced=True))


def split_halves(items: Sequence[Item], seed: int) -> set[str]:
    """The planted half: a seeded random half of ``items``."""
    rng = random.Random(seed)
    shuffled = list(items)
    rng.shuffle(shuffled)
    return {item.id for item in shuffled[: len(items) // 2]}


def plant(setup: Setup, model_out: Path) -> dict[str, Any]:
    """Fine-tune the model on the planted half of the first ``setup.items`` items and save
    it in ``model_out`` with ``planted.json`` (the items, the planted ids, the training)."""
    runner = _runner(setup)
    items = first_n(load_items(runner.spec, setup.data_dirs), setup.items)
    planted = split_halves(items, setup.seed)
    chosen = [i for i in items if i.id in planted]
    if setup.loss == "answer" and setup.chat != "off":
        # The prompts are the probes' own: through the model's chat template, taken (or
        # refused, for a model without one) as a measurement takes it. The text loss reads
        # the published item, no prompt: no template reaches it.
        backend = load_backend(ModelSettings(model=setup.model, seed=setup.seed))
        runner.bind(backend)
        del backend
    examples = plant_examples(runner, chosen, setup.loss)
    training = fine_tune(resolve_model_path(setup.model), examples, model_out, setup)
    record = {
        "task": runner.spec.name,
        "task_file": str(setup.task),
        "items": [i.id for i in items],
        "planted": sorted(planted),
        "training": training,
        "setup": {k: str(v) for k, v in setup.__dict__.items()},
        # What the planted prompts went through, as it happened (None: raw text).
        "chat_template": None if runner.template is None else runner.template.describe(),
    }
    (model_out / "planted.json").write_text(strict_json.dumps(record, indent=1))
    return record


MEASURES = ("order", "answers", "circular", "guessing", "membership", "numbers", "entities")
# The paired right/wrong probes of generative tasks: measure name, probe, null.
REWRITE_MEASURES = {
    "numbers": ("number_rewrite", "the same items with new numbers"),
    "entities": ("entity_rewrite", "the same items with other names and places"),
}


def measure_items(
    runner: TaskRunner,
    items: Sequence[Item],
    backend: Backend,
    setup: Setup,
    measures: Sequence[str] = MEASURES,
) -> list[dict[str, Any]]:
    """The raw per-item measurements every verdict of
    :mod:`pytest_llmeval.contamination._verdicts` is computed from.

    Multiple choice: the option texts and gold; ``order``: the canonical-order
    log-likelihoods (published order and ``order_k`` shuffles); ``answers``: right/wrong
    and the gold option's probability as published and in one gold-moving order;
    ``circular``, ``guessing``: CircularEval and TS-Guessing. Every task, ``membership``:
    Min-K%, Min-K%++ and the mean log-probability of the item text as published and for up
    to ``perturbations`` rewrites (:func:`~._membership.rewritten_docs`). Worked-solution
    tasks, ``numbers`` and ``entities``: right/wrong as published and with new numbers or
    other names (the number- and entity-rewrite probes, generation; None for an item
    without a rewrite). ``measures`` picks some of them (the scaling runs measure the cheap
    ones on thousands of items)."""
    unknown = set(measures) - set(MEASURES)
    if unknown:
        raise ValueError(f"unknown measures {sorted(unknown)}; known: {', '.join(MEASURES)}")
    probes = runner.spec.probes
    records: list[dict[str, Any]] = [{"id": i.id, "subset": i.subset} for i in items]
    multiple_choice = probes.options is not None and probes.gold is not None
    if multiple_choice:
        assert probes.options is not None and probes.gold is not None
        options, gold_field = probes.options, probes.gold
        for rec, item in zip(records, items, strict=True):
            rec["options"] = option_texts(item.doc, options)
            rec["gold"] = gold_index(item.doc, gold_field, len(rec["options"]))
        if "order" in measures:
            order_test = canonical_order_test(
                runner, items, backend, k=setup.order_k, seed=setup.seed
            )
            for n, rec in enumerate(records):
                rec["order"] = {
                    "canonical": order_test.canonical_logprobs[n],
                    "shuffled": list(order_test.shuffled_logprobs[n]),
                }
        if "answers" in measures:
            moved = []
            for item in items:
                first = shuffled_orders(
                    item.doc, options, gold_field, 1, seed=setup.seed, item_id=item.id
                )[0]
                doc = permute_options(item.doc, options, gold_field, first)
                moved.append(Item(f"{item.id}~order0", item.index, doc, item.subset))
            canonical_p, canonical_ok = _gold_probs(runner, items, backend)
            shuffled_p, shuffled_ok = _gold_probs(runner, moved, backend)
            for n, rec in enumerate(records):
                rec["answer"] = {
                    "published": {"correct": canonical_ok[n], "gold_prob": canonical_p[n]},
                    "shuffled": {"correct": shuffled_ok[n], "gold_prob": shuffled_p[n]},
                    "moved_gold": gold_index(moved[n].doc, gold_field, len(rec["options"])),
                }
    elif not (probes.question and probes.solution):
        raise SpecError(
            runner.spec.source, "contamination", "names no options/gold nor question/solution"
        )
    if multiple_choice and "circular" in measures:
        circular = {c.item_id: c for c in circular_probe(runner, items, backend).items}
        for rec in records:
            c = circular.get(rec["id"])
            rec["circular"] = list(c.correct) if c is not None else None
    if multiple_choice and "guessing" in measures:
        guesses = {
            g.item_id: g for g in ts_guessing_probe(runner, items, backend, seed=setup.seed).items
        }
        for rec in records:
            g = guesses.get(rec["id"])
            rec["guessing"] = (
                {"masked": g.masked_index, "exact_match": g.exact_match, "guess": g.guess}
                if g is not None
                else None
            )
    if probes.question and "numbers" in measures:
        if not probes.solution:
            raise SpecError(runner.spec.source, "contamination", "numbers: names no solution")
        _paired_measure(
            records, "numbers", number_rewrite_probe(runner, items, backend, seed=setup.seed)
        )
    if probes.question and "entities" in measures:
        _paired_measure(
            records, "entities", entity_rewrite_probe(runner, items, backend, seed=setup.seed)
        )
    if "membership" in measures:
        memberships = membership_records(
            runner, items, backend, perturbations=setup.perturbations, seed=setup.seed
        )
        for rec, m in zip(records, memberships, strict=True):
            data = m.to_dict()
            rec["membership"] = {"published": data["published"], "perturbed": data["perturbed"]}
    return records


def _paired_measure(records: Sequence[dict[str, Any]], key: str, report: PairedReport) -> None:
    """Each record's right/wrong as published and rewritten (None: no rewrite)."""
    by_id = {p.item_id: p for p in report.items}
    for rec in records:
        pair = by_id.get(rec["id"])
        rec[key] = (
            {
                "published": bool(pair.canonical_correct),
                "rewritten": bool(pair.rewritten_correct[0]),
            }
            if pair is not None
            else None
        )


def round_robin(items: Sequence[Item]) -> list[Item]:
    """``items`` in the order :func:`first_n` picks them (the first item of every subset,
    then the second, ...), so that the part of a chunked measurement done when it is
    stopped samples every subset instead of the first few."""
    depth: dict[str | None, int] = {}
    keyed = []
    for pos, item in enumerate(items):
        keyed.append((depth.get(item.subset, 0), pos, item))
        depth[item.subset] = depth.get(item.subset, 0) + 1
    return [item for _, _, item in sorted(keyed, key=lambda k: (k[0], k[1]))]


def measure(
    setup: Setup,
    model: str,
    out: Path,
    *,
    batch_size: int = 8,
    measures: Sequence[str] = MEASURES,
    chunk: int = 0,
    replace: bool = False,
) -> dict[str, Any]:
    """Measure the first ``setup.items`` items of the task (all of them when 0) with
    ``model``; write ``out``.

    With ``chunk``, items are measured ``chunk`` at a time, round-robin over subsets
    (:func:`round_robin`), and ``out`` is rewritten after each chunk; a run stopped
    half-way picks up where it stopped when started again with the same setup, model and
    measures (the ids already in ``out`` are kept), and a larger ``--items`` extends a
    finished file (:func:`_continues`). An ``out`` holding another measurement is refused;
    with ``replace``, whatever ``out`` holds is measured again from the start (``run``:
    its planted model is trained again)."""
    unknown = set(measures) - set(MEASURES)
    if unknown:  # before the model loads
        raise ValueError(f"--measures: unknown {sorted(unknown)}; known: {', '.join(MEASURES)}")
    with _claim(out):
        runner = _runner(setup)
        items = first_n(load_items(runner.spec, setup.data_dirs), setup.items or None)
        described = {k: str(v) for k, v in setup.__dict__.items()}
        done: list[dict[str, Any]] = []
        seconds = 0.0
        measured = _provenance()
        resumed: list[dict[str, Any]] = []
        if out.is_file() and not replace:
            previous = json.loads(out.read_text())
            if _continues(previous, described, model, measures):
                done, seconds = previous["items"], float(previous["seconds"])
                measured = previous.get("measured") or measured  # when it started
                resumed = list(previous.get("resumed") or [])
            else:  # before the model loads; hours of measurement are not lost
                why = _differs(previous, described, model, measures)
                raise ValueError(
                    f"--out {out} holds another measurement ({why}): "
                    "it is neither resumed nor extended by this one; name another --out, or "
                    "remove it to measure again"
                )
        backend = load_backend(ModelSettings(model=model, batch_size=batch_size, seed=setup.seed))
        runner.bind(backend)  # the chat template, if any, is taken (or refused) now
        result = {
            "task": runner.spec.name,
            "task_file": str(setup.task),
            "model": model,
            "measured": measured,
            "model_info": {k: v for k, v in backend.info().items() if _is_json_scalar(v)},
            # What the prompts went through, as it happened (None: raw text).
            "chat_template": None if runner.template is None else runner.template.describe(),
            "setup": described,
            "measures": list(measures),
            "seconds": seconds,
            "items": done,
        }
        finished = {r["id"] for r in done}
        todo = round_robin([i for i in items if i.id not in finished])
        if done and todo:
            # Every restart is recorded: the code measuring the rest may not be the code
            # that measured the first items, and the tables name both.
            resumed.append({**_provenance(), "from_item": len(done)})
        if resumed:
            result["resumed"] = resumed
        step = chunk or len(todo) or 1
        for start in range(0, len(todo), step):
            began = time.perf_counter()
            done.extend(measure_items(runner, todo[start : start + step], backend, setup, measures))
            seconds += time.perf_counter() - began
            result["seconds"] = round(seconds, 1)
            _write(out, result)
            if chunk:
                print(f"{runner.spec.name}: {len(done)} of {len(items)} items, {seconds:.0f} s")
        if not todo:
            _write(out, result)
        return result


# The settings of a raw file written before --fewshot, --chat and --loss: zero-shot raw text
# (and the only planting there was then, the text loss).
SETUP_BEFORE_ITS_OPTION = {"fewshot": "0", "chat": "off", "loss": "text"}


def _same_place(setup: Mapping[str, str]) -> dict[str, str]:
    """``setup`` with its data folders as resolved paths (from the repository root, where
    the tool runs): ``../shared/benchmarks`` and the absolute path of the same folder are
    one measurement, not two (a file measured with one was refused when resumed with the
    other)."""
    dirs = re.findall(r"PosixPath\('((?:[^'\\]|\\.)*)'\)", setup.get("data_dirs", ""))
    if not dirs:
        return dict(setup)
    return {**setup, "data_dirs": repr(tuple(str(Path(d).resolve()) for d in dirs))}


def _continues(
    previous: Mapping[str, Any], described: Mapping[str, str], model: str, measures: Sequence[str]
) -> bool:
    """Whether the raw file ``previous`` is this measurement stopped half-way, or the same
    measurement over fewer first items: :func:`first_n` takes the first N of one fixed
    round-robin order, so a larger ``--items`` measures the same items and more, and a file
    is extended instead of measured again."""
    if previous.get("model") != model or previous.get("measures") != list(measures):
        return False
    if previous.get("from_run"):  # read from a pytest run (from-run): not measured here
        return False
    # A setting a file written before it existed lacks had the only value there was then.
    before = _same_place({**SETUP_BEFORE_ITS_OPTION, **(previous.get("setup") or {})})
    described = _same_place(described)
    if before == described:
        return True
    had, wants = before.pop("items", "0"), described.get("items", "0")
    same_otherwise = before == {k: v for k, v in described.items() if k != "items"}
    # "0" is all items: nothing extends it, and it extends anything.
    return same_otherwise and had != "0" and (wants == "0" or int(wants) > int(had))


def _differs(
    previous: Mapping[str, Any], described: Mapping[str, str], model: str, measures: Sequence[str]
) -> str:
    """What sets the raw file ``previous`` apart from this measurement, in words."""
    before = _same_place({**SETUP_BEFORE_ITS_OPTION, **(previous.get("setup") or {})})
    described = _same_place(described)
    changed = [
        f"{k} {before.get(k)!r}, not {v!r}" for k, v in described.items() if before.get(k) != v
    ]
    measured_with = f"model {previous.get('model')!r}, not {model!r}"
    if previous.get("model") != model and measured_with not in changed:
        changed.append(measured_with)
    if previous.get("measures") != list(measures):
        changed.append(f"measures {previous.get('measures')}, not {list(measures)}")
    if previous.get("from_run"):
        changed.insert(0, f"read from the pytest run {previous['from_run'].get('run')} by from-run")
    return "; ".join(changed) or "another measurement"


@contextlib.contextmanager
def _claim(out: Path) -> Iterator[None]:
    """One measurement at a time per output file: two runs on the same ``--out`` would
    each rewrite it with their own chunks. The claim is ``<out>.lock`` holding the process
    id; one left by a process that is gone (a killed run) is taken over."""
    lock = out.with_name(out.name + ".lock")
    out.parent.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                holder = int(lock.read_text().strip() or 0)
            except (OSError, ValueError):
                holder = 0
            if holder and _pid_alive(holder):
                raise RuntimeError(
                    f"{out} is being measured by process {holder} ({lock}): wait for it, "
                    "or stop it and start again to resume"
                ) from None
            lock.unlink(missing_ok=True)  # left by a run that was killed
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        break
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)


def _write(out: Path, result: Mapping[str, Any]) -> None:
    """Replace ``out`` whole: a run killed while writing leaves the previous chunk's file,
    never half of one."""
    partial = out.with_name(out.name + ".partial")
    partial.write_text(strict_json.dumps(result, indent=1))
    os.replace(partial, out)


def _provenance() -> dict[str, Any]:
    """The commit of this checkout (and whether it had uncommitted changes) and the date a
    measurement ran: the scaling tables name it for every pool."""
    git = git_info(Path(__file__)) or {}
    return {
        "commit": git.get("short"),
        "dirty": git.get("dirty"),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }


def conditions(result: Mapping[str, Any]) -> str:
    """The prompts and dtype a raw measurement ran with, in words (the validated
    conditions of every verdict measured on it)."""
    # The template the run recorded; a file from before that record: raw text, the only
    # prompts the experiment had.
    return conditions_text(
        int(result.get("setup", {}).get("fewshot", 0)),
        result.get("chat_template") is not None,
        result.get("model_info", {}).get("dtype"),
    )


# Pools of scaling runs made before each pool recorded its conditions: every one of them
# ran the experiment's only prompts then, zero-shot raw text, and float32 on the CPU.
EARLIER_CONDITIONS = "zero-shot prompts without a chat template, float32"


def _is_json_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


# --------------------------------------------------------------------------- analysis

REFERENCE = "untouched"  # the raw files of the model every other model is compared with
DEFAULT_MODEL = "smollm2-135m"  # the model planted and measured when --model is not given
DEFAULT_EPOCHS = 3  # passes over the planted items (plant --epochs)
ALPHA = 0.01  # the probes' default level (--llm-set probe.alpha)
PROBE_SEED = 1234  # the probes' default --llm-set run.seed, with which the raw pools are measured
POSITION_PREFIX = "position_"  # the models that always answer one letter: position_A, ...
FLAG_FPR = 0.05  # the membership flags' target false-positive rate
AUROC_SCORES = ("min_k", "min_k_plus_plus", "mean_logprob")


@functools.lru_cache(maxsize=1 << 16)
def _moved_gold(n_options: int, gold: int, seed: int, item_id: str) -> int:
    """Where the probe's seeded order moves an item's gold (cached across draws)."""
    return list(option_orders(n_options, gold, 1, seed=seed, item_id=item_id)[0]).index(gold)


def moved_answer(record: Mapping[str, Any], seed: int = PROBE_SEED) -> MovedAnswer:
    """A raw record's option-shuffling outcome; the moved gold's position is recorded by
    ``measure`` (``answer.moved_gold``) or, in older files, recomputed from the probe's
    seeded order (the same :func:`option_orders` draw)."""
    answer, gold, n_options = record["answer"], int(record["gold"]), len(record["options"])
    moved = answer.get("moved_gold")
    if moved is None:
        moved = _moved_gold(n_options, gold, seed, record["id"])
    return MovedAnswer(
        record["id"],
        n_options,
        gold,
        int(moved),
        bool(answer["published"]["correct"]),
        bool(answer["shuffled"]["correct"]),
    )


def order_report(task: str, records: Sequence[Mapping[str, Any]]) -> OrderTestReport:
    """The canonical-order report of raw records (:func:`measure_items`)."""
    k = len(records[0]["order"]["shuffled"]) if records else 3
    return OrderTestReport(
        task=task,
        seed=0,
        k=k,
        canonical_logprobs=tuple(float(r["order"]["canonical"]) for r in records),
        shuffled_logprobs=tuple(tuple(float(x) for x in r["order"]["shuffled"]) for r in records),
        item_ids=tuple(r["id"] for r in records),
    )


def circular_report(task: str, records: Sequence[Mapping[str, Any]]) -> CircularReport:
    items = tuple(
        CircularItem(
            r["id"],
            len(r["circular"]),
            tuple(r["circular"]),
            (None,) * len(r["circular"]),
            r.get("gold"),
        )
        for r in records
        if r.get("circular")
    )
    return CircularReport(task, items)


def guessing_report(task: str, records: Sequence[Mapping[str, Any]]) -> GuessingReport:
    items = tuple(
        GuessingItem(
            r["id"], g["masked"], "", "", "", g["guess"], g["guess"], bool(g["exact_match"]), 0.0
        )
        for r in records
        if (g := r.get("guessing"))
    )
    return GuessingReport(task, 0, items)


def memberships(records: Sequence[Mapping[str, Any]]) -> list[ItemMembership]:
    return [ItemMembership.from_dict(r["id"], r["membership"]) for r in records]


def verdicts(
    task: str,
    records: Sequence[Mapping[str, Any]],
    reference: Sequence[Mapping[str, Any]] | None,
    *,
    alpha: float = ALPHA,
    seed: int = PROBE_SEED,
) -> dict[str, ContaminationVerdict]:
    """Every task-level verdict on ``records`` (a subset of items), with and without the
    reference model's records of the same items; ``seed`` is the one the records' option
    orders were drawn with (option shuffling's letter-balance coins use it too, as the
    probe does)."""
    out: dict[str, ContaminationVerdict] = {}

    def measured(key: str) -> bool:
        # Any record, not the first: TS-Guessing has nothing to mask on some items (their
        # record holds None), and a draw that starts with one still has a verdict.
        return any(r.get(key) is not None for r in records)

    theirs: Sequence[Mapping[str, Any]] = reference or ()

    def paired(key: str) -> bool:
        # A reference-paired verdict where the reference measured the same thing: a
        # reference file of other measures pairs nothing (0 of 0 items, a vacuous pass).
        return any(r.get(key) is not None for r in theirs)

    def mcnemar(probe: str, null: str, pairs: Sequence[tuple[bool, bool]]) -> None:
        b = sum(1 for published, rewritten in pairs if published and not rewritten)
        c = sum(1 for published, rewritten in pairs if rewritten and not published)
        out[probe] = ContaminationVerdict(
            probe=probe,
            task=task,
            null=null,
            test="one-sided exact McNemar",
            n=len(pairs),
            p_value=mcnemar_one_sided(b, c),
            alpha=alpha,
            summary=f"b={b} right only as published, c={c} right only rewritten",
            detail={"b": b, "c": c},
            validated_as=probe,
        )

    if measured("answer"):
        out["option_shuffle"] = option_shuffle_verdict(
            task, [moved_answer(r, seed) for r in records], alpha, seed=seed
        )
    for key, (probe, null) in REWRITE_MEASURES.items():
        if measured(key):
            pairs = [(r[key]["published"], r[key]["rewritten"]) for r in records if r.get(key)]
            mcnemar(probe, null, pairs)
    if measured("order"):
        report = order_report(task, records)
        options = {r["id"]: r["options"] for r in records}
        everything = {i: ["x"] for i in report.item_ids}  # no item excluded: the old test
        out["canonical_order_unfiltered"] = order_verdict(report, everything, alpha)
        out["canonical_order"] = order_verdict(report, options, alpha)
        if paired("order"):
            out["canonical_order_vs_reference"] = order_verdict(
                report, options, alpha, reference=order_report(task, theirs)
            )
    if measured("circular"):
        options = {r["id"]: r["options"] for r in records}
        circ = circular_report(task, records)
        out["circular"] = circular_verdict(circ, alpha, options=options)
        if paired("circular"):
            out["circular_vs_reference"] = circular_verdict(
                circ, alpha, reference=circular_report(task, theirs)
            )
    if measured("guessing") and paired("guessing"):
        out["ts_guessing_vs_reference"] = guessing_verdict(
            guessing_report(task, records), guessing_report(task, theirs), alpha
        )
    if not measured("membership"):
        return out
    mine = memberships(records)
    # Multiple choice is rewritten by moving options, worked solutions by their numbers
    # (rewritten_docs); the two are validated apart (FlagReport.rewrites).
    kind = "options" if measured("options") else "numbers"
    for score in ("min_k_plus_plus", "mean_logprob"):
        alone = membership_flags(task, mine, score=score, rewrites=kind).verdict(alpha)
        out[alone.validated_as] = alone
        if paired("membership"):
            against = membership_flags(
                task, mine, reference=memberships(theirs), score=score, rewrites=kind
            ).verdict(alpha)
            out[against.validated_as] = against
    return out


def _aurocs(
    task: str,
    records: Sequence[Mapping[str, Any]],
    reference: Sequence[Mapping[str, Any]] | None,
    planted: set[str],
) -> dict[str, float]:
    """AUROC of planted against clean items for every item-level score."""

    def split(values: Mapping[str, float]) -> float:
        pos = [v for i, v in values.items() if i in planted]
        neg = [v for i, v in values.items() if i not in planted]
        return auroc(pos, neg) if pos and neg else float("nan")

    out: dict[str, float] = {}
    mine = memberships(records) if records and "membership" in records[0] else []
    if mine:
        out.update(
            {s: split({m.item_id: getattr(m.published, s) for m in mine}) for s in AUROC_SCORES}
        )
    for s in AUROC_SCORES if mine else ():
        out[f"{s}_vs_rewrites"] = split(membership_flags(task, mine, score=s).values)
        if reference is not None:
            ref = memberships(reference)
            out[f"{s}_vs_reference"] = split(
                membership_flags(task, mine, reference=ref, score=s).values
            )
    if records and "order" in records[0]:
        rep = order_report(task, records)
        out["order_margin"] = split(
            {
                i: c - sum(x) / len(x)
                for i, c, x in zip(
                    rep.item_ids, rep.canonical_logprobs, rep.shuffled_logprobs, strict=True
                )
            }
        )
    return out


def _flag_quality(
    task: str,
    records: Sequence[Mapping[str, Any]],
    reference: Sequence[Mapping[str, Any]] | None,
    planted: set[str],
) -> dict[str, dict[str, float]]:
    """Precision and recall of the membership flags (target FPR :data:`FLAG_FPR`) on the
    experiment's items, and the false-positive rate among its clean items."""
    out: dict[str, dict[str, float]] = {}
    if not records or "membership" not in records[0]:
        return out
    mine = memberships(records)
    ref = memberships(reference) if reference is not None else None
    for mode in ("rewrites", "reference"):
        if mode == "reference" and ref is None:
            continue
        for score in ("min_k_plus_plus", "mean_logprob"):
            rep = membership_flags(
                task,
                mine,
                reference=ref if mode == "reference" else None,
                score=score,
                fpr=FLAG_FPR,
            )
            flagged = set(rep.flagged)
            hits = len(flagged & planted)
            clean = [i for i in rep.values if i not in planted]
            out[f"{score}_vs_{mode}"] = {
                "flagged": len(flagged),
                "precision": hits / len(flagged) if flagged else float("nan"),
                "recall": hits / len(planted & set(rep.values)) if planted else float("nan"),
                "clean_fpr": sum(1 for i in clean if i in flagged) / len(clean)
                if clean
                else float("nan"),
                "control_fpr": rep.control_fpr,
            }
    return out


def _count_fired(
    task: str,
    draw: Callable[[], list[Mapping[str, Any]]],
    reference: Sequence[Mapping[str, Any]] | None,
    draws: int,
    alpha: float,
) -> dict[str, int]:
    """How many of ``draws`` item sets from ``draw()`` each verdict fires on (with the
    reference model's records of the same items when given)."""
    by_id = {r["id"]: r for r in reference} if reference is not None else None
    fired: dict[str, int] = {}
    for _ in range(draws):
        chosen = draw()
        ref = [by_id[r["id"]] for r in chosen] if by_id is not None else None
        for name, v in verdicts(task, chosen, ref, alpha=alpha).items():
            fired[name] = fired.get(name, 0) + int(v.fired)
    return fired


def fire_rates(
    task: str,
    records: Sequence[Mapping[str, Any]],
    reference: Sequence[Mapping[str, Any]] | None,
    *,
    size: int,
    draws: int,
    seed: int,
    alpha: float = ALPHA,
) -> dict[str, dict[str, Any]]:
    """How often each verdict fires on random ``size``-item draws from ``records``: the
    false-positive rate when every item is clean, the power when every item is planted."""
    rng = random.Random(seed)
    size = min(size, len(records))
    pool = list(records)
    fired = _count_fired(task, lambda: rng.sample(pool, size), reference, draws, alpha)
    return {
        name: {"rate": k / draws, "interval": list(wilson_interval(k, draws)), "size": size}
        for name, k in fired.items()
    }


def analyse(raw: Path, models: Path, *, draws: int = 500, seed: int = 1234) -> dict[str, Any]:
    """Read ``<model>-<task>.json`` raw files (:func:`measure`) and the planted models'
    ``planted.json`` (:func:`plant`, in ``models/<model>/``); the model named
    :data:`REFERENCE` is the untouched one every other model is compared with."""
    files = sorted(raw.glob("*-*.json"))
    data = {f.stem: json.loads(f.read_text()) for f in files}
    plants = {
        d.name: json.loads((d / "planted.json").read_text())
        for d in sorted(models.iterdir())
        if (d / "planted.json").is_file()
    }
    out: dict[str, Any] = {"planted": {}, "pools": {}, "training": {}}
    for name, plant_record in plants.items():
        out["training"][name] = {
            "task": plant_record["task"],
            **plant_record["training"],
            "planted": len(plant_record["planted"]),
        }
    for stem, result in data.items():
        model, task = stem.split("-", 1)
        records = result["items"]
        ref_result = data.get(f"{REFERENCE}-{task}") if model != REFERENCE else None
        ref_by_id = {r["id"]: r for r in ref_result["items"]} if ref_result else None

        def ref_of(
            rs: Sequence[Mapping[str, Any]], by_id: Mapping[str, Any] | None = ref_by_id
        ) -> list[Mapping[str, Any]] | None:
            return [by_id[r["id"]] for r in rs] if by_id is not None else None

        plant_record = plants.get(model)
        planted = (
            set(plant_record["planted"]) if plant_record and plant_record["task"] == task else set()
        )
        clean = [r for r in records if r["id"] not in planted]
        out["pools"][stem] = {
            "measured": result.get("measured"),
            "resumed": result.get("resumed", []),
            "from_run": result.get("from_run"),
            "conditions": conditions(result),
            "model": model,
            "task": task,
            "clean_items": len(clean),
            "fpr": fire_rates(task, clean, ref_of(clean), size=50, draws=draws, seed=seed),
            "flags": _flag_quality(task, clean, ref_of(clean), set()),
        }
        experiment_model = plant_record["task"] == task if plant_record else model == REFERENCE
        for planter, rec in plants.items():
            if rec["task"] != task or not experiment_model or model not in (planter, REFERENCE):
                continue
            ids = set(rec["items"])
            planted_ids = set(rec["planted"])
            exp = [r for r in records if r["id"] in ids]
            halves = {
                "planted": [r for r in exp if r["id"] in planted_ids],
                "clean": [r for r in exp if r["id"] not in planted_ids],
            }
            role = "contaminated" if model == planter else "original"
            entry = out["planted"].setdefault(planter, {"task": task, "models": {}})
            entry["models"][role] = {
                "aurocs": _aurocs(task, exp, ref_of(exp), planted_ids),
                "flags": _flag_quality(task, exp, ref_of(exp), planted_ids),
                "halves": {
                    h: {k: v.to_dict() for k, v in verdicts(task, rs, ref_of(rs)).items()}
                    for h, rs in halves.items()
                },
                "power_25": fire_rates(
                    task,
                    halves["planted"],
                    ref_of(halves["planted"]),
                    size=25,
                    draws=draws,
                    seed=seed,
                ),
            }
    return out


# --------------------------------------------------------------------------- scaling

SIZES = (50, 100, 200, 500, 1000, 2000, 5000)
POWER_SHARE = 0.1  # power(n): draws of n items of which this share is planted


def _rate(fired: int, draws: int, size: int, pool: int) -> dict[str, Any]:
    return {
        "rate": fired / draws,
        "fired": fired,
        "draws": draws,
        "interval": list(wilson_interval(fired, draws)),
        "size": size,
        "disjoint": pool // size,  # how many of the draws could be independent
    }


def scaling_rates(
    task: str,
    records: Sequence[Mapping[str, Any]],
    reference: Sequence[Mapping[str, Any]] | None,
    *,
    sizes: Sequence[int],
    draws: int,
    seed: int,
    alpha: float = ALPHA,
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Each verdict's fire rate on ``draws`` random draws of every size in ``sizes`` below
    the pool's, and its verdict on the whole pool (the largest n there is)."""
    rng = random.Random(seed)
    by_id = {r["id"]: r for r in reference} if reference is not None else None
    rates: dict[str, dict[str, Any]] = {}
    pool = list(records)
    for size in [s for s in sizes if s < len(pool)]:

        def draw(n: int = size) -> list[Mapping[str, Any]]:
            return rng.sample(pool, n)

        fired = _count_fired(task, draw, reference, draws, alpha)
        for name, k in fired.items():
            rates.setdefault(name, {})[str(size)] = _rate(k, draws, size, len(pool))
    ref_all = [by_id[r["id"]] for r in pool] if by_id is not None else None
    # The verdict without its message: the message quotes the validated range, which is
    # what this measurement writes (pytest_llmeval/contamination/validation.json).
    dropped = ("message", "validation", "validation_pools")
    whole = {
        k: _counts_only({f: x for f, x in v.to_dict().items() if f not in dropped})
        for k, v in verdicts(task, pool, ref_all, alpha=alpha).items()
    }
    for name, verdict in whole.items():
        rates.setdefault(name, {})[str(len(pool))] = _rate(
            int(verdict["fired"]), 1, len(pool), len(pool)
        )
    return rates, whole


def _counts_only(value: Any) -> Any:
    """A whole-pool verdict as the tables keep it: its lists of item ids (the order test's
    kept and excluded items) as their lengths."""
    if isinstance(value, list):
        return len(value)
    if isinstance(value, dict):
        return {k: _counts_only(v) for k, v in value.items()}
    return value


def power_rates(
    task: str,
    records: Sequence[Mapping[str, Any]],
    reference: Sequence[Mapping[str, Any]] | None,
    planted: set[str],
    *,
    sizes: Sequence[int],
    draws: int,
    seed: int,
    share: float = POWER_SHARE,
    alpha: float = ALPHA,
) -> dict[str, dict[str, Any]]:
    """Each verdict's fire rate on draws of n items of which ``share`` are planted (a model
    that saw a tenth of the benchmark), for every n the planted pool allows."""
    rng = random.Random(seed)
    hot = [r for r in records if r["id"] in planted]
    cold = [r for r in records if r["id"] not in planted]
    out: dict[str, dict[str, Any]] = {}
    for size in sizes:
        n_hot = round(share * size)
        if n_hot < 1 or n_hot > len(hot) or size - n_hot > len(cold):
            continue

        def draw(n_hot: int = n_hot, size: int = size) -> list[Mapping[str, Any]]:
            return rng.sample(hot, n_hot) + rng.sample(cold, size - n_hot)

        fired = _count_fired(task, draw, reference, draws, alpha)
        for name, k in fired.items():
            out.setdefault(name, {})[str(size)] = _rate(k, draws, size, len(records))
    return out


def scaling(
    raw: Path,
    models: Path | None,
    *,
    sizes: Sequence[int] = SIZES,
    draws: int = 200,
    seed: int = 1234,
    carry: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """False alarms as a function of n on every clean pool of ``raw`` (``<model>-<task>``
    files, or ``<model>-<task>.<label>`` for another set of measures of the same model and
    task; the planted items of a planted model are left out of its pool), and power as a
    function of n on every planted model (:data:`POWER_SHARE` of each draw planted).

    Reference-paired verdicts are computed only for models fine-tuned from the untouched
    one (a ``planted.json`` in ``models``): that pair is known to differ only by the
    fine-tune, which never saw the pool's items. Two untouched models of different
    families are not a known-clean pair (either may have met the benchmark on the web),
    so they are measured without a reference only.

    ``carry``: the results of an earlier scaling run whose raw files are not in ``raw``
    (measurements of other verdicts); its pools and power tables are kept as they were
    measured (:func:`carry_over`) and the validation summary covers both."""
    data = {
        f.name[: -len(".json")]: json.loads(f.read_text()) for f in sorted(raw.glob("*-*.json"))
    }
    plants = (
        {
            d.name: json.loads((d / "planted.json").read_text())
            for d in sorted(models.iterdir())
            if (d / "planted.json").is_file()
        }
        if models is not None and models.is_dir()
        else {}
    )
    out: dict[str, Any] = {"alpha": ALPHA, "draws": draws, "sizes": list(sizes), "pools": {}}
    out["power"] = {}
    for stem, result in data.items():
        # <model>-<task>.json, or <model>-<task>.<label>.json for another set of measures
        # of the same pair; a fine-tune's reference is the file of the untouched model it
        # was fine-tuned from, of the same task and label.
        base, _, label = stem.partition(".")
        model, task = base.split("-", 1)
        records = result["items"]
        plant_record = plants.get(model)
        ref_result = (
            data.get(_reference_stem(data, plants, plant_record, task, label) or "")
            if plant_record is not None
            else None
        )
        ref_by_id = {r["id"]: r for r in ref_result["items"]} if ref_result else None
        if ref_by_id is not None:
            records = [r for r in records if r["id"] in ref_by_id]
        planted = set(plant_record["planted"]) if plant_record else set()
        clean = [r for r in records if r["id"] not in planted]

        def ref_of(
            rs: Sequence[Mapping[str, Any]], by_id: Mapping[str, Any] | None = ref_by_id
        ) -> list[Mapping[str, Any]] | None:
            return [by_id[r["id"]] for r in rs] if by_id is not None else None

        rates, whole = scaling_rates(
            task, clean, ref_of(clean), sizes=sizes, draws=draws, seed=seed
        )
        # The model as it was named for the measurement (an embedded alias, or the
        # directory of a fine-tune); its resolved path is in the raw file's model_info.
        named = Path(str(result["model"])).name
        out["pools"][stem] = {
            "measured": result.get("measured"),
            "resumed": result.get("resumed", []),
            "from_run": result.get("from_run"),
            "conditions": conditions(result),
            "model": model,
            "model_name": named,
            "task": task,
            "role": _fine_tune_role(plant_record, len(planted)) if plant_record else "untouched",
            "clean_items": len(clean),
            "measures": result.get("measures", list(MEASURES)),
            "rates": rates,
            "whole": whole,
        }
        if planted and plant_record and plant_record["task"] == task:
            out["power"][stem] = {
                "model": model,
                "task": task,
                "share": POWER_SHARE,
                "planted": len(planted & {r["id"] for r in records}),
                "rates": power_rates(
                    task,
                    records,
                    ref_of(records),
                    planted,
                    sizes=sizes,
                    draws=draws,
                    seed=seed,
                ),
            }
    out["pools"].update(position_only_pools(data, plants, sizes=sizes, draws=draws, seed=seed))
    if carry is not None:
        carry_over(out, carry)
    out["validation"] = validation_summary(out)
    return out


def position_only_pools(
    data: Mapping[str, Mapping[str, Any]],
    plants: Mapping[str, Any],
    *,
    sizes: Sequence[int],
    draws: int,
    seed: int,
) -> dict[str, Any]:
    """Option shuffling and CircularEval on models that always answer the same letter, on
    the largest untouched ``answers`` pool of each task: they read nothing, so they are
    clean by construction, and they are the limit of a real habit (the default model
    answers "A" on 98.7% of MMLU items zero-shot). Computed from the pool's gold options
    and the probes' seeded orders and rotations
    (:func:`tools.contamination_letter_bias.position_only_records`), no model run. Where a
    benchmark's gold letters are not uniform, a null that moves golds uniformly (or takes
    ``1/n`` for the published rotation) fires on such a model once n is large enough; the
    letter-balanced nulls (:mod:`pytest_llmeval.contamination._letters`) must not."""
    from tools.contamination_letter_bias import position_only_records

    largest: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for stem, result in data.items():
        model, task = stem.partition(".")[0].split("-", 1)
        items = [r for r in result["items"] if r.get("options") and "answer" in r]
        if model in plants or not items:
            continue
        if task not in largest or len(items) > len(largest[task][1]["items"]):
            largest[task] = (stem, {**result, "items": items})
    pools: dict[str, Any] = {}
    for task, (stem, result) in sorted(largest.items()):
        items = result["items"]
        setup_seed = int(result.get("setup", {}).get("seed", PROBE_SEED))
        for letter in range(max(len(r["options"]) for r in items)):
            name = f"{POSITION_PREFIX}{'ABCDEFGHIJ'[letter]}"
            records = position_only_records(items, letter, seed=setup_seed)
            rates, whole = scaling_rates(task, records, None, sizes=sizes, draws=draws, seed=seed)
            pools[f"{name}-{task}"] = {
                "measured": result.get("measured"),
                "resumed": [],
                "from_run": None,
                "conditions": "any prompts (the answer is chosen by its position alone)",
                "model": name,
                "model_name": name,
                "task": task,
                "role": (
                    f"always answers {'ABCDEFGHIJ'[letter]}, whatever the item (reads "
                    f"nothing: clean by construction); the gold options and seeded orders "
                    f"of {stem}"
                ),
                "clean_items": len(items),
                "measures": ["answers", "circular"],
                "rates": rates,
                "whole": whole,
            }
    return pools


def _fine_tune_role(plant_record: Mapping[str, Any], planted: int) -> str:
    """How a fine-tuned pool's model was made, as its label says it: the base, the planted
    items and, where it is not the default, how many passes (on MMLU, 3 passes left the
    planted items 38% right and 10 passes 42%, with their answer letters learned more than
    their answers: two different models)."""
    setup = plant_record.get("setup", {})
    epochs = str(setup.get("epochs", ""))
    passes = f" for {epochs} epochs" if epochs and epochs != str(DEFAULT_EPOCHS) else ""
    how = (
        " as prompt-to-answer pairs, the loss on the answer only"
        if setup.get("loss", "text") == "answer"
        else ""
    )
    return (
        f"fine-tuned from {setup.get('model', DEFAULT_MODEL)} on {planted} "
        f"{plant_record['task']} items{how}{passes}, probed on the others (in-domain, never "
        "saw them)"
    )


def _reference_stem(
    data: Mapping[str, Mapping[str, Any]],
    plants: Mapping[str, Any],
    plant_record: Mapping[str, Any],
    task: str,
    label: str,
) -> str | None:
    """The raw file a fine-tune is paired with: the untouched model it was fine-tuned from
    (``setup.model`` of its ``planted.json``), measured on the same task with the same
    label; a Gemma fine-tune is compared with Gemma, never with another family. None when
    that model was not measured there (no reference-paired verdicts then)."""
    base = str(plant_record.get("setup", {}).get("model", ""))
    found = []
    for stem, result in data.items():
        head, _, other_label = stem.partition(".")
        model, other_task = head.split("-", 1)
        if (other_task, other_label) != (task, label) or model in plants:
            continue
        if base in (str(result.get("model")), Path(str(result.get("model"))).name):
            found.append(stem)
    if len(found) > 1:
        raise ValueError(
            f"{', '.join(sorted(found))}: two raw files of {base} on {task} with label "
            f"{label!r}; keep one as the fine-tune's reference"
        )
    if not found and not base:
        # planted.json without its setup (written before it was recorded): the default model
        return f"{REFERENCE}-{task}{'.' if label else ''}{label}"
    return found[0] if found else None


# Verdicts whose null changed, and a phrase of the null they have now: a carried pool whose
# whole-pool verdict names another null measured another test, and its rates are dropped
# (option shuffling and CircularEval weigh gold letters in their own shares since
# 2026-12-06; pools measured before could not be rescored where their raw files were lost).
CURRENT_NULLS = {"option_shuffle": "letter shares", "circular": "gold letters in their own shares"}


def _other_nulls(pool: Mapping[str, Any]) -> set[str]:
    """The verdicts of a carried pool that were computed against a null they no longer
    have (:data:`CURRENT_NULLS`)."""
    return {
        probe
        for probe, phrase in CURRENT_NULLS.items()
        if probe in pool["rates"] and phrase not in str(pool["whole"].get(probe, {}).get("null"))
    }


def carry_over(results: dict[str, Any], earlier: Mapping[str, Any]) -> None:
    """Fold the pools and power tables of an ``earlier`` scaling run into ``results``, as
    they were measured (alpha and the number of draws must agree). A pool of the same
    model and task measured again with the same measures replaces the earlier one; with
    other measures both are kept, the new one named ``<stem>:<measures>``. Rates of a
    verdict whose null has changed since (:data:`CURRENT_NULLS`) are dropped, and a pool
    left with none."""
    if (earlier["alpha"], earlier["draws"]) != (results["alpha"], results["draws"]):
        raise ValueError(
            f"--carry: alpha {earlier['alpha']} and {earlier['draws']} draws there, "
            f"{results['alpha']} and {results['draws']} here: rerun it with the same ones"
        )
    pools: dict[str, Any] = {}
    renamed: dict[str, str] = {}
    stale: dict[str, set[str]] = {}
    for stem, pool in earlier["pools"].items():
        new = results["pools"].get(stem)
        if new is not None and new["measures"] == pool["measures"]:
            continue
        stale[stem] = _other_nulls(pool)
        pool = {
            **pool,
            "rates": {k: v for k, v in pool["rates"].items() if k not in stale[stem]},
            "whole": {
                k: {**v, "detail": _counts_only(v.get("detail") or {})}
                for k, v in pool["whole"].items()
                if k not in stale[stem]
            },
        }
        if not pool["rates"]:
            continue
        pools[stem] = {"conditions": EARLIER_CONDITIONS, **pool}
        if str(pool.get("role", "")).startswith("fine-tuned on "):
            # Written before roles named the model fine-tuned: the default one, then.
            role = pool["role"].replace("fine-tuned on ", f"fine-tuned from {DEFAULT_MODEL} on ", 1)
            pools[stem]["role"] = role
    kept = set(pools)
    for stem, pool in results["pools"].items():
        key = f"{stem}:{'+'.join(pool['measures'])}" if stem in pools else stem
        renamed[stem] = key
        pools[key] = pool
    results["pools"] = pools
    power = {
        k: {**v, "rates": {p: r for p, r in v["rates"].items() if p not in stale[k]}}
        for k, v in earlier.get("power", {}).items()
        if k in kept
    }
    for stem, table in results["power"].items():
        power[renamed[stem]] = table
    results["power"] = power
    results["sizes"] = sorted(set(results["sizes"]) | set(earlier["sizes"]))


def _discordant_pairs(verdict: Mapping[str, Any]) -> int | None:
    """The number of discordant pairs of a McNemar verdict's whole-pool run (None for the
    other tests)."""
    detail = verdict.get("detail") or {}
    for b, c in (("b", "c"), ("mcnemar_b", "mcnemar_c")):
        if isinstance(detail.get(b), int) and isinstance(detail.get(c), int):
            return int(detail[b]) + int(detail[c])
    return None


def validation_summary(results: Mapping[str, Any]) -> dict[str, Any]:
    """Per verdict: the sizes and pools its false-alarm rate was measured on, the largest
    rate at any size, and whether it holds its level everywhere: no size whose rate is
    above alpha beyond sampling error (the lower end of its 95% Wilson interval over the
    draws above alpha), and no whole pool on which it fired (one verdict on clean items
    that a null at its level gives with probability alpha)."""
    alpha = results["alpha"]
    summary: dict[str, Any] = {}
    uninformative: dict[str, list[str]] = {}
    for stem, pool in results["pools"].items():
        for name, by_size in pool["rates"].items():
            discordant = _discordant_pairs(pool["whole"].get(name, {}))
            if discordant is not None and mcnemar_one_sided(discordant, 0) >= alpha:
                # A McNemar test with too few discordant pairs cannot fire at any n (a
                # model that answers nearly every item wrong both ways, or reproduces no
                # masked option either way): 0% false alarms there say nothing.
                uninformative.setdefault(name, []).append(
                    f"{pool['model_name']} / {pool['task']}: {discordant} discordant pairs "
                    f"in {pool['clean_items']} items"
                )
                continue
            entry = summary.setdefault(
                name,
                {
                    "sizes": [],
                    "pools": [],
                    "conditions": [],
                    "max_rate": 0.0,
                    "fired_on_whole_pool": [],
                },
            )
            if pool["conditions"] not in entry["conditions"]:
                entry["conditions"].append(pool["conditions"])
            sizes = sorted(int(s) for s in by_size)
            entry["sizes"] = sorted(set(entry["sizes"]) | set(sizes))
            drawn = [r for r in by_size.values() if r["draws"] > 1] or list(by_size.values())
            worst = max(drawn, key=lambda r: (r["rate"], r["size"]))
            entry["max_rate"] = max(entry["max_rate"], worst["rate"])
            entry["pools"].append(
                {
                    "pool": stem,
                    "model": pool["model_name"],
                    "task": pool["task"],
                    "role": pool["role"],
                    "conditions": pool["conditions"],
                    "n_max": max(sizes),
                    "max_rate": worst["rate"],
                    "at": worst["size"],
                    "draws": worst["draws"],
                    "interval": worst["interval"],
                }
            )
            if pool["whole"].get(name, {}).get("fired"):
                entry["fired_on_whole_pool"].append(stem)
            entry.setdefault("above_alpha", []).extend(
                f"{stem} n={r['size']}"
                for r in by_size.values()
                if r["draws"] > 1 and r["interval"][0] > alpha
            )
    for entry in summary.values():
        entry["holds"] = not entry["above_alpha"] and not entry["fired_on_whole_pool"]
    for name, pools in uninformative.items():
        # Not validated where it cannot fire: a verdict with no other pool has no entry in
        # validation.json, and the plugin gives none.
        summary.setdefault(name, {"pools": [], "holds": False})["cannot_fire_on"] = pools
    return summary


def _pool_labels(entry: Mapping[str, Any]) -> list[str]:
    """A verdict's pools in words, short enough for a test's message (the tables have the
    rest): one label per model and role, with the most items measured on each benchmark
    (pools of one model measured in two sessions count once); the models that always answer
    one letter as one label; the conditions named per label when the verdict was measured
    under more than one."""
    several = len(entry["conditions"]) > 1
    groups: dict[tuple[str, str], dict[str, int]] = {}
    letters: list[str] = []
    for p in entry["pools"]:
        model = str(p["model"])
        if model.startswith(POSITION_PREFIX):
            letters.append(model.removeprefix(POSITION_PREFIX))
            who = POSITION_PREFIX  # named below, once every letter is known
        else:
            who = f"{model} {p['role']}"
        tasks = groups.setdefault((who, p.get("conditions", "") if several else ""), {})
        tasks[p["task"]] = max(tasks.get(p["task"], 0), int(p["n_max"]))
    each = sorted(set(letters))
    either = f"{', '.join(each[:-1])} or {each[-1]}" if len(each) > 1 else "".join(each)
    position = (
        f"models that always answer {either}, whatever the item (they read nothing: clean "
        "by construction)"
    )
    return [
        f"{position if who == POSITION_PREFIX else who} ("
        + ", ".join(f"{task} up to {n} items" for task, n in tasks.items())
        + (f"; {cond}" if cond else "")
        + ")"
        for (who, cond), tasks in groups.items()
    ]


def _and(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return f"{', '.join(names[:-1])} and {names[-1]}" if len(names) > 1 else "".join(names)


def _model_kinds(entry: Mapping[str, Any]) -> str:
    """The kinds of model a verdict's pools ran, in a few words for its message: the
    untouched models, how many in-domain fine-tunes of each base, the position-only
    models. (The pools one by one, with their benchmarks and sizes, are in the record and
    the tables.)"""
    untouched: set[str] = set()
    tuned: dict[str, set[str]] = {}
    letters = False
    for p in entry["pools"]:
        model = str(p["model"])
        base = re.match(r"fine-tuned from (\S+) on ", str(p["role"]))
        if model.startswith(POSITION_PREFIX):
            letters = True
        elif base:
            tuned.setdefault(base.group(1), set()).add(model)
        else:
            untouched.add(model)
    kinds = []
    if untouched:
        kinds.append(f"untouched models ({', '.join(sorted(untouched))})")
    if tuned:
        counts = ", ".join(f"{len(names)} of {base}" for base, names in sorted(tuned.items()))
        kinds.append(f"in-domain fine-tunes that never saw the items probed ({counts})")
    if letters:
        kinds.append("models that always answer one letter (clean by construction)")
    return _and(kinds)


def _sampling_error(worst: Mapping[str, Any], alpha: float) -> str:
    """For a largest rate above alpha, how sure it is: the draws' 95% interval, and whether
    it reaches down to alpha (a rate of 1.5% on 200 draws may be a verdict at its level of
    1%); empty at or under alpha, or for an entry written before intervals were kept."""
    interval, draws = worst.get("interval"), worst.get("draws")
    if worst["max_rate"] <= alpha or not interval or not draws or draws <= 1:
        return ""
    low, high = (100 * float(x) for x in interval)
    where = "within sampling error of" if low <= 100 * alpha else "above"
    return (
        f" ({round(worst['max_rate'] * draws)} of {draws} draws, 95% interval "
        f"{low:.1f}-{high:.1f}%: {where} alpha={alpha})"
    )


def _power_of(results: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    """Verdict ``name``'s power at a tenth planted, per planted model and conditions: its
    rate at each size (a model measured in several pools under the same conditions, once,
    with the mean of their rates at each size: a message names each model once), for a
    verdict's message to quote the one at the run's n."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for stem, table in sorted(results.get("power", {}).items()):
        rates = table.get("rates", {}).get(name)
        if not rates:
            continue
        conditions = results.get("pools", {}).get(stem, {}).get("conditions", "")
        entry = found.setdefault(
            (table["model"], conditions),
            {
                "model": table["model"],
                "conditions": conditions,
                "share": table.get("share", POWER_SHARE),
                "pools": 0,
                "rates": {},
            },
        )
        entry["pools"] += 1
        for n, r in rates.items():
            entry["rates"].setdefault(str(n), []).append(float(r["rate"]))
    return [
        {**e, "rates": {n: sum(r) / len(r) for n, r in e["rates"].items()}} for e in found.values()
    ]


def validation_file(results: Mapping[str, Any]) -> dict[str, Any]:
    """The compact per-verdict summary the package reads
    (``pytest_llmeval/contamination/validation.json``, :mod:`~._validation`)."""
    verdicts_out = {}
    for name, entry in sorted(results["validation"].items()):
        if not entry["pools"]:
            # Measured only where it cannot fire: not validated, and the plugin says so.
            verdicts_out[name] = {
                "n_min": 0,
                "n_max": 0,
                "pools": [],
                "max_rate": 0.0,
                "worst": "",
                "holds": False,
                "cannot_fire_on": entry["cannot_fire_on"],
            }
            continue
        worst = max(entry["pools"], key=lambda p: p["max_rate"])
        verdicts_out[name] = {
            "n_min": min(entry["sizes"]),
            "n_max": max(entry["sizes"]),
            "pools": _pool_labels(entry),
            "models": _model_kinds(entry),
            "conditions": entry["conditions"],
            # The most items measured under each condition: a run under one lies outside
            # the validated range above that many, whatever other conditions reached.
            "n_max_by_conditions": {
                c: max(int(p["n_max"]) for p in entry["pools"] if p.get("conditions") == c)
                for c in entry["conditions"]
                if any(p.get("conditions") == c for p in entry["pools"])
            },
            "tasks": sorted({p["task"] for p in entry["pools"]}),
            "max_rate": entry["max_rate"],
            "worst": f"{100 * worst['max_rate']:.1f}% of random draws of {worst['at']} items, "
            f"{worst['model']} / {worst['task']}"
            + _sampling_error(worst, results["alpha"])
            + (
                "; fired on the whole pool of " + ", ".join(entry["fired_on_whole_pool"])
                if entry["fired_on_whole_pool"]
                else ""
            ),
            "fired_on_whole_pool": entry["fired_on_whole_pool"],
            "above_alpha": entry["above_alpha"],
            "holds": entry["holds"],
            "power": _power_of(results, name),
        }
    return {
        "alpha": results["alpha"],
        "tables": "docs/contamination-experiment/scaling.md",
        "verdicts": verdicts_out,
    }


def _size_table(title: str, sizes: Sequence[int]) -> list[str]:
    """A section heading and the head of a verdict-by-n table."""
    return [
        "",
        f"## {title}",
        "",
        "| verdict | " + " | ".join(f"n={s}" for s in sizes) + " |",
        "| --- |" + " --- |" * len(sizes),
    ]


def scaling_markdown(results: Mapping[str, Any]) -> str:
    """The FPR(n) and power(n) tables (docs/contamination-experiment/scaling.md)."""
    alpha = results["alpha"]
    lines = [
        "# Contamination verdicts as a function of n: false alarms and power",
        "",
        f"alpha {alpha}; {results['draws']} random draws per size below a pool's size; the "
        "last size of a pool is the whole pool (one verdict: FIRES or pass, with its p). "
        "`disjoint` is how many of the draws could be independent (pool // n).",
    ]
    for pool in results["pools"].values():
        sizes = sorted({int(s) for r in pool["rates"].values() for s in r})
        lines += _size_table(
            f"False alarms: {pool['model_name']} / {pool['task']} ({pool['role']}, "
            f"{pool['clean_items']} clean items)",
            sizes,
        )
        lines[-2:-2] = [
            f"Measured: {', '.join(pool['measures'])}; {pool['conditions']}{_when(pool)}.",
            "",
        ]
        for name in sorted(pool["rates"]):
            cells = []
            for s in sizes:
                r = pool["rates"][name].get(str(s))
                if r is None:
                    cells.append("-")
                elif r["draws"] == 1:
                    p = pool["whole"][name]["p_value"]
                    cells.append(f"{'**FIRES**' if r['fired'] else 'pass'} (p={p:.2g})")
                else:
                    cell = f"{100 * r['rate']:.1f}%"
                    cells.append(f"**{cell}**" if r["rate"] > alpha else cell)
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines += ["", "On the whole pool:", ""]
        for name in sorted(pool["whole"]):
            lines.append(f"- {name}: {pool['whole'][name]['summary']}")
    for stem, power in results["power"].items():
        sizes = sorted({int(s) for r in power["rates"].values() for s in r})
        lines += _size_table(
            f"Power: {stem} ({100 * power['share']:.0f}% of each draw planted, from "
            f"{power['planted']} planted items)",
            sizes,
        )
        for name in sorted(power["rates"]):
            cells = [
                f"{100 * power['rates'][name][str(s)]['rate']:.1f}%"
                if str(s) in power["rates"][name]
                else "-"
                for s in sizes
            ]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Per verdict: where its false-alarm rate was measured",
        "",
        "| verdict | sizes | pools | largest false-alarm rate | holds its level at every n |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, entry in sorted(results["validation"].items()):
        if not entry["pools"]:
            lines.append(
                f"| {name} | - | measured only where it cannot fire: "
                f"{'; '.join(entry['cannot_fire_on'])} | - | not validated |"
            )
            continue
        several = len(entry.get("conditions", ())) > 1  # then each pool names its own
        pools = "; ".join(
            f"{p['model']} / {p['task']} ({p['role']}"
            + (f"; {p['conditions']}" if several and p.get("conditions") else "")
            + f"): {100 * p['max_rate']:.1f}% at n={p['at']}"
            for p in entry["pools"]
        )
        lines.append(
            f"| {name} | {min(entry['sizes'])}..{max(entry['sizes'])} | {pools} | "
            f"{100 * entry['max_rate']:.1f}% | {'yes' if entry['holds'] else '**no**'} |"
        )
    return "\n".join(lines) + "\n"


def _when(pool: Mapping[str, Any]) -> str:
    measured = pool.get("measured") or {}

    def at(m: Mapping[str, Any]) -> str:
        dirty = " with uncommitted changes" if m.get("dirty") else ""
        return f"at commit {m['commit']}{dirty}, {m['date']}"

    parts = []
    if measured.get("commit"):
        parts.append(at(measured))
        parts += [f"from item {a['from_item']} on, {at(a)}" for a in pool.get("resumed") or []]
    text = f" {'; '.join(parts)}" if parts else ""
    run = pool.get("from_run")
    if run:
        # A pool read back from the shipped suite's own probes (tools.contamination_from_run).
        text += f"{',' if text else ''} read from the probe records of the pytest run {run['run']}"
        for checked in run.get("checked") or []:
            text += (
                f" (the same outcomes as `measure` wrote in {checked['file']} on the "
                f"{checked['items']} items both hold)"
            )
    return text


def _fmt_p(v: Mapping[str, Any]) -> str:
    return f"{'**FIRES**' if v['fired'] else 'pass'} (p={v['p_value']:.2g})"


def markdown(results: Mapping[str, Any]) -> str:
    """The experiment's tables (docs/contamination-experiment/results.md)."""
    lines = ["# Planted contamination: verdicts, their power and their false alarms", ""]
    for name, t in results["training"].items():
        lines.append(
            f"- `{name}`: fine-tuned on {t['planted']} {t['task']} items, {t['seconds']} s, "
            "mean loss per epoch " + ", ".join(f"{x:.3f}" for x in t["epoch_losses"])
        )
    for planter, entry in results["planted"].items():
        lines += ["", f"## {planter}: {entry['task']}, planted half against clean half", ""]
        models = entry["models"]
        names = sorted({k for m in models.values() for k in m["aurocs"]})
        lines += ["Item-level AUROC, planted vs clean items:", ""]
        lines += ["| score | original model | contaminated model |", "| --- | --- | --- |"]
        for s in names:
            cells = [
                f"{models[r]['aurocs'][s]:.3f}" if s in models.get(r, {}).get("aurocs", {}) else "-"
                for r in ("original", "contaminated")
            ]
            lines.append(f"| {s} | {cells[0]} | {cells[1]} |")
        lines += ["", f"Verdicts per half (alpha {ALPHA}):", ""]
        verdict_names = sorted(
            {k for m in models.values() for h in m["halves"].values() for k in h}
        )
        lines += [
            "| verdict | "
            + " | ".join(f"{r} / {h}" for r in models for h in ("planted", "clean"))
            + " |",
            "| --- |" + " --- |" * (2 * len(models)),
        ]
        for v in verdict_names:
            cells = [
                _fmt_p(models[r]["halves"][h][v]) if v in models[r]["halves"][h] else "-"
                for r in models
                for h in ("planted", "clean")
            ]
            lines.append(f"| {v} | " + " | ".join(cells) + " |")
        if "contaminated" in models:
            lines += ["", "Power on draws of 25 planted items (contaminated model):", ""]
            lines += ["| verdict | fires |", "| --- | --- |"]
            for v, r in sorted(models["contaminated"]["power_25"].items()):
                lines.append(f"| {v} | {100 * r['rate']:.1f}% |")
            lines += [
                "",
                f"Membership flags at a {100 * FLAG_FPR:.0f}% target false-positive rate "
                "on the experiment's items (contaminated model):",
                "",
            ]
            lines += [
                "| flags | flagged | precision | recall | FPR on clean items | FPR on controls |",
                "| --- | --- | --- | --- | --- | --- |",
            ]
            for k, q in models["contaminated"]["flags"].items():
                lines.append(
                    f"| {k} | {q['flagged']} | {q['precision']:.2f} | {q['recall']:.2f} | "
                    f"{100 * q['clean_fpr']:.1f}% | {100 * q['control_fpr']:.1f}% |"
                )
    lines += ["", f"## False alarms on clean items (draws of 50, alpha {ALPHA})", ""]
    pools = results["pools"]
    verdict_names = sorted({k for p in pools.values() for k in p["fpr"]})
    columns = [f"{p['model']} / {p['task']} ({p['clean_items']})" for p in pools.values()]
    lines += ["| verdict | " + " | ".join(columns) + " |", "| --- |" + " --- |" * len(pools)]
    for v in verdict_names:
        cells = [
            f"{100 * p['fpr'][v]['rate']:.1f}%" if v in p["fpr"] else "-" for p in pools.values()
        ]
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Membership flags (target {100 * FLAG_FPR:.0f}%): share of the clean items flagged",
        "",
        "| flags | " + " | ".join(columns) + " |",
        "| --- |" + " --- |" * len(pools),
    ]
    flag_names = sorted({k for p in pools.values() for k in p.get("flags", {})})
    for f in flag_names:
        cells = [
            f"{100 * p['flags'][f]['clean_fpr']:.1f}%" if f in p.get("flags", {}) else "-"
            for p in pools.values()
        ]
        lines.append(f"| {f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run(setup: Setup, out: Path, *, batch_size: int = 8, draws: int = 200) -> dict[str, Any]:
    """The whole experiment on one task: plant, measure the original and the contaminated
    model, analyse; writes ``results.json`` and ``results.md`` into ``out``."""
    plant_dir = out / "models" / "contaminated"
    plant_dir.mkdir(parents=True, exist_ok=True)
    record = plant(setup, plant_dir)
    task = record["task"]
    raw = out / "raw"
    measure(
        setup, setup.model, raw / f"{REFERENCE}-{task}.json", batch_size=batch_size, replace=True
    )
    measure(
        setup,
        str(plant_dir),
        raw / f"contaminated-{task}.json",
        batch_size=batch_size,
        replace=True,
    )
    results = analyse(out / "raw", out / "models", draws=draws, seed=setup.seed)
    (out / "results.json").write_text(strict_json.dumps(results, indent=1))
    (out / "results.md").write_text(markdown(results))
    return results


ROUNDNESS = ("multiple of 100", "multiple of 10", "multiple of 5", "other")


def _roundness(value: Fraction) -> str:
    if value.denominator != 1:
        return "other"
    v = int(value)
    return next(
        (name for name, step in zip(ROUNDNESS, (100, 10, 5), strict=False) if v % step == 0),
        "other",
    )


def number_rewrite_shift(setup: Setup) -> dict[str, Any]:
    """How much rounder a worked-solution task's published numbers are than its number
    rewrites (no model): over the first ``setup.items`` items, the share of rewritable
    items, and the roundness of the question numbers that change and of the final answers,
    published against rewritten. A rewrite whose numbers are less round than the
    published ones is harder for a model that never saw either, and the number-rewrite
    probe reads that as contamination."""
    runner = _runner(setup)
    probes = runner.spec.probes
    if not (probes.question and probes.solution):
        raise SpecError(
            str(setup.task), "contamination", "names no question and solution to rewrite"
        )
    items = first_n(load_items(runner.spec, setup.data_dirs), setup.items or None)
    counts: dict[str, dict[str, int]] = {
        side: dict.fromkeys(ROUNDNESS, 0)
        for side in (
            "numbers published",
            "numbers rewritten",
            "answers published",
            "answers rewritten",
        )
    }
    kept = changed = same_digits = 0
    for item in items:
        question, solution = str(item.doc[probes.question]), str(item.doc[probes.solution])
        rewrite = rewrite_numbers(question, solution, seed=setup.seed, item_id=item.id)
        answer = final_answer(solution)
        if rewrite is None or answer is None:
            continue
        kept += 1
        for old, new in rewrite.changes:
            changed += 1
            same_digits += len(old) == len(new)
            counts["numbers published"][_roundness(Fraction(old))] += 1
            counts["numbers rewritten"][_roundness(Fraction(new))] += 1
        counts["answers published"][_roundness(Fraction(answer))] += 1
        counts["answers rewritten"][_roundness(Fraction(rewrite.answer))] += 1
    return {
        "task": runner.spec.name,
        "items": len(items),
        "rewritable": kept,
        "numbers_changed": changed,
        "same_digit_count": same_digits,
        "seed": setup.seed,
        "commit": (git_info(Path.cwd()) or {}).get("commit"),
        "roundness": counts,
    }


def shift_markdown(result: Mapping[str, Any]) -> str:
    lines = [
        f"{result['task']}: {result['rewritable']} of {result['items']} items have a number "
        f"rewrite (seed {result['seed']}, commit {str(result['commit'])[:7]}); "
        f"{result['numbers_changed']} question numbers change, "
        f"{result['same_digit_count']} keep their digit count",
        "",
        "| | " + " | ".join(ROUNDNESS) + " |",
        "|---|" + "---:|" * len(ROUNDNESS),
    ]
    for side, row in result["roundness"].items():
        total = sum(row.values()) or 1
        lines.append(
            f"| {side} | " + " | ".join(f"{100 * row[k] / total:.1f}%" for k in ROUNDNESS) + " |"
        )
    return "\n".join(lines) + "\n"


def _setup(args: argparse.Namespace) -> Setup:
    return Setup(
        task=args.task,
        data_dirs=tuple(args.data_dir or [Path("../shared/benchmarks")]),
        model=args.model,
        items=args.items,
        epochs=args.epochs,
        lr=args.lr,
        seed=args.seed,
        order_k=args.order_k,
        perturbations=args.perturbations,
        fewshot=args.fewshot,
        chat=args.chat,
        loss=getattr(args, "loss", "text"),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.contamination_experiment")
    commands = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--task", type=Path, default=Path("benchmarks/mmlu.yaml"))
    common.add_argument("--data-dir", type=Path, action="append", default=None)
    common.add_argument("--model", default=DEFAULT_MODEL)
    common.add_argument("--items", type=int, default=100, help="first N items; 0: all")
    common.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS)
    common.add_argument("--lr", type=float, default=1e-4)
    common.add_argument("--seed", type=int, default=1234)
    common.add_argument("--order-k", type=int, default=3)
    common.add_argument("--perturbations", type=int, default=3)
    common.add_argument("--fewshot", type=int, default=0, help="shots in the probe prompts")
    common.add_argument(
        "--chat",
        choices=("off", "on"),
        default="off",
        help="the probe prompts through the model's chat template (as the shipped probes run)",
    )
    p_plant = commands.add_parser("plant", parents=[common], help="fine-tune on a planted half")
    p_plant.add_argument("--model-out", type=Path, required=True)
    p_plant.add_argument(
        "--overwrite",
        action="store_true",
        help="write over a --model-out folder that is not empty (refused without it)",
    )
    p_plant.add_argument(
        "--loss",
        choices=LOSSES,
        default="text",
        help="text: every token of the published item (a web copy read in pretraining); "
        "answer: the probe's prompt to its answer, the loss on the answer only (the item "
        "in an instruction-tuning set)",
    )
    p_measure = commands.add_parser("measure", parents=[common], help="raw per-item scores")
    p_measure.add_argument("--out", type=Path, required=True)
    p_measure.add_argument("--batch-size", type=int, default=8)
    p_measure.add_argument(
        "--measures",
        default=",".join(MEASURES),
        help=f"comma-separated subset of {','.join(MEASURES)} (default: all)",
    )
    p_measure.add_argument(
        "--chunk", type=int, default=0, help="write every CHUNK items; rerun to resume"
    )
    p_analyse = commands.add_parser("analyse", parents=[common], help="verdicts and tables")
    p_analyse.add_argument("--raw", type=Path, required=True, help="<model>-<task>.json files")
    p_analyse.add_argument("--models", type=Path, required=True, help="<model>/planted.json")
    p_analyse.add_argument("--draws", type=int, default=500)
    p_analyse.add_argument("--out", type=Path, required=True)
    p_scaling = commands.add_parser(
        "scaling", parents=[common], help="false alarms and power as a function of n"
    )
    p_scaling.add_argument("--raw", type=Path, required=True, help="<model>-<task>.json files")
    p_scaling.add_argument("--models", type=Path, default=None, help="<model>/planted.json")
    p_scaling.add_argument("--draws", type=int, default=200)
    p_scaling.add_argument(
        "--sizes", default=",".join(str(s) for s in SIZES), help="comma-separated n"
    )
    p_scaling.add_argument("--out", type=Path, required=True)
    p_scaling.add_argument(
        "--carry",
        type=Path,
        default=None,
        help="an earlier scaling.json whose pools are kept (their raw files are not in --raw)",
    )
    p_scaling.add_argument(
        "--validation-out",
        type=Path,
        default=None,
        help="also write the verdicts' validated ranges (the package's validation.json)",
    )
    p_rewrites = commands.add_parser(
        "rewrites", parents=[common], help="how round published and rewritten numbers are"
    )
    p_rewrites.add_argument("--out", type=Path, default=None, help="also write this JSON")
    p_from_run = commands.add_parser(
        "from-run",
        parents=[common],
        help="a raw file read from the probe records of a pytest run (answers, circular)",
    )
    p_from_run.add_argument(
        "--run", type=Path, required=True, help="the run folder (under --llm-output)"
    )
    p_from_run.add_argument("--out", type=Path, required=True)
    p_from_run.add_argument(
        "--measures", default="answers,circular", help="answers, circular, or both (default)"
    )
    p_from_run.add_argument(
        "--check",
        type=Path,
        action="append",
        default=[],
        help="a raw file `measure` wrote: the items both hold must agree (repeatable)",
    )
    p_run = commands.add_parser("run", parents=[common], help="plant, measure and analyse")
    p_run.add_argument("--out", type=Path, required=True)
    p_run.add_argument("--batch-size", type=int, default=8)
    p_run.add_argument("--draws", type=int, default=200)
    args = parser.parse_args(argv)
    setup = _setup(args)
    if args.command == "plant":
        if args.model_out.is_dir() and any(args.model_out.iterdir()) and not args.overwrite:
            # A fine-tune takes minutes to hours and raw pools name it by its folder.
            held = sorted(p.name for p in args.model_out.iterdir())
            parser.error(
                f"--model-out {args.model_out} is not empty ({', '.join(held[:4])}"
                f"{', ...' if len(held) > 4 else ''}): planting would write over it; "
                "pass --overwrite or name another folder"
            )
        if args.model_out.exists() and not args.model_out.is_dir():
            parser.error(
                f"--model-out {args.model_out} is a file, not a folder: the fine-tune is "
                "saved as a folder (weights, tokenizer, planted.json); name a folder"
            )
        try:
            args.model_out.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            parser.error(f"--model-out {args.model_out} cannot be made a folder: {error}")
        record = plant(setup, args.model_out)
        print(strict_json.dumps(record["training"]))
    elif args.command == "measure":
        result = measure(
            setup,
            args.model,
            args.out,
            batch_size=args.batch_size,
            measures=[m for m in args.measures.split(",") if m],
            chunk=args.chunk,
        )
        print(f"{result['task']}: {len(result['items'])} items in {result['seconds']} s")
    elif args.command == "from-run":
        from tools.contamination_from_run import RunMismatch, from_run

        with _claim(args.out):
            if args.out.is_file():
                raise ValueError(f"--out {args.out} exists: name another, or remove it")
            try:
                measures = [m for m in args.measures.split(",") if m]
                result = from_run(setup, args.run, measures=measures, check=args.check)
            except RunMismatch as exc:  # a wrong setup or run, in words; nothing written
                parser.exit(2, f"from-run: {exc}\n")
            _write(args.out, result)
        checked = "; ".join(
            f"{c['outcomes_equal']} outcomes equal to {c['file']}"
            for c in result["from_run"]["checked"]
        )
        print(
            f"{result['task']}: {len(result['items'])} items, {'+'.join(result['measures'])} "
            f"from {args.run.name}" + (f"; {checked}" if checked else "")
        )
    elif args.command == "analyse":
        results = analyse(args.raw, args.models, draws=args.draws, seed=args.seed)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(strict_json.dumps(results, indent=1))
        (args.out / "results.md").write_text(markdown(results))
        print(markdown(results))
    elif args.command == "scaling":
        results = scaling(
            args.raw,
            args.models,
            sizes=[int(x) for x in args.sizes.split(",") if x],
            draws=args.draws,
            seed=args.seed,
            carry=json.loads(args.carry.read_text()) if args.carry else None,
        )
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "scaling.json").write_text(strict_json.dumps(results, indent=1))
        (args.out / "scaling.md").write_text(scaling_markdown(results))
        if args.validation_out is not None:
            args.validation_out.write_text(
                strict_json.dumps(validation_file(results), indent=1) + "\n"
            )
        print(scaling_markdown(results))
    elif args.command == "rewrites":
        shift = number_rewrite_shift(setup)
        if args.out is not None:
            args.out.write_text(strict_json.dumps(shift, indent=1) + "\n")
        print(shift_markdown(shift))
    else:
        results = run(setup, args.out, batch_size=args.batch_size, draws=args.draws)
        print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
