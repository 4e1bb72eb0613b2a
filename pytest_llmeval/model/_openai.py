"""A backend that evaluates through an OpenAI-compatible completions server (vLLM, SGLang,
TGI, llama.cpp's server, llama-cpp-python's server), over HTTP, with the standard library
only.

Generation: ``POST {base_url}/completions`` with the prompt, ``max_tokens``, greedy settings
(``temperature`` 0, ``top_p`` 1, ``n`` 1), the seed and the stop sequences; the text is also
cut client-side before the first stop sequence, as the ``hf`` backend does. With a chat
template (``prompt.chat_template`` on, or auto on a server that has one): ``POST
{base_url}/chat/completions`` with the conversation as messages, so the server's own
template renders it (``chat_template()`` says ``source: server``; the text it renders is not
known here). Whether the server has a template is probed once, when first asked. With
reasoning-block markers, stop sequences are applied client-side only after the block
(the server would cut the reasoning itself); the finish reason is then ``stop`` only when
one cut the text there, else the server's ``length``, or ``eos`` for its ``stop``.

Log-likelihood: prompt log-probabilities, as lm-evaluation-harness's ``local-completions``
model gets them. Trailing whitespace of the context moves to the continuation (as in the
``hf`` backend); ``context + continuation`` is sent with ``echo: true``, ``logprobs: 1`` and
``max_tokens: 1`` (llama-cpp-python reads ``max_tokens: 0`` as "until the context is full",
so the one generated token is requested and dropped, as lm-evaluation-harness does). The
continuation's tokens are found by character offset (``text_offset``): token ``i`` spans
``[text_offset[i], text_offset[i + 1])``; it belongs to the continuation when it ends after
the boundary or starts at or after it. **A token that straddles the boundary** (it covers
the last characters of the context and the first of the continuation, which happens when
the tokenizer merges across it) **counts as a continuation token**, so every character of
the continuation is scored; the ``hf`` backend instead splits by token counts of the
context tokenized alone, so such requests can differ slightly between the two backends.
``is_greedy`` compares each token's log-probability with the top-1 alternative. With
``token_detail``, ``token_logprobs`` are filled but ``token_zscores`` stay empty: they need
the full next-token distribution, which a server does not return (Min-K%++ fails clearly on
this backend, see ``contamination._membership``). The first token of a prompt has no
log-probability in this API; when it belongs to the continuation (an empty context) it is
left out of the sum and of ``n_tokens``.

A probe at start-up echoes a text repeated three times and checks that the server's
prompt log-probabilities belong to their own tokens (where a model copies, the top-1
alternative at position ``i`` is token ``i``, not ``i + 1``): llama-cpp-python 0.3 returns
them one position off for models that add no BOS token, and log-likelihood requests to
such a server, or to one without prompt log-probabilities, fail with a ``ModelError``
saying so (``info()["prompt_logprobs"]`` records the probe's verdict). The probe has the
retries of any request; when it still gets no answer (``not probed: why``) it runs again at
the first log-likelihood request, and those requests fail while it cannot run.

Context windows: the window is ``model.max_length`` or, when the server reports it,
``max_model_len`` from ``/models``. When the server also has a tokenize endpoint (found once
at start: llama-cpp-python's ``/extras/tokenize``, vLLM's ``/tokenize``, llama.cpp's
``/tokenize``), prompts are counted client-side: ``overflow: skip`` answers
``context_overflow`` and the ``truncate_*`` policies cut the prompt's tokens and send their
detokenized text; a log-likelihood prompt longer than the window less one token (the
generated one) keeps its last tokens, as the ``hf`` backend cuts such requests from the left
(it keeps ``max_length + 1`` tokens, this backend ``max_length - 1``). Otherwise a prompt
is sent as is; when the server rejects it for its length, ``skip`` answers
``context_overflow``, ``truncate_*`` fails with a ``ModelError`` naming the option, and a
log-likelihood request fails saying what is missing.

Requests: at most ``concurrency`` in flight (a thread pool), identical requests sent once,
results in request order; connection errors, timeouts, 429 and 5xx are retried up to
``max_retries`` times with exponential backoff and jitter (honouring ``Retry-After``); other
4xx fail at once. The API key is read from the environment variable ``api_key_env`` and
never recorded.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import email.utils
import http.client
import json
import os
import random
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import replace
from typing import Any, TypeVar

from pytest_llmeval._errors import ModelError
from pytest_llmeval.model._progress import report_progress
from pytest_llmeval.model._types import (
    ChatTemplate,
    GenerateRequest,
    GenerateResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    ModelSettings,
    cut_at_stop,
    fit_tokens,
    move_trailing_space,
    no_room,
)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# Server headers that say what answers (recorded with the run).
_IDENTITY_HEADERS = ("server", "x-powered-by", "via", "openai-version")
# Statuses worth retrying: the request may succeed later.
_RETRY_STATUSES = frozenset({408, 429})
# Sampling parameters outside the OpenAI API that some servers apply by default and that
# change greedy decoding: llama.cpp's servers default to repeat_penalty 1.1, a default of
# the server, not of the model. They are sent set to neutral; one the server rejects by
# name at start-up is dropped then, before the record says what every request sends.
_NEUTRAL_EXTRAS: dict[str, Any] = {"repeat_penalty": 1.0}
# Under --llm-set model.generation_config=neutral, also the model's own: vLLM applies the model's
# generation_config.json (its repetition_penalty) unless a request sets it.
_NEUTRAL_MODEL_EXTRAS: dict[str, Any] = {"repetition_penalty": 1.0}
_CONTEXT_MESSAGE = re.compile(
    r"context[ _-]?(length|window|size)|maximum context|too long|exceeds? the (model|max)"
    r"|must be <= \d+|input tokens",
    re.IGNORECASE,
)
_PROMPT_TOKENS = (
    r"(\d+) in your prompt",
    r"(\d+) in the messages",
    r"has (\d+) input tokens",
    r"Given: (\d+) `inputs` tokens",
    r"input \((\d+) tokens\)",
    r"total length (\d+)",
    r"Requested tokens \((\d+)\)",
)
_WINDOW = (
    r"maximum context length is (\d+)",
    r"context length \((\d+) tokens\)",
    r"context length (\d+)",
    r"context window of (\d+)",
    r"must be <= (\d+)",
)
# A text whose second and third copies any language model predicts token by token (it
# copies): the prompt-logprob alignment probe.
PROBE_TEXT = "; ".join(["red apple, blue river, green stone, yellow house, purple cloud"] * 3)
# The alignment probe's verdict when it got no answer (no connection, or a retryable
# status after its retries): it runs again at the first log-likelihood request.
NOT_PROBED = "not probed"
NO_PROMPT_LOGPROBS = (
    "returned no prompt log-probabilities (a completions request with echo and logprobs): "
    "multiple-choice tasks and other log-likelihood requests need a server that scores the "
    "prompt, such as vLLM or llama.cpp (llama-cpp-python's server started with "
    "--logits_all true); OpenAI's own API does not"
)


class HTTPStatusError(Exception):
    """A non-2xx answer (after retries for retryable statuses)."""

    def __init__(
        self, url: str, status: int, message: str, data: Any, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{url}: HTTP {status}: {message}")
        self.url = url
        self.status = status
        self.message = message
        self.data = data
        self.retry_after = retry_after


def _error_message(body: bytes) -> tuple[str, Any]:
    """The server's error message (OpenAI, FastAPI and TGI shapes) and the parsed body."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:500] or "(no message)", None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"]), data
        for key in ("message", "detail", "error"):
            if data.get(key):
                return str(data[key]), data
    return text[:500], data


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (seconds or an HTTP date); None when absent/bad."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return max(0.0, (when - _dt.datetime.now(_dt.timezone.utc)).total_seconds())


def _first_int(patterns: Sequence[str], text: str) -> int | None:
    for pattern in patterns:
        match = re.search(pattern, text)
        if match:
            return int(match.group(1))
    return None


class _Tokenizer:
    """A server's tokenize/detokenize endpoints (one of three known flavours)."""

    def __init__(self, kind: str, root: str, model: str) -> None:
        self.kind = kind
        self.model = model
        if kind == "llama-cpp-python":
            self.tokenize_url = root + "/extras/tokenize"
            self.detokenize_url = root + "/extras/detokenize"
        else:
            self.tokenize_url = root + "/tokenize"
            self.detokenize_url = root + "/detokenize"
        self.can_detokenize = False

    def tokenize_body(self, text: str) -> dict[str, Any]:
        if self.kind == "llama-cpp-python":
            return {"model": self.model, "input": text}
        if self.kind == "vllm":
            return {"model": self.model, "prompt": text}
        return {"content": text, "add_special": True}

    def detokenize_body(self, tokens: list[int]) -> dict[str, Any]:
        if self.kind == "llama.cpp":
            return {"tokens": tokens}
        return {"model": self.model, "tokens": tokens}

    @staticmethod
    def tokens(data: Any) -> list[int] | None:
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            return None
        return [int(t) for t in tokens]

    def text(self, data: Any) -> str | None:
        key = {"llama-cpp-python": "text", "vllm": "prompt", "llama.cpp": "content"}[self.kind]
        value = data.get(key) if isinstance(data, dict) else None
        return value if isinstance(value, str) else None


class OpenAIBackend:
    """A model behind an OpenAI-compatible ``/completions`` endpoint (see the module doc).

    ``batch_size`` is the concurrency: the plugin hands the backend that many items at a
    time, and their requests are sent with at most ``concurrency`` in flight.
    """

    backoff_base = 0.5  # seconds before the first retry (doubled each retry, jittered)
    backoff_cap = 30.0  # the longest backoff between two attempts
    retry_after_cap = 120.0  # the longest Retry-After honoured

    def __init__(self, settings: ModelSettings) -> None:
        assert settings.base_url  # ModelSettings checked the server settings
        parsed = urllib.parse.urlsplit(settings.base_url)
        self.settings = settings
        self.base_url = settings.base_url.rstrip("/")
        path = parsed.path.rstrip("/")
        if path.endswith("/v1"):
            path = path[: -len("/v1")]
        self.root = urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, path, "", ""))
        self.concurrency = settings.concurrency
        self.max_retries = settings.max_retries
        self.timeout = settings.request_timeout
        self._api_key = os.environ.get(settings.api_key_env) if settings.api_key_env else None
        self._random = random.Random()  # jitter only; never the global generator
        self._lock = threading.Lock()
        self._extras = dict(_NEUTRAL_EXTRAS)
        if settings.generation_config == "neutral":
            self._extras.update(_NEUTRAL_MODEL_EXTRAS)
        # Where a request with the extras was first answered (the start-up check), and
        # whether they are fixed: after start-up a rejected one is an error, not dropped.
        self._extras_checked: str | None = None
        self._extras_settled = False
        self.requests_sent = 0
        self.server_headers: dict[str, str] = {}
        self.server_model: dict[str, Any] | None = None
        self.served_models: list[str] = []
        self._probe_models()
        self.max_length: int | None = settings.max_length or (
            int(self.server_model["max_model_len"])
            if self.server_model and isinstance(self.server_model.get("max_model_len"), int)
            else None
        )
        self.tokenizer = self._probe_tokenizer()
        self._probe_lock = threading.Lock()  # one alignment probe at a time
        self.prompt_logprobs = self._probe_prompt_logprobs()
        if self._extras_checked is None:  # the echo probe got no answer
            self._probe_extras()
        self._extras_settled = True
        self._chat: ChatTemplate | None = None
        self._chat_probed: str | None = None  # what the chat probe found, once run

    # ------------------------------------------------------------------ HTTP

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _once(self, url: str, body: Mapping[str, Any] | None) -> tuple[Any, dict[str, str]]:
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(
            url, data=data, headers=self._headers(), method="GET" if body is None else "POST"
        )
        with self._lock:
            self.requests_sent += 1
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read()
                headers = {k.lower(): v for k, v in response.headers.items()}
        except urllib.error.HTTPError as exc:
            try:
                raw_error = exc.read()
            except (OSError, http.client.HTTPException):
                raw_error = b""
            message, parsed = _error_message(raw_error)
            after = _retry_after(exc.headers.get("Retry-After") if exc.headers else None)
            raise HTTPStatusError(url, exc.code, message, parsed, after) from None
        try:
            return json.loads(raw.decode("utf-8")), headers
        except ValueError:
            raise ModelError(f"{url}: the server's answer is not JSON: {raw[:200]!r}") from None

    def _backoff(self, attempt: int) -> float:
        delay = min(self.backoff_cap, self.backoff_base * 2.0**attempt)
        return delay * (0.5 + 0.5 * self._random.random())

    def _call(
        self, url: str, body: Mapping[str, Any] | None = None, *, retries: int | None = None
    ) -> tuple[Any, dict[str, str]]:
        """One request with retries; raises ``HTTPStatusError`` for a non-retryable status
        (or a retryable one after the last attempt) and ``ModelError`` when the server
        cannot be reached."""
        retries = self.max_retries if retries is None else retries
        for attempt in range(retries + 1):
            try:
                return self._once(url, body)
            except HTTPStatusError as exc:
                retryable = _retryable(exc.status)
                # A server that cannot score prompts says so with a 500; retrying won't help.
                if not retryable or attempt == retries or "logits_all" in exc.message:
                    raise
                wait = (
                    min(exc.retry_after, self.retry_after_cap)
                    if exc.retry_after is not None
                    else self._backoff(attempt)
                )
            except (
                urllib.error.URLError,
                TimeoutError,
                ConnectionError,
                http.client.HTTPException,
            ) as exc:
                if attempt == retries:
                    reason = getattr(exc, "reason", None) or exc
                    raise ModelError(
                        f"{url}: no answer from the server after {attempt + 1} attempt(s): "
                        f"{reason} (--llm-set openai.base_url={self.settings.base_url}, "
                        f"--llm-set openai.max_retries={self.max_retries})"
                    ) from None
                wait = self._backoff(attempt)
            time.sleep(wait)
        raise AssertionError("not reached")  # pragma: no cover

    def _fail(self, exc: HTTPStatusError) -> ModelError:
        return ModelError(f"{exc.url}: HTTP {exc.status}: {exc.message}")

    def _completion(
        self, body: dict[str, Any], retries: int | None = None, path: str = "/completions"
    ) -> dict[str, Any]:
        """POST /completions (or ``path``) with the neutral sampling extras the server
        accepts. One it rejects by name is dropped during start-up only; afterwards the
        record states what every request sends, so such a rejection is an error."""
        url = self.base_url + path
        while True:
            with self._lock:
                extras = dict(self._extras)
            try:
                data, _ = self._call(url, {**body, **extras}, retries=retries)
            except HTTPStatusError as exc:
                rejected = [k for k in extras if exc.status in (400, 422) and k in exc.message]
                if not rejected:
                    raise
                if self._extras_settled:
                    raise self._late_rejection(url, rejected, extras, exc) from None
                with self._lock:
                    for key in rejected:
                        self._extras.pop(key, None)
                continue
            if self._extras_checked is None:
                self._extras_checked = path
            if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
                raise ModelError(f"{url}: unexpected answer (no 'choices'): {str(data)[:300]}")
            if not data["choices"] or not isinstance(data["choices"][0], dict):
                raise ModelError(f"{url}: the answer has no completion choice")
            return data

    def _late_rejection(
        self, url: str, rejected: list[str], extras: dict[str, Any], exc: HTTPStatusError
    ) -> ModelError:
        checked = (
            f"which {self._extras_checked} accepted at start-up"
            if self._extras_checked is not None
            else "which could not be checked at start-up (the server answered no request)"
        )
        return ModelError(
            f"{url}: the server rejected {', '.join(rejected)} (HTTP {exc.status}: "
            f"{exc.message}), {checked}; the run's record says every request sends "
            f"{extras} (decoding.generation_config.sent, the environment's "
            "backend.sampling_extras), so no request is sent without it. Run again once "
            "the server answers consistently: the fields are checked again at start-up."
        )

    def _map(self, fn: Callable[[K], V], keys: Sequence[K]) -> dict[K, V]:
        """``fn`` over the distinct ``keys`` with at most ``concurrency`` calls at once."""
        unique = list(dict.fromkeys(keys))
        if not unique:
            return {}
        if len(unique) == 1 or self.concurrency == 1:
            done: dict[K, V] = {}
            for key in unique:
                done[key] = fn(key)
                report_progress(len(done), len(unique))  # the progress line
            return done
        futures: dict[K, Future[V]] = {}
        with ThreadPoolExecutor(
            max_workers=min(self.concurrency, len(unique)), thread_name_prefix="llmeval-openai"
        ) as pool:
            for key in unique:
                futures[key] = pool.submit(fn, key)
            try:
                # Answers as they come, counted in this (the caller's) thread, where the
                # progress callback is installed.
                for finished, future in enumerate(as_completed(futures.values()), 1):
                    if future.exception() is not None:
                        break  # raised below, in the order of the keys
                    report_progress(finished, len(unique))
                return {key: future.result() for key, future in futures.items()}
            except BaseException:
                for future in futures.values():
                    future.cancel()
                raise

    # ------------------------------------------------------------------ start-up probes

    def _probe_models(self) -> None:
        url = self.base_url + "/models"
        try:
            data, headers = self._call(url)
        except HTTPStatusError as exc:
            raise ModelError(
                f"{url}: HTTP {exc.status}: {exc.message} (is --llm-set openai.base_url the "
                "server's "
                "OpenAI API root, e.g. http://host:port/v1?)"
            ) from None
        self.server_headers = {k: headers[k] for k in _IDENTITY_HEADERS if k in headers}
        entries = data.get("data") if isinstance(data, dict) else None
        models = [m for m in entries or [] if isinstance(m, dict) and "id" in m]
        self.served_models = [str(m["id"]) for m in models]
        for entry in models:
            if str(entry["id"]) == self.settings.model:
                # What identifies the served model: vLLM's root (the weights' path or hub
                # name) and parent (a LoRA's base), llama.cpp's meta (vocabulary, sizes,
                # parameters). No server reports a revision of the weights, and "created"
                # is the time of the answer (vLLM, llama.cpp), not of the model: a
                # redeployed model under the same name needs --llm-set openai.model_revision.
                self.server_model = {
                    k: entry[k]
                    for k in ("id", "max_model_len", "owned_by", "root", "parent", "meta")
                    if k in entry
                }
        if self.served_models and self.server_model is None:
            raise ModelError(
                f"--llm-model={self.settings.model}: the server at {self.base_url} serves "
                f"{', '.join(self.served_models)}; pass one of these names"
            )

    def chat_template(self) -> ChatTemplate | None:
        """The server's own chat template, when ``/chat/completions`` answers a one-token
        request (probed once): vLLM refuses chat requests for a model without a template,
        a server without the endpoint answers 404."""
        if self._chat_probed is not None:
            return self._chat
        body = {
            "model": self.settings.model,
            "messages": [{"role": "user", "content": "Hello"}],
            "max_tokens": 1,
            "temperature": 0.0,
        }
        url = self.base_url + "/chat/completions"
        try:
            self._call(url, body, retries=1)
        except HTTPStatusError as exc:
            if exc.status == 404 or (exc.status in (400, 422, 500) and "template" in exc.message):
                self._chat_probed = f"no chat template: HTTP {exc.status}: {exc.message[:200]}"
                return None
            raise self._fail(exc) from None
        self._chat_probed = "the server answers /chat/completions"
        self._chat = ChatTemplate(source="server", sha256=None, render=None)
        return self._chat

    def _probe_tokenizer(self) -> _Tokenizer | None:
        """The first tokenize endpoint that tokenizes a probe text (one attempt each)."""
        probe = "Hello world"
        for kind in ("llama-cpp-python", "vllm", "llama.cpp"):
            tokenizer = _Tokenizer(kind, self.root, self.settings.model)
            try:
                data, _ = self._call(
                    tokenizer.tokenize_url, tokenizer.tokenize_body(probe), retries=0
                )
            except (HTTPStatusError, ModelError):
                continue
            tokens = _Tokenizer.tokens(data)
            if not tokens:
                continue
            try:
                back, _ = self._call(
                    tokenizer.detokenize_url, tokenizer.detokenize_body(tokens), retries=0
                )
                tokenizer.can_detokenize = probe in (tokenizer.text(back) or "")
            except (HTTPStatusError, ModelError):
                tokenizer.can_detokenize = False
            return tokenizer
        return None

    def _probe_extras(self) -> None:
        """Which sampling extras the server takes, when the echo probe could not tell (it
        was refused for its own reason, or got no answer): a one-token generation on
        /completions or, where that endpoint refuses it, /chat/completions. A field
        rejected by name is dropped here, before anything records what requests send."""
        body: dict[str, Any] = {
            "model": self.settings.model,
            "max_tokens": 1,
            "temperature": 0.0,
            "top_p": 1.0,
            "n": 1,
            "seed": self.settings.seed,
        }
        try:
            self._completion({**body, "prompt": "Hello"})
            return
        except HTTPStatusError as exc:
            if _retryable(exc.status):  # no answer: the chat endpoint would not give one
                return
        except ModelError:
            return
        chat = {**body, "messages": [{"role": "user", "content": "Hello"}]}
        with contextlib.suppress(HTTPStatusError, ModelError):
            self._completion(chat, path="/chat/completions")

    def _echo_body(self, prompt: str) -> dict[str, Any]:
        return {
            "model": self.settings.model,
            "prompt": prompt,
            "max_tokens": 1,
            "temperature": 0.0,
            "top_p": 1.0,
            "n": 1,
            "logprobs": 1,
            "echo": True,
            "seed": self.settings.seed,
        }

    def _probe_prompt_logprobs(self) -> str:
        """Whether the server scores prompts, and whether each log-probability belongs to
        its own token: ``aligned``, ``shifted`` (one token off: llama-cpp-python 0.3 does
        this for models that add no BOS token), ``unavailable: why``, ``unknown`` (the
        answer decides neither) or ``not probed: why`` (no answer: the server could not
        be reached, or a retryable status persisted through the retries).

        A text repeated three times is echoed (with the retries of any request); where
        the top-1 alternative at position ``i`` names token ``i`` the values are aligned,
        where it names token ``i + 1`` they belong to the next position."""
        text = PROBE_TEXT
        try:
            data = self._completion(self._echo_body(text))
        except HTTPStatusError as exc:
            lowered = exc.message.lower()
            if not _retryable(exc.status) or any(
                w in lowered for w in ("echo", "logprobs", "logits_all")
            ):
                return f"unavailable: HTTP {exc.status}: {exc.message}"
            return f"{NOT_PROBED}: HTTP {exc.status}: {exc.message}"
        except ModelError as exc:
            return f"{NOT_PROBED}: {exc}"
        logprobs = data["choices"][0].get("logprobs")
        if not isinstance(logprobs, dict):
            return "unavailable: no logprobs in an echoed completion"
        tokens = logprobs.get("tokens")
        offsets = logprobs.get("text_offset")
        tops = logprobs.get("top_logprobs")
        if not (isinstance(tokens, list) and isinstance(offsets, list) and isinstance(tops, list)):
            return "unavailable: no token log-probabilities in an echoed completion"
        n = sum(1 for off in offsets if isinstance(off, int) and off < len(text))
        if n < 2:
            return "unavailable: only the generated token is scored (no prompt log-probabilities)"
        aligned = shifted = 0
        for i in range(1, n - 1):
            top = tops[i]
            if not isinstance(top, dict) or not top or tokens[i] == tokens[i + 1]:
                continue
            best = max(top, key=lambda key: float(top[key]))
            aligned += best == tokens[i]
            shifted += best == tokens[i + 1]
        if shifted >= 3 and shifted > 2 * aligned:
            return "shifted"
        if aligned >= 3 and aligned > 2 * shifted:
            return "aligned"
        return "unknown"

    def _tokenize(self, text: str) -> list[int]:
        assert self.tokenizer is not None
        try:
            data, _ = self._call(self.tokenizer.tokenize_url, self.tokenizer.tokenize_body(text))
        except HTTPStatusError as exc:
            raise self._fail(exc) from None
        tokens = _Tokenizer.tokens(data)
        if tokens is None:
            raise ModelError(f"{self.tokenizer.tokenize_url}: no token list in {str(data)[:200]}")
        return tokens

    def _detokenize(self, tokens: list[int]) -> str:
        assert self.tokenizer is not None
        try:
            data, _ = self._call(
                self.tokenizer.detokenize_url, self.tokenizer.detokenize_body(tokens)
            )
        except HTTPStatusError as exc:
            raise self._fail(exc) from None
        text = self.tokenizer.text(data)
        if text is None:
            raise ModelError(f"{self.tokenizer.detokenize_url}: no text in {str(data)[:200]}")
        return text

    # ------------------------------------------------------------------ protocol

    @property
    def batch_size(self) -> int:
        return self.concurrency

    def decoding(self) -> dict[str, Any]:
        """How the server is asked to choose tokens, as records state it: what each
        request sends, and that the rest is the server's (the client cannot see it)."""
        rule = self.settings.generation_config
        with self._lock:
            sent = dict(self._extras)
        return {
            "do_sample": False,
            "temperature": 0.0,
            "top_p": 1.0,
            "generation_config": {
                "rule": rule,
                "source": "the server",
                "sent": sent,
                "applied": (
                    "the server's defaults for what a request does not set (vLLM: the "
                    "model's generation_config.json, its --generation-config auto)"
                    if rule == "model"
                    else "none that the requests could turn off (the fields sent are neutral; "
                    "a server that rejected one by name applies its own default)"
                ),
            },
        }

    def info(self) -> Mapping[str, Any]:
        return {
            "backend": "openai",
            "model": self.settings.model,
            "base_url": self.base_url,
            "server_model": self.server_model,
            "served_models": self.served_models,
            "server": self.server_headers,
            "tokenize_endpoint": (
                None
                if self.tokenizer is None
                else {"kind": self.tokenizer.kind, "url": self.tokenizer.tokenize_url}
            ),
            "sampling_extras": dict(self._extras),
            "decoding": self.decoding(),
            "prompt_logprobs": self.prompt_logprobs,
            "chat_template": self._chat.describe() if self._chat is not None else None,
            "chat_probe": self._chat_probed,
            "device": None,
            "dtype": None,
            "batch_size": self.batch_size,
            "concurrency": self.concurrency,
            "max_retries": self.max_retries,
            "request_timeout": self.timeout,
            "max_length": self.max_length,
            "seed": self.settings.seed,
            # Nothing is seeded in this process: the seed goes to the server with every
            # request (``seed`` in the body), which applies it or not.
            "seeds": {"request_seed": self.settings.seed},
            "deterministic_algorithms": None,  # the server's kernels are not known here
            "api_key_env": self.settings.api_key_env,
            "model_sha256_reason": (
                "remote model behind an OpenAI-compatible server: its weights cannot be "
                "hashed from the client; it is identified by the served name and what the "
                "server reports (server_model, server)"
            ),
        }

    # ------------------------------------------------------------------ log-likelihood

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        if self.prompt_logprobs.startswith(NOT_PROBED):
            # The start-up probe got no answer: ask again before any value is returned.
            with self._probe_lock:
                if self.prompt_logprobs.startswith(NOT_PROBED):
                    self.prompt_logprobs = self._probe_prompt_logprobs()
            if self.prompt_logprobs.startswith(NOT_PROBED):
                raise ModelError(
                    f"the server at {self.base_url}: whether its prompt log-probabilities "
                    "belong to their own tokens (llama-cpp-python 0.3 returns them one token "
                    "off for models that add no BOS token) could not be checked: the probe "
                    "got no answer at start-up nor now "
                    f"({self.prompt_logprobs.removeprefix(NOT_PROBED + ': ')}), so no "
                    "log-likelihood is computed unchecked; it is tried again with the next "
                    "requests"
                )
        if self.prompt_logprobs.startswith("unavailable"):
            raise ModelError(
                f"the server at {self.base_url} {NO_PROMPT_LOGPROBS} ({self.prompt_logprobs})"
            )
        if self.prompt_logprobs == "shifted":
            raise ModelError(
                f"the server at {self.base_url} returns prompt log-probabilities shifted by one "
                "token (each value is that of the next position, as llama-cpp-python 0.3 does "
                "for models that add no BOS token): log-likelihoods would be wrong. Use a "
                "server that scores prompts correctly (vLLM), or make llama-cpp-python's "
                "server add a BOS token (--kv_overrides tokenizer.ggml.add_bos_token=bool:true; "
                "this changes the model's input)."
            )
        keys = [(*_split(r.context, r.continuation), r.overflow) for r in requests]
        scored = self._map(self._score, keys)
        out = []
        for req, key in zip(requests, keys, strict=True):
            result = scored[key]
            if result.token_logprobs and not req.token_detail:
                result = replace(result, token_logprobs=())
            out.append(result)
        return out

    def _score(self, key: tuple[str, int, str]) -> LoglikelihoodResult:
        """One request's result; a problem of this request alone (an empty continuation,
        a context that does not fit under ``skip``) is its result, not an exception."""
        prompt, boundary, overflow = key
        if boundary >= len(prompt):
            return _ll_error(f"empty continuation after {prompt[-40:]!r}: nothing to score")
        truncated = 0
        if self.tokenizer is not None and self.max_length is not None:
            tokens = self._tokenize(prompt)
            if len(tokens) > self.max_length - 1:
                if overflow == "skip":
                    return LoglikelihoodResult(
                        logprob=0.0,
                        is_greedy=False,
                        n_tokens=0,
                        context_overflow=True,
                        n_context_tokens=len(tokens),
                        context_window=self.max_length,
                    )
                if overflow != "truncate_left":
                    return _ll_error(
                        f"multiple_choice.overflow: {overflow} cannot be applied by "
                        "--llm-backend=openai (it cuts contexts from the left only); use "
                        "truncate_left or skip, or the hf backend"
                    )
                try:
                    cut, boundary = self._cut_left(prompt, boundary, tokens)
                except ModelError as exc:  # this request's continuation is too long
                    return _ll_error(str(exc))
                truncated = len(tokens) - len(self._tokenize(cut))
                prompt = cut
        try:
            data = self._completion(self._echo_body(prompt))
        except HTTPStatusError as exc:
            if any(word in exc.message.lower() for word in ("echo", "logprobs", "logits_all")):
                raise ModelError(
                    f"the server at {self.base_url} {NO_PROMPT_LOGPROBS}; it said: "
                    f"HTTP {exc.status}: {exc.message}"
                ) from None
            if exc.status in (400, 413, 422) and _is_context_error(exc):
                if overflow == "skip":
                    return LoglikelihoodResult(
                        logprob=0.0,
                        is_greedy=False,
                        n_tokens=0,
                        context_overflow=True,
                        n_context_tokens=_first_int(_PROMPT_TOKENS, exc.message),
                        context_window=self.max_length or _first_int(_WINDOW, exc.message),
                    )
                return _ll_error(
                    f"a log-likelihood request does not fit the server's context window "
                    f"({exc.message}). With multiple_choice.overflow: {overflow} this "
                    "backend cuts such requests when the window is known (--llm-set "
                    "model.max_length, "
                    "or max_model_len from /models) and the server has tokenize and "
                    f"detokenize endpoints{self._tokenizer_state()}; or use overflow: skip."
                )
            raise self._fail(exc) from None
        total, greedy, logprobs = prompt_logprobs(
            data["choices"][0], prompt, boundary, self.base_url
        )
        return LoglikelihoodResult(
            logprob=total,
            is_greedy=greedy,
            n_tokens=len(logprobs),
            token_logprobs=logprobs,
            truncated_tokens=truncated,
            context_window=self.max_length if truncated else None,
        )

    def _cut_left(self, prompt: str, boundary: int, tokens: list[int]) -> tuple[str, int]:
        """A prompt longer than the window less one token (the generated one) keeps its
        last tokens, as the hf backend keeps the last ``max_length + 1`` of a request's
        tokens; the continuation must survive whole."""
        assert self.tokenizer is not None and self.max_length is not None
        room = self.max_length - 1
        if len(tokens) <= room:
            return prompt, boundary
        continuation = prompt[boundary:]
        if not self.tokenizer.can_detokenize:
            raise ModelError(
                f"a log-likelihood request of {len(tokens)} tokens does not fit the context "
                f"window ({self.max_length}) and the server's detokenize endpoint "
                f"({self.tokenizer.detokenize_url}) does not answer, so it cannot be cut"
            )
        keep = room
        for _ in range(4):
            text = self._detokenize(tokens[-keep:]) if keep > 0 else ""
            if not text.endswith(continuation) or len(text) == len(continuation):
                break
            count = len(self._tokenize(text))
            if count <= room:
                return text, len(text) - len(continuation)
            keep -= count - room
        raise ModelError(
            f"a log-likelihood request of {len(tokens)} tokens does not fit the context window "
            f"({self.max_length}) even when its context is cut: the continuation "
            f"{continuation[:80]!r} alone is too long"
        )

    # ------------------------------------------------------------------ generation

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        runnable = []
        done: dict[GenerateRequest, GenerateResult] = {}
        for req in requests:
            if self.max_length is not None and req.max_new_tokens >= self.max_length:
                done[req] = no_room(req.max_new_tokens, self.max_length)
            else:
                runnable.append(req)
        done.update(self._map(self._generate_one, runnable))
        return [done[r] for r in requests]

    @staticmethod
    def _overflow(prompt_tokens: int | None, window: int | None) -> GenerateResult:
        return GenerateResult(
            text="",
            n_tokens=0,
            finish_reason="context_overflow",
            n_prompt_tokens=prompt_tokens,
            context_window=window,
        )

    def _generate_one(self, req: GenerateRequest) -> GenerateResult:
        prompt = req.context
        n_prompt: int | None = None
        truncated = 0
        chat = bool(req.messages)
        # A conversation is rendered by the server: its tokens cannot be counted here.
        counted = not chat and self.tokenizer is not None and self.max_length is not None
        if counted:
            assert self.max_length is not None
            budget = self.max_length - req.max_new_tokens
            tokens = self._tokenize(prompt)
            n_prompt = len(tokens)
            if n_prompt > budget:
                if req.overflow == "skip":
                    return self._overflow(n_prompt, self.max_length)
                prompt, kept = self._truncate(tokens, budget, req.overflow)
                truncated = n_prompt - kept
        body: dict[str, Any] = {
            "model": self.settings.model,
            "max_tokens": req.max_new_tokens,
            "temperature": 0.0,
            "top_p": 1.0,
            "n": 1,
            "seed": self.settings.seed,
        }
        if chat:
            body["messages"] = [{"role": r, "content": c} for r, c in req.messages]
        else:
            body["prompt"] = prompt
        # Stop sequences would cut a reasoning block on the server: with markers they are
        # applied here only, after the block.
        sent_stop = list(req.stop) if req.thinking is None else []
        if sent_stop:
            body["stop"] = sent_stop
        path = "/chat/completions" if chat else "/completions"
        try:
            data = self._completion(body, path=path)
        except HTTPStatusError as exc:
            if exc.status in (400, 413, 422) and _is_context_error(exc):
                return self._rejected_for_length(exc, req, n_prompt)
            raise self._fail(exc) from None
        choice = data["choices"][0]
        message = choice.get("message")
        text = message.get("content") if chat and isinstance(message, dict) else choice.get("text")
        if not isinstance(text, str):
            raise ModelError(f"{self.base_url}{path}: the answer has no text")
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        assert isinstance(usage, dict)
        text, hit = cut_at_stop(text, req.stop, req.thinking, req.thinking_open)
        # A stop sequence that cut the text here (outside a reasoning block) ended it;
        # otherwise the server's reason, read against the stop sequences it was sent.
        finish = "stop" if hit else _finish_reason(choice, sent_stop)
        error = None
        if finish is None:  # a content filter, an aborted request, no reason at all
            finish = "error"
            error = (
                f"the server at {self.base_url} ended the generation with finish_reason "
                f"{choice.get('finish_reason')!r} (neither 'stop' nor 'length'): the text may "
                f"be cut short ({len(text)} characters, ending {text[-60:]!r}), so it is not "
                "scored"
            )
        n_tokens = usage.get("completion_tokens")
        server_prompt = usage.get("prompt_tokens")
        return GenerateResult(
            text=text,
            n_tokens=int(n_tokens) if isinstance(n_tokens, int) else None,  # not said
            finish_reason=finish,
            error=error,
            n_prompt_tokens=(
                n_prompt
                if n_prompt is not None
                else int(server_prompt)
                if isinstance(server_prompt, int)
                else None
            ),
            truncated_tokens=truncated,
            context_window=self.max_length,
        )

    def _rejected_for_length(
        self, exc: HTTPStatusError, req: GenerateRequest, n_prompt: int | None
    ) -> GenerateResult:
        """The server rejected the prompt for its length: under ``overflow: skip`` the item
        does not fit (with the prompt's tokens and the window, as the server says them);
        another policy could not be applied here, which is an error saying why."""
        tokens_in_message = _first_int(_PROMPT_TOKENS, exc.message)
        if isinstance(exc.data, dict):  # llama.cpp's server: n_prompt_tokens, n_ctx
            error = exc.data.get("error")
            if isinstance(error, dict) and isinstance(error.get("n_prompt_tokens"), int):
                tokens_in_message = int(error["n_prompt_tokens"])
        if req.overflow == "skip":
            window = self.max_length or _first_int(_WINDOW, exc.message)
            return self._overflow(tokens_in_message or n_prompt, window)
        raise ModelError(
            f"generate.overflow: {req.overflow} cannot be applied by --llm-backend=openai "
            f"here: the server at {self.base_url} rejected a prompt for its length "
            f"({exc.message}) and prompts can only be cut client-side when the server "
            "has a tokenize endpoint (vLLM /tokenize, llama.cpp /tokenize, "
            "llama-cpp-python /extras/tokenize) and the context window is known "
            f"(--llm-set model.max_length){self._tokenizer_state()}. Use overflow: skip, or the "
            "hf backend."
        ) from None

    def _tokenizer_state(self) -> str:
        if self.tokenizer is None:
            return "; this server has none"
        if self.max_length is None:
            return "; the window is unknown"
        return ""

    def _truncate(self, tokens: list[int], budget: int, overflow: str) -> tuple[str, int]:
        """The prompt cut to ``budget`` tokens as text, and its token count. The text is
        tokenized again to check the cut (a seam can tokenize differently); it is cut
        further while it is too long."""
        assert self.tokenizer is not None
        if not self.tokenizer.can_detokenize:
            raise ModelError(
                f"generate.overflow: {overflow} needs the server's detokenize endpoint "
                f"({self.tokenizer.detokenize_url} did not answer); use overflow: skip"
            )
        target = budget
        for _ in range(4):
            text = self._detokenize(fit_tokens(tokens, target, overflow))
            count = len(self._tokenize(text))
            if count <= budget:
                return text, count
            target -= count - budget
        raise ModelError(
            f"generate.overflow: {overflow}: could not cut a prompt of {len(tokens)} tokens "
            f"to {budget} through the server's tokenizer"
        )


def _split(context: str, continuation: str) -> tuple[str, int]:
    """The prompt ``context + continuation`` after moving the context's trailing whitespace
    to the continuation, and the character index where the continuation starts."""
    context, continuation = move_trailing_space(context, continuation)
    return context + continuation, len(context)


def _ll_error(message: str) -> LoglikelihoodResult:
    return LoglikelihoodResult(logprob=0.0, is_greedy=False, n_tokens=0, error=message)


def _retryable(status: int) -> bool:
    """A status worth retrying: the request may succeed later."""
    return status in _RETRY_STATUSES or status >= 500


def _is_context_error(exc: HTTPStatusError) -> bool:
    data = exc.data if isinstance(exc.data, dict) else {}
    error = data.get("error") if isinstance(data.get("error"), dict) else {}
    assert isinstance(error, dict)
    if error.get("code") == "context_length_exceeded":
        return True
    if error.get("type") == "exceed_context_size_error":
        return True
    return bool(_CONTEXT_MESSAGE.search(exc.message))


def _finish_reason(choice: Mapping[str, Any], sent: Sequence[str]) -> str | None:
    """Ours from the server's, for a text that no stop sequence cut client-side (a stop
    sequence left in such a text is inside a reasoning block, where stops do not apply):
    ``length`` is ``length``; TGI's own ``eos_token`` and ``stop_sequence`` are ``eos`` and
    ``stop``; any other reason but ``stop`` (``content_filter``, vLLM's ``abort``, none)
    is None: the text may be cut short. The server's ``stop`` is ``eos``
    when the request was sent no stop sequences (none, or held back for a reasoning
    block) or the server says the end-of-sequence token stopped it (vLLM's
    ``stop_reason`` None, SGLang's ``matched_stop`` a token id), else ``stop`` (servers
    cut a matched stop sequence out of the text, so without those fields a stop-sequence
    hit and EOS look alike; with stop sequences sent, a stop-sequence hit is the
    likelier)."""
    reason = choice.get("finish_reason")
    if reason == "length":
        return "length"
    # Text Generation Inference before 2.2.1 (and servers built on it) named its reasons
    # itself: the end-of-sequence token, a stop sequence.
    if reason == "eos_token":
        return "eos"
    if reason == "stop_sequence":
        return "stop"
    if reason != "stop":
        return None
    if not sent:
        return "eos"
    if "stop_reason" in choice:
        return "eos" if choice["stop_reason"] is None else "stop"
    if "matched_stop" in choice:
        return "stop" if isinstance(choice["matched_stop"], str) else "eos"
    return "stop"


def prompt_logprobs(
    choice: Mapping[str, Any], prompt: str, boundary: int, base_url: str
) -> tuple[float, bool, tuple[float, ...]]:
    """The continuation's summed log-probability, whether it is greedy, and its per-token
    log-probabilities, from an echoed completion choice (see the module doc for the
    boundary rule)."""
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        raise ModelError(f"the server at {base_url} {NO_PROMPT_LOGPROBS}")
    offsets = logprobs.get("text_offset")
    values = logprobs.get("token_logprobs")
    tops = logprobs.get("top_logprobs")
    if not isinstance(offsets, list) or not isinstance(values, list) or not offsets:
        raise ModelError(f"the server at {base_url} {NO_PROMPT_LOGPROBS}")
    if len(values) != len(offsets):
        raise ModelError(
            f"the server at {base_url} returned {len(values)} token log-probabilities for "
            f"{len(offsets)} token offsets"
        )
    if not isinstance(tops, list) or len(tops) != len(offsets):
        tops = [None] * len(offsets)
    # Prompt tokens only: the generated token (max_tokens 1) starts at or after the end.
    n = sum(1 for off in offsets if isinstance(off, int) and off < len(prompt))
    if n == 0 or any(not isinstance(off, int) for off in offsets[:n]):
        raise ModelError(f"the server at {base_url} {NO_PROMPT_LOGPROBS}")
    chosen: list[float] = []
    greedy = True
    for i in range(n):
        start = offsets[i]
        end = offsets[i + 1] if i + 1 < n else len(prompt)
        if not (end > boundary or start >= boundary):
            continue
        value = values[i]
        if value is None:
            if i == 0:  # the API never scores a prompt's first token
                continue
            raise ModelError(
                f"the server at {base_url} gave no log-probability for prompt token {i}"
            )
        value = float(value)
        chosen.append(value)
        top = tops[i]
        if isinstance(top, dict) and top:
            greedy = greedy and value >= max(float(v) for v in top.values()) - 1e-6
        else:
            greedy = False
    if not chosen:
        raise ModelError(
            f"the server at {base_url} scored none of the continuation {prompt[boundary:]!r}"
        )
    return sum(chosen), greedy, tuple(chosen)
