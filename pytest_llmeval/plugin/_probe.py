"""The ``llm_probe`` fixture: contamination probes as tests, with a verdict per task.

The probe itself and the verdict it gives are ``contamination.run_probe``'s; here it meets
pytest: the probe settings of a test's marker, the task's items after ``run.exclude``, the
reference model loaded once, every model call kept chunk by chunk in the run directory for
resume, the report sent to the controller, and the verdict as a skip, a pass or a failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmeval import _json as strict_json
from pytest_llmeval._errors import LlmEvalError

if TYPE_CHECKING:
    from pytest_llmeval.contamination import ProbeOutcome
    from pytest_llmeval.eval import TaskRunner
    from pytest_llmeval.settings import Settings

    from ._session import LlmEvalSession

#: The probe settings a test's ``@pytest.mark.llm_probe(...)`` may set.
MARKER_SETTINGS = ("items", "alpha", "fpr")


def probe_settings(settings: Settings, marker: Mapping[str, Any]) -> tuple[int, float, float]:
    """A probe test's items, level and target false-positive rate: the project's settings,
    over them the test's ``llm_probe`` marker, and over both ``--llm-set`` (a one-off for
    every probe of the run, as pytest-benchmark's options over its marker)."""
    from pytest_llmeval.settings import BY_NAME, SettingError

    unknown = sorted(set(marker) - set(MARKER_SETTINGS))
    if unknown:
        raise pytest.UsageError(
            f"@pytest.mark.llm_probe: unknown argument(s) {', '.join(unknown)} (it takes "
            f"{', '.join(MARKER_SETTINGS)}; the reference model is the setting "
            "probe.reference_model)"
        )
    values = []
    for key in MARKER_SETTINGS:
        name = f"probe.{key}"
        value = settings[name]
        if key in marker and settings.source(name) != "--llm-set":
            try:
                value = BY_NAME[name].parse(marker[key], "@pytest.mark.llm_probe")
            except SettingError as exc:
                raise pytest.UsageError(str(exc)) from None
        values.append(value)
    return int(values[0]), float(values[1]), float(values[2])


class ProbeRunner:
    """Runs a probe on a collected task's first ``probe.items`` items (after
    ``run.exclude``) with the session's model (and the reference model when given),
    records the report in the run directory and checks its verdict."""

    def __init__(
        self, session: LlmEvalSession, backend: Any, marker: Mapping[str, Any] | None = None
    ) -> None:
        self.session = session
        self.backend = backend
        self.items, self.alpha, self.fpr = probe_settings(session.options.settings, marker or {})
        self._reference: Any = None
        self._reference_error: str | None = None  # why it could not be loaded (not retried)
        self._reference_record: dict[str, Any] | None = None
        self._correct: dict[str, dict[str, bool]] = {}  # task -> item id -> right as published
        # The running probe's models, their calls kept chunk by chunk (_chunked).
        self._running: tuple[TaskRunner, str] | None = None
        self._wrapped: dict[str, Any] = {}
        self._resumed: dict[str, list[str]] = {}

    # ------------------------------------------------------------------ reference model

    def reference(self) -> Any | None:
        """The reference backend (loaded once), or None without ``--llm-set "
        "probe.reference_model``."""
        name = self.session.options.reference_model
        if name is None:
            return None
        if self._reference_error is not None:
            pytest.fail(self._reference_error, pytrace=False)
        if self._reference is None:
            from dataclasses import replace

            from pytest_llmeval.compute import load_failure
            from pytest_llmeval.model import load_backend

            settings = replace(self.session.options.model_settings(), model=name)
            try:
                self._reference = load_backend(settings)
            except Exception as exc:  # as for the model: one line, not a chained traceback
                self._reference_error = load_failure(exc, "--llm-set probe.reference_model", name)
            if self._reference_error is not None:
                pytest.fail(self._reference_error, pytrace=False)
            self._reference_record = self._describe_reference(name)
        return self._reference

    def _describe_reference(self, name: str) -> dict[str, Any]:
        from pathlib import Path

        from pytest_llmeval.record import HashCache, model_fingerprint

        info = dict(self._reference.info())
        path = info.get("model_path")
        record: dict[str, Any] = {"model": name, "model_path": path}
        if path and Path(str(path)).is_dir():
            cache = HashCache()
            record["sha256"] = model_fingerprint(Path(str(path)), cache)["sha256"]
            cache.save()
        else:
            record["sha256"] = None
            record["sha256_reason"] = "not a local model directory (served model)"
        return record

    def _reference_name(self) -> str:
        rec = self._reference_record or {}
        digest = rec.get("sha256")
        short = f" (sha256 {digest[:12]})" if digest else ""
        return f"reference model {rec.get('model')}{short}"

    # ------------------------------------------------------------------ running

    def run(
        self, task: str, probe: str, *, n: int | None = None, k: int | None = None
    ) -> ProbeOutcome:
        from pytest_llmeval.contamination import PROBES, ProbeContext, run_probe
        from pytest_llmeval.dataset import first_n, load_items

        if probe not in PROBES:
            raise ValueError(f"unknown probe {probe!r}; known: {', '.join(PROBES)}")
        runner = self.session.runners.get(task)
        if runner is None and task in self.session.broken_specs:
            # Its spec was found but cannot be collected: the probe fails with the reason
            # (a skip would read as a probe this run did not ask for).
            pytest.fail(
                f"{task} {probe}: its spec cannot be collected: {self.session.broken_specs[task]}",
                pytrace=False,
            )
        if runner is None:
            pytest.skip(f"task {task!r} is not collected (run the probes with its spec)")
        rewrite_problem = getattr(runner, "rewrite_problem", None)
        problem = rewrite_problem() if rewrite_problem is not None else None
        if problem is not None:
            pytest.skip(f"{task} {probe}: no verdict: {problem}")
        opts = self.session.options
        try:
            # An lm-eval task's documents are the harness's (its contamination: block in
            # the lmeval spec names their fields).
            lmeval_items = getattr(runner, "items", None)
            items = (
                lmeval_items
                if lmeval_items is not None
                else load_items(runner.spec, opts.data_dirs)
            )
        except LlmEvalError as exc:
            pytest.skip(str(exc))
        loaded = len(items)
        items = [i for i in items if i.id not in self.session.excluded]
        chosen = first_n(items, n or self.items)
        if not chosen:  # never a verdict on nothing
            if lmeval_items is not None and not loaded:
                why = "its lm-eval task gave no documents"
            else:  # an empty data file, or every item excluded: said as for its tests
                from ._collect import no_items_reason

                why = no_items_reason(self.session, runner.spec, loaded)
            pytest.skip(f"{task} {probe}: no item to probe: {why}")
        self._running, self._wrapped, self._resumed = (runner, probe), {}, {}
        dtype = self.backend.info().get("dtype")
        context = ProbeContext(
            runner,
            chosen,
            model=self._model,
            reference=self._ref,
            reference_name=self._reference_name,
            seed=opts.seed,
            alpha=self.alpha,
            fpr=self.fpr,
            dtype=dtype and str(dtype),
            correct=self._correct.setdefault(runner.spec.name, {}),
            k=k,
        )
        outcome = run_probe(probe, context)
        outcome.extra["requests"] = self._chunk_counts()
        self.session.add_probe(self._payload(outcome, self.alpha))
        return outcome

    # ------------------------------------------------------------------ resume

    def _model(self) -> Any:
        """The session's model for the running probe, its calls kept chunk by chunk."""
        return self._chunked("model", self.backend)

    def _ref(self) -> Any | None:
        """The reference model for the running probe (None without one), likewise."""
        ref = self.reference()
        return None if ref is None else self._chunked("reference", ref)

    def _chunked(self, role: str, backend: Any) -> Any:
        """``backend`` with the running probe's calls cut into fixed chunks
        (``contamination._resume``), each appended to
        ``contamination/requests/<task>-<probe>[-reference].jsonl`` in the run directory
        as it is computed and, unless ``run.resume=false``, taken from an interrupted run's
        file of the same key (``record.model_call_key``: the model, its settings and the
        backend code) instead of computed again."""
        if role not in self._wrapped:
            from pytest_llmeval.contamination import ChunkedBackend, NoStore

            wrapped = ChunkedBackend(backend, NoStore())
            wrapped.store = self._store(role, backend, wrapped.chunk)
            self._wrapped[role] = wrapped
        return self._wrapped[role]

    def _store(self, role: str, backend: Any, chunk: int) -> Any:
        from pytest_llmeval.contamination import NoStore
        from pytest_llmeval.record import RequestChunks, model_call_key, resumable_chunks

        assert self._running is not None
        runner, probe = self._running
        session, opts = self.session, self.session.options
        if role == "reference":
            sha256 = (self._reference_record or {}).get("sha256")
            revision = None
        else:
            sha256 = session.evaluator.model_settings.get("model_sha256")
            revision = opts.model_revision
        if session.is_worker or (sha256 is None and revision is None):
            # An xdist worker writes no run directory; a served model without a stated
            # revision has nothing that tells a redeployed one apart. Chunked all the
            # same: the same numbers.
            return NoStore()
        key = model_call_key(backend.info(), sha256, revision, {"role": role, "chunk": chunk})
        name = f"{runner.spec.name}-{probe}" + ("-reference" if role == "reference" else "")
        found, sources = resumable_chunks(opts.output, name, key) if opts.resume else ({}, [])
        run = session.run_dir()
        self._resumed[role] = [str(s.resolve()) for s in sources]
        # Marked superseded when this session ends (it holds their chunks now).
        session.resumed_from.update(str(s) for s in sources)
        return RequestChunks(run.path, name, key, found)

    def _chunk_counts(self) -> dict[str, Any]:
        """What the running probe computed and reused, per model (the report's
        ``requests``; reuse also goes to eval.log)."""
        assert self._running is not None
        runner, probe = self._running
        counts: dict[str, Any] = {}
        for role, wrapped in self._wrapped.items():
            counts[role] = {**wrapped.counts.to_dict(), "reused_from": self._resumed.get(role, [])}
            if wrapped.counts.reused and not self.session.is_worker:
                self.session.run_dir().log(
                    f"contamination {runner.spec.name} {probe} ({role}): "
                    f"{wrapped.counts.reused} requests reused from "
                    f"{', '.join(self._resumed.get(role, []))}, "
                    f"{wrapped.counts.computed} computed"
                )
        return counts

    def _payload(self, outcome: ProbeOutcome, alpha: float) -> dict[str, Any]:
        """The outcome as plain data (it may travel from an xdist worker): the report to
        write, the flagged items' exclusion list when the verdict fired, and the summary."""
        import json
        import uuid

        extra = {"reference": self._reference_record} if self._reference_record else {}
        report = json.loads(strict_json.dumps({**outcome.to_dict(alpha), **extra}))
        flagged = None
        fired = outcome.verdict is not None and outcome.verdict.fired
        if fired and outcome.handling is not None and outcome.handling.flagged:
            flagged = outcome.handling.exclusion_list(
                (
                    f"{outcome.task}: items flagged by {outcome.probe} "
                    f"({outcome.report.score}, {outcome.report.null})",
                    f"target false-positive rate {outcome.report.fpr}; use with --llm-set "
                    "run.exclude",
                )
            )
        return {
            "id": uuid.uuid4().hex,
            "report": report,
            "flagged": flagged,
            "summary": outcome.summary(),
        }

    # ------------------------------------------------------------------ verdict

    def check(self, outcome: ProbeOutcome) -> None:
        """Fail the calling test with the verdict when it fires (with the scores on all,
        clean and flagged items and the policy for membership flags)."""
        if outcome.verdict is None:
            pytest.skip(outcome.no_verdict or f"{outcome.task} {outcome.probe}: no verdict")
        if not outcome.verdict.fired:
            return
        lines = [outcome.verdict.message()]
        if outcome.handling is not None:
            lines.append("scores: " + "; ".join(s.describe() for s in outcome.handling.scores))
            lines.append(f"handling: {outcome.handling.policy}")
            if outcome.handling.flagged:
                lines.append(
                    f"flagged items: contamination/{outcome.task}-flagged.txt in the run "
                    "directory (--llm-set run.exclude format)"
                )
        pytest.fail("\n".join(lines), pytrace=False)
