"""The Markdown summary of a run (``summary.md``, the GitHub Actions step summary).

Plain Python (no pytest, no torch): built from the task rows the plugin already has, the
environment snapshot and, when a baseline was given, the comparison with it.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_llmeval.gate import (
    POLICY_TEXT,
    Comparison,
    TaskDecision,
    TaskTally,
    format_diff,
    format_p,
)

FAILED_STATUSES = ("fail", "error", "incomplete")
MAX_FLIPPED_IDS = 20


def _num(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def _pct(value: Any) -> str:
    x = _num(value)
    return "n/a" if math.isnan(x) else f"{100 * x:.1f}%"


def _cell(value: Any) -> str:
    """Table cell text: pipes escaped, line breaks flattened."""
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _status(row: Mapping[str, Any]) -> str:
    status = str(row.get("status", ""))
    if status == "undecided":
        policy = row.get("policy", "point")
        if row.get("failed"):
            return f"❌ undecided (fails under {policy})"
        return f"❔ undecided (passes under {policy})"
    if status == "pass":
        return "✅ pass"
    if status in FAILED_STATUSES:
        return f"❌ {status}"
    return status


def floor_source_text(source: Mapping[str, Any] | None) -> str:
    """Where a floor came from, in one line (the rule and the reference run's numbers)."""
    if not source:
        return "source not recorded"
    where = source.get("from")
    if where == "reference run":
        sha = source.get("model_sha256")
        ci = source.get("ci95") or [math.nan, math.nan]
        return (
            f"rule {source.get('rule')} from run {source.get('run')} "
            f"(model {source.get('model') or '?'}, sha256 {str(sha)[:12] if sha else 'n/a'}, "
            f"{source.get('items')} items, {source.get('metric')} {_pct(source.get('score'))} "
            f"[{_pct(ci[0])}, {_pct(ci[1])}])"
        )
    if where == "spec":
        return f"from the task spec {source.get('path', '')}".rstrip()
    note = source.get("note")
    return f"from {where}" + (f": {note}" if note else "")


def _seconds(value: Any) -> str:
    x = _num(value)
    return "-" if math.isnan(x) else f"{x:.1f} s"


def _status_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [
        "| task | items | metric | score | 95% CI | floor | status | time |",
        "|---|---:|---|---:|---:|---:|---|---:|",
    ]
    for row in rows:
        low, high = _num(row.get("ci_low")), _num(row.get("ci_high"))
        ci = "n/a" if math.isnan(low) or math.isnan(high) else f"{_pct(low)} – {_pct(high)}"
        floor = row.get("floor")
        lines.append(
            f"| {_cell(row.get('task', '?'))} | {row.get('n', '?')}/{row.get('total', '?')} "
            f"| {_cell(row.get('metric', ''))} | {_pct(row.get('score'))} | {ci} "
            f"| {'-' if floor is None else _pct(floor)} | {_status(row)} "
            f"| {_seconds(row.get('seconds'))} |"
        )
    return lines


def _partial_note(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    partial = []
    for row in rows:
        n, total = row.get("n"), row.get("total")
        if isinstance(n, int) and isinstance(total, int) and n < total:
            partial.append(f"{row.get('task', '?')} {n} of {total}")
    if not partial:
        return []
    return [
        "",
        "> **Partial**: scores cover only the selected items (`--llm-limit` or `-k`), not "
        f"whole tasks: {', '.join(partial)}.",
    ]


def _floors_section(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    floored = [r for r in rows if r.get("floor") is not None and r.get("status") != "skipped"]
    if not floored:
        return []
    policy = str(floored[0].get("policy", "point"))
    lines = [
        "",
        f"**Floors** (policy `{policy}`: {POLICY_TEXT.get(policy, policy)}; status: the "
        "floor against the score's 95% interval):",
        "",
    ]
    for row in floored:
        lines.append(
            f"- {_cell(row.get('task', '?'))}: floor {_pct(row.get('floor'))}, "
            f"{_cell(floor_source_text(row.get('floor_source')))}"
        )
    return lines


def _get(mapping: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(mapping, Mapping):
            return None
        mapping = mapping.get(key)
    return mapping


def _first(*values: Any) -> Any:
    return next((v for v in values if v not in (None, "")), None)


def _short_name(value: Any) -> Any:
    """A local path as its last component; a hub id (``org/name``) as it is."""
    if isinstance(value, str) and value.startswith(("/", "./", "../", "~")):
        return Path(value).name or value
    return value


def environment_headline(environment: Mapping[str, Any]) -> str:
    """One line: model (weights digest), dtype/device, library versions, git commit.

    Reads the environment snapshot: ``model`` (a name, or a mapping with name/path, sha256,
    dtype, device), ``backend`` (the model as loaded: model, model_path, dtype, device,
    device_name, torch, transformers), ``libraries``, ``cuda`` and ``git`` (commit/short and
    dirty, directly or under ``code``); top-level ``dtype``/``device``/``torch``/... too.
    Missing keys are left out.
    """
    parts: list[str] = []
    model = environment.get("model")
    backend = environment.get("backend")

    def lookup(key: str) -> Any:
        return _first(_get(environment, "model", key), _get(backend, key), environment.get(key))

    name: Any = model
    if isinstance(model, Mapping):
        name = _first(model.get("name"), model.get("id"), model.get("model"))
    name = _short_name(
        _first(
            name,
            _get(backend, "model"),
            _get(backend, "model_path"),
            _get(environment, "model", "path"),
        )
    )
    sha = _first(_get(environment, "model", "sha256"), environment.get("sha256"))
    if name is not None or sha is not None:
        text = f"model `{name}`" if name is not None else "model"
        if isinstance(sha, str) and sha:
            text += f" (sha256 `{sha[:12]}`)"
        parts.append(text)
    dtype, device, device_name = lookup("dtype"), lookup("device"), lookup("device_name")
    if dtype is not None or device is not None:
        text = " on ".join(str(v) for v in (dtype, device) if v is not None)
        if device_name is not None and device_name != device:
            text += f" ({device_name})"
        parts.append(text)
    for lib in ("torch", "transformers"):
        version = _first(
            _get(environment, "libraries", lib), _get(backend, lib), environment.get(lib)
        )
        if version is not None:
            parts.append(f"{lib} {version}")
    cuda = _get(environment, "cuda", "cuda")
    if cuda:
        parts.append(f"CUDA {cuda}")
    git = environment.get("git")
    if isinstance(git, Mapping) and isinstance(git.get("code"), Mapping):
        git = git["code"]
    if isinstance(git, Mapping):
        commit = _first(git.get("short"), git.get("commit"))
        if isinstance(commit, str) and commit:
            text = f"git `{commit[:7]}`"
            if git.get("dirty"):
                text += " (dirty)"
            parts.append(text)
    return ", ".join(parts)


def _comparison_section(comparison: Comparison, max_items: int) -> list[str]:
    lines = [
        "",
        f"### Compared with baseline `{comparison.baseline_path}`",
        "",
        "| task | shared items | baseline | current | Δ points | p-value | regressed | improved |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in comparison.tasks:
        if t.n_shared == 0:
            where = (
                "no items in common"
                if t.only_in_baseline and t.only_in_current
                else "only in the baseline"
                if t.only_in_baseline
                else "only in this run"
            )
            lines.append(f"| {_cell(t.task)} | 0 | - | - | - | - | - | {where} |")
            continue
        mark = " ⚠️" if t.significant and t.delta < 0 else ""
        lines.append(
            f"| {_cell(t.task)} | {t.n_shared} | {_pct(t.baseline_score)} "
            f"| {_pct(t.current_score)} | {t.delta_points:+.1f}{mark} | {format_p(t.p_value)} "
            f"| {len(t.regressed)} | {len(t.improved)} |"
        )
    lines.append("")
    compared = [t for t in comparison.tasks if t.n_shared]
    partial = [t.task for t in compared if not t.binary]
    tests = (
        "exact McNemar test"
        if not partial
        else f"paired sign-flip test on the per-item scores ({', '.join(partial)})"
        if len(partial) == len(compared)
        else "exact McNemar test where every score is 0 or 1, paired sign-flip test on the "
        f"per-item scores elsewhere ({', '.join(partial)})"
    )
    lines.append(
        f"Scores on the items both runs scored; p-value: {tests} (⚠️ a significant "
        f"drop at p < {comparison.alpha:g})."
    )
    for t in comparison.tasks:
        if not t.regressed:
            continue
        shown = ", ".join(f"`{i}`" for i in t.regressed[:max_items])
        more = f" and {len(t.regressed) - max_items} more" if len(t.regressed) > max_items else ""
        what = (
            "items correct in the baseline, wrong now"
            if t.binary
            else ("items scored lower than in the baseline")
        )
        lines += [
            "",
            f"<details><summary>{html.escape(t.task)}: {len(t.regressed)} {what}</summary>",
            "",
            shown + more,
            "",
            "</details>",
        ]
    if comparison.config_diffs:
        lines += [
            "",
            "> [!WARNING]",
            "> The settings differ from the baseline's; score changes may come from them:",
            ">",
        ]
        lines += [f"> - `{format_diff(d)}`" for d in comparison.config_diffs]
    if comparison.env_diffs:
        lines += ["", "Environment differences:", ""]
        lines += [f"- `{format_diff(d)}`" for d in comparison.env_diffs]
    return lines


def prompt_lines(configs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """How prompts were presented, one line per distinct way, naming its tasks: the chat
    template (source, SHA256 prefix, end-of-turn token) or raw text, few-shot turns, the
    system prompt, BOS."""
    ways: dict[str, list[str]] = {}
    for task, config in configs.items():
        if not config:
            continue
        template = config.get("chat_template")
        mode = config.get("chat_mode") or {}
        pinned = " (pinned by its spec)" if str(mode.get("by", "")).startswith("spec") else ""
        if template:
            sha = str(template.get("sha256") or "")[:12]
            where = f"{template.get('source')}, sha256 {sha}" if sha else template.get("source")
            text = f"chat template ({where}"
            if template.get("end_of_turn"):
                text += f"; turns end with {template['end_of_turn']}"
            text += ")" + pinned
            text += ", few-shot as turns" if config.get("fewshot_multiturn") else ""
        else:
            text = f"raw text, no chat template{pinned}"
        system = config.get("system_prompt")
        text += f", system prompt {system[:40]!r}" if system else ""
        bos = config.get("bos") or {}
        if bos.get("add"):
            text += f", BOS {bos.get('token')} first"
        thinking = config.get("thinking")
        if thinking:
            text += f", thinking {thinking['start']}...{thinking['end']} stripped"
        ways.setdefault(text, []).append(task)
    return [f"{text}: {', '.join(sorted(tasks))}" for text, tasks in ways.items()]


def decoding_lines(configs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What greedy decoding applied of the model's generation config, one line per distinct
    way, naming its generative tasks; nothing where no field changed the argmax and none
    was turned off (see model/_greedy.py)."""
    ways: dict[str, list[str]] = {}
    for task, config in configs.items():
        rule = ((config or {}).get("generation") or {}).get("generation_config")
        if not isinstance(rule, Mapping):
            continue
        applied = rule.get("applied")
        off = {
            k: v
            for k, v in (rule.get("not_applied") or {}).items()
            if "sampling only" not in str(v)
        }
        if isinstance(applied, Mapping) and applied:
            fields = ", ".join(f"{k} {v}" for k, v in applied.items())
            text = f"greedy, with the model's generation config applied ({fields})"
        elif off:
            fields = ", ".join(f"{k} {str(v).split(':')[0]}" for k, v in off.items())
            text = (
                f"plain argmax ({rule.get('rule')}): the model's generation config not applied "
                f"({fields})"
            )
        else:
            continue
        ways.setdefault(text, []).append(task)
    return [f"{text}: {', '.join(sorted(tasks))}" for text, tasks in ways.items()]


def deselected_lines(
    deselected: Sequence[str], probed: Iterable[str] = (), *, code: str = ""
) -> list[str]:
    """The tasks ``-k``/``-m`` left out: one line naming those that ran nothing, one naming
    those whose contamination probes ran though their scored items were left out (a run of
    probes alone deselects its tasks' items; listed with the rest, the probed task read as
    never touched). ``code`` wraps the options (a backtick in Markdown)."""
    ran = set(probed)
    options = f"{code}-k{code}/{code}-m{code}"
    untouched = [t for t in deselected if t not in ran]
    probes_only = [t for t in deselected if t in ran]
    lines = []
    if untouched:
        lines.append(f"deselected by {options} ({len(untouched)}): {', '.join(untouched)}")
    if probes_only:
        lines.append(
            f"contamination probes only, their scored items deselected by {options} "
            f"({len(probes_only)}): {', '.join(probes_only)}"
        )
    return lines


def not_run_section(not_run: Sequence[Mapping[str, Any]], probed: Iterable[str] = ()) -> list[str]:
    """The collected tasks that ran no item: one line per skipped task with its reason and
    what to pass, then the deselected ones (:func:`deselected_lines`; ``probed``: the tasks
    whose contamination probes ran)."""
    skipped = [n for n in not_run if n.get("state") == "skipped"]
    deselected = [str(n.get("task", "?")) for n in not_run if n.get("state") == "deselected"]
    if not skipped and not deselected:
        return []
    lines = ["", "**Tasks not run**:", ""]
    for n in skipped:
        lines.append(
            f"- `{_cell(n.get('task', '?'))}` skipped: {_cell(n.get('reason', ''))}; "
            f"to run it: {_cell(n.get('fix', ''))}"
        )
    lines += [f"- {_cell(line)}" for line in deselected_lines(deselected, probed, code="`")]
    return lines


PROBE_MARKS = {"possible contamination": "❌", "no sign of contamination": "✅"}


def probes_section(probes: Sequence[Mapping[str, Any]]) -> list[str]:
    """The contamination probes of the run: one line each (its verdict and null, or why it
    has none), the membership scores and handling below one that fired."""
    if not probes:
        return []
    lines = ["", "**Contamination probes**:", ""]
    for probe in probes:
        mark = PROBE_MARKS.get(str(probe.get("outcome")), "➖")
        lines.append(
            f"- {mark} **{_cell(probe.get('outcome', ''))}**: {_cell(probe.get('text', ''))}"
        )
        lines += [f"  - {_cell(line)}" for line in probe.get("details") or []]
    return lines


def markdown_summary(
    title: str,
    task_rows: list[dict[str, Any]],
    environment: dict[str, Any] | None,
    comparison: Comparison | None,
    *,
    max_items: int = MAX_FLIPPED_IDS,
    task_configs: Mapping[str, Mapping[str, Any]] | None = None,
    notes: Sequence[str] = (),
    not_run: Sequence[Mapping[str, Any]] = (),
    probes: Sequence[Mapping[str, Any]] = (),
    interrupted: str | None = None,
) -> str:
    """The run as Markdown: whether it was interrupted (``interrupted``: why), status
    table, partial note, the tasks that did not run
    (``not_run``: ``task, state, reason, fix``, see :func:`not_run_section`), how prompts
    were presented (from ``task_configs``, see :func:`prompt_lines`), the contamination
    probes (``probes``: see :func:`probes_section`), environment line and the comparison.

    Each task row has ``task, n, total, metric, score, ci_low, ci_high, floor, status,
    seconds`` (scores and floor as proportions; floats may be NaN).
    """
    lines = [f"## {title}", ""]
    if interrupted:
        # Read in a CI step summary, a cancelled job's tables look complete otherwise.
        lines += [
            f"> ⚠️ This run was {_cell(interrupted)}: what is below covers the items and "
            "probes that finished before it stopped.",
            "",
        ]
    if task_rows:
        lines += _status_table(task_rows)
        lines += _floors_section(task_rows)
        lines += _partial_note(task_rows)
        if notes:
            lines += ["", *(f"> ⚠️ {_cell(note)}" for note in notes)]
    elif probes:
        lines.append("No benchmark task was scored: contamination probes only.")
    else:
        lines.append("No tasks ran.")
    lines += not_run_section(not_run, (str(p.get("task")) for p in probes))
    lines += probes_section(probes)
    prompts = prompt_lines(task_configs or {})
    if prompts:
        lines += ["", "**Prompts**:", *(f"- {_cell(line)}" for line in prompts)]
    decoding = decoding_lines(task_configs or {})
    if decoding:
        lines += ["", "**Decoding**:", *(f"- {_cell(line)}" for line in decoding)]
    if environment:
        headline = environment_headline(environment)
        if headline:
            lines += ["", f"**Environment**: {headline}"]
    if comparison is not None:
        lines += _comparison_section(comparison, max_items)
    return "\n".join(lines) + "\n"


def append_github_step_summary(
    markdown: str, environ: Mapping[str, str] = os.environ
) -> Path | None:
    """Append to the file named by ``GITHUB_STEP_SUMMARY``; its path, or None when unset."""
    name = environ.get("GITHUB_STEP_SUMMARY")
    if not name:
        return None
    path = Path(name)
    text = markdown if markdown.endswith("\n") else markdown + "\n"
    with path.open("a", encoding="utf-8") as fh:
        fh.write(text + "\n")
    return path


def summary_entry(v: TaskDecision, tally: TaskTally, records: Mapping[str, Any]) -> dict[str, Any]:
    """A scored task's entry of ``metrics_summary.json``: its status, its score with the
    interval, and what the tally saw (items that did not fit, truncated, errors, recall
    cues, repeats, subsets, named metrics); ``records``: what its output file holds (the
    report and the record commands check it)."""
    entry: dict[str, Any] = {
        "n": v.n,
        "total_items": v.total,
        "partial": v.n + len(tally.not_fitting) < v.total,
        "metric": v.metric,
        "score": v.score,
        "mean": v.estimate.value,
        "stderr": v.estimate.stderr,
        "ci95": [v.estimate.ci_low, v.estimate.ci_high],
        "floor": v.floor,
        "status": v.status,
        "seconds": round(v.seconds, 3),
        "config_hash": tally.config.get("config_hash"),
        "prompt_hash": tally.config.get("prompt_hash"),
        "records": dict(records),
    }
    if v.floor is not None:
        entry["floor_source"] = v.floor_source
        entry["policy"] = v.policy
        entry["failed"] = v.failed
    if tally.recall_cues:
        entry["recall_cues"] = {
            "n": len(tally.recall_cues),
            "items": dict(sorted(tally.recall_cues.items())),
        }
    for name, ids in (
        ("not_fitting", sorted(tally.not_fitting)),
        ("truncated", sorted(tally.truncated)),
    ):
        if ids:
            entry[name] = {"n": len(ids), "items": ids}
    if tally.errors:
        entry["errors"] = {"n": len(tally.errors), "items": list(tally.errors)}
    if v.repeats:
        entry["repeats"] = list(v.repeats)
        entry["spread"] = v.spread
    if tally.has_subsets:  # scored items per subset; empty ones
        entry["subsets"] = {"ran": tally.subsets_ran(), "empty": dict(tally.empty_subsets)}
    named = tally.metric_estimates()
    if named:  # beside the primary score; the status is on the primary score only
        entry["metrics"] = {
            name: {
                "n": est.n,
                "mean": est.value,
                "stderr": est.stderr,
                "ci95": [est.ci_low, est.ci_high],
            }
            for name, est in named.items()
        }
    return entry


def skipped_entry(v: TaskDecision, reason: str, fix: str) -> dict[str, Any]:
    """The ``metrics_summary.json`` entry of a task none of whose items ran: why, and what
    to pass."""
    return {
        "n": 0,
        "total_items": v.total,
        "metric": v.metric,
        "status": "skipped",
        "reason": reason,
        "fix": fix,
    }


def summary_row(task: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """A task's row of the summary table, from its ``metrics_summary.json`` entry (a task
    another process of a combined run scored), as :meth:`TaskDecision.row` gives it."""
    ci = entry.get("ci95") or [math.nan, math.nan]
    return {
        "task": task,
        "n": entry.get("n"),
        "total": entry.get("total_items"),
        "metric": entry.get("metric"),
        "score": entry.get("score"),
        "ci_low": ci[0],
        "ci_high": ci[1],
        "floor": entry.get("floor"),
        "status": entry.get("status"),
        "seconds": entry.get("seconds"),
        "policy": entry.get("policy"),
        "failed": entry.get("failed"),
        "floor_source": entry.get("floor_source"),
    }
