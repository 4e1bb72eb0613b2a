"""``--llm-backend=openai`` through the plugin, against the scripted loopback server: option
validation, the run record of a served model, and ``report.agreement``. No torch needed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from openai_fake import FakeServer

from pytest_llmeval.eval import agreement
from pytest_llmeval.model._openai import PROBE_TEXT


def _openai(server: FakeServer, *extra: str) -> list[str]:
    return [
        "--llm-backend=openai",
        f"--llm-set=openai.base_url={server.url}",
        "--llm-model=toy",
        "--llm-data-dir=.",
        "-p",
        "no:cacheprovider",
        *extra,
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--llm-backend=openai"], "*--llm-backend=openai needs the server's URL*"),
        (
            ["--llm-backend=openai", "--llm-set=openai.base_url=localhost:8000/v1"],
            "*openai.base_url (from --llm-set): expected http(s)://HOST:PORT/v1*",
        ),
        (
            ["--llm-set=openai.base_url=http://x/v1"],
            "*--llm-set openai.base_url is for --llm-backend=openai*",
        ),
        (
            ["--llm-backend=tgi"],
            "*--llm-backend (ini llm_backend): expected one of hf|vllm|openai*",
        ),
        (
            ["--llm-set=openai.concurrency=0"],
            "*openai.concurrency (from --llm-set): must be >= 1*",
        ),
        (
            ["--llm-set=openai.max_retries=-1"],
            "*openai.max_retries (from --llm-set): must be >= 0*",
        ),
        (
            ["--llm-set=openai.request_timeout=0"],
            "*openai.request_timeout (from --llm-set): expected a number > 0, got '0'*",
        ),
        (
            ["--llm-set=report.agreement=nope.json"],
            "*report.agreement: cannot read*",
        ),
    ],
)
def test_options_are_validated(pytester: pytest.Pytester, args: list[str], message: str) -> None:
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_help_lists_the_server_options(pytester: pytest.Pytester) -> None:
    out = pytester.runpytest("--help").stdout.str()
    # The server's settings are a table of their own, set in pyproject.toml or with --llm-set.
    for text in ("--llm-backend", "--llm-set", "[tool.llmeval.openai]"):
        assert text in out


def test_a_run_on_a_served_model_records_the_server(
    pytester: pytest.Pytester, fake_openai: FakeServer, write_project
) -> None:
    write_project(pytester)
    result = pytester.runpytest(
        *_openai(fake_openai, "--llm-output=out", "--llm-set=openai.concurrency=2")
    )
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["arith*5/5*exact_match*", "colors*4/4*acc*"])
    run = next((pytester.path / "out").iterdir())
    config = json.loads((run / "eval_config.json").read_text())
    assert config["framework"]["backend"] == "openai"
    assert config["framework"]["base_url"] == fake_openai.url
    assert config["framework"]["server_model"]["id"] == "toy"
    assert config["batch_size"] == 2  # the concurrency
    assert config["model_sha256"] is None and config["weights_sha256"] is None
    assert "cannot be hashed" in config["model_sha256_reason"]
    env = config["environment"]
    assert env["model"]["sha256"] is None and "cannot be hashed" in env["model"]["reason"]
    assert env["backend"]["backend"] == "openai"
    assert "agreement" not in config
    # Facts, not constants: nothing is seeded in this process (the seed goes with each
    # request), and the server's kernels are not known here.
    assert config["seeds"] == {"request_seed": 1234}
    assert config["torch_deterministic_algorithms"] is None
    colors = [json.loads(line) for line in (run / "tasks" / "colors_output.jsonl").open()]
    assert all(len(r["logprobs"]) == 3 for r in colors)
    # 4 items x 3 choices scored on the server (+ the start-up probe), 5 generations
    bodies = fake_openai.completion_bodies()
    assert sum(1 for b in bodies if b.get("echo") and b["prompt"] != PROBE_TEXT) == 12
    assert sum(1 for b in bodies if not b.get("echo")) == 5


@pytest.mark.parametrize("where", ["pyproject", "ini"])
def test_backend_settings_work_from_the_project(
    pytester: pytest.Pytester, fake_openai: FakeServer, write_project, where: str
) -> None:
    write_project(pytester)
    if where == "pyproject":
        pytester.makepyprojecttoml(
            f'[tool.pytest.ini_options]\nllm_backend = "openai"\n\n'
            f'[tool.llmeval.openai]\nbase_url = "{fake_openai.url}"\n'
            "concurrency = 3\nmax_retries = 0\n"
        )
    else:
        pytester.makeini(
            f"[pytest]\nllm_backend = openai\nllm_set =\n    openai.base_url={fake_openai.url}\n"
            "    openai.concurrency=3\n    openai.max_retries=0\n"
        )
    result = pytester.runpytest(
        "--llm-model=toy", "--llm-data-dir=.", "--llm-output=out", "-p", "no:cacheprovider"
    )
    assert result.ret == 0, result.stdout.str()
    run = next((pytester.path / "out").iterdir())
    framework = json.loads((run / "eval_config.json").read_text())["framework"]
    assert (framework["concurrency"], framework["max_retries"]) == (3, 0)


def test_agreement_cli_and_its_record_in_a_run(
    pytester: pytest.Pytester, fake_openai: FakeServer, write_project
) -> None:
    write_project(pytester)
    out = pytester.path / "agreement.json"
    side = f"openai:{fake_openai.url}@toy"
    status = agreement.main(
        [
            "--task",
            str(pytester.path / "colors.yaml"),
            "--task",
            str(pytester.path / "arith.yaml"),
            "--limit",
            "3",
            "--a",
            side,
            "--b",
            side,
            "--data-dir",
            str(pytester.path),
            "--out",
            str(out),
        ]
    )
    assert status == 0
    record = json.loads(out.read_text())
    assert record["format"] == agreement.FORMAT
    colors, arith = record["summary"]["colors"], record["summary"]["arith"]
    assert colors["items"] == arith["items"] == 3
    assert colors["same_prediction"] == colors["same_correctness"] == 1.0
    assert colors["mean_abs_dlogprob"] == colors["max_abs_dlogprob"] == 0.0
    assert arith["identical_output"] == 1.0 and arith["mcnemar_p"] == 1.0
    assert arith["difference"] == 0.0
    items = record["tasks"]["colors"]["items"]
    assert [i["item_id"] for i in items] == ["colors-0000", "colors-0001", "colors-0002"]
    assert len(items[0]["a"]["logprobs"]) == 3 and items[0]["gold"] == 0
    assert record["a"]["info"]["backend"] == "openai"

    result = pytester.runpytest(
        *_openai(
            fake_openai, "--llm-output=runs", f"--llm-set=report.agreement={out}", "-k", "colors"
        )
    )
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        [f"agreement {side} (A) vs {side} (B): arith 3 items: same prediction 100.0%*sha256 *"]
    )
    run = next((pytester.path / "runs").iterdir())
    config = json.loads((run / "eval_config.json").read_text())
    assert config["agreement"]["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert config["agreement"]["summary"] == record["summary"]
    assert config["agreement"]["file"] == str(out)


def test_an_agreement_file_must_be_one(pytester: pytest.Pytester, tmp_path: Path) -> None:
    bad = tmp_path / "other.json"
    bad.write_text('{"hello": 1}')
    result = pytester.runpytest(f"--llm-set=report.agreement={bad}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*not an agreement record*"])
