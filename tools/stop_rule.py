"""Does a generative spec measure the model or its stop rule? Each spec, chat template on and off.

    python -m tools.stop_rule [--specs gsm8k,bbh,humaneval,math500,ifeval] [--items 50]
        [--model smollm2-135m] [--data-dir ../shared/benchmarks] [--out DIR]

Runs each spec's first ``--items`` items through ``pytest`` twice, with
``prompt.chat_template=on`` and ``=off`` (one process at a time), and reads the item
records the runs wrote. Per run it prints: how many outputs a stop sequence cut within
their first :data:`EARLY_TOKENS` generated tokens (the sign of a stop rule written for
another prompt form: a chat answer that opens with a code fence or a blank line), how
many ended at the token limit, how many ended on the model's end of turn, and the score.
Writes ``stop_rule.md`` (the table) and ``stop_rule.json`` (the numbers, with the early-cut
outputs themselves) into ``--out``. Nothing here asserts anything: it is a measurement,
and docs/USAGE.md#generative-specs-under-chat-templates publishes its table.

``--openings N`` (instead of the table) answers the question an early cut raises: did the
stop rule cut an answer, or was the cut the model's answer? Each run is made again from a
copy of the spec with no stop sequences and ``max_new_tokens: N``, and the table counts
the outputs in which one of the spec's own stop sequences occurs within those N tokens, by
sequence, with the first outputs as examples (``openings.md``, ``openings.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_llmeval import LlmEvalError
from pytest_llmeval.record import load_run

#: A stop sequence that ends an output within this many generated tokens cut it "early".
EARLY_TOKENS = 16

SUITE = Path(__file__).resolve().parents[1] / "benchmarks"


@dataclass
class StopRuleRow:
    """One spec under one template setting."""

    spec: str
    template: str
    items: int = 0
    early_stop: int = 0
    stopped: int = 0
    length: int = 0
    eos: int = 0
    errors: int = 0
    score: float | None = None
    mean_tokens: float | None = None
    early_examples: list[str] = field(default_factory=list)

    def share(self, count: int) -> float:
        return count / self.items if self.items else float("nan")


def summarise(spec: str, template: str, records: list[dict[str, Any]]) -> StopRuleRow:
    """The row of one run from its item records (``tasks/<task>_output.jsonl``)."""
    row = StopRuleRow(spec=spec, template=template)
    scores: list[float] = []
    tokens: list[int] = []
    for record in records:
        if record.get("error"):
            row.errors += 1
            continue
        row.items += 1
        reason = record.get("finish_reason")
        n = record.get("n_output_tokens")
        if isinstance(n, int):
            tokens.append(n)
        row.stopped += reason == "stop"
        if reason == "stop" and isinstance(n, int) and n <= EARLY_TOKENS:
            row.early_stop += 1
            if len(row.early_examples) < 5:
                row.early_examples.append(str(record.get("output")))
        elif reason == "length":
            row.length += 1
        elif reason == "eos":
            row.eos += 1
        score = record.get("score")
        if isinstance(score, (int, float)):
            scores.append(float(score))
    row.score = sum(scores) / len(scores) if scores else None
    row.mean_tokens = sum(tokens) / len(tokens) if tokens else None
    return row


def _pytest(spec_file: Path, run_dir: Path, template: str, args: argparse.Namespace) -> None:
    if run_dir.exists():  # its records would be read as this run's
        raise SystemExit(f"{run_dir} exists (an earlier measurement): give a new --out")
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(spec_file),
        f"--llm-model={args.model}",
        f"--llm-data-dir={args.data_dir}",
        f"--llm-limit={args.items}",
        f"--llm-set=prompt.chat_template={template}",
        f"--llm-set=run.dir={run_dir}",
        "--llm-set=run.resume=false",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
    ]
    print("$", " ".join(command), file=sys.stderr, flush=True)
    subprocess.run(command, check=False, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _records(spec: str, template: str, run_dir: Path) -> list[dict[str, Any]] | None:
    try:
        run = load_run(run_dir)
    except LlmEvalError as exc:  # the run wrote nothing (it failed before any item)
        print(f"{spec} ({template}): {exc}", file=sys.stderr)
        return None
    return [record for items in run.items.values() for record in items.values()]


def run_spec(spec: str, template: str, args: argparse.Namespace) -> StopRuleRow:
    run_dir = Path(args.out) / f"{spec}-{template}"
    _pytest(SUITE / f"{spec}.yaml", run_dir, template, args)
    records = _records(spec, template, run_dir)
    if records is None:
        return StopRuleRow(spec=spec, template=template)
    return summarise(spec, template, records)


def _stops(block: Any) -> list[str]:
    stops = block.get("stop") if isinstance(block, dict) else None
    return [str(s) for s in stops] if isinstance(stops, list) else []


def unstopped_spec(
    spec: dict[str, Any], max_new_tokens: int, template: str
) -> tuple[dict[str, Any], list[str]]:
    """A copy of a spec's mapping without stop sequences and with a budget of
    ``max_new_tokens``, and the stop sequences the spec applies under ``template``: its
    chat form's where it has a chat form that sets them and the template is not off."""
    copy = json.loads(json.dumps(spec))
    base = copy.setdefault("generate", {})
    chat = (copy.get("chat_form") or {}).get("generate")
    stops = _stops(base)
    if template != "off" and isinstance(chat, dict) and "stop" in chat:
        stops = _stops(chat)
    for block in (base, chat):
        if isinstance(block, dict) and "stop" in block:
            block["stop"] = []
    base["max_new_tokens"] = max_new_tokens
    return copy, stops


@dataclass
class OpeningsRow:
    """What a spec's outputs open with when nothing stops them."""

    spec: str
    template: str
    items: int = 0
    # Outputs in which one of the spec's stop sequences occurs, by the first one found.
    containing: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)


def summarise_openings(
    spec: str, template: str, stops: list[str], records: list[dict[str, Any]]
) -> OpeningsRow:
    row = OpeningsRow(spec=spec, template=template)
    for record in records:
        if record.get("error"):
            continue
        row.items += 1
        output = str(record.get("output") or "")
        found = [(output.find(s), s) for s in stops if s in output]
        if found:
            first = min(found)[1]
            row.containing[first] = row.containing.get(first, 0) + 1
        if len(row.examples) < 5:
            row.examples.append(output[:60])
    return row


def run_openings(spec: str, template: str, args: argparse.Namespace) -> OpeningsRow:
    import yaml

    source = yaml.safe_load((SUITE / f"{spec}.yaml").read_text(encoding="utf-8"))
    copy, stops = unstopped_spec(source, args.openings, template)
    folder = Path(args.out) / "openings"
    folder.mkdir(parents=True, exist_ok=True)
    spec_file = folder / f"{spec}-{template}.yaml"
    spec_file.write_text(yaml.safe_dump(copy, sort_keys=False, allow_unicode=True))
    run_dir = folder / f"{spec}-{template}"
    _pytest(spec_file, run_dir, template, args)
    return summarise_openings(spec, template, stops, _records(spec, template, run_dir) or [])


def openings_markdown(rows: list[OpeningsRow], args: argparse.Namespace) -> str:
    lines = [
        f"No stop sequences, the first {args.openings} generated tokens of each output "
        f"(`--openings {args.openings}`): how many contain one of the spec's stop sequences.",
        "",
        "| spec | template | outputs | containing a stop sequence | by sequence | first outputs |",
        "| --- | --- | ---: | ---: | --- | --- |",
    ]
    for row in rows:
        total = sum(row.containing.values())
        by = ", ".join(
            f"`{s!r}` {n}" for s, n in sorted(row.containing.items(), key=lambda x: -x[1])
        )
        examples = "; ".join(f"`{e!r}`" for e in row.examples[:3])
        lines.append(
            f"| {row.spec} | {row.template} | {row.items} | {total} | {by or '-'} | {examples} |"
        )
    return "\n".join(lines) + "\n"


def _pct(row: StopRuleRow, count: int) -> str:
    return f"{count}/{row.items} ({100 * row.share(count):.0f}%)"


def markdown(rows: list[StopRuleRow], args: argparse.Namespace) -> str:
    lines = [
        f"Model `{args.model}`, first {args.items} items of each spec, greedy; "
        f"command: `python -m tools.stop_rule --specs {args.specs} --items {args.items}`.",
        "",
        f"| spec | template | cut by a stop in the first {EARLY_TOKENS} tokens | cut by a stop "
        "| at the token limit | end of turn | mean tokens | score |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        score = "n/a" if row.score is None else f"{100 * row.score:.1f}"
        mean = "n/a" if row.mean_tokens is None else f"{row.mean_tokens:.0f}"
        lines.append(
            f"| {row.spec} | {row.template} | {_pct(row, row.early_stop)} | "
            f"{_pct(row, row.stopped)} | "
            f"{_pct(row, row.length)} | {_pct(row, row.eos)} | {mean} | {score} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.stop_rule", description=__doc__)
    parser.add_argument("--specs", default="gsm8k,bbh,humaneval,math500,ifeval")
    parser.add_argument("--items", type=int, default=50)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--data-dir", default=str(SUITE.parents[1] / "shared" / "benchmarks"))
    parser.add_argument("--templates", default="on,off")
    parser.add_argument("--out", default="stop-rule-out")
    parser.add_argument(
        "--openings",
        type=int,
        default=0,
        metavar="N",
        help="instead, run each spec without stops for N tokens (what the outputs open with)",
    )
    args = parser.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.openings:
        openings = []
        for spec in args.specs.split(","):
            for template in args.templates.split(","):
                openings.append(run_openings(spec, template, args))
        (Path(args.out) / "openings.json").write_text(
            json.dumps([asdict(r) for r in openings], indent=2) + "\n"
        )
        text = openings_markdown(openings, args)
        (Path(args.out) / "openings.md").write_text(text)
        print(text)
        return 0
    rows = []
    for spec in args.specs.split(","):
        for template in args.templates.split(","):
            rows.append(run_spec(spec, template, args))
            (Path(args.out) / "stop_rule.json").write_text(
                json.dumps([asdict(r) for r in rows], indent=2) + "\n"
            )
    table = markdown(rows, args)
    (Path(args.out) / "stop_rule.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
