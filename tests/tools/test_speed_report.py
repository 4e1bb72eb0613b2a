"""The speed report's memory-traffic count (``ForwardMeter``) and its table."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lm_eval", reason="lm-eval not installed: pip install -e '.[parity]'")
torch = pytest.importorskip("torch")

from tools.lmeval_compare import ForwardMeter, Report, TaskReport  # noqa: E402
from tools.speed import generated_tokens, memory_rows  # noqa: E402


def _model(tiny_model_dir: Path):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def test_meter_counts_weights_per_pass_and_each_rows_cache(tiny_model_dir: Path) -> None:
    """Two forward passes of a padded batch: the decoder's weights are read once per pass,
    the LM head's once per pass that ran it, and every row's keys/values once per layer
    over all the positions it attends to (padding included, as the kernels read it)."""
    model = _model(tiny_model_dir)
    config = model.config
    meter = ForwardMeter(model)
    ids = torch.randint(0, config.vocab_size, (3, 5))
    mask = torch.ones(3, 5, dtype=torch.long)
    mask[0, :2] = 0
    from transformers import DynamicCache

    # transformers 5.2x calls the cache argument `cache`, earlier ones `past_key_values`.
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    cache = DynamicCache()
    with torch.inference_mode(), meter.measure() as stats:
        model(input_ids=ids, attention_mask=mask, use_cache=True, **{name: cache})
        step = torch.randint(0, config.vocab_size, (3, 1))
        model(
            input_ids=step,
            attention_mask=torch.cat([mask, mask.new_ones(3, 1)], 1),
            use_cache=True,
            **{name: cache},
        )
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv_heads = config.num_key_value_heads
    per_position = config.num_hidden_layers * 2 * kv_heads * head_dim * 4
    assert stats.forward_calls == 2
    assert stats.head_calls == 2
    assert stats.kv_reads == 3 * 5 + 3 * 6
    decoder = sum(p.numel() for p in model.get_decoder().parameters()) - sum(
        p.numel() for p in model.get_input_embeddings().parameters()
    )
    head = sum(p.numel() for p in model.get_output_embeddings().parameters())
    assert stats.bytes_read == 2 * 4 * decoder + 2 * 4 * head + (15 + 18) * per_position


def test_meter_counts_a_fused_step_as_it_runs(tiny_model_dir: Path) -> None:
    """Our fused step (a ragged block over a laid-out cache): its real tokens, each row's
    cache positions and block, and the LM head only when the step asks for logits."""
    meter = ForwardMeter(_model(tiny_model_dir))
    tokens = torch.zeros((2, 3), dtype=torch.long)
    mask = torch.ones((2, 10), dtype=torch.long)
    meter._fused_step(tokens, mask, [3, 1], "all")
    meter._fused_step(tokens, mask, [3, 1], "none")
    meter._fused_step(tokens, mask, None, "last")
    stats = meter.stats
    assert stats.forward_calls == 3
    assert stats.decoder_tokens == 4 + 4 + 6
    assert stats.kv_reads == 3 * 2 * 13
    assert stats.head_calls == 2
    assert stats.head_rows == 4 + 2


def _task(
    task_type: str,
    records: list[dict[str, Any]],
    model_s: tuple[float, float],
    gb: tuple[float, float],
) -> TaskReport:
    def tool(seconds: float, gigabytes: float) -> dict[str, Any]:
        return {"timing": {"model_s": seconds}, "forward": {"bytes_read": gigabytes * 1e9}}

    return TaskReport(
        task_type=task_type,
        summary={"items": len(records)},
        criteria=[],
        worst=[],
        ours=tool(model_s[0], gb[0]),
        lmeval=tool(model_s[1], gb[1]),
        records=records,
    )


def test_memory_table_rates_and_shares() -> None:
    """Tokens per second from our outputs' token counts, GB/s over the model time and its
    share of the measured read rate; a scoring task has no generated tokens."""
    gen = _task(
        "gsm8k",
        [{"n_output_tokens": 30}, {"n_output_tokens": 10}],
        model_s=(2.0, 8.0),
        gb=(10.0, 40.0),
    )
    scoring = _task("mmlu", [{"item_id": "a"}], model_s=(1.0, 1.0), gb=(5.0, 5.0))
    report = Report(config={}, tasks=[gen, scoring])
    assert generated_tokens(gen) == 40
    assert generated_tokens(scoring) is None
    rows = memory_rows(report, read_rate=20.0)
    assert rows[0] == ["gsm8k", "lm-eval", "5", "40", "5", "25.0%"]
    assert rows[1] == ["gsm8k", "ours", "20", "10", "5", "25.0%"]
    assert rows[2][:3] == ["mmlu", "lm-eval", "-"]
    # A report written before the count existed shows no traffic rather than a number.
    old = _task("gsm8k", [{"n_output_tokens": 1}], model_s=(1.0, 1.0), gb=(1.0, 1.0))
    del old.ours["forward"]["bytes_read"]
    row = memory_rows(Report(config={}, tasks=[old]), read_rate=20.0)[1]
    assert row[2:] == ["1", "-", "-", "-"]


def test_an_engine_in_other_processes_is_measured_by_time_alone() -> None:
    """``--engine vllm``: the engines run in their own processes, where no hook reaches;
    the meter counts nothing (zero, not a made-up count) and the run is timed."""
    meter = ForwardMeter(None)
    with meter.measure() as stats:
        pass
    assert stats.forward_calls == 0 and stats.flops == 0.0
    assert (meter.decoder_params, meter.head_params) == (0, 0)


def test_the_engine_option_is_parsed() -> None:
    from tools.lmeval_compare import parse_args

    assert parse_args(["--engine", "vllm"], "x", "y").engine == "vllm"
    assert parse_args([], "x", "y").engine == "hf"
    with pytest.raises(SystemExit):
        parse_args(["--engine", "tgi"], "x", "y")
    vllm = parse_args(["--engine", "vllm", "--memory-share", "0.1", "--no-hf"], "x", "y")
    assert (vllm.memory_share, vllm.hf_too) == (0.1, False)
    plain = parse_args([], "x", "y")
    assert (plain.memory_share, plain.hf_too) == (None, True)
