"""Option shuffling's and CircularEval's false alarms on position-only models, from a raw
pool's items.

A position-only model always answers the same letter: it reads nothing, so it cannot have
seen any item, and it is the limit of a real habit (SmolLM2-135M-Instruct, zero-shot,
answers "A" on 98.7% of MMLU items). Option shuffling compares each item's right/wrong as
published with the same item with its gold option moved (one seeded order per item). For
such a model an item is right as published when its gold sits at the model's letter and
right shuffled when the moved gold lands there, so the probe's two accuracies are the
benchmark's share of gold at that letter and the share the moved orders put there; where
the published gold letters are not uniform the two differ, and a test that moves golds
uniformly fires at some n on a model that saw nothing. CircularEval asks each item in every
rotation: such a model is right in exactly one, the published one where the gold sits at
its letter, so a test against ``1/n`` fires the same way. Both probes now weigh the letters
in the benchmark's own shares (:mod:`pytest_llmeval.contamination._letters`); this tool
is how that is checked.

Nothing is run through a model: the records are computed from a raw file's options and
gold (``measure --measures answers`` wrote them) and the probe's own seeded orders
(:func:`pytest_llmeval.contamination._rewrite.option_orders`), then scored with the
experiment's draws (:func:`tools.contamination_experiment.scaling_rates`)::

    python -m tools.contamination_letter_bias RAW.json [RAW.json ...] [--draws 200]
"""

from __future__ import annotations

import argparse
import json
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_llmeval.contamination._rewrite import option_orders
from tools.contamination_experiment import PROBE_SEED, SIZES, scaling_rates


def position_only_records(
    items: Sequence[Mapping[str, Any]], letter: int, *, seed: int = PROBE_SEED
) -> list[dict[str, Any]]:
    """The raw records a model that always answers option ``letter`` gives: ``answer``
    (option shuffling: right as published when the gold sits at the letter, right moved
    when the probe's seeded order moves it there) and ``circular`` (right in the one
    rotation that puts the gold at the letter)."""
    records = []
    for item in items:
        n_options, gold = len(item["options"]), int(item["gold"])
        moved = list(option_orders(n_options, gold, 1, seed=seed, item_id=item["id"])[0])
        records.append(
            {
                "id": item["id"],
                "options": item["options"],
                "gold": gold,
                "answer": {
                    "published": {"correct": gold == letter},
                    "shuffled": {"correct": moved.index(gold) == letter},
                    "moved_gold": moved.index(gold),
                },
                "circular": [(gold - r) % n_options == letter for r in range(n_options)],
            }
        )
    return records


def letter_table(
    raw: Mapping[str, Any],
    *,
    probe: str = "option_shuffle",
    draws: int = 200,
    seed: int = PROBE_SEED,
    sizes: Sequence[int] = SIZES,
) -> list[dict[str, Any]]:
    """Per letter: ``probe``'s fire rate (``option_shuffle`` or ``circular``) at every
    size and on the whole pool."""
    items = [i for i in raw["items"] if i.get("options") and i.get("gold") is not None]
    rows = []
    for letter in range(max(len(i["options"]) for i in items)):
        records = position_only_records(items, letter, seed=seed)
        rates, whole = scaling_rates(
            str(raw["task"]), records, None, sizes=sizes, draws=draws, seed=seed
        )
        rows.append(
            {
                "letter": string.ascii_uppercase[letter],
                "gold_share": sum(int(i["gold"]) == letter for i in items) / len(items),
                "rates": rates[probe],
                "whole": whole[probe],
            }
        )
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("raw", nargs="+", type=Path, help="raw files of measure (answers)")
    parser.add_argument("--draws", type=int, default=200)
    args = parser.parse_args(argv)
    for path in args.raw:
        raw = json.loads(path.read_text())
        n = len(raw["items"])
        for probe in ("option_shuffle", "circular"):
            print(f"## {probe}, {raw['task']}: {path.name}, {n} items\n")
            _print_table(letter_table(raw, probe=probe, draws=args.draws), n)


def _print_table(rows: Sequence[Mapping[str, Any]], n: int) -> None:
    sizes = list(rows[0]["rates"])
    print("| always answers | gold there | " + " | ".join(f"n={s}" for s in sizes) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in sizes) + " |")
    for row in rows:
        cells = []
        for s in sizes:
            if int(s) < n:
                cells.append(f"{row['rates'][s]['rate']:.1%}")
            else:
                w = row["whole"]
                outcome = "FIRES" if w["fired"] else "pass"
                cells.append(f"{outcome} ({w['summary']}, p={w['p_value']:.2g})")
        print(f"| {row['letter']} | {row['gold_share']:.1%} | " + " | ".join(cells) + " |")
    print()


if __name__ == "__main__":
    main()
