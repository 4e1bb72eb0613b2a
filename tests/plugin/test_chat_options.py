"""Chat-template options through pytest: validated before any model loads, the rendered
prompt shown for one item, the template recorded, and resume never mixing the two modes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")


def _args(model: Path | str, *extra: str) -> list[str]:
    return [f"--llm-model={model}", "--llm-data-dir=.", "-p", "no:cacheprovider", *extra]


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            "--llm-set=prompt.chat_template=maybe",
            "prompt.chat_template (from --llm-set): expected one of auto|on|off, got 'maybe'",
        ),
        (
            "--llm-set=prompt.chat_template_file=missing.jinja",
            "prompt.chat_template_file (from --llm-set): no such file: missing.jinja",
        ),
        (
            "--llm-set=prompt.fewshot_multiturn=sometimes",
            "prompt.fewshot_multiturn (from --llm-set): expected true or false (also yes/no, "
            "on/off, 1/0), got 'sometimes'",
        ),
        (
            "--llm-set=model.add_bos=sometimes",
            "model.add_bos (from --llm-set): expected one of auto|yes|no, got 'sometimes'",
        ),
        (
            "--llm-set=prompt.thinking_markers=<think>",
            "prompt.thinking_markers (from --llm-set): expected START,END*",
        ),
    ],
)
def test_bad_options_fail_before_the_model_loads(
    pytester: pytest.Pytester, write_project, option: str, message: str
) -> None:
    write_project(pytester)
    # A model path that does not exist: the option is checked first.
    result = pytester.runpytest(*_args("no-such-model", option))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


def test_template_file_is_for_the_in_process_backend(pytester: pytest.Pytester) -> None:
    (pytester.path / "t.jinja").write_text("{{ messages }}")
    result = pytester.runpytest(
        "--llm-model=toy",
        "--llm-backend=openai",
        "--llm-set=openai.base_url=http://127.0.0.1:9/v1",
        "--llm-set=prompt.chat_template_file=t.jinja",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*server*applies its own template*"])


def _runs(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if p.is_dir())


def test_chat_run_shows_records_and_never_resumes_across_modes(
    pytester: pytest.Pytester, chat_model_dirs: dict[str, Path], write_project
) -> None:
    write_project(pytester)
    model = chat_model_dirs["llama3"]
    one = pytester.runpytest(
        *_args(model, "--llm-output=out", "-k", "arith-0000", "-p", "no:randomly")
    )
    assert one.ret == 0, one.stdout.str()
    out = one.stdout.str()
    # The exact rendered prompt, special tokens visible; BOS written by the template once.
    assert "a chat template rendered 3 message(s)" in out
    assert "<|begin_of_text|><|start_header_id|>user<|end_header_id|>" in out
    assert "the BOS token is added" not in out
    assert "prompts: chat template (tokenizer, sha256 " in out
    assert "turns end with <|eot_id|>" in out and "few-shot as turns" in out
    (run,) = _runs(pytester.path / "out")
    config = json.loads((run / "eval_config.json").read_text())
    task = config["tasks"]["arith"]
    assert task["chat_template"]["source"] == "tokenizer"
    assert len(task["chat_template"]["sha256"]) == 64
    assert task["chat_mode"] == {"requested": "auto", "by": "run", "applied": True}
    assert task["fewshot_multiturn"] is True
    assert task["bos"]["add"] is True and task["bos"]["token"] == "<|begin_of_text|>"
    item = json.loads((run / "tasks" / "arith_output.jsonl").read_text().splitlines()[0])
    assert [m["role"] for m in item["messages"]] == ["user", "assistant", "user"]
    assert item["bos_added"] is False
    assert item["prompt"].startswith("<|begin_of_text|>")

    # The same item without the template: a different config hash, nothing reused, and the
    # raw prompt gets the BOS token from the tokenizer's policy.
    (run / "metrics_summary.json").unlink()  # as if interrupted: offered for resume
    off = pytester.runpytest(
        *_args(model, "--llm-output=out", "-k", "arith-0000", "--llm-set=prompt.chat_template=off")
    )
    assert off.ret == 0
    second = next(r for r in _runs(pytester.path / "out") if r != run)
    assert "reused" not in (second / "eval.log").read_text()
    raw = json.loads((second / "eval_config.json").read_text())["tasks"]["arith"]
    assert raw["chat_template"] is None
    assert raw["config_hash"] != task["config_hash"]
    assert raw["prompt_hash"] != task["prompt_hash"]
    item = json.loads((second / "tasks" / "arith_output.jsonl").read_text().splitlines()[0])
    assert item["messages"] is None and item["bos_added"] is True
    assert "the BOS token is added before this text" in off.stdout.str()
