"""The openai backend on a real server: llama-cpp-python's OpenAI-compatible server running
the default model's GGUF (SmolLM2-135M-Instruct, Q4_1), against the in-process HF backend
on the same file dequantized to float32.

Both run real MMLU (letter log-likelihood) and GSM8K (generation) items through pytest as a
user would. The two are not expected to be identical: llama.cpp computes with Q4_1 kernels
(activations quantized to 8 bits), HF with the dequantized float32 weights; and the server
is started with a BOS token added to every prompt, because llama-cpp-python 0.3.36 returns
echoed prompt log-probabilities one token off for models without one (SmolLM2; the backend's
start-up probe refuses such a server), so it sees one token more than HF. The test asserts
what holds, prints the agreement numbers and checks the server side's run record. Prompt
scoring in llama-cpp-python's server costs ~0.1 s per prompt token, hence ``slow``.

Needs the optional extra ``server`` (``pip install -e ".[server]"``, builds llama.cpp);
skipped without it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_llmeval.eval import ItemResult
from pytest_llmeval.eval.agreement import compare_results
from pytest_llmeval.model._resolve import EMBEDDED, find_embedded_gguf

REPO = Path(__file__).resolve().parents[2]
LIMIT = 4
WINDOW = 2048  # the server's n_ctx; the HF run is given the same window


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def llama_cpp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama-cpp-python's server on the default model's GGUF, one thread, prompt logits on;
    yields its API root (``http://127.0.0.1:PORT/v1``)."""
    pytest.importorskip(
        "llama_cpp.server",
        reason="llama-cpp-python's server is not installed (optional extra: "
        'pip install -e ".[server]")',
    )
    gguf = find_embedded_gguf(EMBEDDED["smollm2-135m"])
    port = _free_port()
    log = tmp_path_factory.mktemp("llama-cpp-server") / "server.log"
    # fmt: off
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(gguf), "--model_alias", "smollm2-135m",
        "--host", "127.0.0.1", "--port", str(port),
        "--logits_all", "true", "--n_ctx", str(WINDOW),
        "--n_threads", "1", "--n_threads_batch", "1",
        "--seed", "1234", "--verbose", "false",
        "--kv_overrides", "tokenizer.ggml.add_bos_token=bool:true",
    ]
    # fmt: on
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(url + "/models", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the server did not answer in 180 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _records(run: Path, task: str) -> list[ItemResult]:
    lines = (run / "tasks" / f"{task}_output.jsonl").read_text().splitlines()
    fields = ItemResult.__dataclass_fields__
    return [
        ItemResult.from_dict({k: v for k, v in json.loads(line).items() if k in fields})
        for line in lines
    ]


def _run(pytester: pytest.Pytester, shared: Path, name: str, *args: str) -> Path:
    out = pytester.path / name
    result = pytester.runpytest_subprocess(
        str(REPO / "benchmarks" / "mmlu.yaml"),
        str(REPO / "benchmarks" / "gsm8k.yaml"),
        f"--llm-data-dir={shared}",
        f"--llm-output={out}",
        f"--llm-limit={LIMIT}",
        f"--llm-set=model.max_length={WINDOW}",
        "-p",
        "no:cacheprovider",
        *args,
        timeout=1200,
    )
    assert result.ret == 0, result.stdout.str()
    return next(out.iterdir())


@pytest.mark.slow
@pytest.mark.xdist_group("default-model")
def test_llama_cpp_server_agrees_with_the_hf_backend(
    pytester: pytest.Pytester,
    shared_benchmarks: Path,
    default_model: str,
    llama_cpp_server: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    started = time.monotonic()
    served = _run(
        pytester,
        shared_benchmarks,
        "served",
        "--llm-backend=openai",
        f"--llm-set=openai.base_url={llama_cpp_server}",
        f"--llm-model={default_model}",
        "--llm-set=openai.concurrency=2",
    )
    served_seconds = time.monotonic() - started
    started = time.monotonic()
    local = _run(pytester, shared_benchmarks, "local", f"--llm-model={default_model}")
    local_seconds = time.monotonic() - started

    config: dict[str, Any] = json.loads((served / "eval_config.json").read_text())
    assert config["framework"]["backend"] == "openai"
    assert config["framework"]["base_url"] == llama_cpp_server
    assert config["framework"]["server_model"]["id"] == default_model
    assert config["model_sha256"] is None and config["model_sha256_reason"]
    backend_info = config["environment"]["backend"]
    assert backend_info["tokenize_endpoint"]["kind"] == "llama-cpp-python"
    assert backend_info["prompt_logprobs"] == "aligned"

    mmlu = compare_results(_records(local, "mmlu"), _records(served, "mmlu"))
    gsm8k = compare_results(_records(local, "gsm8k"), _records(served, "gsm8k"))
    m, g = mmlu["summary"], gsm8k["summary"]
    print(
        f"\nllama.cpp server (Q4_1) vs HF (dequantized float32), {LIMIT} items each; "
        f"served {served_seconds:.0f}s, in-process {local_seconds:.0f}s\n"
        f"mmlu: same prediction {m['same_prediction']:.2f}, mean |Δ logprob| "
        f"{m['mean_abs_dlogprob']:.3f}, max {m['max_abs_dlogprob']:.3f}, "
        f"acc {m['score_a']:.2f} (hf) vs {m['score_b']:.2f} (server)\n"
        f"gsm8k: identical outputs {g['identical_output']:.2f}, same answer "
        f"{g['same_prediction']:.2f}, em {g['score_a']:.2f} (hf) vs {g['score_b']:.2f} (server)"
    )
    assert m["items"] == g["items"] == LIMIT
    # Same model, different kernels: log-likelihoods of the answer letters stay close
    # (measured: see the printed numbers) and most predictions agree.
    assert m["mean_abs_dlogprob"] < 0.5
    assert m["same_prediction"] >= 0.75
    for item in mmlu["items"]:
        assert all(lp < 0 for lp in item["b"]["logprobs"])
    # Greedy generation diverges once one token differs; each output still starts the same
    # way for most items (the first words), and every output ended for a recorded reason.
    served_out = {r.item_id: r for r in _records(served, "gsm8k")}
    local_out = {r.item_id: r for r in _records(local, "gsm8k")}
    same_start = sum(
        1
        for item_id, r in local_out.items()
        if (r.output or "").split()[:3] == (served_out[item_id].output or "").split()[:3]
    )
    assert same_start >= LIMIT // 2
    assert all(r.finish_reason in ("stop", "length", "eos") for r in served_out.values())
