"""The stop-rule measurement's row: what it counts from a run's item records."""

from __future__ import annotations

import argparse

from tools.stop_rule import (
    EARLY_TOKENS,
    markdown,
    summarise,
    summarise_openings,
    unstopped_spec,
)


def _record(reason: str, tokens: int, score: float, output: str = "x") -> dict[str, object]:
    return {"finish_reason": reason, "n_output_tokens": tokens, "score": score, "output": output}


def test_early_cuts_are_stops_within_the_first_tokens() -> None:
    records = [
        _record("stop", 2, 0.0, output=""),
        _record("stop", EARLY_TOKENS, 0.0, output="```"),
        _record("stop", EARLY_TOKENS + 1, 1.0),
        _record("length", 256, 0.0),
        _record("eos", 40, 1.0),
        {"error": "boom"},
    ]
    row = summarise("humaneval", "on", records)
    assert (row.items, row.errors) == (5, 1)
    assert (row.early_stop, row.stopped, row.length, row.eos) == (2, 3, 1, 1)
    assert row.early_examples == ["", "```"]
    assert row.score == 0.4
    assert row.mean_tokens == (2 + EARLY_TOKENS + EARLY_TOKENS + 1 + 256 + 40) / 5


def test_a_run_without_records_has_no_score_and_prints() -> None:
    row = summarise("gsm8k", "off", [])
    assert row.items == 0 and row.score is None and row.mean_tokens is None
    table = markdown([row], argparse.Namespace(model="m", items=3, specs="gsm8k"))
    assert "gsm8k" in table and "off" in table


def test_the_unstopped_copy_has_no_stops_and_remembers_them() -> None:
    spec = {
        "task": "t",
        "generate": {"stop": ["\ndef", "\n#"], "max_new_tokens": 512},
        "chat_form": {"generate": {"stop": ["```"]}},
    }
    copy, stops = unstopped_spec(spec, 16, "off")
    assert stops == ["\ndef", "\n#"]
    assert copy["generate"] == {"stop": [], "max_new_tokens": 16}
    assert copy["chat_form"]["generate"]["stop"] == []
    assert unstopped_spec(spec, 16, "on")[1] == ["```"]  # the chat form's stops apply
    assert unstopped_spec({"generate": {"stop": ["Q:"]}}, 8, "on")[1] == ["Q:"]
    assert spec["generate"]["stop"] == ["\ndef", "\n#"]  # the original is left alone


def test_openings_count_the_first_stop_sequence_in_each_output() -> None:
    records = [
        {"output": "\n# Test\nprint(f(1))"},  # "\n#" comes before "\nprint"
        {"output": "\ndef g():"},
        {"output": "    return x"},
        {"error": "boom"},
    ]
    row = summarise_openings("humaneval", "off", ["\ndef", "\n#", "\nprint"], records)
    assert row.items == 3
    assert row.containing == {"\n#": 1, "\ndef": 1}
