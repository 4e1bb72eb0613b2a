"""The environment drift check: a syrupy snapshot of what must not change between runs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmeval._errors import LlmEvalError
from pytest_llmeval.dataset import DataNotInstalled, hub_allowed

if TYPE_CHECKING:
    from ._session import LlmEvalSession


@dataclass(frozen=True)
class DriftCheck:
    fingerprint: dict[str, Any]

    @classmethod
    def for_session(cls, llm: LlmEvalSession) -> DriftCheck:
        from pytest_llmeval.record import drift_fingerprint

        evaluator = llm.evaluator
        try:
            evaluator.backend()
            backend = (evaluator.environment or {}).get("backend") or {}
            template = backend.get("chat_template") or {}
            # How decode steps run when the model generates (decode_step says what ran).
            plan = backend.get("decode_plan") or backend.get("decode_step") or {}
            extra: dict[str, Any] = {
                "dtype": evaluator.model_settings.get("dtype"),
                "device_type": evaluator.model_settings.get("device_type"),
                "batch_size": evaluator.model_settings.get("batch_size"),
                "seed": evaluator.model_settings.get("seed"),
                # The model's chat template and BOS policy (each task's hashes cover them
                # too; these lines name the cause when they change).
                "chat_template.sha256": template.get("sha256"),
                "chat_template.end_of_turn": template.get("end_of_turn"),
                "add_bos": (backend.get("bos") or {}).get("add"),
                # How generation steps run (model/_step.py): the numbers differ by summation
                # order between the fused step and the model's own forward pass.
                "decode_step": plan.get("step"),
                "prompt_lookup": plan.get("prompt_lookup"),
            }
            engine = backend.get("engine")
            if engine:  # the vllm backend: its version and the settings that change numbers
                for key in ("vllm", "tensor_parallel", "data_parallel", "max_num_seqs", "args"):
                    extra[f"engine.{key}"] = engine.get(key)
            for name in sorted(llm.runners):
                runner = llm.runners[name]
                try:
                    if (
                        runner.spec.dataset.path is not None
                        and not runner.data_files()
                        and not hub_allowed()
                    ):
                        raise DataNotInstalled(name)  # none of its files is here
                    state = evaluator.state(runner)
                except DataNotInstalled:  # recorded as such: installing it is a change too
                    extra[f"tasks.{name}.config_hash"] = "not installed"
                    extra[f"tasks.{name}.prompt_hash"] = "not installed"
                    continue
                extra[f"tasks.{name}.config_hash"] = state.config_hash
                extra[f"tasks.{name}.prompt_hash"] = state.prompt_hash
        except LlmEvalError as exc:
            pytest.fail(str(exc), pytrace=False)
        assert evaluator.environment is not None
        return cls(drift_fingerprint(evaluator.environment, extra))

    def assert_matches(self, snapshot: Any) -> None:
        """Compare with the stored snapshot; on drift, fail naming each changed field."""
        from syrupy.extensions.json import JSONSnapshotExtension

        stored = snapshot.use_extension(JSONSnapshotExtension)
        if stored == self.fingerprint:  # with --snapshot-update this (re)writes the snapshot
            return
        from pytest_llmeval.record import describe_drift

        old = _stored_fingerprint(stored)
        lines = describe_drift(old, self.fingerprint) if old is not None else ["no snapshot yet"]
        pytest.fail(
            "the evaluation environment differs from its snapshot:\n  "
            + "\n  ".join(lines)
            + "\nScores may change with it. If the change is intended, accept it by rerunning "
            "this test with --snapshot-update and commit the updated snapshot.",
            pytrace=False,
        )


def _stored_fingerprint(snapshot: Any) -> dict[str, Any] | None:
    """The snapshot file's content (syrupy's JSON extension: one file per test)."""
    try:
        location = Path(
            snapshot.extension.get_location(test_location=snapshot.test_location, index=0)
        )
    except Exception:  # syrupy internals differ across versions; fall back to the layout
        test = snapshot.test_location
        location = (
            Path(test.filepath).parent
            / "__snapshots__"
            / Path(test.filepath).stem
            / f"{test.snapshot_name}.json"
        )
    try:
        data = json.loads(location.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None
