"""The tiny benchmark project that plugin and record tests write into a pytester folder
(a generative ``arith`` task and a multiple-choice ``colors`` task with their data), and
the conftest that kills a run with SIGKILL after ``KILL_AFTER`` items (for resume tests)."""

from __future__ import annotations

import json

import pytest

ARITH = [
    {"q": "what is two plus three?", "a": "5"},
    {"q": "what is one plus one?", "a": "2"},
    {"q": "what is four plus four?", "a": "8"},
    {"q": "what is nine minus two?", "a": "7"},
    {"q": "what is three times three?", "a": "9"},
]
COLORS = [
    {"question": "Which one is a color?", "options": ["red", "table", "seven"], "label": 0},
    {"question": "Which one is a number?", "options": ["blue", "seven", "apple"], "label": 1},
    {"question": "Which one is a fruit?", "options": ["nine", "green", "apple"], "label": 2},
    {"question": "Which one is an animal?", "options": ["cat", "four", "yellow"], "label": 0},
]

GEN_SPEC = """\
task: arith
markers: [regression, math]
floor: {floor}
dataset: {{path: arith.jsonl}}
prompt:
  template: "Question: {{{{ q }}}}\\nAnswer:"
  target: "{{{{ a }}}}"
fewshot:
  k: 1
  examples: [{{q: "what is zero plus one?", a: "1"}}]
mode: generate
generate:
  target: "{{{{ a }}}}"
  max_new_tokens: 4
  stop: ["\\n"]
  extract: [last_number]
  compare: numeric
"""

MC_SPEC = """\
task: colors
markers: [release, knowledge]
floor: {floor}
dataset: {{path: colors.jsonl}}
prompt:
  template: "{{{{ question }}}}\\nAnswer:"
mode: multiple_choice
multiple_choice:
  choices: "{{{{ options }}}}"
  gold: "{{{{ label }}}}"
"""


def write_project(pytester: pytest.Pytester, gen_floor: float = 0.0, mc_floor: float = 0.0) -> None:
    (pytester.path / "arith.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ARITH))
    (pytester.path / "colors.jsonl").write_text("".join(json.dumps(r) + "\n" for r in COLORS))
    (pytester.path / "arith.yaml").write_text(GEN_SPEC.format(floor=gen_floor))
    (pytester.path / "colors.yaml").write_text(MC_SPEC.format(floor=mc_floor))


# A conftest for pytester runs: SIGKILL the run after $KILL_AFTER reported items.
KILL_CONFTEST = """
import os, signal
seen = []
def pytest_runtest_logreport(report):
    if report.when == "call" and os.environ.get("KILL_AFTER"):
        seen.append(report.nodeid)
        if len(seen) == int(os.environ["KILL_AFTER"]):
            os.kill(os.getpid(), signal.SIGKILL)
"""


# A third task whose benchmark data is not installed (no 'absent_bench' folder anywhere):
# collected as one stand-in item that is skipped with the reason.
ABSENT_SPEC = """\
task: absent
markers: [regression]
dataset: {path: absent_bench/test.jsonl}
prompt: {template: "{{ q }}"}
mode: generate
generate: {target: "{{ a }}"}
"""


def write_absent_task(pytester: pytest.Pytester) -> None:
    (pytester.path / "absent.yaml").write_text(ABSENT_SPEC)


# A multiple-choice task with a contamination: block (options and gold), for the probes.
PROBED_SPEC = """\
task: quiz
dataset: {path: quiz.jsonl}
prompt:
  template: "{{ question }}\\nA. {{ choices[0] }}\\nB. {{ choices[1] }}\\nC. {{ choices[2] }}\\n\\
    Answer:"
mode: multiple_choice
multiple_choice:
  choices: ["A", "B", "C"]
  gold: "{{ answer }}"
contamination: {options: choices, gold: answer}
"""

# Ctrl-C (a KeyboardInterrupt on the controller) after two tests have reported.
INTERRUPT_CONFTEST = """
seen = []
def pytest_runtest_logreport(report):
    if report.when == "call":
        seen.append(report.nodeid)
        if len(seen) == 2:
            raise KeyboardInterrupt
"""
