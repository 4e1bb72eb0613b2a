"""What checking stop sequences costs per generated token, against the output's length.

A generation with stop sequences is checked after every token against its text so far.
This times that check two ways on a tokenizer (the default model's unless ``--model``
names a directory): decoding the whole output again at each token (the HF backend before
``model/_detok.py``) and the incremental text of ``model/_detok.py``, at each output
length of ``--lengths``; both on the same tokens (a real text's, repeated), one row.

    python -m tools.stop_check_cost --lengths 1024,4096,16384

Prints a Markdown table: the length, the milliseconds per token of each way at that
length, and the seconds each would spend on one row's checks up to that length.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from pytest_llmeval.model import resolve_model_path
from pytest_llmeval.model._detok import IncrementalText

_TEXT = Path(__file__).resolve().parent.parent / "docs" / "USAGE.md"


def measure(tokenizer: Any, lengths: list[int], repeats: int = 64) -> list[dict[str, float]]:
    """Per length ``n``: the seconds per check of each way over the ``repeats`` tokens
    after the first ``n``."""
    text = _TEXT.read_text(encoding="utf-8")
    ids: list[int] = []
    while len(ids) < max(lengths) + repeats:
        ids += tokenizer.encode(text, add_special_tokens=False)
    rows = []
    for n in lengths:
        started = time.perf_counter()
        for i in range(n, n + repeats):
            tokenizer.decode(ids[: i + 1], skip_special_tokens=True)
        whole = (time.perf_counter() - started) / repeats
        inc = IncrementalText(tokenizer)
        inc.extend(ids[:n])  # the row so far, then one token at a time
        started = time.perf_counter()
        for i in range(n, n + repeats):
            inc.extend([ids[i]])
        incremental = (time.perf_counter() - started) / repeats
        assert inc.text == tokenizer.decode(ids[: n + repeats], skip_special_tokens=True)
        rows.append(
            {
                "length": n,
                "whole_ms": whole * 1e3,
                "incremental_ms": incremental * 1e3,
                # the whole decode grows with the length: about n/2 tokens per check
                # on average over the row
                "whole_row_s": whole * n / 2,
                "incremental_row_s": incremental * n,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="a model name or directory")
    parser.add_argument("--lengths", default="256,1024,4096,16384")
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(args.model))
    lengths = [int(x) for x in args.lengths.split(",")]
    print(
        "| output tokens | whole decode, ms/token | incremental, ms/token "
        "| whole decode, s per row | incremental, s per row |"
    )
    print("| ---: | ---: | ---: | ---: | ---: |")
    for row in measure(tokenizer, lengths):
        print(
            f"| {row['length']:.0f} | {row['whole_ms']:.3f} | {row['incremental_ms']:.3f} "
            f"| {row['whole_row_s']:.2f} | {row['incremental_row_s']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
