"""The run's ``eval_config.json``: what the run was asked for, what its processes reported
(backend, engine, environment, per xdist worker where they differ) and each task's config.

Plain data in, plain data out: the plugin gathers what its options and the workers' reports
hold; this builds the document (its keys in the order the records have always had).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_llmeval.record._env import drift_fingerprint


def run_config(
    *,
    asked: Mapping[str, Any],
    environment: Mapping[str, Any] | None,
    environments: Mapping[str, Mapping[str, Any]],
    tasks: Mapping[str, Mapping[str, Any]],
    started: str,
    excluded: Mapping[str, Any] | None = None,
    agreement: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``eval_config.json``. ``asked``: the run's settings as given (model, dtype, device,
    batch_size, limit, seed, repeat, check_determinism, data_dirs, allow_unisolated_code,
    settings);
    ``environment``: the first process's environment record, ``environments`` every
    process's by worker id; ``tasks``: each task's config; ``excluded``: the exclusion
    file's entry; ``agreement``: the agreement file's."""
    env = environment
    backend = env.get("backend", {}) if env else {}
    model = (env.get("model") or {}) if env else {}
    config: dict[str, Any] = {
        "model": asked["model"],
        "model_path": backend.get("model_path"),
        "model_sha256": model.get("sha256"),
        "weights_sha256": model.get("weights_sha256"),
        "framework": {
            "backend": backend.get("backend"),
            "torch": backend.get("torch"),
            "transformers": backend.get("transformers"),
        },
        "dtype": backend.get("dtype", asked["dtype"]),
        "device": _per_worker(environments, "device", backend.get("device", asked["device"])),
        "batch_size": backend.get("batch_size", asked["batch_size"]),
        "limit": asked["limit"],
        "seed": asked["seed"],
        # What the backend seeded and how torch was set, as it reports them (a server
        # backend seeds nothing here: its seed travels with each request).
        "seeds": backend.get("seeds"),
        "torch_deterministic_algorithms": backend.get("deterministic_algorithms"),
        "repeat": asked["repeat"],
        "check_determinism": asked["check_determinism"],
        "excluded_items": dict(excluded) if excluded is not None else None,
        "data_dirs": [str(d) for d in asked["data_dirs"]],
        "sandbox": {"allow_unisolated_code": asked["allow_unisolated_code"]},
        # The settings beyond the core options that were given anywhere, each with where
        # (pyproject.toml, the ini's llm_set, a profile, --llm-set): provenance.
        "settings": asked.get("settings"),
        "started": started,
        "tasks": {name: dict(task) for name, task in sorted(tasks.items())},
        "environment": env,
    }
    if len(environments) > 1 or any(k != "main" for k in environments):
        config["workers"] = _workers(env, environments)
    if backend.get("backend") == "vllm":
        # The engine: its version and settings, as asked for and as it runs.
        config["framework"].update(vllm=backend.get("vllm"), engine=backend.get("engine"))
    if backend.get("backend") == "openai":
        # A served model: no weights to hash; it is identified by what the server says.
        config["model_sha256_reason"] = model.get("reason")
        config["framework"].update(
            base_url=backend.get("base_url"),
            server_model=backend.get("server_model"),
            server=backend.get("server"),
            concurrency=backend.get("concurrency"),
            max_retries=backend.get("max_retries"),
        )
    if agreement is not None:
        config["agreement"] = dict(agreement)
    return config


def _per_worker(environments: Mapping[str, Mapping[str, Any]], key: str, default: Any) -> Any:
    """A backend setting of the run: its value when every process had the same, else the
    value of each xdist worker by id."""
    values = {
        worker: (env.get("backend") or {}).get(key) for worker, env in sorted(environments.items())
    }
    if len(set(map(str, values.values()))) > 1:
        return values
    return default


def _workers(
    environment: Mapping[str, Any] | None, environments: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """Per process (xdist worker): its device, host and pid, and its whole environment
    record when that differs from the first one's in anything but those."""
    base = drift_fingerprint(dict(environment), {}) if environment else {}
    workers: dict[str, Any] = {}
    for worker, env in sorted(environments.items()):
        backend = env.get("backend") or {}
        entry: dict[str, Any] = {
            "device": backend.get("device"),
            "device_name": backend.get("device_name"),
            "dtype": backend.get("dtype"),
            "batch_size": backend.get("batch_size"),
            "hostname": env.get("hostname"),
            "pid": env.get("pid"),
        }
        if drift_fingerprint(dict(env), {}) != base:
            entry["environment"] = env
        workers[worker] = entry
    return workers
