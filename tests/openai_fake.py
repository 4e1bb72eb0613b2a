"""A scripted OpenAI-compatible server on loopback (``http.server`` in a thread).

It answers ``GET /v1/models`` and ``POST /v1/completions`` like a completions server with a
toy model: tokens are whitespace-led words (``" two"``), a token's log-probability is
``-len(token) / 10`` and generation echoes a fixed answer. Tests replace ``completions``
(or add ``routes``) to script errors, delays and odd answers; the server records every
request and the largest number of requests it was answering at once.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = re.compile(r"\s*\S+|\s+")


def toy_tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


def toy_logprob(token: str) -> float:
    return -len(token) / 10


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


def echo_logprobs(
    prompt: str, tokens: list[str] | None = None, *, shifted: bool = False
) -> dict[str, Any]:
    """An echoed completion of one generated token ``" !"`` with prompt log-probabilities
    (the first prompt token unscored, as the API does). ``shifted``: each position's top-1
    alternative is the next token, as when the values are one position off."""
    pieces = (tokens if tokens is not None else toy_tokens(prompt)) + [" !"]
    offsets, pos = [], 0
    for piece in pieces:
        offsets.append(pos)
        pos += len(piece)
    values: list[float | None] = [toy_logprob(p) for p in pieces]
    tops: list[dict[str, float] | None] = [{p: toy_logprob(p)} for p in pieces]
    if shifted:
        following = [*pieces[1:], "?"]
        tops = [{nxt: -0.01, p: toy_logprob(p)} for p, nxt in zip(pieces, following, strict=True)]
    values[0] = None
    tops[0] = None
    return {
        "text": prompt + " !",
        "finish_reason": "length",
        "logprobs": {
            "tokens": pieces,
            "text_offset": offsets,
            "token_logprobs": values,
            "top_logprobs": tops,
        },
    }


def default_completion(body: dict[str, Any]) -> Reply:
    prompt = str(body.get("prompt", ""))
    if body.get("echo"):
        choice = echo_logprobs(prompt)
    else:
        choice = {"text": f" answer to {prompt[-12:]}", "finish_reason": "length"}
    return Reply(
        body={
            "choices": [{"index": 0, **choice}],
            "usage": {"prompt_tokens": len(toy_tokens(prompt)), "completion_tokens": 3},
        }
    )


class FakeServer:
    def __init__(self) -> None:
        self.models: list[dict[str, Any]] = [
            {"id": "toy", "object": "model", "owned_by": "tests", "max_model_len": 4096}
        ]
        self.completions: Callable[[dict[str, Any]], Reply] = default_completion
        self.routes: dict[str, Callable[[dict[str, Any]], Reply]] = {}
        self.requests: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, reply: Reply) -> None:
                data = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, body: dict[str, Any]) -> None:
                with fake._lock:
                    fake.requests.append((self.path, body, dict(self.headers.items())))
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                try:
                    if self.path == "/v1/models":
                        reply = Reply(body={"object": "list", "data": fake.models})
                    elif self.path == "/v1/completions":
                        reply = fake.completions(body)
                    elif self.path in fake.routes:
                        reply = fake.routes[self.path](body)
                    else:
                        reply = Reply(404, {"detail": "Not Found"})
                    if reply.delay:
                        time.sleep(reply.delay)
                finally:
                    with fake._lock:
                        fake.in_flight -= 1
                self._answer(reply)

            def do_GET(self) -> None:
                self._handle({})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self._handle(json.loads(self.rfile.read(length) or b"{}"))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def completion_bodies(self) -> list[dict[str, Any]]:
        return [body for path, body, _ in self.requests if path == "/v1/completions"]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
