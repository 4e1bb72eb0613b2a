"""The OpenAI-compatible backend with a chat template: conversations go to
``/chat/completions`` (the server's template renders them), multiple choice is refused with
the alternatives, reasoning blocks are never cut by stop sequences."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai_fake import FakeServer, Reply

from pytest_llmeval._errors import ModelError
from pytest_llmeval.dataset import load_items
from pytest_llmeval.eval import ChatSettings, TaskRunner
from pytest_llmeval.model import GenerateRequest, ModelSettings, load_backend
from pytest_llmeval.model._openai import OpenAIBackend
from pytest_llmeval.task import task_spec_from_dict


def _backend(server: FakeServer) -> OpenAIBackend:
    backend = load_backend(ModelSettings(model="toy", backend="openai", base_url=server.url))
    assert isinstance(backend, OpenAIBackend)
    return backend


def _chat_reply(text: str, finish: str = "stop") -> Reply:
    return Reply(
        body={
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish,
                }
            ],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5},
        }
    )


def _chat_bodies(server: FakeServer) -> list[dict[str, Any]]:
    return [b for path, b, _ in server.requests if path == "/v1/chat/completions"]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    docs = [{"question": "2+3?", "answer": "5"}, {"question": "1+1?", "answer": "2"}]
    (tmp_path / "toy.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    return tmp_path


def _spec(mode: str = "generate") -> Any:
    data: dict[str, Any] = {
        "task": "toy",
        "dataset": {"path": "toy.jsonl"},
        "prompt": {
            "description": "Arithmetic.",
            "template": "Q: {{ question }}\nA:",
            "target": "{{ answer }}",
        },
        "fewshot": {"k": 1, "examples": [{"question": "4+4?", "answer": "8"}]},
        "mode": mode,
    }
    if mode == "generate":
        data["generate"] = {"target": "{{ answer }}", "stop": ["\n\n"], "max_new_tokens": 16}
    else:
        data["multiple_choice"] = {"choices": ["{{ answer }}", "7"], "gold": "0"}
    return task_spec_from_dict(data)


def test_no_chat_endpoint_means_no_template(fake_openai: FakeServer, data: Path) -> None:
    backend = _backend(fake_openai)
    assert backend.chat_template() is None  # the fake answers 404
    assert backend.info()["chat_probe"].startswith("no chat template: HTTP 404")
    runner = TaskRunner(_spec(), [data], ChatSettings(mode="auto"))
    runner.run(load_items(runner.spec, [data])[:1], backend)
    assert runner.template is None
    assert "prompt" in fake_openai.completion_bodies()[-1]
    with pytest.raises(ModelError, match="no chat template"):
        TaskRunner(_spec(), [data], ChatSettings(mode="on")).bind(backend)


def test_a_server_refusing_chat_for_want_of_a_template(fake_openai: FakeServer) -> None:
    fake_openai.routes["/v1/chat/completions"] = lambda body: Reply(
        400, {"error": {"message": "This model has no chat template (default is not allowed)"}}
    )
    assert _backend(fake_openai).chat_template() is None


def test_conversation_goes_to_chat_completions(fake_openai: FakeServer, data: Path) -> None:
    fake_openai.routes["/v1/chat/completions"] = lambda body: _chat_reply(
        "The answer is 5.\n\nMore text"
    )
    backend = _backend(fake_openai)
    runner = TaskRunner(_spec(), [data], ChatSettings(mode="auto", system_prompt="Be brief."))
    result = runner.run(load_items(runner.spec, [data])[:1], backend)[0]
    assert runner.prompt_record()["chat_template"] == {
        "source": "server",
        "sha256": None,
        "system_role": True,
        "end_of_turn": None,
    }
    body = _chat_bodies(fake_openai)[-1]
    assert body["messages"] == [
        {"role": "system", "content": "Be brief.\n\nArithmetic."},
        {"role": "user", "content": "Q: 4+4?\nA:"},
        {"role": "assistant", "content": "8"},
        {"role": "user", "content": "Q: 2+3?\nA:"},
    ]
    assert "prompt" not in body
    assert body["temperature"] == 0.0 and body["max_tokens"] == 16 and body["stop"] == ["\n\n"]
    assert result.output == "The answer is 5."  # cut client-side too
    assert result.finish_reason == "stop"
    assert result.messages == body["messages"]
    assert result.prompt.startswith("<system>\nBe brief.")


def test_multiple_choice_through_a_server_template_is_refused(
    fake_openai: FakeServer, data: Path
) -> None:
    fake_openai.routes["/v1/chat/completions"] = lambda body: _chat_reply("A")
    backend = _backend(fake_openai)
    runner = TaskRunner(_spec("multiple_choice"), [data], ChatSettings(mode="on"))
    with pytest.raises(ModelError) as err:
        runner.run(load_items(runner.spec, [data]), backend)
    message = str(err.value)
    assert "log-likelihood" in message and "/chat/completions" in message
    assert "--llm-set prompt.chat_template=off" in message and "--llm-backend=hf" in message
    # With the template off the same task is scored through /completions.
    off = TaskRunner(_spec("multiple_choice"), [data], ChatSettings(mode="off"))
    assert len(off.run(load_items(off.spec, [data]), backend)) == 2


def test_stop_sequences_never_cut_the_reasoning_block(fake_openai: FakeServer) -> None:
    reply = "<think>first\n\nsecond</think>\nThe answer is 5.\n\nignored"
    fake_openai.routes["/v1/chat/completions"] = lambda body: _chat_reply(reply)
    backend = _backend(fake_openai)
    request = GenerateRequest(
        "", 64, stop=("\n\n",), messages=(("user", "2+3?"),), thinking=("<think>", "</think>")
    )
    out = backend.generate([request])[0]
    assert "stop" not in _chat_bodies(fake_openai)[-1]  # the server would cut the thought
    assert out.text == "<think>first\n\nsecond</think>\nThe answer is 5."
    assert out.finish_reason == "stop"


def test_a_chat_form_through_a_server_template(fake_openai: FakeServer, data: Path) -> None:
    """A chat form's question goes to /chat/completions; one that opens the assistant's turn
    (an assistant prefix) is refused with the alternatives: the server's own template
    cannot continue a turn."""
    fake_openai.routes["/v1/chat/completions"] = lambda body: _chat_reply("The answer is 5")
    backend = _backend(fake_openai)
    base = {
        "task": "toy",
        "dataset": {"path": "toy.jsonl"},
        "prompt": {"template": "Q: {{ question }}\nA:"},
        "mode": "generate",
        "generate": {"target": "{{ answer }}", "stop": ["\n"], "max_new_tokens": 16},
    }
    asked = task_spec_from_dict({**base, "chat_form": {"prompt": {"template": "{{ question }}"}}})
    runner = TaskRunner(asked, [data], ChatSettings(mode="on"))
    runner.run(load_items(runner.spec, [data]), backend)
    # Both items' questions, each as the last user turn (the backend sends them
    # concurrently: the order they arrive in is not fixed).
    last = [b["messages"][-1] for b in _chat_bodies(fake_openai)[-2:]]
    assert sorted(m["content"] for m in last) == ["1+1?", "2+3?"]
    assert {m["role"] for m in last} == {"user"}
    prefixed = task_spec_from_dict(
        {**base, "chat_form": {"prompt": {"assistant_prefix": "The answer is"}}}
    )
    runner = TaskRunner(prefixed, [data], ChatSettings(mode="on"))
    with pytest.raises(ModelError) as err:
        runner.run(load_items(runner.spec, [data]), backend)
    message = str(err.value)
    assert "chat_form.prompt.assistant_prefix" in message
    assert "--llm-set prompt.chat_template=off" in message and "--llm-backend=hf" in message
