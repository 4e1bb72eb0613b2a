"""What greedy decoding applied of the model's generation config, where users look: the
terminal, summary.md and eval_config.json of a pytester run on a tiny model whose
``generation_config.json`` sets a repetition penalty."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def penalised(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("penalised") / "model"
    shutil.copytree(tiny_model_dir, target)
    path = target / "generation_config.json"
    config = json.loads(path.read_text()) if path.is_file() else {}
    path.write_text(json.dumps({**config, "repetition_penalty": 1.3, "temperature": 0.6}))
    return target


@pytest.mark.parametrize("rule", ["model", "neutral"])
def test_the_decoding_rule_reads_in_the_terminal_summary_and_record(
    pytester: pytest.Pytester,
    penalised: Path,
    write_project,  # type: ignore[no-untyped-def]
    rule: str,
) -> None:
    write_project(pytester)
    result = pytester.runpytest(
        f"--llm-model={penalised}",
        "--llm-data-dir=.",
        "--llm-output=out",
        "-p",
        "no:cacheprovider",
        f"--llm-set=model.generation_config={rule}",
    )
    assert result.ret == 0, result.stdout.str()
    expected = (
        "decoding: greedy, with the model's generation config applied (repetition_penalty 1.3): "
        "arith"
        if rule == "model"
        else "decoding: plain argmax (neutral): the model's generation config not applied "
        "(repetition_penalty 1.3): arith"
    )
    result.stdout.fnmatch_lines([expected.replace("[", "[[]")])
    (run,) = (pytester.path / "out").iterdir()
    assert f"- {expected.removeprefix('decoding: ')}" in (run / "summary.md").read_text()
    config = json.loads((run / "eval_config.json").read_text())
    record = config["tasks"]["arith"]["generation"]["generation_config"]
    assert record["rule"] == rule
    assert record["applied"] == ({"repetition_penalty": 1.3} if rule == "model" else {})
    assert "sampling only" in record["not_applied"]["temperature"]
    assert "generation" not in config["tasks"]["colors"]  # multiple choice decodes nothing
