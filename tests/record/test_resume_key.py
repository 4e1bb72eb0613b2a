"""The resume key holds every model setting that can change an item's result: the device
map, the tokenizer's files, the revision of a served model and, for a generative task,
the decode step and prompt lookup; the record says which decode step ran (``none`` when
no generation ran)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from openai_fake import FakeServer
from tiny_projects import KILL_CONFTEST
from tiny_projects import write_project as write_project_files

from pytest_llmeval.record import (
    HashCache,
    model_fingerprint,
    resume_key,
    resume_settings,
    run_state,
    tokenizer_digest,
)


@pytest.fixture
def write_project():  # type: ignore[no-untyped-def]
    """The two tiny tasks of tests/tiny_projects.py (generative ``arith``, multiple-choice
    ``colors``) with their data (tests/plugin/conftest.py's fixture does not reach here)."""
    return write_project_files


def _runs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir())


def _count(log: str, verb: str) -> int:
    return sum(int(n) for n in re.findall(rf": {verb} (\d+)", log))


def _kill_after(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, n: int, *args: str
) -> Path:
    """An interrupted run (SIGKILL after ``n`` items); its directory."""
    out = pytester.path / "out"
    before = set(_runs(out)) if out.exists() else set()
    monkeypatch.setenv("KILL_AFTER", str(n))
    killed = pytester.runpytest_subprocess(*args)
    monkeypatch.delenv("KILL_AFTER")
    assert killed.ret == -9
    (run,) = set(_runs(out)) - before
    assert run_state(run)[0] == "interrupted"
    return run


def _last_log(pytester: pytest.Pytester) -> str:
    return (_runs(pytester.path / "out")[-1] / "eval.log").read_text()


# ------------------------------------------------------------------ the key's parts


def _model_dir(root: Path) -> Path:
    model = root / "model"
    (model / "additional_chat_templates").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"weights")
    (model / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0}}}')
    (model / "tokenizer_config.json").write_text('{"model_max_length": 64}')
    (model / "additional_chat_templates" / "tools.jinja").write_text("{{ messages }}")
    return model


def test_the_tokenizer_digest_covers_its_files_and_reuses_the_model_fingerprint(
    tmp_path: Path,
) -> None:
    model = _model_dir(tmp_path)
    cache = HashCache(tmp_path / "cache.json")
    fingerprint = model_fingerprint(model, cache)
    digest = tokenizer_digest(model, fingerprint["files"], cache)
    assert digest is not None
    assert sorted(digest["files"]) == [
        "additional_chat_templates/tools.jinja",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert digest["files"]["tokenizer.json"] == fingerprint["files"]["tokenizer.json"]
    # A digest the fingerprint already took is used as it is, not taken again.
    reused = tokenizer_digest(model, {"tokenizer.json": "0" * 64}, cache)
    assert reused is not None and reused["files"]["tokenizer.json"] == "0" * 64
    # An added-tokens file changes tokenization: it moves the tokenizer's digest and the
    # model's (which covers every tokenizer file), not the weights'.
    (model / "added_tokens.json").write_text('{"<extra>": 1}')
    grown = tokenizer_digest(model, fingerprint["files"], cache)
    assert grown is not None and "added_tokens.json" in grown["files"]
    assert grown["sha256"] != digest["sha256"]
    after = model_fingerprint(model, cache)
    assert after["sha256"] != fingerprint["sha256"]
    assert after["weights_sha256"] == fingerprint["weights_sha256"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert tokenizer_digest(empty) is None


def test_each_setting_outside_the_config_hash_changes_the_key() -> None:
    identity: dict[str, Any] = {"package": "x", "repeat": 1}
    info: dict[str, Any] = {
        "device_map": None,
        "decode_plan": {"step": "fused", "prompt_lookup": 5},
    }
    tokenizer = {"sha256": "a" * 64}
    base = resume_settings(info, tokenizer, None, generative=True)
    assert base == {
        "device_map": None,
        "tokenizer_sha256": "a" * 64,
        "model_revision": None,
        "decode_step": "fused",
        "prompt_lookup": 5,
    }
    key = resume_key("cfg", identity, base)
    changed = [
        resume_settings({**info, "device_map": "auto"}, tokenizer, None, generative=True),
        resume_settings(info, {"sha256": "b" * 64}, None, generative=True),
        resume_settings(info, tokenizer, "v2", generative=True),
        resume_settings(
            {**info, "decode_plan": {"step": "transformers", "prompt_lookup": 0}},
            tokenizer,
            None,
            generative=True,
        ),
        resume_settings(
            {**info, "decode_plan": {"step": "fused", "prompt_lookup": 0}},
            tokenizer,
            None,
            generative=True,
        ),
    ]
    assert len({key, *(resume_key("cfg", identity, s) for s in changed)}) == 6
    # A multiple-choice task runs no decode step: its key does not hold one.
    scored = resume_settings(info, tokenizer, None, generative=False)
    assert "decode_step" not in scored and "prompt_lookup" not in scored
    other_step = {**info, "decode_plan": {"step": "transformers", "prompt_lookup": 0}}
    assert resume_settings(other_step, tokenizer, None, generative=False) == scored


# ------------------------------------------------------------------ through the plugin


def _args(model: Path | str, *extra: str) -> list[str]:
    return [
        f"--llm-model={model}",
        "--llm-data-dir=.",
        "-p",
        "no:cacheprovider",
        "--llm-output=out",
        *extra,
    ]


def test_a_generative_task_is_not_resumed_across_decode_steps(
    pytester: pytest.Pytester,
    tiny_model_dir: Path,
    write_project: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write_project(pytester)
    pytester.makeconftest(KILL_CONFTEST)
    args = _args(tiny_model_dir, "--llm-batch-size=2", "-k", "arith")
    interrupted = _kill_after(pytester, monkeypatch, 2, *args)
    other = pytester.runpytest_subprocess(*args, "--llm-set=hf.decode_step=transformers")
    assert other.ret == 0
    log = _last_log(pytester)
    assert _count(log, "reused") == 0 and _count(log, "computed") == 5
    assert run_state(interrupted)[0] == "interrupted"  # still offered: nothing was reused
    same = pytester.runpytest_subprocess(*args)
    assert same.ret == 0
    assert _count(_last_log(pytester), "reused") == 2


def test_the_record_says_which_decode_step_ran(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project: Any
) -> None:
    """A multiple-choice run generates nothing: no decode step ran. When a generative task
    follows one, the step that ran reaches the record although the environment was sent
    with the first (multiple-choice) item."""
    write_project(pytester)
    mc = pytester.runpytest_subprocess(*_args(tiny_model_dir, "-k", "colors"))
    assert mc.ret == 0
    env = json.loads((_runs(pytester.path / "out")[-1] / "eval_config.json").read_text())[
        "environment"
    ]
    assert env["backend"]["decode_step"] == {
        "step": "none",
        "requested": "auto",
        "reason": "no generation ran (log-likelihood requests only)",
        "prompt_lookup": 0,
    }
    assert env["backend"]["decode_plan"]["step"] == "fused"
    assert env["tokenizer_sha256"] is not None
    # colors.yaml runs before arith.yaml when given first on the command line.
    both = pytester.runpytest_subprocess(*_args(tiny_model_dir, "colors.yaml", "arith.yaml"))
    assert both.ret == 0
    config = json.loads((_runs(pytester.path / "out")[-1] / "eval_config.json").read_text())
    assert config["environment"]["backend"]["decode_step"]["step"] == "fused"
    assert config["tasks"]["arith"]["resume_settings"]["decode_step"] == "fused"
    assert "decode_step" not in config["tasks"]["colors"]["resume_settings"]


def _openai(server: FakeServer, *extra: str) -> list[str]:
    return [
        "--llm-backend=openai",
        f"--llm-set=openai.base_url={server.url}",
        "--llm-model=toy",
        "--llm-data-dir=.",
        "-p",
        "no:cacheprovider",
        "--llm-output=out",
        *extra,
    ]


def test_a_served_model_is_resumed_only_under_the_same_stated_revision(
    pytester: pytest.Pytester,
    fake_openai: FakeServer,
    write_project: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server reports nothing that changes when the model behind a name is replaced:
    without ``openai.model_revision`` the run warns that resume cannot tell a redeployed
    model apart; with it, items of another revision are not reused."""
    write_project(pytester)
    pytester.makeconftest(KILL_CONFTEST)
    unstated = pytester.runpytest_subprocess(*_openai(fake_openai, "-k", "colors"))
    assert unstated.ret == 0
    unstated.stdout.fnmatch_lines(
        [
            f"WARNING --llm-model=toy is served by {fake_openai.url} and no revision of its "
            "weights is known (the server reports none): resume across server restarts "
            "cannot tell a redeployed model apart; pass --llm-set "
            "openai.model_revision=COMMIT-OR-DIGEST, or --llm-set run.resume=false"
        ]
    )
    args = _openai(fake_openai, "-k", "colors", "--llm-set=openai.model_revision=v1")
    _kill_after(pytester, monkeypatch, 2, *args)
    redeployed = pytester.runpytest_subprocess(
        *_openai(fake_openai, "-k", "colors", "--llm-set=openai.model_revision=v2")
    )
    assert redeployed.ret == 0
    assert "no revision of its weights is known" not in redeployed.stdout.str()
    assert _count(_last_log(pytester), "reused") == 0
    config = json.loads((_runs(pytester.path / "out")[-1] / "eval_config.json").read_text())
    assert config["environment"]["model_revision"] == "v2"
    assert config["tasks"]["colors"]["resume_settings"]["model_revision"] == "v2"


def test_copying_the_model_keeps_the_tokenizer_digest(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Digests by relative path: a copy of the model directory resumes like the original."""
    copy = tmp_path / "copy"
    shutil.copytree(tiny_model_dir, copy)
    first, second = tokenizer_digest(tiny_model_dir), tokenizer_digest(copy)
    assert first is not None and first == second
