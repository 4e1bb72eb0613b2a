"""The run report in a real browser: headless Chromium (Debian's ``chromium``; ``.ci/run``
installs it) driven over the DevTools protocol by ``tools/chromium.py``.

The main test builds the report of a small real run (the default model on real C-Eval and
GSM8K items) and checks what a person would: the page loads without console errors or
network requests, the task table and its plots are there, filtering the item browser to
"wrong" shows exactly the wrong items, and an item shows its prompt and output. Without
Chromium the tests are skipped with the reason.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval.eval import ItemResult
from pytest_llmeval.record import write_report
from tools.chromium import Chromium, Page, find_chromium

pytestmark = pytest.mark.browser
RunBenchmarks = Callable[..., tuple[pytest.RunResult, Path]]

HOSTILE = '</script><script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'

LISTED = "[...document.querySelectorAll('#browser details.item')].map(d => d.dataset.id)"


@pytest.fixture(scope="module")
def chromium() -> Iterator[Chromium]:
    executable = find_chromium()
    if executable is None:
        pytest.skip(
            "no Chromium on this machine: apt-get install chromium (.ci/run installs it), "
            "or point LLMEVAL_CHROMIUM at a Chromium/Chrome binary"
        )
    with Chromium.launch(executable) as browser:
        yield browser


def _open(browser: Chromium, html: Path, fragment: str = "") -> Page:
    page = browser.new_page(1280, 900)
    page.goto(html.resolve().as_uri() + fragment)
    page.wait_for("document.documentElement.getAttribute('data-ready')")
    return page


def _click(page: Page, selector: str) -> None:
    page.evaluate(f"document.querySelector({json.dumps(selector)}).click()")


def _records(run: Path, task: str) -> list[dict[str, Any]]:
    text = (run / "tasks" / f"{task}_output.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def test_report_of_a_real_run_in_chromium(
    run_benchmarks: RunBenchmarks, chromium: Chromium
) -> None:
    result, out = run_benchmarks(
        "-m",
        "regression",
        "-k",
        "ceval or gsm8k-0000",
        "--llm-limit=4",
        "--llm-failures=2",
        # Raw prompts: on these four C-Eval items the default model is then right on some
        # and wrong on others, which the filter checks need (with its chat template it is
        # wrong on all four).
        "--llm-chat-template=off",
    )
    assert result.ret == 0, result.stdout.str()
    (run,) = out.iterdir()
    html = run / "report.html"
    assert html.is_file(), result.stdout.str()
    result.stdout.fnmatch_lines([f"run report: *{run.name}/report.html"])
    page = _open(chromium, html)

    # the task table and its plots
    tasks = page.evaluate(
        "[...document.querySelectorAll('table.tasks tbody tr')].map(r => r.cells[0].textContent)"
    )
    assert tasks == ["ceval", "gsm8k"]
    assert (
        page.evaluate("document.querySelectorAll('table.tasks svg.ci rect.interval').length") == 2
    )
    assert page.evaluate("document.querySelectorAll('#failures svg.bars').length") >= 1

    # filter the item browser to the wrong items of C-Eval
    ceval = _records(run, "ceval")
    wrong = [r["item_id"] for r in ceval if not r["correct"]]
    right = [r["item_id"] for r in ceval if r["correct"]]
    assert wrong and right, "the run should have right and wrong C-Eval items to filter"
    _click(page, '#browser button[data-task="ceval"]')
    assert page.evaluate(LISTED) == [r["item_id"] for r in ceval]
    _click(page, '#browser button[data-status="wrong"]')
    assert page.evaluate(LISTED) == wrong
    assert page.evaluate("document.querySelector('#browser .count').dataset.count") == str(
        len(wrong)
    )
    _click(page, '#browser button[data-status="correct"]')
    assert page.evaluate(LISTED) == right

    # an item shows its prompt (few-shot block folded) and its output
    (item,) = _records(run, "gsm8k")
    _click(page, '#browser button[data-task="gsm8k"]')
    _click(page, f'#browser details.item[data-id="{item["item_id"]}"] > summary')
    shown = page.evaluate(
        """(() => {
          const d = document.querySelector('#browser details.item[open]');
          return {
            prefix: d.querySelector('details.fewshot pre').textContent,
            fewshotOpen: d.querySelector('details.fewshot').open,
            prompt: d.querySelector('pre.prompt').textContent,
            output: d.querySelector('pre.output').textContent,
            text: d.querySelector('.body').textContent,
          };
        })()"""
    )
    assert shown["prefix"] + shown["prompt"] == item["prompt"]
    assert shown["fewshotOpen"] is False and len(shown["prefix"]) > len(shown["prompt"])
    assert shown["output"] == item["output"]
    assert item["target"] in shown["text"] and item["finish_reason"] in shown["text"]

    # a multiple-choice item draws its choices as bars
    _open_item = f"#item/ceval/{ceval[0]['item_id']}"
    page.evaluate(f"location.hash = {json.dumps(_open_item)}")
    page.wait_for("!!document.querySelector('#browser details.item[open] .choices .fill')")
    bars = page.evaluate(
        "document.querySelectorAll('#browser details.item[open] .choices .track').length"
    )
    assert bars == len(ceval[0]["choices"])

    assert page.problems() == []
    assert page.requests() == [html.resolve().as_uri()]  # the page itself, nothing else


def test_hostile_record_text_stays_text_in_the_browser(tmp_path: Path, chromium: Chromium) -> None:
    run = tmp_path / "run"
    (run / "tasks").mkdir(parents=True)
    record = ItemResult(
        task="arith",
        item_id="arith-0000",
        subset=None,
        correct=False,
        score=0.0,
        prompt="Q: 1+1?\nA: 2\n\n" + HOSTILE,
        target=HOSTILE,
        fewshot_ids=["f0"],
        output=HOSTILE,
        extracted=HOSTILE,
        finish_reason="stop",
    ).to_dict()
    (run / "tasks" / "arith_output.jsonl").write_text(json.dumps(record) + "\n")
    (run / "metrics_summary.json").write_text(
        json.dumps({"arith": {"n": 1, "score": 0.0, "ci95": [0, 0.79], "verdict": HOSTILE}})
    )
    html = write_report(run)
    page = _open(chromium, html, "#item/arith/arith-0000")
    assert page.evaluate("document.querySelector('#browser pre.output').textContent") == HOSTILE
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.evaluate("document.querySelectorAll('img, script').length") == 2  # its own
    assert page.dialogs() == []
    assert page.problems() == []
