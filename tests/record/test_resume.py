"""When an item of an interrupted run may be reused (``record/_resume.py``): the resume key
covers the task config, the package (version, source digest, git state), the project's git
commit, the repeat count and the determinism reruns; each record's content digests must
match the item as it is now; the data files' digests are recorded by relative path."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval import _json as strict_json
from pytest_llmeval.record import data_files, resume_key, run_identity, same_content
from pytest_llmeval.record._resume import package_identity

DIGESTS = {"doc_hash": "d" * 64, "prompt_hash": "p" * 64, "target_hash": "t" * 64}


def _identity(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "package": {
            "name": "pytest-llm-evaluation",
            "version": "0.1.0",
            "source_sha256": "a" * 64,
            "git": {"commit": "c" * 40, "dirty": False},
        },
        "project_git": {"commit": "e" * 40, "dirty": False},
        "repeat": 1,
        "check_determinism": 0,
    }
    for key, value in changes.items():
        if key in ("version", "source_sha256", "git"):
            base["package"] = {**base["package"], key: value}
        else:
            base[key] = value
    return base


@pytest.mark.parametrize(
    "change",
    [
        {"version": "0.2.0"},  # another release of the package
        {"source_sha256": "b" * 64},  # an edited extractor, not committed yet
        {"git": {"commit": "f" * 40, "dirty": False}},  # another commit of the package
        {"project_git": {"commit": "0" * 40, "dirty": False}},  # the project's own code
        {"project_git": {"commit": "e" * 40, "dirty": True}},
        {"repeat": 3},  # --llm-set run.repeat shapes each record (repeat_scores)
        {"check_determinism": 2},
    ],
)
def test_the_resume_key_changes_with_everything_that_produced_a_record(
    change: dict[str, Any],
) -> None:
    assert resume_key("cfg0", _identity(**change)) != resume_key("cfg0", _identity())


def test_the_resume_key_changes_with_the_task_config_and_is_stable() -> None:
    assert resume_key("cfg0", _identity()) == resume_key("cfg0", _identity())
    assert resume_key("cfg1", _identity()) != resume_key("cfg0", _identity())


def test_run_identity_carries_the_package_and_the_run_settings(tmp_path: Path) -> None:
    identity = run_identity(tmp_path, repeat=2, check_determinism=0)
    assert identity["repeat"] == 2 and identity["check_determinism"] == 0
    assert identity["project_git"] is None  # not a git checkout
    package = package_identity()
    assert identity["package"] == package
    assert len(package["source_sha256"]) == 64 and package["name"] == "pytest-llm-evaluation"


def test_an_item_is_reused_only_when_every_content_digest_matches() -> None:
    assert same_content(DIGESTS, DIGESTS)
    for name in DIGESTS:
        assert not same_content({**DIGESTS, name: "x" * 64}, DIGESTS)  # edited row/prompt
        assert not same_content({k: v for k, v in DIGESTS.items() if k != name}, DIGESTS)
    assert not same_content(DIGESTS, {})  # digests unknown now: never reused


def test_data_files_are_digested_by_their_path_in_the_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data" / "arith"
    data.mkdir(parents=True)
    (data / "test.jsonl").write_text('{"q": 1}\n')
    elsewhere = tmp_path / "other.jsonl"
    elsewhere.write_text("x\n")
    digests = data_files([data / "test.jsonl", elsewhere], [tmp_path / "data"])
    assert digests == {
        "arith/test.jsonl": hashlib.sha256(b'{"q": 1}\n').hexdigest(),
        str(elsewhere): hashlib.sha256(b"x\n").hexdigest(),
    }


def test_strict_json_writes_null_for_numbers_that_are_not_finite() -> None:
    value = {"score": math.nan, "ci95": (math.inf, -math.inf), "n": 3, "ok": [1.5, None]}
    text = strict_json.dumps(value, sort_keys=True)
    assert text == '{"ci95": [null, null], "n": 3, "ok": [1.5, null], "score": null}'

    def refuse(name: str) -> Any:
        raise ValueError(name)

    json.loads(text, parse_constant=refuse)  # a strict reader accepts it
