"""Model settings are checked once, when they are made, with the option named."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_llmeval.model import ModelSettings, SettingsError


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"dtype": "float8"}, "--llm-dtype=float8: expected one of auto|float32|bfloat16|float16"),
        ({"device": "gpu"}, "--llm-device=gpu: expected auto, cpu, cuda or cuda:N"),
        ({"device": "cuda:x"}, "--llm-device=cuda:x: expected auto, cpu, cuda or cuda:N"),
        ({"batch_size": -1}, "--llm-batch-size=-1: must be >= 1 or auto"),
        (
            {"device_map": "spread"},
            "hf.device_map=spread: expected one of auto|balanced|sequential",
        ),
        (
            {"device_map": "auto", "device": "cpu"},
            "hf.device_map=auto: places the model itself",
        ),
        ({"add_bos": "maybe"}, "model.add_bos=maybe: expected one of auto|yes|no"),
        ({"max_length": 8}, "model.max_length=8: must be >= 16 (tokens)"),
        ({"backend": "tgi"}, "--llm-backend=tgi: expected one of hf|vllm|openai"),
        (
            {"backend": "openai"},
            "openai.base_url: --llm-backend=openai needs the server's URL",
        ),
        (
            {"backend": "openai", "base_url": "host:1/v1"},
            "openai.base_url=host:1/v1: expected http",
        ),
        (
            {"base_url": "http://h:1/v1"},
            "openai.base_url=http://h:1/v1: is for --llm-backend=openai",
        ),
        ({"concurrency": 0}, "openai.concurrency=0: must be >= 1"),
        ({"max_retries": -1}, "openai.max_retries=-1: must be >= 0"),
        ({"request_timeout": 0.0}, "openai.request_timeout=0.0: expected seconds > 0"),
        (
            {"backend": "openai", "base_url": "http://h:1/v1", "chat_template_file": "t.jinja"},
            "prompt.chat_template_file=t.jinja: is applied on this side by the hf "
            "and vllm backends",
        ),
    ],
)
def test_bad_settings_name_the_option(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError) as err:
        ModelSettings(model="m", **fields)
    assert str(err.value).startswith(message)


def test_good_settings_pass() -> None:
    ModelSettings(model="m", device="cuda:1", dtype="bfloat16", batch_size=0, add_bos="yes")
    ModelSettings(model="m", backend="openai", base_url="https://h:8000/v1", concurrency=2)
    ModelSettings(model="m", device_map="balanced")
