"""Peak memory of one tool on the speed benchmark's items, in a process of its own.

    python -m tools.peak_memory --tool ours|lmeval [the options of python -m tools.speed]

Run by ``python -m tools.speed`` once per tool: each child loads only its own tool's
model and runs the same task sets (the same items, batch size, dtype and device) as the
speed run, so that neither tool's memory is counted in the other's. The child prints one
JSON line: its resident-set peak (the kernel's high-water mark, :func:`maxrss_mb`) after the
imports, after the model load, after each task type (the peak so far, so each is at least
the one before) and at its end. Nothing here asserts a size.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TOOLS = ("ours", "lmeval")


def maxrss_mb() -> float:
    """This process's resident-set peak so far, MiB: the kernel's high-water mark of its
    own memory since it started (``VmHWM``). Not ``ru_maxrss``: a process started from a
    large one (the speed run, with both models loaded) inherits that one's size there."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:  # not Linux
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_child(command: Sequence[str]) -> tuple[int, str]:
    """Run ``command``; its exit status and standard output (its standard error passes
    through)."""
    proc = subprocess.run(list(command), stdout=subprocess.PIPE, check=False)
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


def _run_tool(tool: str, argv: Sequence[str]) -> dict[str, Any]:
    from tools.lmeval_compare import (
        ForwardMeter,
        Models,
        add_arguments,
        options_from_args,
        quiet_libraries,
        run_lmeval,
        run_ours,
    )

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    opts = options_from_args(parser.parse_args(list(argv)))
    out: dict[str, Any] = {"tool": tool, "imports_mb": 0.0, "tasks": {}}
    with quiet_libraries():
        from pytest_llmeval.model import ModelSettings, load_backend, resolve_model_path
        from tools.lmeval_tasks import SINGLE_FILE, write_task_set

        if tool == "lmeval":
            from lm_eval.models.huggingface import HFLM
        out["imports_mb"] = maxrss_mb()
        path = resolve_model_path(opts.model)
        ours: Any = None
        lm: Any = None
        if tool == "ours":
            ours = load_backend(
                ModelSettings(
                    model=opts.model,
                    device=opts.device,
                    dtype=opts.dtype,
                    batch_size=opts.batch_size,
                )
            )
            meter = ForwardMeter(ours.model, ours)
        else:
            lm = HFLM(
                pretrained=str(path),
                device=opts.device,
                dtype=opts.dtype,
                batch_size=opts.batch_size,
            )
            meter = ForwardMeter(lm.model)
        models = Models(
            ours=ours,
            lmeval=lm,
            ours_meter=meter,
            lmeval_meter=meter,
            load_s={},
            model_path=path,
        )
        out["model_load_mb"] = maxrss_mb()
        with tempfile.TemporaryDirectory(prefix="llmeval-peak-memory-") as tmp:
            for task_type in opts.tasks:
                subjects = opts.subjects if task_type not in SINGLE_FILE else None
                task_set = write_task_set(
                    task_type,
                    opts.data_dirs,
                    Path(tmp),
                    opts.items,
                    opts.max_new_tokens,
                    subjects,
                    chat=opts.chat_settings(),
                )
                if tool == "ours":
                    run_ours(task_set, models, opts.chunk_items)
                else:
                    run_lmeval(task_set, models)
                out["tasks"][task_type] = {"items": len(task_set.items), "peak_mb": maxrss_mb()}
    out["process_peak_mb"] = maxrss_mb()
    return out


def measure(argv: Sequence[str], log: Any = None) -> dict[str, Any]:
    """Both tools' peaks, each in a child process of its own (one after the other, so that
    neither competes with the other for memory): per tool the child's report and
    ``process_peak_mb``, the child's peak at its end."""
    result: dict[str, Any] = {}
    for tool in TOOLS:
        if log is not None:
            log(f"peak memory: {tool} in a process of its own ...")
        command = [sys.executable, "-m", "tools.peak_memory", "--tool", tool, *argv]
        status, text = run_child(command)
        lines = [line for line in text.splitlines() if line.startswith("{")]
        if status != 0 or not lines:
            result[tool] = {"error": f"exit status {status}"}
            continue
        result[tool] = json.loads(lines[-1])
    return result


MEMORY_PEAK_HEADER = ["tool", "after imports MiB", "after model load MiB", "peak by task MiB",
                      "process peak MiB"]  # fmt: skip


def peak_rows(peaks: dict[str, Any]) -> list[list[str]]:
    """One row per tool: the peak after its imports and its model load, after each task
    type (the peak so far), and its process's peak."""
    rows = []
    for tool in TOOLS:
        entry = peaks.get(tool)
        if entry is None:
            continue
        name = "lm-eval" if tool == "lmeval" else tool
        if "error" in entry:
            rows.append([name, "-", "-", f"failed: {entry['error']}", "-"])
            continue
        by_task = ", ".join(
            f"{task} ({t['items']} items) {t['peak_mb']:.0f}" for task, t in entry["tasks"].items()
        )
        rows.append(
            [
                name,
                f"{entry['imports_mb']:.0f}",
                f"{entry['model_load_mb']:.0f}",
                by_task,
                f"{entry['process_peak_mb']:.0f}",
            ]
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] != "--tool" or args[1] not in TOOLS:
        raise SystemExit(f"usage: python -m tools.peak_memory --tool {'|'.join(TOOLS)} ...")
    print(json.dumps(_run_tool(args[1], args[2:])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
