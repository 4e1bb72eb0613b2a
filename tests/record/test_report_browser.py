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


def _open(browser: Chromium, html: Path, fragment: str = "", width: int = 1280) -> Page:
    page = browser.new_page(width, 900)
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
        "--llm-set=report.failures=2",
        # Raw prompts: on these four C-Eval items the default model is then right on some
        # and wrong on others, which the filter checks need (with its chat template it is
        # wrong on all four).
        "--llm-set=prompt.chat_template=off",
    )
    assert result.ret == 0, result.stdout.str()
    (run,) = out.iterdir()
    html = run / "report.html"
    assert html.is_file(), result.stdout.str()
    result.stdout.fnmatch_lines([f"run report: *{run.name}/report.html"])
    page = _open(chromium, html)

    # the task table and its plots
    tasks = page.evaluate(
        "[...document.querySelectorAll('table.tasks tbody tr:not(.sub)')]"
        ".map(r => r.cells[0].textContent)"
    )
    assert tasks == ["ceval", "gsm8k"]
    assert (
        page.evaluate(
            "document.querySelectorAll('table.tasks tr:not(.sub) svg.ci rect.interval').length"
        )
        == 2
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


REPO = Path(__file__).resolve().parents[2]
WIDTHS = (800, 1400)

# At one width: what overflows the page or its box, and what the page shows.
LAYOUT = """(() => {
  const vw = document.documentElement.clientWidth;
  const out = {pageScroll: document.documentElement.scrollWidth - vw, outside: []};
  for (const sel of ['table.tasks th', 'table.tasks td', 'table.compare td',
                     '.history-grid figure', '#browser details.item']) {
    for (const e of document.querySelectorAll(sel)) {
      const r = e.getBoundingClientRect();
      if (r.left < 0 || r.right > vw + 0.5) out.outside.push(sel + ': ' + e.textContent);
    }
  }
  const wrap = document.querySelector('table.tasks').closest('.table-wrap');
  out.tasksScroll = wrap.scrollWidth - wrap.clientWidth;
  const time = document.querySelector('table.tasks th:last-child').getBoundingClientRect();
  out.timeInside = time.right <= wrap.getBoundingClientRect().right + 0.5;
  return out;
})()"""

# The contrast of the history chart's axis labels against the page (WCAG ratio) and size.
AXIS = """(() => {
  const lum = (c) => {
    const [r, g, b] = c.match(/[0-9.]+/g).slice(0, 3).map(Number).map(v => v / 255)
      .map(v => v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4));
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const bg = lum(getComputedStyle(document.body).backgroundColor === 'rgba(0, 0, 0, 0)'
    ? getComputedStyle(document.documentElement).backgroundColor
    : getComputedStyle(document.body).backgroundColor);
  return [...document.querySelectorAll('svg.history text')].map(t => {
    const s = getComputedStyle(t), fg = lum(s.fill);
    return {text: t.textContent, size: parseFloat(s.fontSize),
            contrast: (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05)};
  });
})()"""


def _run_specs(pytester: pytest.Pytester, data: Path, model: str, out: Path, *args: str) -> Path:
    """One real run of the shipped specs (only those named: no ``-k`` unless given)."""
    before = set(out.iterdir()) if out.is_dir() else set()
    result = pytester.runpytest_subprocess(
        *(str(REPO / "benchmarks" / f"{name}.yaml") for name in ("mmlu", "gsm8k", "bbh")),
        f"--llm-model={model}",
        f"--llm-data-dir={data}",
        f"--llm-output={out}",
        "--llm-limit=2",
        "-p",
        "no:cacheprovider",
        *args,
        timeout=1200,
    )
    assert result.ret in (0, 1), result.stdout.str()  # wrong answers are not errors
    (run,) = set(out.iterdir()) - before
    return run


def test_report_under_chat_prompts_at_two_widths(
    pytester: pytest.Pytester, shared_benchmarks: Path, default_model: str, chromium: Chromium
) -> None:
    """Issue 30, item 5, on real runs of the default model with its chat template (the
    default): MMLU and GSM8K with few-shot turns, BBH with its 3-shot text, two runs of the
    same items (the second compared with the first: identical items) and a -k debug run
    between them, opened at 800 and 1400 px."""
    out = pytester.path / "runs"
    first = _run_specs(pytester, shared_benchmarks, default_model, out)
    _run_specs(pytester, shared_benchmarks, default_model, out, "-k", "gsm8k-0000")
    run = _run_specs(pytester, shared_benchmarks, default_model, out, f"--llm-baseline={first}")
    html = run / "report.html"
    mmlu, gsm8k, bbh = (_records(run, t) for t in ("mmlu", "gsm8k", "bbh"))
    assert {r["subset"] for r in mmlu} == {"abstract_algebra", "anatomy"}
    assert all(r["messages"] for r in mmlu + gsm8k + bbh), "the default is the chat template"

    for width in WIDTHS:
        page = _open(chromium, html, width=width)
        layout = page.evaluate(LAYOUT)
        assert layout["pageScroll"] <= 0, (width, layout)
        assert layout["outside"] == [], (width, layout)
        assert layout["tasksScroll"] <= 0 and layout["timeInside"], (width, layout)

        # named metrics and subsets as rows under their task, with n and an interval
        rows = page.evaluate(
            "[...document.querySelectorAll('table.tasks tr.sub')].map(r => [r.dataset.task,"
            " r.className, r.dataset.name, r.cells[2].textContent, !!r.querySelector('svg.ci'),"
            " r.querySelector('.ci-text').textContent])"
        )
        named = [(t, n, k) for t, c, n, k, svg, ci in rows if c == "sub metric" and svg and ci]
        assert named == [("gsm8k", "strict_match", "2"), ("gsm8k", "flexible_extract", "2")]
        subsets = {(t, n, k) for t, c, n, k, svg, ci in rows if c == "sub subset" and svg}
        assert {("mmlu", "abstract_algebra", "1"), ("mmlu", "anatomy", "1")} <= subsets
        assert {(t, n) for t, n, _ in subsets if t == "bbh"} == {("bbh", r["subset"]) for r in bbh}

        # identical paired items: what ten... two pairs can bound, not [+0.0, +0.0]
        compare = page.evaluate("document.querySelector('table.compare').textContent")
        assert "[+0.0, +0.0]" not in compare
        notes = page.evaluate(
            "[...document.querySelectorAll('tr.interval-note')].map(r => r.textContent)"
        )
        assert notes and all("no discordant pairs" in n or "changed" in n for n in notes)

        # history: the trend over the same two items; the -k run counted apart
        gsm = page.evaluate(
            "(() => { const f = document.querySelector('.history-grid figure[data-task=gsm8k]');"
            " return {points: f.querySelectorAll('svg.history circle').length,"
            " text: f.textContent}; })()"
        )
        assert gsm["points"] == 2 and "1 of them -k/node-id selections" in gsm["text"], gsm
        for label in page.evaluate(AXIS):
            assert label["size"] >= 12 and label["contrast"] >= 4.5, label

        # the few-shot fold of a chat prompt: every example turn folded, the item's own
        # turn in view
        item = mmlu[0]
        page.evaluate(f"location.hash = {json.dumps('#item/mmlu/' + item['item_id'])}")
        page.wait_for("!!document.querySelector('#browser details.item[open] details.fewshot')")
        shown = page.evaluate(
            """(() => {
              const d = document.querySelector('#browser details.item[open]');
              return {summary: d.querySelector('details.fewshot > summary').textContent,
                      prefix: d.querySelector('details.fewshot pre').textContent,
                      prompt: d.querySelector('pre.prompt').textContent,
                      right: d.getBoundingClientRect().right};
            })()"""
        )
        own = item["messages"][-1]["content"]
        examples = [m["content"] for m in item["messages"][1:-1] if m["role"] == "user"]
        assert shown["prefix"] + shown["prompt"] == item["prompt"]
        assert len(examples) == 5 and all(e in shown["prefix"] for e in examples)
        assert shown["prompt"].startswith("<|im_start|>user\n" + own), shown["prompt"][:80]
        assert "5 few-shot example(s) as chat turns" in shown["summary"]
        assert shown["right"] <= width

        # GSM8K's named metrics in the item panel
        page.evaluate(f"location.hash = {json.dumps('#item/gsm8k/' + gsm8k[0]['item_id'])}")
        page.wait_for("!!document.querySelector('#browser details.item[open] .named-metrics')")
        metrics = page.evaluate(
            "[...document.querySelectorAll('#browser details.item[open] .named-metrics li')]"
            ".map(li => li.dataset.metric)"
        )
        assert metrics == ["strict_match", "flexible_extract"]

        # BBH: its 3-shot text, said plainly (not "1 example(s)")
        page.evaluate(f"location.hash = {json.dumps('#item/bbh/' + bbh[0]['item_id'])}")
        page.wait_for("!!document.querySelector('#browser details.item[open] details.fewshot')")
        summary = page.evaluate(
            "document.querySelector('#browser details.item[open] details.fewshot > summary')"
            ".textContent"
        )
        assert "3-shot text" in summary and "1 example" not in summary, summary
        rest = page.evaluate(
            "document.querySelector('#browser details.item[open] pre.prompt').textContent"
        )
        assert rest.startswith("Q: ") and "So the answer is" not in rest, rest[:200]

        assert page.problems() == []
        assert page.requests() == [html.resolve().as_uri()]


def test_item_browser_says_lower_and_higher_for_partial_scores(
    tmp_path: Path, chromium: Chromium
) -> None:
    """A task compared on partial scores (F1): its flipped items scored lower or higher,
    and the item browser's filter, tags and item facts say so (they said "correct ->
    wrong" and "was correct" of items that stayed correct)."""

    def write(path: Path, scores: list[float]) -> Path:
        (path / "tasks").mkdir(parents=True)
        (path / "eval_config.json").write_text(json.dumps({"tasks": {"squad": {"metric": "f1"}}}))
        records = [
            {
                "task": "squad",
                "item_id": f"squad-{i:04d}",
                "correct": score > 0.5,
                "score": score,
                "prompt": f"Question {i}",
                "target": "an answer",
            }
            for i, score in enumerate(scores)
        ]
        (path / "tasks" / "squad_output.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in records)
        )
        return path

    baseline = write(tmp_path / "base", [0.9] * 6)
    run = write(tmp_path / "run", [0.6] * 5 + [0.95])
    html = write_report(run, baseline)
    page = _open(chromium, html, "#flipped/squad/regressed")
    page.wait_for("document.querySelectorAll('#browser details.item').length === 5")
    shown = page.evaluate(
        """(() => ({
          options: [...document.querySelectorAll('#browser select[data-filter=flip] option')]
            .map(o => o.textContent),
          tags: [...document.querySelectorAll('#browser details.item .tag.flip')]
            .map(t => t.textContent),
        }))()"""
    )
    assert shown["options"] == [
        "all items",
        "scored lower or higher",
        "scored lower",
        "scored higher",
    ]
    assert shown["tags"] == ["scored lower"] * 5
    _click(page, "#browser details.item > summary")
    text = page.evaluate("document.querySelector('#browser details.item[open] .body').textContent")
    assert "scored lower than in the baseline" in text and "wrong now" not in text
