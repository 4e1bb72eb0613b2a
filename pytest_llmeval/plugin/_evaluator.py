"""The compute side of a pytest process: the model, per-task state, batched results.

Runs wherever items run (the only process without xdist, each worker with it). It never
writes the run directory; what the controller needs travels in report user properties.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_llmeval._errors import LlmEvalError
from pytest_llmeval.dataset import Item, task_subsets
from pytest_llmeval.eval import ItemResult, TaskRunner
from pytest_llmeval.record import config_hash, prompt_hash, resumable_items, task_config

from ._options import Options

if TYPE_CHECKING:
    from pytest_llmeval.model import Backend

# Absolute tolerance on log-likelihoods for the determinism check (float32 CPU kernels
# differ by ~1e-6 between batch compositions; anything above 1e-4 is a real difference).
LOGPROB_TOLERANCE = 1e-4


def _json(value: Any) -> Any:
    """Plain JSON types only: xdist serialises user properties with execnet."""
    return json.loads(json.dumps(value, default=str))


@dataclass
class TaskState:
    config: dict[str, Any]
    prompt_hash: str
    config_hash: str
    resumable: dict[str, dict[str, Any]] = field(default_factory=dict)
    resumed_from: list[str] = field(default_factory=list)
    determinism_checked: int = 0


class Evaluator:
    def __init__(self, options: Options, code_dir: Path) -> None:
        self.options = options
        self.code_dir = code_dir
        self._backend: Backend | None = None
        self._error: str | None = None
        self.environment: dict[str, Any] | None = None
        self.model_settings: dict[str, Any] = {}
        self.states: dict[str, TaskState] = {}
        self.cache: dict[str, ItemResult] = {}

    # ------------------------------------------------------------------ model

    def backend(self) -> Backend:
        """Load the model once per process; a failure is remembered and re-raised."""
        if self._backend is not None:
            return self._backend
        if self._error is not None:
            raise LlmEvalError(self._error)
        from pytest_llmeval.model import load_backend

        settings = self.options.model_settings(worker=_xdist_worker())
        try:
            backend = load_backend(settings)
            self.environment = self._environment(backend)
        except LlmEvalError as exc:
            self._error = str(exc)
            raise
        except ImportError as exc:
            self._error = (
                f"the model backend needs torch and transformers ({exc.name} is missing): "
                "pip install 'pytest-llm-evaluation[hf]'"
            )
            raise LlmEvalError(self._error) from None
        self._backend = backend
        return backend

    def _environment(self, backend: Backend) -> dict[str, Any]:
        from pytest_llmeval.record import HashCache, environment_record

        info = dict(backend.info())
        raw_path = info.get("model_path")
        model_path = Path(str(raw_path)) if raw_path else None
        cache = HashCache()
        env = environment_record(
            self.code_dir,
            model_path if model_path is not None and model_path.is_dir() else None,
            hash_cache=cache,
        )
        cache.save()
        if env.get("model") is None and info.get("model_sha256_reason"):
            # A model behind a server: no weights to hash here; say so instead of a bare null.
            env["model"] = {
                "sha256": None,
                "weights_sha256": None,
                "reason": info["model_sha256_reason"],
            }
        model = env.get("model") or {}
        env["backend"] = info
        libraries = env.get("libraries", {})
        self.model_settings = {
            "backend": info.get("backend"),
            "weights_sha256": model.get("weights_sha256"),
            "model_sha256": model.get("sha256"),
            "dtype": info.get("dtype"),
            "device_type": str(info.get("device") or "").split(":")[0],
            "batch_size": info.get("batch_size"),
            "max_length": info.get("max_length"),
            "seed": self.options.seed,
            "torch": libraries.get("torch"),
            "transformers": libraries.get("transformers"),
        }
        if info.get("backend") == "openai":
            # What identifies the remote model (its weights cannot be hashed from here).
            self.model_settings.update(
                base_url=info.get("base_url"),
                served_model=info.get("model"),
                server_model=info.get("server_model"),
                server=info.get("server"),
            )
        plain: dict[str, Any] = _json(env)
        return plain

    # ------------------------------------------------------------------ tasks

    def state(self, runner: TaskRunner) -> TaskState:
        name = runner.spec.name
        if name not in self.states:
            runner.bind(self.backend())
            subsets = task_subsets(runner.spec, runner.data_dirs)
            config: dict[str, Any] = _json(task_config(runner, subsets))
            state = TaskState(
                config=config,
                prompt_hash=prompt_hash(config),
                config_hash=config_hash(config, self.model_settings),
            )
            if self.options.resume:
                found, sources = resumable_items(self.options.output, name, state.config_hash)
                state.resumable = found
                state.resumed_from = [str(s) for s in sources]
            self.states[name] = state
        return self.states[name]

    def results(
        self, runner: TaskRunner, wanted: Item, selection: Callable[[], list[Item]]
    ) -> tuple[ItemResult, list[str]]:
        """The result of ``wanted``, computing it with the selected items that follow it.

        Returns the result and log lines for the run's eval.log.
        """
        if wanted.id in self.cache:
            return self.cache.pop(wanted.id), []
        backend = self.backend()
        state = self.state(runner)
        log: list[str] = []
        pending = selection()
        if wanted not in pending:
            pending = [wanted]
        start = pending.index(wanted)
        chunk = [it for it in pending[start:] if it.id not in self.cache][: backend.batch_size]
        to_compute = []
        reused = 0
        for item in chunk:
            record = state.resumable.pop(item.id, None)
            if record is not None:
                result = ItemResult.from_dict(
                    {k: v for k, v in record.items() if k in ItemResult.__dataclass_fields__}
                )
                result.reused_from = str(record.get("run_dir", "")) or "interrupted run"
                self.cache[item.id] = result
                reused += 1
            else:
                to_compute.append(item)
        name = runner.spec.name
        if reused:
            log.append(f"{name}: reused {reused} finished item(s) (config {state.config_hash})")
        if to_compute:
            started = time.perf_counter()
            results = runner.run(to_compute, backend)
            repeat_scores = [[r.score] for r in results]
            for _ in range(1, self.options.repeat):
                again = runner.run(to_compute, backend)
                for scores, r in zip(repeat_scores, again, strict=True):
                    scores.append(r.score)
            for result, scores in zip(results, repeat_scores, strict=True):
                result.config_hash = state.config_hash
                if self.options.repeat > 1:
                    result.repeat_scores = scores
                self.cache[result.item_id] = result
            self._check_determinism(runner, state, to_compute, results)
            took = time.perf_counter() - started
            log.append(
                f"{name}: computed {len(results)} item(s) in {took:.1f}s "
                f"({self.options.repeat} repeat(s), batch size {backend.batch_size})"
            )
        return self.cache.pop(wanted.id), log

    def _check_determinism(
        self, runner: TaskRunner, state: TaskState, items: list[Item], results: list[ItemResult]
    ) -> None:
        """Rerun the first items of a task as a batch of their own and compare."""
        budget = self.options.check_determinism - state.determinism_checked
        if budget <= 0:
            return
        sample = list(zip(items, results, strict=True))[:budget]
        state.determinism_checked += len(sample)
        again = runner.run([it for it, _ in sample], self.backend())
        for (_, first), second in zip(sample, again, strict=True):
            problems = []
            if first.output != second.output:
                problems.append(f"output {first.output!r} != {second.output!r}")
            for i, (a, b) in enumerate(zip(first.logprobs, second.logprobs, strict=True)):
                if abs(a - b) > LOGPROB_TOLERANCE:
                    problems.append(f"log-likelihood of choice {i}: {a!r} != {b!r}")
            first.determinism = "; ".join(problems) if problems else "ok"


def _xdist_worker() -> int | None:
    """This process's xdist worker number (gw3 -> 3), None outside xdist: with several GPUs
    and ``--llm-device auto`` each worker takes its own device."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else None
