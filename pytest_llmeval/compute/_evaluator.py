"""The compute side of a pytest process: the model, per-task state, batched results.

Runs wherever items run (the only process without xdist, each worker with it). It never
writes the run directory; what the controller needs travels in report user properties.
Plain Python: the plugin gives it the run's options (:class:`RunOptions`) and, where
progress is shown, a :class:`~._progress.ProgressBoard`.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_llmeval._errors import LlmEvalError, one_line
from pytest_llmeval.dataset import Item
from pytest_llmeval.eval import ItemResult, TaskRunner, item_digests
from pytest_llmeval.record import (
    config_hash,
    data_files,
    prompt_hash,
    resumable_items,
    resume_key,
    resume_settings,
    run_identity,
    same_content,
    task_config,
    tokenizer_digest,
)

from ._progress import ProgressBoard

if TYPE_CHECKING:
    from pytest_llmeval.model import Backend, ModelSettings


class RunOptions(Protocol):
    """What the evaluator reads of a run's options (the plugin's ``Options``)."""

    @property
    def seed(self) -> int: ...
    @property
    def repeat(self) -> int: ...
    @property
    def check_determinism(self) -> int: ...
    @property
    def resume(self) -> bool: ...
    @property
    def output(self) -> Path: ...
    @property
    def model_revision(self) -> str | None: ...
    def model_settings(self, worker: int | None = None) -> ModelSettings: ...


# Tolerance of the determinism check on a log-likelihood, by the dtype the model ran in:
# (absolute, relative to the value). The rerun has the same batch composition as the first
# run (the same items, in the same call), so on deterministic kernels the numbers are
# identical; what remains is the run-to-run noise of kernels without a deterministic
# implementation (GPU atomics, split reductions), a few units of the dtype's last place
# per value, accumulated over the continuation's tokens. float32 keeps 24 bits of mantissa
# (eps 1.2e-7), float16 11 (eps 9.8e-4), bfloat16 8 (eps 7.8e-3): an absolute 1e-4 is right
# for float32 and flags healthy bfloat16 items. Backends that do not say their dtype (a
# server) get bfloat16's, the loosest. See docs/RECORDS.md.
LOGPROB_TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-4, 1e-5),
    "float16": (1e-2, 1e-3),
    "bfloat16": (5e-2, 1e-2),
}


def logprob_tolerance(dtype: str | None, value: float) -> float:
    """The largest difference of a log-likelihood ``value`` that the determinism check
    accepts between two runs in ``dtype``."""
    absolute, relative = LOGPROB_TOLERANCES.get(str(dtype), LOGPROB_TOLERANCES["bfloat16"])
    return absolute + relative * abs(value)


def _json(value: Any) -> Any:
    """Plain JSON types only: xdist serialises user properties with execnet."""
    return json.loads(json.dumps(value, default=str))


def load_failure(exc: Exception, flag: str, model: str) -> str:
    """One line saying why ``model`` (given as ``flag``: ``--llm-model`` or
    ``probe.reference_model``) could not be loaded: the package's own error (its
    ``--llm-model=`` prefix renamed to the flag given), the missing extra, or anything else
    a broken model or device raises, folded into one line."""
    if isinstance(exc, LlmEvalError):
        return str(exc).replace(f"--llm-model={model}: ", f"{flag}={model}: ", 1)
    if isinstance(exc, ImportError):
        return (
            f"the model backend needs torch and transformers ({exc.name} is missing): "
            "pip install 'pytest-llm-evaluation[hf]'"
        )
    return f"{flag}={model}: the model could not be loaded: {one_line(exc)}"


@dataclass
class TaskState:
    config: dict[str, Any]
    prompt_hash: str
    config_hash: str
    resume_key: str = ""
    # The model settings outside the config hash that the resume key holds (recorded).
    resume_settings: dict[str, Any] = field(default_factory=dict)
    data_files: dict[str, str] = field(default_factory=dict)
    resumable: dict[str, dict[str, Any]] = field(default_factory=dict)
    resumed_from: list[str] = field(default_factory=list)
    determinism_checked: int = 0
    # A generative task's results as their sequences end (continuous batching), and the
    # ids still to come from it.
    stream: Iterator[ItemResult] | None = None
    streaming: set[str] = field(default_factory=set)


# pytest-xdist modes that run all items of a task in one worker: the plugin schedules
# ``load`` and ``loadgroup`` itself (``_schedule.py``: xdist's own loadgroup loses its
# groups on pytest 9), ``loadscope`` and ``loadfile`` keep a spec file (and all
# ``lmeval::`` items) in one scope, ``each`` runs everything everywhere. Under any other
# mode (``worksteal``) a generative task is not streamed: a stream of its whole selection
# would compute items that another worker runs too.
WHOLE_TASK_DIST = ("load", "loadfile", "loadscope", "loadgroup", "each", "no")


# Fields of a backend's info() that change while it runs, with the method that reads each
# cheaply: taken again after each item and sent to the controller when they moved.
LIVE_BACKEND_INFO = (
    ("decode_step", "decode_step_info"),
    ("batch_size_by_width", "batch_sizes_by_width"),
)


def _batch_size_text(backend: Backend) -> str:
    """The batch size for the log, with the sizes per width where ``auto`` on a GPU has
    probed more than one width so far."""
    by_width = getattr(backend, "batch_sizes_by_width", None)
    widths = by_width() if callable(by_width) else {}
    text = f"batch size {backend.batch_size}"
    if len(widths) > 1:
        text += f", by width so far {', '.join(f'{w}: {n}' for w, n in widths.items())}"
    return text


class Evaluator:
    def __init__(self, options: RunOptions, code_dir: Path) -> None:
        self.options = options
        self.code_dir = code_dir
        # Whether this process runs every selected item of a task (False in an xdist
        # worker whose items are spread): then a generative task may stream them all.
        self.whole_tasks = True
        self._backend: Backend | None = None
        self._error: str | None = None
        self._identity: dict[str, Any] | None = None
        self.environment: dict[str, Any] | None = None
        self.model_settings: dict[str, Any] = {}
        # The tokenizer files' digest of the model directory (None for a served model).
        self.tokenizer: dict[str, Any] | None = None
        self.states: dict[str, TaskState] = {}
        self.cache: dict[str, ItemResult] = {}
        # Where items done are counted for the progress line (None: no progress shown).
        self.progress: ProgressBoard | None = None

    # ------------------------------------------------------------------ model

    @property
    def load_error(self) -> str | None:
        """Why the model could not be loaded in this process (None: not tried, or loaded)."""
        return self._error

    def backend(self) -> Backend:
        """Load the model once per process; a failure of any kind is remembered and
        re-raised as one short :class:`LlmEvalError` (never retried per item)."""
        if self._backend is not None:
            return self._backend
        if self._error is not None:
            raise LlmEvalError(self._error)
        from pytest_llmeval.model import load_backend

        settings = self.options.model_settings(worker=_xdist_worker())
        try:
            backend = load_backend(settings)
            self.environment = self._environment(backend)
        except Exception as exc:  # anything a broken model or device raises
            self._error = load_failure(exc, "--llm-model", settings.model)
        else:
            self._backend = backend
            return backend
        raise LlmEvalError(self._error)

    def close(self) -> None:
        """Release the model's engine where its backend has one to stop (the vllm
        backend's processes, while the streams their logs write to are still open)."""
        close = getattr(self._backend, "close", None)
        if callable(close):
            close()

    def _environment(self, backend: Backend) -> dict[str, Any]:
        from pytest_llmeval.record import HashCache, environment_record

        info = dict(backend.info())
        raw_path = info.get("model_path")
        model_path = Path(str(raw_path)) if raw_path else None
        cache = HashCache()
        model_dir = model_path if model_path is not None and model_path.is_dir() else None
        env = environment_record(self.code_dir, model_dir, hash_cache=cache)
        if model_dir is not None:
            known = (env.get("model") or {}).get("files") or {}
            self.tokenizer = tokenizer_digest(model_dir, known, cache)
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
        env["tokenizer_sha256"] = (self.tokenizer or {}).get("sha256")
        if self.options.model_revision is not None:
            env["model_revision"] = self.options.model_revision
        env["worker"] = os.environ.get("PYTEST_XDIST_WORKER") or None
        env["pid"] = os.getpid()
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
        if info.get("backend") == "vllm":
            # The engine's settings and version: kernels, tensor-parallel reductions and the
            # engine's batching decide the last digits.
            self.model_settings["engine"] = info.get("engine")
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

    def identity(self) -> dict[str, Any]:
        """The code and run settings behind this process's item records (resume key)."""
        if self._identity is None:
            self._identity = run_identity(
                self.code_dir, self.options.repeat, self.options.check_determinism
            )
        return self._identity

    def state(self, runner: TaskRunner) -> TaskState:
        name = runner.spec.name
        if name not in self.states:
            backend = self.backend()
            # A new task: the cached states of the prompt prefixes (few-shot blocks) of
            # the tasks before it are not asked for again (they held hundreds of MB).
            clear = getattr(backend, "clear_prefix_cache", None)
            if callable(clear):
                clear()
            runner.bind(backend)
            config: dict[str, Any] = _json(task_config(runner, runner.subsets()))
            digest = config_hash(config, self.model_settings)
            settings = resume_settings(
                (self.environment or {}).get("backend") or {},
                self.tokenizer,
                self.options.model_revision,
                generative=runner.spec.mode == "generate",
            )
            state = TaskState(
                config=config,
                prompt_hash=prompt_hash(config),
                config_hash=digest,
                resume_key=resume_key(digest, self.identity(), settings),
                resume_settings=settings,
                data_files=data_files(runner.data_files(), runner.data_dirs),
            )
            if self.options.resume:
                found, sources = resumable_items(self.options.output, name, state.resume_key)
                state.resumable = found
                state.resumed_from = [str(s) for s in sources]
            self.states[name] = state
        return self.states[name]

    def _reusable(self, runner: TaskRunner, state: TaskState, item: Item) -> ItemResult | None:
        """A finished result of ``item`` from an interrupted run, when its record was
        computed from the item as it is now (source record, prompt, target: the digests
        of ``record._resume``)."""
        record = state.resumable.pop(item.id, None)
        if record is None:
            return None
        try:
            prepared = runner.prepare(item)
        except LlmEvalError:
            return None
        if not same_content(record, item_digests(prepared)):
            return None
        result = ItemResult.from_dict(
            {k: v for k, v in record.items() if k in ItemResult.__dataclass_fields__}
        )
        result.reused_from = str(record.get("run_dir") or "") or None
        return result

    def results(
        self, runner: TaskRunner, wanted: Item, selection: Callable[[], list[Item]]
    ) -> tuple[ItemResult, list[str]]:
        """The result of ``wanted``, computing it with the selected items that follow it.

        A generative task on a backend that streams (continuous batching) is handed all
        its selected items from ``wanted`` on at once; each later item takes its result
        from that stream (see :meth:`_streamed`). Otherwise ``wanted`` is computed with
        the next items, up to the batch size. Returns the result and log lines for the
        run's eval.log.
        """
        if wanted.id in self.cache:
            return self.cache.pop(wanted.id), []
        backend = self.backend()
        state = self.state(runner)
        self._begin_progress(runner.spec.name, selection)
        if (
            runner.streams(backend)
            and self.whole_tasks
            and self.options.repeat == 1
            and state.determinism_checked >= self.options.check_determinism
        ):
            return self._streamed(runner, state, wanted, selection, backend)
        log: list[str] = []
        chunk = self._pending(wanted, selection)[: backend.batch_size]
        to_compute = self._not_reused(runner, state, chunk, log)
        name = runner.spec.name
        if to_compute:
            started = time.perf_counter()
            with self._chunk(name, len(to_compute)):
                results = runner.run(to_compute, backend)
            repeat_scores = [[r.score] for r in results]
            for _ in range(1, self.options.repeat):
                again = runner.run(to_compute, backend)
                for scores, r in zip(repeat_scores, again, strict=True):
                    scores.append(r.score)
            for result, scores in zip(results, repeat_scores, strict=True):
                if self.options.repeat > 1 and result.error is None:
                    result.repeat_scores = scores
                self._keep(state, result)
            self._check_determinism(runner, state, to_compute, results)
            self._advance(name, len(to_compute))
            took = time.perf_counter() - started
            log.append(
                f"{name}: computed {len(results)} item(s) in {took:.1f}s "
                f"({self.options.repeat} repeat(s), {_batch_size_text(backend)})"
            )
        return self.cache.pop(wanted.id), log

    def backend_info_changed(self) -> dict[str, Any] | None:
        """The fields of the backend's record that the run itself moves
        (:data:`LIVE_BACKEND_INFO`: how decode steps ran, ``none`` until a generation runs;
        the batch size per width, probed as batches first need a width), those that changed
        since the environment was taken; the environment is updated."""
        backend = self._backend
        env = (self.environment or {}).get("backend")
        if backend is None or not isinstance(env, dict):
            return None
        changed: dict[str, Any] = {}
        for key, method in LIVE_BACKEND_INFO:
            info = getattr(backend, method, None)
            if not callable(info):
                continue
            now = _json(info())
            if env.get(key) != now:
                env[key] = changed[key] = now
        return changed or None

    def take_computed_ahead(self) -> list[ItemResult]:
        """Results computed for items that have not asked for them (finished, without an
        error, not reused), taken out of the cache."""
        ahead = [r for r in self.cache.values() if r.error is None and r.reused_from is None]
        self.cache.clear()
        return ahead

    def _pending(self, wanted: Item, selection: Callable[[], list[Item]]) -> list[Item]:
        """``wanted`` and the selected items of its task after it, without those whose
        results are waiting in the cache."""
        pending = selection()
        if wanted not in pending:
            pending = [wanted]
        start = pending.index(wanted)
        return [it for it in pending[start:] if it.id not in self.cache]

    def _not_reused(
        self, runner: TaskRunner, state: TaskState, items: list[Item], log: list[str]
    ) -> list[Item]:
        """``items`` without those whose finished results (of an interrupted run) can be
        reused: those go into the cache."""
        to_compute = []
        for item in items:
            found = self._reusable(runner, state, item)
            if found is not None:
                self.cache[item.id] = found
                self._advance(runner.spec.name, 1, reused=True)
            else:
                to_compute.append(item)
        if len(to_compute) < len(items):
            log.append(
                f"{runner.spec.name}: reused {len(items) - len(to_compute)} finished item(s) "
                f"(config {state.config_hash})"
            )
        return to_compute

    def _keep(self, state: TaskState, result: ItemResult) -> None:
        result.config_hash = state.config_hash
        result.resume_key = state.resume_key
        self.cache[result.item_id] = result

    def _streamed(
        self,
        runner: TaskRunner,
        state: TaskState,
        wanted: Item,
        selection: Callable[[], list[Item]],
        backend: Backend,
    ) -> tuple[ItemResult, list[str]]:
        """``wanted``'s result from the task's stream: when ``wanted`` is not on its way
        (the first item, or items run out of order), a new stream of it and the selected
        items after it (without reusable ones); then results are taken from the stream,
        as their sequences end, until ``wanted``'s is there. Results that end earlier wait
        in the cache for their items. An error from the backend ends the stream (the next
        item starts a new one)."""
        log: list[str] = []
        name = runner.spec.name
        if state.stream is None or wanted.id not in state.streaming:
            to_compute = self._not_reused(runner, state, self._pending(wanted, selection), log)
            if wanted.id in self.cache:
                return self.cache.pop(wanted.id), log
            state.stream = runner.stream(to_compute, backend)
            state.streaming = {item.id for item in to_compute}
            how = (
                f"generating {len(to_compute)} item(s) with continuous batching"
                if runner.spec.mode == "generate"
                else f"scoring {len(to_compute)} item(s), all handed over at once"
            )
            log.append(f"{name}: {how} ({_batch_size_text(backend)})")
        started = time.perf_counter()
        computed = 0
        while wanted.id not in self.cache:
            try:
                result = next(state.stream)
            except StopIteration:
                state.stream, state.streaming = None, set()
                raise LlmEvalError(f"{name}: the stream ended without item {wanted.id}") from None
            except BaseException:
                state.stream, state.streaming = None, set()
                raise
            state.streaming.discard(result.item_id)
            self._keep(state, result)
            self._advance(name, 1)
            computed += 1
        log.append(
            f"{name}: computed {computed} item(s) in {time.perf_counter() - started:.1f}s "
            f"({len(state.streaming)} on their way)"
        )
        return self.cache.pop(wanted.id), log

    def _begin_progress(self, task: str, selection: Callable[[], list[Item]]) -> None:
        """A task's first computation: its progress starts, out of its selected items."""
        if self.progress is not None and task not in self.progress.tasks:
            self.progress.begin(task, len(selection()))

    def _chunk(self, task: str, n_items: int) -> contextlib.AbstractContextManager[None]:
        """The backend's reports of the call inside, as shares of ``n_items`` items."""
        if self.progress is None:
            return contextlib.nullcontext()
        return self.progress.chunk(task, n_items)

    def _advance(self, task: str, n: int, *, reused: bool = False) -> None:
        if self.progress is not None:
            self.progress.add(task, n, reused=reused)

    def _check_determinism(
        self, runner: TaskRunner, state: TaskState, items: list[Item], results: list[ItemResult]
    ) -> None:
        """Rerun the batch that holds a task's first items, as it was (the same items in
        the same call, so the same batch composition), and compare those items: outputs
        exactly, log-likelihoods within the dtype's tolerance (``logprob_tolerance``)."""
        budget = self.options.check_determinism - state.determinism_checked
        if budget <= 0:
            return
        sample = [(i, r) for i, r in enumerate(results) if r.error is None][:budget]
        if not sample:
            return
        state.determinism_checked += len(sample)
        again = runner.run(items, self.backend())
        dtype = self.model_settings.get("dtype")
        for index, first in sample:
            second = again[index]
            problems = []
            if second.error is not None:
                problems.append(f"the rerun failed: {second.error}")
            elif first.output != second.output:
                problems.append(f"output {first.output!r} != {second.output!r}")
            for i, (a, b) in enumerate(zip(first.logprobs, second.logprobs, strict=False)):
                if abs(a - b) > logprob_tolerance(dtype, a):
                    problems.append(
                        f"log-likelihood of choice {i}: {a!r} != {b!r} (tolerance "
                        f"{logprob_tolerance(dtype, a):.2g} in {dtype})"
                    )
            first.determinism = "; ".join(problems) if problems else "ok"


def _xdist_worker() -> int | None:
    """This process's xdist worker number (gw3 -> 3), None outside xdist: with several GPUs
    and ``--llm-device auto`` each worker takes its own device."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else None
