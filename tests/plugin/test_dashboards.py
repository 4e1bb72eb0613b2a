"""What CI dashboards read from a run: JUnit XML and pytest-html's page.

A wrong answer is a failure there (neither passed nor skipped), each task's gate is its
own test case, and neither a wrong answer nor ``-x`` changes what decides the exit status:
the gates."""

from __future__ import annotations

import html
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

WRONG_5 = "wrong: extracted nothing, target '5' (the task's floor decides the run)"


def _args(model: Path, *extra: str) -> list[str]:
    return [
        f"--llm-model={model}",
        "--llm-data-dir=.",
        "-p",
        "no:cacheprovider",
        "--llm-output=out",
        *extra,
    ]


def _cases(path: Path) -> dict[str, ET.Element]:
    """JUnit test cases by ``classname::name``."""
    return {
        f"{c.attrib['classname']}::{c.attrib['name']}": c for c in ET.parse(path).iter("testcase")
    }


def _outcome(case: ET.Element) -> str:
    tags = [c.tag for c in case if c.tag not in ("properties", "system-out", "system-err")]
    return tags[0] if tags else "passed"


def _props(case: ET.Element) -> dict[str, str]:
    return {p.attrib["name"]: p.attrib["value"] for p in case.iter("property")}


def _message(case: ET.Element, tag: str) -> str:
    (element,) = case.findall(tag)
    return element.attrib["message"]


def _html_data(path: Path) -> dict[str, Any]:
    """pytest-html 4's test data: the JSON in the page's ``data-jsonblob`` attribute."""
    match = re.search(r'data-jsonblob="([^"]*)"', path.read_text())
    assert match is not None
    return json.loads(html.unescape(match.group(1)))


def _html_results(path: Path) -> dict[str, list[str]]:
    return {
        nodeid: [row["result"] for row in rows]
        for nodeid, rows in _html_data(path)["tests"].items()
    }


def test_wrong_items_fail_in_junit_and_html_and_the_failed_gate_is_its_own_case(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("pytest_html")
    write_project(pytester, mc_floor=0.99)
    result = pytester.runpytest(
        *_args(tiny_model_dir, "--junitxml=x.xml", "--html=r.html", "--self-contained-html")
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the colors gate, nothing else
    result.stdout.fnmatch_lines(["*3 passed, 6 wrong, 1 gate passed, 1 gate failed*"])

    cases = _cases(pytester.path / "x.xml")
    suite = ET.parse(pytester.path / "x.xml").getroot()[0].attrib
    assert (suite["tests"], suite["failures"], suite["skipped"]) == ("11", "7", "0")
    # The tiny model answers every arithmetic item wrongly and one colors item.
    for i in range(5):
        assert _outcome(cases[f"arith.yaml::arith-000{i}"]) == "failure"
    (failure,) = cases["arith.yaml::arith-0000"].findall("failure")
    assert failure.attrib["message"] == WRONG_5
    assert [_outcome(cases[f"colors.yaml::colors-000{i}"]) for i in range(4)] == [
        "passed",
        "failure",
        "passed",
        "passed",
    ]
    gate = cases["colors.yaml.colors::gate"]
    assert _outcome(gate) == "failure"
    assert _message(gate, "failure").startswith(
        "gate failed: acc 0.7500 [95% CI 0.3006, 0.9544] is below the floor 0.9900"
    )
    assert _props(gate) == {
        "task": "colors",
        "metric": "acc",
        "n": "4",
        "score": "0.7500",
        "ci_low": "0.3006",
        "ci_high": "0.9544",
        "floor": "0.9900",
        "status": "fail",
        "policy": "point",
    }
    assert _outcome(cases["arith.yaml.arith::gate"]) == "passed"
    assert _props(cases["arith.yaml.arith::gate"])["status"] == "pass"

    page = pytester.path / "r.html"
    results = _html_results(page)
    assert results["arith.yaml::arith-0000"] == ["Failed"]
    assert results["colors.yaml::colors-0000"] == ["Passed"]
    assert results["colors.yaml::colors::gate"] == ["Failed"]
    assert results["arith.yaml::arith::gate"] == ["Passed"]
    flat = [r for rows in results.values() for r in rows]
    assert (flat.count("Failed"), flat.count("Passed"), flat.count("Skipped")) == (7, 4, 0)
    text = page.read_text()
    assert "11 tests took" in text
    logs = json.dumps(_html_data(page))
    assert WRONG_5 in html.unescape(logs)
    assert "Loading weights" not in logs  # no model-loading progress bar as captured stderr
    # The llmeval summary table: padded cells, the interval as one readable cell.
    assert 'style="padding:3px 10px' in text
    assert "[30.1%, 95.4%]</td>" in text


def test_a_floor_that_holds_exits_0_with_wrong_items_still_failures(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    write_project(pytester)
    pytester.makeconftest(CALL_TIMES)
    result = pytester.runpytest(*_args(tiny_model_dir, "--junitxml=x.xml", "-q"))
    assert result.ret == pytest.ExitCode.OK
    cases = _cases(pytester.path / "x.xml")
    assert _outcome(cases["arith.yaml::arith-0000"]) == "failure"
    assert _outcome(cases["arith.yaml.arith::gate"]) == "passed"
    assert _outcome(cases["colors.yaml.colors::gate"]) == "passed"
    # A call's time, as the reporters see it, is the item's own share of its batch, as
    # recorded (not the batch's, nor the model's loading, on the first item).
    seen = json.loads((pytester.path / "call-times.json").read_text())
    (run,) = (pytester.path / "out").iterdir()
    recorded = {}
    for task in ("arith", "colors"):
        for line in (run / "tasks" / f"{task}_output.jsonl").read_text().splitlines():
            record = json.loads(line)
            recorded[f"{task}.yaml::{record['item_id']}"] = record["seconds"]
    assert seen == recorded


# A conftest: each call report's duration after every other hook has seen it.
CALL_TIMES = """
import json, pytest
seen = {}
@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    if report.when == "call" and "::gate" not in report.nodeid:
        seen[report.nodeid] = report.duration
def pytest_sessionfinish(session):
    with open("call-times.json", "w") as fh:
        json.dump(seen, fh)
"""


@pytest.mark.parametrize("dist", [[], ["-n", "1"]], ids=["no-xdist", "xdist"])
def test_x_does_not_stop_on_a_wrong_answer(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project, dist: list[str]
) -> None:  # type: ignore[no-untyped-def]
    if dist:
        pytest.importorskip("xdist")
    write_project(pytester)
    result = pytester.runpytest(*_args(tiny_model_dir, "-x", "--junitxml=x.xml", *dist))
    assert result.ret == pytest.ExitCode.OK
    assert "stopping after" not in result.stdout.str()
    outcomes = result.parseoutcomes()
    assert (outcomes.get("passed"), outcomes.get("wrong")) == (3, 6)
    assert len(_cases(pytester.path / "x.xml")) == 11  # 9 items and 2 gates


def test_an_undecided_gate_is_skipped_or_failed_by_the_policy_and_no_floor_is_skipped(
    pytester: pytest.Pytester, tiny_model_dir: Path, write_project
) -> None:  # type: ignore[no-untyped-def]
    """colors scores 3/4 (95% CI 30.1% to 95.4%): a floor of 0.5 lies inside."""
    write_project(pytester, mc_floor=0.5)
    spec = pytester.path / "arith.yaml"
    spec.write_text(spec.read_text().replace("floor: 0.0", "floor: null"))
    lenient = pytester.runpytest(
        *_args(tiny_model_dir, "--junitxml=x.xml", "--llm-set=gate.policy=lenient", "-k", "colors")
    )
    assert lenient.ret == pytest.ExitCode.OK
    gate = _cases(pytester.path / "x.xml")["colors.yaml.colors::gate"]
    assert _outcome(gate) == "skipped"
    assert _message(gate, "skipped").startswith(
        "undecided: the floor 0.5000 lies inside acc 0.7500 [95% CI 0.3006, 0.9544]"
    )
    assert _props(gate)["status"] == "undecided" and _props(gate)["policy"] == "lenient"

    strict = pytester.runpytest(
        *_args(tiny_model_dir, "--junitxml=y.xml", "--llm-set=gate.policy=strict", "-rA")
    )
    assert strict.ret == pytest.ExitCode.TESTS_FAILED
    cases = _cases(pytester.path / "y.xml")
    assert _outcome(cases["colors.yaml.colors::gate"]) == "failure"
    assert "--llm-set gate.policy=strict" in _message(cases["colors.yaml.colors::gate"], "failure")
    no_floor = cases["arith.yaml.arith::gate"]
    assert _outcome(no_floor) == "skipped"
    assert _message(no_floor, "skipped").startswith("no floor")
    strict.stdout.fnmatch_lines(["*3 passed, 6 wrong, 1 gate skipped, 1 gate failed*"])
