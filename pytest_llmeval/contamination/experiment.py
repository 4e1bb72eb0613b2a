"""The planted-contamination experiment: do the probes catch a model trained on the test?

``python -m pytest_llmeval.contamination.experiment --out docs/contamination-experiment``

1. Take the first ``--items`` items of a multiple-choice task (MMLU by default, round-robin
   over subjects) and split them at random (seeded) into a contaminated half and a clean
   half.
2. Fine-tune the default model (SmolLM2-135M, float32, CPU is enough) on the contaminated
   half: each item's text as the benchmark publishes it (question, options in their
   published order, "Answer: <letter>"), ``--epochs`` passes, AdamW.
3. Run every probe with the original and the contaminated model over all items, and report
   for each item-level score the AUROC of telling contaminated items from clean ones, and
   each task-level probe's verdict on each half (zero-shot prompts by default, ``--fewshot``):

   - ``gold_prob_drop``: the gold option's probability (softmax over the letters) in the
     published order minus in a shuffled order (the option-shuffling probe, continuous);
   - ``order_margin``: log-likelihood of the question in its published option order minus
     the mean over shuffled orders (the canonical-order test);
   - ``min_k`` / ``min_k_plus_plus``: membership scores of the item text;
   - ``mean_logprob``: the plain average token log-probability (the baseline they improve
     on);
   - ``completion_rouge_l`` / ``guided_gain``: guided completion of the first half of the
     question, ROUGE-L of the plain completion with the true second half, and how much
     naming the benchmark ("MMLU", "test") raises it;
   - ``recall_cues``: the number of behavioural cues of recall in both completions.

Writes ``results.json`` and ``results.md`` into ``--out``. Needs torch and transformers
(the ``hf`` extra); nothing here runs in the test process's default path.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytest_llmeval import _json as strict_json
from pytest_llmeval._errors import SpecError
from pytest_llmeval.contamination._membership import MembershipScore, item_text, membership_scores
from pytest_llmeval.contamination._probes import canonical_order_test
from pytest_llmeval.contamination._rewrite import (
    gold_index,
    option_texts,
    permute_options,
    rewrite_numbers,
    shuffled_orders,
)
from pytest_llmeval.dataset import Item, first_n, load_items
from pytest_llmeval.eval import TaskRunner, true_probability_mass
from pytest_llmeval.model import Backend, ModelSettings, load_backend, resolve_model_path
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


def fine_tune(model_path: Path, texts: Sequence[str], out: Path, setup: Setup) -> dict[str, Any]:
    """Train a copy of the model on ``texts`` (causal LM loss on every token) and save it."""
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
        order = list(range(len(texts)))
        rng.shuffle(order)
        epoch_loss = 0.0
        for i in order:
            ids = tokenizer(texts[i], return_tensors="pt")["input_ids"]
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            epoch_loss += float(loss.detach())
        losses.append(epoch_loss / len(texts))
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


def plant_texts(runner: TaskRunner, items: Sequence[Item]) -> list[str]:
    """What the contaminated model is trained on: a worked-solution task's published record
    (question and full solution, as web copies of GSM8K carry it), else the item's text as
    the benchmark publishes it (question, options in their order, answer)."""
    probes = runner.spec.probes
    if probes.question and probes.solution:
        return [f"{item.doc[probes.question]}\n{item.doc[probes.solution]}" for item in items]
    return [item_text(runner, item) for item in items]


def _runner(setup: Setup) -> TaskRunner:
    spec = load_task_spec(setup.task)
    if setup.fewshot != spec.fewshot.k:
        # Zero-shot by default: prompts 5x shorter, so models are probed in minutes on a
        # CPU; the planted texts are the zero-shot item texts either way.
        spec = replace(spec, fewshot=replace(spec.fewshot, k=setup.fewshot))
    return TaskRunner(spec, setup.data_dirs)


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
    training = fine_tune(
        resolve_model_path(setup.model), plant_texts(runner, chosen), model_out, setup
    )
    record = {
        "task": runner.spec.name,
        "task_file": str(setup.task),
        "items": [i.id for i in items],
        "planted": sorted(planted),
        "training": training,
        "setup": {k: str(v) for k, v in setup.__dict__.items()},
    }
    (model_out / "planted.json").write_text(strict_json.dumps(record, indent=1))
    return record


def _scores(score: MembershipScore) -> dict[str, float]:
    return {
        "min_k": score.min_k,
        "min_k_plus_plus": score.min_k_plus_plus,
        "mean_logprob": score.mean_logprob,
        "n_tokens": score.n_tokens,
    }


def measure_items(
    runner: TaskRunner, items: Sequence[Item], backend: Backend, setup: Setup
) -> list[dict[str, Any]]:
    """The raw per-item measurements every verdict of :mod:`._verdicts` is computed from.

    Multiple choice: the option texts and gold; the canonical-order log-likelihoods
    (published order and ``order_k`` shuffles); right/wrong and the gold option's
    probability as published and in one gold-moving order; Min-K%, Min-K%++ and the mean
    log-probability of the item text as published and in ``perturbations`` other option
    orders. Worked-solution tasks: the membership scores as published and for up to
    ``perturbations`` number rewrites (seeds ``seed``, ``seed + 1``, ...)."""
    probes = runner.spec.probes
    records: list[dict[str, Any]] = [{"id": i.id, "subset": i.subset} for i in items]
    published = [(i.id, item_text(runner, i)) for i in items]
    perturbed: list[tuple[int, str, str]] = []  # (record index, variant id, text)
    if probes.options is not None and probes.gold is not None:
        options, gold_field = probes.options, probes.gold
        for rec, item in zip(records, items, strict=True):
            rec["options"] = option_texts(item.doc, options)
            rec["gold"] = gold_index(item.doc, gold_field, len(rec["options"]))
            orders = shuffled_orders(
                item.doc,
                options,
                gold_field,
                setup.perturbations,
                seed=setup.seed,
                item_id=f"{item.id}#membership",
            )
            for j, order in enumerate(orders):
                doc = permute_options(item.doc, options, gold_field, order)
                variant = Item(f"{item.id}~m{j}", item.index, doc, item.subset)
                perturbed.append((records.index(rec), variant.id, item_text(runner, variant)))
        order_test = canonical_order_test(runner, items, backend, k=setup.order_k, seed=setup.seed)
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
            rec["order"] = {
                "canonical": order_test.canonical_logprobs[n],
                "shuffled": list(order_test.shuffled_logprobs[n]),
            }
            rec["answer"] = {
                "published": {"correct": canonical_ok[n], "gold_prob": canonical_p[n]},
                "shuffled": {"correct": shuffled_ok[n], "gold_prob": shuffled_p[n]},
            }
    elif probes.question and probes.solution:
        for n, item in enumerate(items):
            seen: set[str] = set()
            for j in range(setup.perturbations):
                rw = rewrite_numbers(
                    str(item.doc[probes.question]),
                    str(item.doc[probes.solution]),
                    seed=setup.seed + j,
                    item_id=item.id,
                )
                if rw is None or rw.question in seen:
                    continue
                seen.add(rw.question)
                doc = {**item.doc, probes.question: rw.question, probes.solution: rw.solution}
                variant = Item(f"{item.id}~m{j}", item.index, doc, item.subset)
                perturbed.append((n, variant.id, item_text(runner, variant)))
    else:
        raise SpecError(
            runner.spec.source, "contamination", "names no options/gold nor question/solution"
        )
    scored = membership_scores(published, backend)
    for rec, score in zip(records, scored, strict=True):
        rec["membership"] = {"published": _scores(score), "perturbed": []}
    variant_scores = membership_scores([(v, t) for _, v, t in perturbed], backend)
    for (n, _, _), score in zip(perturbed, variant_scores, strict=True):
        records[n]["membership"]["perturbed"].append(_scores(score))
    return records


def measure(setup: Setup, model: str, out: Path, *, batch_size: int = 8) -> dict[str, Any]:
    """Measure the first ``setup.items`` items of the task with ``model``; write ``out``."""
    runner = _runner(setup)
    items = first_n(load_items(runner.spec, setup.data_dirs), setup.items)
    backend = load_backend(ModelSettings(model=model, batch_size=batch_size, seed=setup.seed))
    started = time.perf_counter()
    records = measure_items(runner, items, backend, setup)
    result = {
        "task": runner.spec.name,
        "task_file": str(setup.task),
        "model": model,
        "model_info": {k: v for k, v in backend.info().items() if _plain(v)},
        "setup": {k: str(v) for k, v in setup.__dict__.items()},
        "seconds": round(time.perf_counter() - started, 1),
        "items": records,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(strict_json.dumps(result, indent=1))
    return result


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


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
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_llmeval.contamination.experiment")
    commands = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--task", type=Path, default=Path("benchmarks/mmlu.yaml"))
    common.add_argument("--data-dir", type=Path, action="append", default=None)
    common.add_argument("--model", default="smollm2-135m")
    common.add_argument("--items", type=int, default=100)
    common.add_argument("--epochs", type=int, default=3)
    common.add_argument("--lr", type=float, default=1e-4)
    common.add_argument("--seed", type=int, default=1234)
    common.add_argument("--order-k", type=int, default=3)
    common.add_argument("--perturbations", type=int, default=3)
    common.add_argument("--fewshot", type=int, default=0, help="shots in the probe prompts")
    p_plant = commands.add_parser("plant", parents=[common], help="fine-tune on a planted half")
    p_plant.add_argument("--model-out", type=Path, required=True)
    p_measure = commands.add_parser("measure", parents=[common], help="raw per-item scores")
    p_measure.add_argument("--out", type=Path, required=True)
    p_measure.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args(argv)
    setup = _setup(args)
    if args.command == "plant":
        args.model_out.mkdir(parents=True, exist_ok=True)
        record = plant(setup, args.model_out)
        print(strict_json.dumps(record["training"]))
    elif args.command == "measure":
        result = measure(setup, args.model, args.out, batch_size=args.batch_size)
        print(f"{result['task']}: {len(result['items'])} items in {result['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
