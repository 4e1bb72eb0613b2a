"""The OpenAI-compatible backend against a scripted loopback server (``fake_openai``):
request shapes, log-likelihood from echoed prompt log-probabilities, generation, retries,
concurrency, deduplication and context overflow."""

from __future__ import annotations

import math
import re
import socket
import time
from typing import Any

import pytest
from openai_fake import FakeServer, Reply, default_completion, echo_logprobs, toy_logprob

from pytest_llmeval._errors import ModelError
from pytest_llmeval.model import (
    GenerateRequest,
    LoglikelihoodRequest,
    ModelSettings,
    load_backend,
)
from pytest_llmeval.model._openai import PROBE_TEXT, OpenAIBackend
from pytest_llmeval.plugin._collect import describe


def _backend(server: FakeServer, **kw: Any) -> OpenAIBackend:
    settings = ModelSettings(model="toy", backend="openai", base_url=server.url, **kw)
    backend = load_backend(settings)
    assert isinstance(backend, OpenAIBackend)
    backend.backoff_base = 0.01  # fast retries without Retry-After
    server.requests.clear()  # start-up requests (/models, tokenize and echo probes)
    return backend


def _completion(text: str, finish: str = "stop", **extra: Any) -> Reply:
    return Reply(
        body={
            "choices": [{"index": 0, "text": text, "finish_reason": finish, **extra}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7},
        }
    )


# ---------------------------------------------------------------- start-up and records


def test_info_records_the_server_and_never_the_key(
    fake_openai: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOY_KEY", "sk-secret-123")
    backend = _backend(fake_openai, api_key_env="TOY_KEY", concurrency=3, seed=7)
    info = backend.info()
    assert info["backend"] == "openai"
    assert info["base_url"] == fake_openai.url
    assert info["model"] == "toy"
    assert info["server_model"] == {"id": "toy", "max_model_len": 4096, "owned_by": "tests"}
    assert info["server"]["server"].startswith("BaseHTTP")
    assert (info["concurrency"], info["max_retries"], info["seed"]) == (3, 5, 7)
    assert info["max_length"] == 4096  # from /models
    assert info["prompt_logprobs"] == "aligned"  # the start-up probe
    assert backend.batch_size == 3
    assert "sk-secret-123" not in repr(info)
    # the key is sent, as a bearer token
    assert all(h.get("Authorization") == "Bearer sk-secret-123" for _, _, h in fake_openai.requests)


def test_max_length_option_wins_over_the_server(fake_openai: FakeServer) -> None:
    assert _backend(fake_openai, max_length=512).info()["max_length"] == 512


def test_a_model_the_server_does_not_serve_is_named(fake_openai: FakeServer) -> None:
    with pytest.raises(ModelError, match="serves toy; pass one of these names"):
        load_backend(ModelSettings(model="other", backend="openai", base_url=fake_openai.url))


def test_settings_are_validated() -> None:
    with pytest.raises(ModelError, match=r"openai\.base_url"):
        load_backend(ModelSettings(model="m", backend="openai"))
    with pytest.raises(ModelError, match="http"):
        load_backend(ModelSettings(model="m", backend="openai", base_url="ftp://x/v1"))
    with pytest.raises(ModelError, match="--llm-backend=tgi"):
        load_backend(ModelSettings(model="m", backend="tgi"))


def test_an_unreachable_server_fails_after_its_retries() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    OpenAIBackend.backoff_base, saved = 0.01, OpenAIBackend.backoff_base
    try:
        with pytest.raises(ModelError, match=r"no answer from the server after 2 attempt"):
            load_backend(
                ModelSettings(
                    model="m",
                    backend="openai",
                    base_url=f"http://127.0.0.1:{port}/v1",
                    max_retries=1,
                )
            )
    finally:
        OpenAIBackend.backoff_base = saved


# ---------------------------------------------------------------- log-likelihood


def test_loglikelihood_sums_the_continuation_tokens(fake_openai: FakeServer) -> None:
    backend = _backend(fake_openai)
    results = backend.loglikelihood(
        [
            LoglikelihoodRequest("Question: two plus three? Answer:", " 5"),
            # trailing whitespace of the context moves to the continuation
            LoglikelihoodRequest("Colors: red green. Answer: ", "blue sky", token_detail=True),
        ]
    )
    assert results[0].logprob == pytest.approx(toy_logprob(" 5"))
    assert (results[0].n_tokens, results[0].is_greedy) == (1, True)
    assert results[0].token_logprobs == ()
    assert results[1].logprob == pytest.approx(toy_logprob(" blue") + toy_logprob(" sky"))
    assert results[1].token_logprobs == pytest.approx((toy_logprob(" blue"), toy_logprob(" sky")))
    assert results[1].token_zscores == ()  # needs the full distribution: never filled here
    bodies = fake_openai.completion_bodies()
    assert {b["prompt"] for b in bodies} == {
        "Question: two plus three? Answer: 5",
        "Colors: red green. Answer: blue sky",
    }
    for body in bodies:
        assert body["echo"] is True and body["logprobs"] == 1
        assert body["max_tokens"] == 1 and body["temperature"] == 0.0
        assert body["model"] == "toy" and body["seed"] == 1234


def test_a_token_straddling_the_boundary_counts_for_the_continuation(
    fake_openai: FakeServer,
) -> None:
    # The server's tokenizer merges across the boundary: "Answer:(B)" -> "Answer", ":(", "B)"
    backend = _backend(fake_openai)
    fake_openai.completions = lambda body: Reply(
        body={"choices": [echo_logprobs(body["prompt"], ["Answer", ":(", "B)"])]}
    )
    (result,) = backend.loglikelihood([LoglikelihoodRequest("Answer:", "(B)")])
    # ":(" covers the context's ":" and the continuation's "(": it is scored with "B)"
    assert result.n_tokens == 2
    assert result.logprob == pytest.approx(toy_logprob(":(") + toy_logprob("B)"))


def test_the_unscored_first_token_of_an_empty_context_is_left_out(
    fake_openai: FakeServer,
) -> None:
    (result,) = _backend(fake_openai).loglikelihood(
        [LoglikelihoodRequest("", "hello big world", token_detail=True)]
    )
    assert result.n_tokens == 2
    assert result.token_logprobs == pytest.approx((toy_logprob(" big"), toy_logprob(" world")))


def test_is_greedy_compares_with_the_top_alternative(fake_openai: FakeServer) -> None:
    def better_alternative(body: dict[str, Any]) -> Reply:
        choice = echo_logprobs(body["prompt"])
        choice["logprobs"]["top_logprobs"][-2] = {" 7": -0.01, " 5": toy_logprob(" 5")}
        return Reply(body={"choices": [choice]})

    backend = _backend(fake_openai)
    assert backend.loglikelihood([LoglikelihoodRequest("Answer:", " 5")])[0].is_greedy
    fake_openai.completions = better_alternative
    assert not backend.loglikelihood([LoglikelihoodRequest("Answer:", " 5")])[0].is_greedy


@pytest.mark.parametrize(
    "reply",
    [
        Reply(body={"choices": [{"text": "x !", "logprobs": None, "finish_reason": "length"}]}),
        # only the generated token scored (echo ignored)
        Reply(
            body={
                "choices": [
                    {
                        "text": " !",
                        "logprobs": {
                            "tokens": [" !"],
                            "text_offset": [100],
                            "token_logprobs": [-0.1],
                            "top_logprobs": [{" !": -0.1}],
                        },
                    }
                ]
            }
        ),
        Reply(400, {"error": {"message": "echo is not supported together with logprobs"}}),
    ],
    ids=["no-logprobs", "no-prompt-tokens", "rejected"],
)
def test_without_prompt_logprobs_multiple_choice_fails_clearly(
    fake_openai: FakeServer, reply: Reply
) -> None:
    backend = _backend(fake_openai)
    fake_openai.completions = lambda body: reply
    with pytest.raises(ModelError, match=r"multiple-choice tasks .* need a server that scores"):
        backend.loglikelihood([LoglikelihoodRequest("Answer:", " 5")])


def test_prompt_logprobs_one_token_off_are_refused(fake_openai: FakeServer) -> None:
    fake_openai.completions = lambda body: Reply(
        body={"choices": [echo_logprobs(body["prompt"], shifted=True)]}
    )
    backend = _backend(fake_openai)
    assert backend.info()["prompt_logprobs"] == "shifted"
    with pytest.raises(ModelError, match="shifted by one token"):
        backend.loglikelihood([LoglikelihoodRequest("Answer:", " 5")])


def test_the_alignment_probe_is_retried_like_any_request(
    fake_openai: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server still loading (HTTP 503 twice) gets the probe's retries, so the shift is
    found at start-up."""
    monkeypatch.setattr(OpenAIBackend, "backoff_base", 0.01)
    failures = [Reply(503, {"error": {"message": "Loading model"}})] * 2

    def loading(body: dict[str, Any]) -> Reply:
        if failures:
            return failures.pop()
        return Reply(body={"choices": [echo_logprobs(body["prompt"], shifted=True)]})

    fake_openai.completions = loading
    backend = _backend(fake_openai)
    assert backend.info()["prompt_logprobs"] == "shifted"
    with pytest.raises(ModelError, match="shifted by one token"):
        backend.loglikelihood([LoglikelihoodRequest("Answer:", " 5")])


@pytest.mark.parametrize("later", ["shifted", "aligned", "down"])
def test_an_alignment_probe_that_could_not_run_runs_again_before_scoring(
    fake_openai: FakeServer, monkeypatch: pytest.MonkeyPatch, later: str
) -> None:
    """When the probe gets no answer at start-up (5xx after its retries), it runs again
    at the first log-likelihood request: values are never returned unchecked, and a
    server that still cannot be asked fails those requests saying so."""
    monkeypatch.setattr(OpenAIBackend, "backoff_base", 0.01)
    state = {"up": False}

    def answer(body: dict[str, Any]) -> Reply:
        if not state["up"]:
            return Reply(503, {"error": {"message": "Loading model"}})
        return Reply(body={"choices": [echo_logprobs(body["prompt"], shifted=later == "shifted")]})

    fake_openai.completions = answer
    backend = _backend(fake_openai, max_retries=1)
    assert backend.info()["prompt_logprobs"] == "not probed: HTTP 503: Loading model"
    state["up"] = later != "down"
    request = LoglikelihoodRequest("Answer:", " 5")
    if later == "aligned":
        assert backend.loglikelihood([request])[0].n_tokens == 1
        assert backend.info()["prompt_logprobs"] == "aligned"
        assert [b["prompt"] for b in fake_openai.completion_bodies()] == [PROBE_TEXT, "Answer: 5"]
        return
    match = "shifted by one token" if later == "shifted" else "could not be checked"
    with pytest.raises(ModelError, match=match):
        backend.loglikelihood([request])
    # only the probe was sent (twice, with its retry, while the server was down)
    assert {b["prompt"] for b in fake_openai.completion_bodies()} == {PROBE_TEXT}


def test_a_server_without_prompt_logprobs_still_generates(fake_openai: FakeServer) -> None:
    def no_echo(body: dict[str, Any]) -> Reply:
        if body.get("echo"):
            return Reply(400, {"error": {"message": "echo and logprobs are not supported"}})
        return _completion(" 12")

    fake_openai.completions = no_echo
    backend = _backend(fake_openai)
    assert backend.info()["prompt_logprobs"].startswith("unavailable: HTTP 400")
    assert backend.generate([GenerateRequest("q", 4)])[0].text == " 12"
    calls = len(fake_openai.completion_bodies())
    with pytest.raises(ModelError, match="multiple-choice tasks"):
        backend.loglikelihood([LoglikelihoodRequest("Answer:", " 5")])
    assert len(fake_openai.completion_bodies()) == calls  # refused without a request


# ---------------------------------------------------------------- generation


def test_generate_request_and_stop_handling(fake_openai: FakeServer) -> None:
    replies = {
        "p-stop": _completion(" 42\nQ: next", finish="stop"),  # stop string echoed: cut
        "p-length": _completion(" 1 2 3", finish="length"),
        "p-eos": _completion(" done", finish="stop"),  # no stop sequences asked: EOS
        "p-vllm": _completion(" done", finish="stop", stop_reason=None),  # vLLM says EOS
        "p-hit": _completion(" 7", finish="stop"),  # server cut its stop sequence out
    }
    backend = _backend(fake_openai, seed=99)
    fake_openai.completions = lambda body: replies[body["prompt"]]
    stop = ("\nQ:", "\n\n")
    results = backend.generate(
        [
            GenerateRequest("p-stop", 16, stop),
            GenerateRequest("p-length", 3, stop),
            GenerateRequest("p-eos", 16),
            GenerateRequest("p-vllm", 16, stop),
            GenerateRequest("p-hit", 16, stop),
        ]
    )
    assert [(r.text, r.finish_reason) for r in results] == [
        (" 42", "stop"),
        (" 1 2 3", "length"),
        (" done", "eos"),
        (" done", "eos"),
        (" 7", "stop"),
    ]
    assert (results[0].n_tokens, results[0].n_prompt_tokens) == (7, 11)
    bodies = {b["prompt"]: b for b in fake_openai.completion_bodies()}  # sent concurrently
    body = bodies["p-stop"]
    assert body["max_tokens"] == 16 and body["stop"] == ["\nQ:", "\n\n"]
    assert (body["temperature"], body["top_p"], body["n"], body["seed"]) == (0.0, 1.0, 1, 99)
    assert "stop" not in bodies["p-eos"]
    assert body["repeat_penalty"] == 1.0  # llama.cpp servers default to 1.1


def test_with_reasoning_markers_the_finish_reason_follows_the_server(
    fake_openai: FakeServer,
) -> None:
    """With reasoning-block markers the stop sequences are not sent (the server would cut
    the reasoning) and apply only after the block: a stop sequence inside the block ends
    nothing, so the server's ``length`` stays ``length`` and its ``stop`` is the
    end-of-sequence token; one after the block that cut the text is ``stop``."""
    replies = {
        "p-budget": _completion("<think>Let me see.\n\nQuestion: what if x is 3? Then", "length"),
        "p-eos": _completion("<think>short</think> 4", "stop"),
        "p-cut": _completion("<think>a\n\nb</think> 4\n\nQuestion: next", "length"),
    }
    backend = _backend(fake_openai)
    fake_openai.completions = lambda body: replies[body["prompt"]]
    markers = ("<think>", "</think>")
    stop = ("Question:", "\n\n")
    results = backend.generate([GenerateRequest(p, 16, stop, thinking=markers) for p in replies])
    assert [(r.text, r.finish_reason) for r in results] == [
        ("<think>Let me see.\n\nQuestion: what if x is 3? Then", "length"),
        ("<think>short</think> 4", "eos"),
        ("<think>a\n\nb</think> 4", "stop"),
    ]
    assert all("stop" not in body for body in fake_openai.completion_bodies())


@pytest.mark.parametrize("reason", ["content_filter", "abort", None, "missing", "tool_calls"])
def test_a_generation_ended_for_another_reason_is_the_items_error(
    fake_openai: FakeServer, reason: str | None
) -> None:
    """A finish reason other than ``stop`` or ``length`` (a content filter, an aborted
    request, none at all) may have cut the text short: that request's result is an
    error naming the server's reason, and the rest of the batch is scored. A text that
    one of the request's stop sequences cut client-side ended there: it is whole."""

    def answer(body: dict[str, Any]) -> Reply:
        if body["prompt"] == "fine":
            return _completion(" 4")
        text = " 5\n\nQ: next" if body["prompt"] == "stopped" else " The answer is"
        reply = _completion(text, "length")
        choice = reply.body["choices"][0]
        if reason == "missing":
            del choice["finish_reason"]
        else:
            choice["finish_reason"] = reason
        return reply

    backend = _backend(fake_openai)
    fake_openai.completions = answer
    for stop in ((), ("\n\n",)):
        cut, fine = backend.generate(
            [GenerateRequest("cut", 64, stop), GenerateRequest("fine", 64)]
        )
        assert cut.finish_reason == "error" and cut.error is not None
        assert f"finish_reason {None if reason == 'missing' else reason!r}" in cut.error
        assert "not scored" in cut.error
        assert (fine.text, fine.finish_reason, fine.error) == (" 4", "eos", None)
    (stopped,) = backend.generate([GenerateRequest("stopped", 64, ("\n\n",))])
    assert (stopped.text, stopped.finish_reason, stopped.error) == (" 5", "stop", None)


@pytest.mark.parametrize(("reason", "ours"), [("eos_token", "eos"), ("stop_sequence", "stop")])
def test_text_generation_inference_reasons_are_normal_endings(
    fake_openai: FakeServer, reason: str, ours: str
) -> None:
    """TGI before 2.2.1 says ``eos_token`` and ``stop_sequence`` where OpenAI says
    ``stop``: normal endings, not the item's error."""

    def answer(body: dict[str, Any]) -> Reply:
        reply = _completion(" 4", "length")
        reply.body["choices"][0]["finish_reason"] = reason
        return reply

    backend = _backend(fake_openai)
    fake_openai.completions = answer
    (result,) = backend.generate([GenerateRequest("q", 64, ("\n\n",))])
    assert (result.text, result.finish_reason, result.error) == (" 4", ours, None)


def test_a_token_count_the_server_does_not_report_is_unknown(fake_openai: FakeServer) -> None:
    """Without ``usage`` (or its ``completion_tokens``) the number of generated tokens is
    not known: None, not 0; the prompt's count likewise."""
    no_usage = Reply(
        body={"choices": [{"index": 0, "text": " four five", "finish_reason": "length"}]}
    )
    replies = {"none": no_usage, "said": _completion(" 4")}
    backend = _backend(fake_openai)
    fake_openai.completions = lambda body: replies[body["prompt"]]
    unknown, said = backend.generate([GenerateRequest("none", 3), GenerateRequest("said", 3)])
    assert (unknown.text, unknown.finish_reason) == (" four five", "length")
    assert (unknown.n_tokens, unknown.n_prompt_tokens) == (None, None)
    assert (said.n_tokens, said.n_prompt_tokens) == (7, 11)
    record = {"prompt": "none", "output": unknown.text, "finish_reason": "length"}
    shown = describe({**record, "n_output_tokens": unknown.n_tokens, "target": "4", "correct": 0})
    assert "--- finish: length, tokens not reported" in shown


REJECT_PENALTY = Reply(400, {"error": {"message": "Unrecognized argument: repeat_penalty"}})


def _generation_bodies(server: FakeServer) -> list[dict[str, Any]]:
    return [b for b in server.completion_bodies() if not b.get("echo")]


def test_a_rejected_sampling_extra_is_dropped_at_start_up(fake_openai: FakeServer) -> None:
    """The start-up probe (the echo request) finds out which extras the server takes, so
    what the record says is sent, before any generation, is what every request sends."""

    def strict(body: dict[str, Any]) -> Reply:
        return REJECT_PENALTY if "repeat_penalty" in body else default_completion(body)

    fake_openai.completions = strict
    backend = _backend(fake_openai, concurrency=1)
    assert backend.info()["sampling_extras"] == {}
    assert backend.decoding()["generation_config"]["sent"] == {}
    assert [r.text for r in backend.generate([GenerateRequest("a", 4), GenerateRequest("b", 4)])]
    bodies = fake_openai.completion_bodies()
    assert len(bodies) == 2 and not any("repeat_penalty" in b for b in bodies)


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_extras_are_checked_at_start_up_when_the_echo_probe_cannot_tell(
    fake_openai: FakeServer, endpoint: str
) -> None:
    """A server that refuses the echo request for its own reason (no prompt
    log-probabilities) gets a one-token generation at start-up, on /completions or, where
    that endpoint fails, /chat/completions; a field it rejects is dropped then."""

    def completions(body: dict[str, Any]) -> Reply:
        if endpoint == "chat":
            return Reply(404, {"error": {"message": "This is a chat model"}})
        if body.get("echo"):
            return Reply(400, {"error": {"message": "echo is not supported"}})
        return REJECT_PENALTY if "repeat_penalty" in body else _completion(" 4")

    fake_openai.completions = completions
    fake_openai.routes["/v1/chat/completions"] = lambda body: (
        REJECT_PENALTY
        if "repeat_penalty" in body
        else Reply(body={"choices": [{"message": {"content": "4"}, "finish_reason": "stop"}]})
    )
    backend = _backend(fake_openai)
    assert backend.info()["sampling_extras"] == {}
    assert backend.decoding()["generation_config"]["sent"] == {}
    if endpoint == "completions":
        assert backend.generate([GenerateRequest("q", 4)])[0].text == " 4"
        assert "repeat_penalty" not in fake_openai.completion_bodies()[-1]


def test_a_field_rejected_after_start_up_is_never_dropped_unrecorded(
    fake_openai: FakeServer,
) -> None:
    """A field the server took at start-up and rejects later: the record (bound into the
    tasks' config) says every request sends it, so the request fails naming the field
    instead of going out without it."""
    backend = _backend(fake_openai)
    sent = backend.decoding()["generation_config"]["sent"]
    assert sent == {"repeat_penalty": 1.0}
    fake_openai.completions = lambda body: (
        REJECT_PENALTY if "repeat_penalty" in body else _completion(" 4")
    )
    with pytest.raises(ModelError, match=r"rejected repeat_penalty .*accepted at start-up"):
        backend.generate([GenerateRequest("q", 4)])
    assert all(b["repeat_penalty"] == 1.0 for b in fake_openai.completion_bodies())
    assert backend.decoding()["generation_config"]["sent"] == sent


@pytest.mark.parametrize("rule", ["model", "neutral"])
def test_the_generation_config_rule_decides_what_each_request_sends(
    fake_openai: FakeServer, rule: str
) -> None:
    """Under ``model`` the server's defaults (vLLM: the model's generation config) decide
    what a request does not set; under ``neutral`` the repetition penalty is sent at 1.
    The record says which, and what was sent."""
    fake_openai.completions = lambda body: _completion(" ok")
    backend = _backend(fake_openai, generation_config=rule)
    backend.generate([GenerateRequest("a", 4)])
    (body,) = fake_openai.completion_bodies()
    assert body["temperature"] == 0.0 and body["repeat_penalty"] == 1.0
    assert body.get("repetition_penalty") == (1.0 if rule == "neutral" else None)
    decoding = backend.info()["decoding"]
    assert decoding["do_sample"] is False
    record = decoding["generation_config"]
    assert record["rule"] == rule and record["source"] == "the server"
    assert record["sent"] == {k: v for k, v in body.items() if k.endswith("penalty")}


# ---------------------------------------------------------------- retries and errors


def test_429_and_503_are_retried_honouring_retry_after(fake_openai: FakeServer) -> None:
    script = [
        Reply(429, {"error": {"message": "slow down"}}, {"Retry-After": "1"}),
        Reply(503, {"error": {"message": "loading"}}, {"Retry-After": "1"}),
    ]

    def flaky(body: dict[str, Any]) -> Reply:
        return script.pop(0) if script else _completion(" fine")

    backend = _backend(fake_openai)
    fake_openai.completions = flaky
    started = time.monotonic()
    (result,) = backend.generate([GenerateRequest("q", 4)])
    assert result.text == " fine"
    assert time.monotonic() - started >= 1.9  # waited as told, twice
    assert len(fake_openai.completion_bodies()) == 3


def test_5xx_without_retry_after_backs_off_and_gives_up(fake_openai: FakeServer) -> None:
    backend = _backend(fake_openai, max_retries=2)
    fake_openai.completions = lambda body: Reply(500, {"error": {"message": "boom"}})
    with pytest.raises(ModelError, match=r"/v1/completions: HTTP 500: boom"):
        backend.generate([GenerateRequest("q", 4)])
    assert len(fake_openai.completion_bodies()) == 3


def test_other_4xx_fail_at_once_with_the_servers_message(fake_openai: FakeServer) -> None:
    backend = _backend(fake_openai)
    fake_openai.completions = lambda body: Reply(400, {"error": {"message": "bad temperature"}})
    with pytest.raises(ModelError) as info:
        backend.generate([GenerateRequest("q", 4)])
    assert f"{fake_openai.url}/completions: HTTP 400: bad temperature" in str(info.value)
    assert len(fake_openai.completion_bodies()) == 1


# ---------------------------------------------------------------- concurrency


def test_in_flight_requests_are_bounded_and_results_keep_their_order(
    fake_openai: FakeServer,
) -> None:
    def slow(body: dict[str, Any]) -> Reply:
        reply = default_completion(body)
        reply.delay = 0.15
        return reply

    backend = _backend(fake_openai, concurrency=3)
    fake_openai.completions = slow
    requests = [GenerateRequest(f"prompt number {i:02d}", 4) for i in range(10)]
    results = backend.generate(requests)
    assert [r.text for r in results] == [f" answer to {r.context[-12:]}" for r in requests]
    assert fake_openai.max_in_flight == 3


def test_identical_requests_are_sent_once(fake_openai: FakeServer) -> None:
    backend = _backend(fake_openai, concurrency=4)
    gen = [GenerateRequest(p, 4) for p in ("a", "b", "a", "c", "b", "a")]
    assert [r.text for r in backend.generate(gen)] == [
        f" answer to {p}" for p in ("a", "b", "a", "c", "b", "a")
    ]
    assert len(fake_openai.completion_bodies()) == 3
    # "x " + "y" and "x" + " y" are one prompt with one boundary: one request
    ll = [
        LoglikelihoodRequest("ctx x ", "y"),
        LoglikelihoodRequest("ctx x", " y"),
        LoglikelihoodRequest("ctx x", " y", token_detail=True),
    ]
    results = backend.loglikelihood(ll)
    assert len(fake_openai.completion_bodies()) == 4
    assert results[0].logprob == results[1].logprob == results[2].logprob
    assert results[2].token_logprobs and not results[0].token_logprobs


# ---------------------------------------------------------------- context windows


CONTEXT_ERROR = Reply(
    400,
    {
        "error": {
            "message": "This model's maximum context length is 2048 tokens, however you "
            "requested 2300 tokens (2044 in your prompt; 256 for the completion). Please "
            "reduce your prompt; or completion length.",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
    },
)


def test_a_prompt_rejected_for_length_is_reported_as_not_fitting(
    fake_openai: FakeServer,
) -> None:
    fake_openai.models = [{"id": "toy"}]  # no max_model_len: the window is unknown
    backend = _backend(fake_openai)
    fake_openai.completions = lambda body: CONTEXT_ERROR
    (result,) = backend.generate([GenerateRequest("long prompt", 256)])
    assert result.finish_reason == "context_overflow"
    assert (result.n_prompt_tokens, result.context_window) == (2044, 2048)
    # truncation cannot be done without the server's tokenizer: a clear error
    with pytest.raises(ModelError, match=r"generate.overflow: truncate_left .* tokenize"):
        backend.generate([GenerateRequest("long prompt", 256, overflow="truncate_left")])


def _tokenize_routes(server: FakeServer) -> None:
    """llama-cpp-python's /extras/tokenize and /extras/detokenize over the toy tokenizer."""
    vocab: dict[str, int] = {}
    pieces: dict[int, str] = {}

    def ids(text: str) -> list[int]:
        out = []
        for piece in text.split(" "):
            if piece not in vocab:
                vocab[piece] = len(vocab)
                pieces[vocab[piece]] = piece
            out.append(vocab[piece])
        return out

    server.routes["/extras/tokenize"] = lambda body: Reply(body={"tokens": ids(body["input"])})
    server.routes["/extras/detokenize"] = lambda body: Reply(
        body={"text": " ".join(pieces[t] for t in body["tokens"])}
    )


def test_with_a_tokenize_endpoint_prompts_are_fitted_client_side(
    fake_openai: FakeServer,
) -> None:
    _tokenize_routes(fake_openai)
    fake_openai.models = [{"id": "toy", "max_model_len": 64}]
    backend = _backend(fake_openai)
    assert backend.info()["tokenize_endpoint"]["kind"] == "llama-cpp-python"
    prompt = " ".join(f"w{i}" for i in range(70))
    skip, left, middle, fits = backend.generate(
        [
            GenerateRequest(prompt, 4),
            GenerateRequest(prompt, 4, overflow="truncate_left"),
            GenerateRequest(prompt, 4, overflow="truncate_middle"),
            GenerateRequest("w1 w2", 4),
        ]
    )
    assert (skip.finish_reason, skip.n_prompt_tokens, skip.context_window) == (
        "context_overflow",
        70,
        64,
    )
    assert (left.truncated_tokens, left.n_prompt_tokens) == (10, 70)
    assert (middle.truncated_tokens, fits.truncated_tokens) == (10, 0)
    sent = {b["prompt"] for b in fake_openai.completion_bodies()}
    assert " ".join(f"w{i}" for i in range(10, 70)) in sent  # the end kept
    head_tail = [f"w{i}" for i in range(30)] + [f"w{i}" for i in range(40, 70)]
    assert " ".join(head_tail) in sent  # first and last halves kept
    assert prompt not in sent  # the skipped prompt never went out
    assert not math.isnan(float(left.n_tokens))


def test_a_long_loglikelihood_request_is_cut_from_the_left(fake_openai: FakeServer) -> None:
    _tokenize_routes(fake_openai)
    fake_openai.models = [{"id": "toy", "max_model_len": 16}]
    backend = _backend(fake_openai)
    context = " ".join(f"w{i}" for i in range(30)) + " Answer:"
    (result,) = backend.loglikelihood([LoglikelihoodRequest(context, " 5")])
    assert result.logprob == pytest.approx(toy_logprob(" 5"))
    assert result.truncated_tokens == 17 and result.context_window == 16
    (body,) = fake_openai.completion_bodies()
    # the window less the generated token: the last 15 of the 32 toy tokens
    assert body["prompt"] == " ".join(f"w{i}" for i in range(17, 30)) + " Answer: 5"


def test_a_loglikelihood_request_the_server_finds_too_long_fails_clearly(
    fake_openai: FakeServer,
) -> None:
    fake_openai.models = [{"id": "toy"}]
    backend = _backend(fake_openai)
    fake_openai.completions = lambda body: CONTEXT_ERROR
    # A problem of this request alone: its result says so (the batch's others are scored).
    (result,) = backend.loglikelihood([LoglikelihoodRequest("long context", " 5")])
    assert result.error is not None
    assert re.search(r"does not fit the server's context window .* has none", result.error)
    # Under overflow "skip" it is reported as not fitting instead.
    (skipped,) = backend.loglikelihood(
        [LoglikelihoodRequest("long context", " 5", overflow="skip")]
    )
    assert skipped.context_overflow and skipped.error is None
