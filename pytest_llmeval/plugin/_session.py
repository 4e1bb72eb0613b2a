"""The per-run state of the plugin, stored on ``config.stash``.

One object per pytest process. On an xdist worker it holds the model and computes item
results; on the controller (or a run without xdist) it also aggregates reports into task
results, decides floors and writes the run record.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmeval.eval import ItemResult, TaskRunner
from pytest_llmeval.scorer import Estimate, accuracy
from pytest_llmeval.task import TaskSpec

from ._options import Options

if TYPE_CHECKING:
    from pytest_llmeval.model import Backend

    from ._collect import EvalItem

# Items computed per call into the backend: the item asked for and the next pending ones.
CHUNK_BATCHES = 1


def task_meta(spec: TaskSpec, total_items: int) -> dict[str, Any]:
    """What the controller needs to know of a task; travels in every item report."""
    return {
        "floor": spec.floor,
        "metric": spec.metric,
        "total_items": total_items,
        "source": spec.source,
    }


@dataclass
class TaskTally:
    """What the controller has seen of one task (from reports, so it works under xdist)."""

    name: str
    metric: str
    floor: float | None
    total_items: int
    selected: int = 0
    skipped: int = 0
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def estimate(self) -> Estimate:
        return accuracy([r["score"] for r in self.results.values()])


@dataclass(frozen=True)
class Verdict:
    task: str
    n: int
    selected: int
    total: int
    metric: str
    estimate: Estimate
    floor: float | None
    seconds: float
    status: str  # pass | FAIL | error | incomplete | no floor

    @property
    def failed(self) -> bool:
        return self.status in ("FAIL", "error", "incomplete")


class LlmEvalSession:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.options = Options.from_config(config)
        self.is_worker = hasattr(config, "workerinput")
        self.specs: dict[str, TaskSpec] = {}
        self.total_items: dict[str, int] = {}
        self.runners: dict[str, TaskRunner] = {}
        self.selected: dict[str, list[EvalItem]] = {}
        self.cache: dict[str, ItemResult] = {}
        self.tallies: dict[str, TaskTally] = {}
        self._backend: Backend | None = None
        self._backend_error: str | None = None
        self.model_info_sent = False
        self.model_info: dict[str, Any] = {}
        self.run_dir: Path | None = None
        self._eval_config: dict[str, Any] = {}
        self.verdicts: list[Verdict] = []

    # ---------------------------------------------------------------- collection

    def register_task(self, spec: TaskSpec, total_items: int) -> TaskSpec:
        if spec.name in self.options.floors:
            from dataclasses import replace

            spec = replace(spec, floor=self.options.floors[spec.name])
        existing = self.specs.get(spec.name)
        if existing is not None and existing.source != spec.source:
            raise pytest.UsageError(
                f"task name {spec.name!r} is defined twice: {existing.source} and {spec.source}"
            )
        self.specs[spec.name] = spec
        self.total_items[spec.name] = total_items
        self.runners[spec.name] = TaskRunner(spec, self.options.data_dirs)
        return spec

    def set_selection(self, items: list[pytest.Item]) -> None:
        from ._collect import EvalItem

        self.selected = {}
        for item in items:
            if isinstance(item, EvalItem):
                self.selected.setdefault(item.task, []).append(item)

    # ---------------------------------------------------------------- model

    def backend(self) -> Backend:
        """The model of this process, loaded on first use and shared by every item."""
        if self._backend is None:
            if self._backend_error is not None:
                pytest.fail(self._backend_error, pytrace=False)
            from pytest_llmeval._errors import LlmEvalError
            from pytest_llmeval.model import ModelSettings, load_backend

            assert self.options.model is not None
            settings = ModelSettings(
                model=self.options.model,
                device=self.options.device,
                dtype=self.options.dtype,
                batch_size=self.options.batch_size,
                seed=self.options.seed,
            )
            try:
                self._backend = load_backend(settings)
            except LlmEvalError as exc:
                self._backend_error = str(exc)
                pytest.fail(self._backend_error, pytrace=False)
            except ImportError as exc:
                self._backend_error = (
                    f"the model backend needs torch and transformers ({exc.name} is missing): "
                    "pip install 'pytest-llm-evaluation[hf]'"
                )
                pytest.fail(self._backend_error, pytrace=False)
        return self._backend

    def result_for(self, item: EvalItem) -> ItemResult:
        """This item's result; computes it with the next pending items of its task in a batch."""
        if item.item.id in self.cache:
            return self.cache.pop(item.item.id)
        backend = self.backend()
        pending = [
            it for it in self.selected.get(item.task, [item]) if it.item.id not in self.cache
        ]
        if item not in pending:
            pending = [item]
        start = pending.index(item)
        chunk = pending[start : start + backend.batch_size * CHUNK_BATCHES]
        results = self.runners[item.task].run([it.item for it in chunk], backend)
        for result in results:
            self.cache[result.item_id] = result
        return self.cache.pop(item.item.id)

    # ---------------------------------------------------------------- aggregation

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Fold one item report (from this process or an xdist worker) into its task.

        Under xdist this runs on the workers and on the controller; only the controller
        (or a run without xdist) keeps tallies and writes records.
        """
        if self.is_worker:
            return
        props = dict(report.user_properties)
        task = props.get("llmeval_task")
        meta = props.get("llmeval_meta")
        if not isinstance(task, str) or not isinstance(meta, dict):
            return
        tally = self.tallies.get(task)
        if tally is None:
            tally = self.tallies[task] = TaskTally(
                name=task,
                metric=str(meta["metric"]),
                floor=meta["floor"],
                total_items=int(meta["total_items"]),
            )
        if report.when == "setup":
            tally.selected += 1
            if report.skipped:
                tally.skipped += 1
        model_info = props.get("llmeval_model")
        if isinstance(model_info, dict) and not self.model_info:
            self.model_info = model_info
        if report.when == "call":
            tally.seconds += report.duration
            result = props.get("llmeval_result")
            if isinstance(result, dict):
                tally.results[result["item_id"]] = result
                self.write_result(str(task), result)
        if report.failed and "llmeval_result" not in props:
            tally.errors.append(f"{report.nodeid}: {report.when} failed")

    def _run_dir(self) -> Path:
        if self.run_dir is None:
            stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
            model = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(self.options.model or "none").name)
            base = self.options.output / f"{stamp}_{model}"
            path, n = base, 1
            while path.exists():
                n += 1
                path = base.with_name(f"{base.name}-{n}")
            (path / "tasks").mkdir(parents=True)
            self.run_dir = path
            config = {
                "model": self.options.model,
                "device": self.options.device,
                "dtype": self.options.dtype,
                "batch_size": self.options.batch_size,
                "limit": self.options.limit,
                "seed": self.options.seed,
                "data_dirs": [str(d) for d in self.options.data_dirs],
            }
            self._eval_config = config
            (path / "eval_config.json").write_text(json.dumps(config, indent=2) + "\n")
        return self.run_dir

    def write_result(self, task: str, result: dict[str, Any]) -> None:
        """Append one item result to the run record as soon as it is known."""
        path = self._run_dir() / "tasks" / f"{task}_output.jsonl"
        with path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(result, ensure_ascii=False, sort_keys=True) + "\n")

    def decide(self) -> list[Verdict]:
        verdicts = []
        for name in sorted(self.tallies):
            tally = self.tallies[name]
            selected = tally.selected
            est = tally.estimate()
            n = len(tally.results)
            if tally.errors:
                status = "error"
            elif tally.skipped == selected:
                status = "skipped"
            elif n < selected - tally.skipped:
                status = "incomplete"
            elif tally.floor is None:
                status = "no floor"
            else:
                status = "pass" if est.value >= tally.floor else "FAIL"
            verdicts.append(
                Verdict(
                    task=name,
                    n=n,
                    selected=selected,
                    total=tally.total_items,
                    metric=tally.metric,
                    estimate=est,
                    floor=tally.floor,
                    seconds=tally.seconds,
                    status=status,
                )
            )
        self.verdicts = verdicts
        if verdicts and self.run_dir is not None:
            summary = {
                v.task: {
                    "n": v.n,
                    "total_items": v.total,
                    "partial": v.n < v.total,
                    "metric": v.metric,
                    "score": v.estimate.value,
                    "stderr": v.estimate.stderr,
                    "ci95": [v.estimate.ci_low, v.estimate.ci_high],
                    "floor": v.floor,
                    "verdict": v.status,
                    "seconds": round(v.seconds, 3),
                }
                for v in verdicts
            }
            config = dict(self._eval_config)
            config["model_info"] = self.model_info
            config["tasks"] = {
                t.name: {
                    "metric": t.metric,
                    "floor": t.floor,
                    "total_items": t.total_items,
                    "selected": t.selected,
                }
                for t in self.tallies.values()
            }
            (self.run_dir / "eval_config.json").write_text(json.dumps(config, indent=2) + "\n")
            (self.run_dir / "metrics_summary.json").write_text(
                json.dumps(summary, indent=2, allow_nan=True) + "\n"
            )
        return verdicts
