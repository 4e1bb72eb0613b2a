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
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from pytest_llmeval import _json as strict_json
from pytest_llmeval.contamination._cues import guided_completion_probe, scan_output
from pytest_llmeval.contamination._membership import item_text, membership_scores
from pytest_llmeval.contamination._probes import canonical_order_test
from pytest_llmeval.contamination._rewrite import option_orders, permute_options
from pytest_llmeval.dataset import Item, first_n, load_items
from pytest_llmeval.eval import TaskRunner, true_probability_mass
from pytest_llmeval.model import Backend, ModelSettings, load_backend, resolve_model_path
from pytest_llmeval.scorer import auroc, binomial_upper_tail, mcnemar_exact
from pytest_llmeval.task import load_task_spec

SCORES = (
    "gold_prob_drop",
    "order_margin",
    "min_k",
    "min_k_plus_plus",
    "mean_logprob",
    "completion_rouge_l",
    "guided_gain",
    "recall_cues",
)


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
    fewshot: int = 0
    benchmark_name: str = "MMLU"


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


def item_scores(
    runner: TaskRunner, items: Sequence[Item], backend: Backend, setup: Setup
) -> dict[str, list[Any]]:
    """Every item-level score of the module docstring, per item (higher = more suspicious),
    and the per-item outcomes the task-level probes are computed from."""
    probes = runner.spec.probes
    assert probes.options is not None and probes.gold is not None
    shuffled = []
    for item in items:
        gold = int(item.doc[probes.gold])
        moved = option_orders(
            len(item.doc[probes.options]), gold, 1, seed=setup.seed, item_id=item.id
        )[0]
        doc = permute_options(item.doc, probes.options, probes.gold, moved)
        shuffled.append(Item(id=f"{item.id}~order0", index=item.index, doc=doc, subset=item.subset))
    canonical_p, canonical_ok = _gold_probs(runner, items, backend)
    shuffled_p, shuffled_ok = _gold_probs(runner, shuffled, backend)
    order = canonical_order_test(runner, items, backend, k=setup.order_k, seed=setup.seed)
    texts = [(item.id, item_text(runner, item)) for item in items]
    membership = membership_scores(texts, backend)
    guided = guided_completion_probe(
        runner, items, backend, benchmark=setup.benchmark_name, split="test"
    )
    return {
        "completion_rouge_l": [g.unguided_rouge_l for g in guided.items],
        "guided_gain": [g.guided_rouge_l - g.unguided_rouge_l for g in guided.items],
        "recall_cues": [
            len(scan_output(g.guided_output)) + len(scan_output(g.unguided_output))
            for g in guided.items
        ],
        "gold_prob_drop": [a - b for a, b in zip(canonical_p, shuffled_p, strict=True)],
        "order_margin": [
            c - sum(s) / len(s)
            for c, s in zip(order.canonical_logprobs, order.shuffled_logprobs, strict=True)
        ],
        "min_k": [m.min_k for m in membership],
        "min_k_plus_plus": [m.min_k_plus_plus for m in membership],
        "mean_logprob": [m.mean_logprob for m in membership],
        "canonical_correct": canonical_ok,
        "shuffled_correct": shuffled_ok,
        "order_first": [
            all(c > x for x in s)
            for c, s in zip(order.canonical_logprobs, order.shuffled_logprobs, strict=True)
        ],
    }


def task_verdicts(
    scores: dict[str, list[Any]], in_half: dict[str, list[bool]], setup: Setup
) -> dict[str, dict[str, Any]]:
    """The task-level probes (option shuffling's McNemar test, the canonical-order binomial
    test) on each half, from the per-item outcomes."""
    out: dict[str, dict[str, Any]] = {}
    for half, mask in in_half.items():
        pairs = [
            (a, b)
            for a, b, m in zip(
                scores["canonical_correct"], scores["shuffled_correct"], mask, strict=True
            )
            if m
        ]
        firsts = [f for f, m in zip(scores["order_first"], mask, strict=True) if m]
        n = len(pairs)
        out[half] = {
            "accuracy": sum(a for a, _ in pairs) / n if n else float("nan"),
            "shuffled_accuracy": sum(b for _, b in pairs) / n if n else float("nan"),
            "shuffle_p": mcnemar_exact(
                sum(1 for a, b in pairs if a and not b), sum(1 for a, b in pairs if b and not a)
            ),
            "order_first": f"{sum(firsts)}/{len(firsts)}",
            "order_p": binomial_upper_tail(
                sum(firsts), len(firsts), Fraction(1, setup.order_k + 1)
            ),
        }
    return out


def run(setup: Setup, out: Path) -> dict[str, Any]:
    spec = load_task_spec(setup.task)
    if setup.fewshot != spec.fewshot.k:
        # Zero-shot by default: prompts 5x shorter, so both models are probed in minutes on
        # a CPU; the planted texts are the zero-shot item texts either way.
        spec = replace(spec, fewshot=replace(spec.fewshot, k=setup.fewshot))
    runner = TaskRunner(spec, setup.data_dirs)
    items = first_n(load_items(spec, setup.data_dirs), setup.items)
    rng = random.Random(setup.seed)
    shuffled = list(items)
    rng.shuffle(shuffled)
    planted = {item.id for item in shuffled[: len(items) // 2]}
    halves = {
        "contaminated": [i for i in items if i.id in planted],
        "clean": [i for i in items if i.id not in planted],
    }
    labels = [item.id in planted for item in items]
    half_ids = {h: {i.id for i in v} for h, v in halves.items()}
    results: dict[str, Any] = {
        "task": spec.name,
        "items": len(items),
        "planted": sorted(planted),
        "setup": {k: str(v) for k, v in setup.__dict__.items()},
        "models": {},
    }
    model_path = resolve_model_path(setup.model)
    with tempfile.TemporaryDirectory(prefix="llmeval-planted-") as tmp:
        training = fine_tune(
            model_path, [item_text(runner, i) for i in halves["contaminated"]], Path(tmp), setup
        )
        results["training"] = training
        for name, path in (("original", setup.model), ("contaminated", tmp)):
            backend = load_backend(ModelSettings(model=str(path), batch_size=8, seed=setup.seed))
            scores = item_scores(runner, items, backend, setup)
            results["models"][name] = {
                "auroc": {
                    s: auroc(
                        [v for v, lab in zip(scores[s], labels, strict=True) if lab],
                        [v for v, lab in zip(scores[s], labels, strict=True) if not lab],
                    )
                    for s in SCORES
                },
                "verdicts": task_verdicts(
                    scores, {h: [i.id in ids for i in items] for h, ids in half_ids.items()}, setup
                ),
                "scores": scores,
            }
            del backend
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(strict_json.dumps(results, indent=1))
    (out / "results.md").write_text(markdown(results))
    return results


def markdown(results: dict[str, Any]) -> str:
    lines = [
        f"# Planted contamination: {results['task']}, {results['items']} items, half planted",
        "",
        f"Fine-tuning on the planted half: {results['training']['seconds']} s, mean loss per "
        "epoch " + ", ".join(f"{x:.3f}" for x in results["training"]["epoch_losses"]) + ".",
        "",
        "AUROC of each item-level score for telling planted items from clean ones "
        "(0.5 = no separation):",
        "",
        "| score | original model | contaminated model |",
        "| --- | --- | --- |",
    ]
    models = results["models"]
    for s in SCORES:
        before, after = models["original"]["auroc"][s], models["contaminated"]["auroc"][s]
        lines.append(f"| {s} | {before:.3f} | {after:.3f} |")
    lines += [
        "",
        "Task-level probes per half (accuracy in published / shuffled order, McNemar p of "
        "option shuffling; canonical order most likely / items and its binomial p):",
        "",
        "| model | half | accuracy | shuffled | shuffle p | order first | order p |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, model in models.items():
        for half, v in model["verdicts"].items():
            lines.append(
                f"| {name} | {half} | {v['accuracy']:.2f} | {v['shuffled_accuracy']:.2f} | "
                f"{v['shuffle_p']:.2g} | {v['order_first']} | {v['order_p']:.2g} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_llmeval.contamination.experiment")
    parser.add_argument("--task", type=Path, default=Path("benchmarks/mmlu.yaml"))
    parser.add_argument("--data-dir", type=Path, action="append", default=None)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--items", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--order-k", type=int, default=3)
    parser.add_argument("--fewshot", type=int, default=0, help="shots in the probe prompts")
    parser.add_argument("--benchmark-name", default="MMLU", help="named in guided completion")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    setup = Setup(
        task=args.task,
        data_dirs=tuple(args.data_dir or [Path("../shared/benchmarks")]),
        model=args.model,
        items=args.items,
        epochs=args.epochs,
        lr=args.lr,
        seed=args.seed,
        order_k=args.order_k,
        fewshot=args.fewshot,
        benchmark_name=args.benchmark_name,
    )
    results = run(setup, args.out)
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
