"""Command-line and ini options: one ``llmeval`` group of core options (each also an ini
key), ``--llm-set``/``--llm-profile`` for the settings tables, and the removed options."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmeval.gate import FloorRule, parse_floor_rule
from pytest_llmeval.model import SettingsError

if TYPE_CHECKING:
    from pytest_llmeval.eval import ChatSettings
    from pytest_llmeval.model import ModelSettings
    from pytest_llmeval.settings import Settings

# The core options, the ones a user types (cli flag, ini name, help, default as ini
# string). Every other setting is in a table of its own (pytest_llmeval/settings), set
# in pyproject.toml, by a profile, or with --llm-set for a one-off.
_OPTIONS: list[tuple[str, str, str, str | None]] = [
    (
        "--llm-model",
        "llm_model",
        "model to evaluate: a local HF model directory, a .gguf file (converted once into "
        "the cache), 'smollm2-135m', or the name a server serves (--llm-backend=openai)",
        None,
    ),
    (
        "--llm-backend",
        "llm_backend",
        "hf (transformers in this process, default) | vllm (vLLM's engine in this process) "
        "| openai (an OpenAI-compatible completions server at openai.base_url); each has its "
        "settings table: [tool.llmeval.hf], [tool.llmeval.vllm], [tool.llmeval.openai]",
        "hf",
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
    ("--llm-limit", "llm_limit", "evaluate the deterministic first N items of each task", None),
    (
        "--llm-data-dir",
        "llm_data_dir",
        "directory with local benchmark data (repeatable: searched in the order given, "
        "before LLMEVAL_DATA_DIR and the ini value)",
        None,
    ),
    (
        "--llm-output",
        "llm_output",
        "directory for run records (default .llmeval/runs under rootdir)",
        None,
    ),
    (
        "--llm-show",
        "llm_show",
        "what to print: item details (prompt, output, answer, target) auto|all|wrong|none, "
        "or catalog: the capability catalog of the collected tasks, running nothing",
        "auto",
    ),
    (
        "--llm-baseline",
        "llm_baseline",
        "compare with an earlier run directory: deltas, flipped items, config drift (gated "
        "by the gate.baseline_rule setting)",
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
        "--llm-profile",
        "llm_profile",
        "named settings profiles to apply, comma-separated ([tool.llmeval.profile.NAME] in "
        "pyproject.toml: a model's prompt shaping, a gate policy, a cluster's engine)",
        None,
    ),
]

SET_HELP = (
    "a setting for this run, SECTION.KEY=VALUE (repeatable; e.g. vllm.tensor_parallel=4, "
    "prompt.chat_template=off, gate.baseline_rule=drop:2:sig); wins over pyproject.toml's "
    "[tool.llmeval] tables, the ini's llm_set lines and profiles; the list: docs/USAGE.md"
)

# Removed options that took a value (the rest were switches); see settings.REMOVED.
_REMOVED_SWITCHES = (
    "strict",
    "allow-unisolated-code",
    "plan",
    "catalog",
    "hub",
    "strip-thinking",
    "no-resume",
)


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
        help="override a task's score floor (repeatable); ini: llm_floors (one TASK=SCORE a "
        "line); the rest of the gate policy is the [tool.llmeval.gate] table",
    )
    parser.addini(
        "llm_floors",
        help="score floor overrides, one TASK=SCORE a line",
        type="linelist",
        default=[],
    )
    group.addoption(
        "--llm-set",
        dest="llm_set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help=SET_HELP,
    )
    parser.addini(
        "llm_set",
        help="settings, one SECTION.KEY=VALUE a line (for projects without pyproject.toml)",
        type="linelist",
        default=[],
    )
    group.addoption(
        "--llm-lmeval-tasks",
        dest="llm_lmeval_tasks",
        default=None,
        metavar="NAMES",
        help="run lm-evaluation-harness tasks or groups as items, comma-separated "
        "(arc_easy,mmlu): each document is an item lmeval-<task>-NNNN; needs the lmeval "
        "extra (an lmeval: spec pins them for a project)",
    )
    # Removed options stay known for one release: each is a usage error naming its
    # replacement (checked in Options.from_config), hidden from --help.
    from pytest_llmeval.settings import REMOVED

    for option in REMOVED:
        group.addoption(
            f"--llm-{option}",
            dest="llm_removed_" + option.replace("-", "_"),
            action="store_true" if option in _REMOVED_SWITCHES else "store",
            default=None,
            help=argparse.SUPPRESS,
        )


def _raw(config: pytest.Config, name: str) -> Any:
    value = config.getoption(name)
    if value is not None:
        return value
    return config.getini(name)


def _int(config: pytest.Config, name: str, minimum: int | None) -> int | None:
    """An integer core option (None when unset)."""
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


def _text(config: pytest.Config, name: str) -> str | None:
    value = _raw(config, name)
    return str(value).strip() or None if value not in (None, "") else None


def _engine(options: Options) -> None:
    """The vllm backend's settings that need vLLM itself (installed, its engine arguments'
    names, enough devices): named now, before collection and before any engine starts.
    Imports vLLM (seconds), so only for runs of that backend that evaluate a model."""
    from pytest_llmeval.model import vllm_settings_problem

    problem = vllm_settings_problem(options.model_settings())
    if problem is not None:
        raise _settings_error(problem, options.settings)


def _settings_error(exc: SettingsError, settings: Settings) -> pytest.UsageError:
    """A model setting's error, naming the setting and where it was given (or the core
    option's flag and ini key)."""
    from pytest_llmeval.settings import setting_for_option

    got = "" if exc.value is None else f", got {exc.value!r}"
    setting = setting_for_option(exc.option)
    if setting is not None:
        return pytest.UsageError(f"{settings.label(setting.name)}: {exc.expected}{got}")
    name = "llm_" + exc.option.replace("-", "_")
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


def _floor_rule(settings: Settings) -> FloorRule:
    try:
        return parse_floor_rule(str(settings["gate.floor_rule"]))
    except ValueError as exc:
        raise pytest.UsageError(f"{settings.label('gate.floor_rule')}: {exc}") from None


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


def _base_url(settings: Settings, backend: str) -> str | None:
    url: str | None = settings["openai.base_url"]
    if backend == "openai":
        return url
    # The project's value may stay in place for when the backend is switched; a URL given
    # for this run with another backend is a mistake.
    if settings.source("openai.base_url") == COMMAND_LINE:
        raise pytest.UsageError(
            f"--llm-set openai.base_url is for --llm-backend=openai (the backend is {backend}, "
            "which loads --llm-model into this process)"
        )
    return None


def _template_file(settings: Settings, path: Path | None) -> Path | None:
    """``prompt.chat_template_file``: a file that reads as a chat template, compiles (a
    Jinja syntax error is named now, not when the model loads at the first item) and
    writes the conversation: rendered on a user message, alone and after a system message,
    the user's text must come out (a template that never reads ``messages``, such as a
    system prompt saved as the file by mistake, would give every item the same prompt)."""
    if path is None:
        return None
    label = settings.label("prompt.chat_template_file")
    if not path.is_file():
        raise pytest.UsageError(f"{label}: no such file: {path}")
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
            f"{label}: {path} is not a valid Jinja template: {exc}; fix the template, or "
            "leave the setting out to use the model's own"
        ) from None
    problem = chat_template_problem(text)
    if problem is not None:
        raise pytest.UsageError(
            f"{label}: {path} is not a chat template: {problem}; give a template that "
            "renders the messages (a system prompt for every task is the setting "
            "prompt.system_prompt), or leave the setting out to use the model's own"
        )
    return path


def _path(config: pytest.Config, name: str) -> Path | None:
    value = _raw(config, name)
    return Path(str(value)).expanduser() if value else None


def _setting_path(config: pytest.Config, settings: Settings, name: str) -> Path | None:
    """A path setting: one given with ``--llm-set`` is relative to the working directory,
    as a command-line path is; one in a project file to the folder of that file."""
    value = settings[name]
    if value is None:
        return None
    path = Path(str(value)).expanduser()
    if path.is_absolute() or settings.source(name) == COMMAND_LINE:
        return path
    return _project_dir(config) / path


def _project_dir(config: pytest.Config) -> Path:
    return config.inipath.parent if config.inipath else config.rootpath


def _writable_dir(label: str, path: Path) -> Path:
    """A directory the run will create or write into: not a file, and its nearest existing
    ancestor a writable directory (checked now, not after the model's work is done)."""
    if path.exists() and not path.is_dir():
        raise pytest.UsageError(
            f"{label}: {path} is a file; it must be a directory (or not exist yet)"
        )
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise pytest.UsageError(
            f"{label}: cannot create or write {path}: {existing} is not a writable directory"
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


def _model(value: str | None, backend: str, label: str) -> str | None:
    """``--llm-model`` (or ``probe.reference_model``): for the in-process backends (hf,
    vllm) a known name, a model directory or a ``.gguf`` file, checked now (the weights are
    read when the first item needs them)."""
    if not value:
        return None
    model = str(value)
    if backend == "openai":
        return model  # the name the server serves the model under
    from pytest_llmeval.model import EMBEDDED, gguf_problem, is_gguf_path, lfs_pointer_problem

    if model.lower() in EMBEDDED:
        return model
    path = Path(model).expanduser()
    if is_gguf_path(path) and not path.is_dir():
        problem = gguf_problem(path)
        if problem is not None:
            raise pytest.UsageError(f"{label}={model}: {problem}")
        return model  # converted once into the cache when the model is loaded
    if not path.is_dir():
        known = ", ".join(sorted(EMBEDDED))
        what = (
            "is a file, not a model directory or a .gguf file"
            if path.exists()
            else "no such directory"
        )
        raise pytest.UsageError(
            f"{label}={model}: {what}, and not a known model name ({known}). Hub ids "
            "are not fetched at run time: download the model first (huggingface-cli "
            "download ID --local-dir DIR) and pass DIR."
        )
    if not (path / "config.json").is_file():
        raise pytest.UsageError(
            f"{label}={model}: {path} has no config.json (not a Hugging Face model directory)"
        )
    pointer = lfs_pointer_problem(path)
    if pointer is not None:  # safetensors would fail at the first item: "header too large"
        raise pytest.UsageError(f"{label}={model}: {pointer}")
    return model


_EMPTY_HINTS = {
    "llm_model": (
        "MODEL",
        "give a model directory or a known name (smollm2-135m), or leave the option out to "
        "collect the items without evaluating them",
    ),
    "llm_data_dir": (
        "DIR",
        "give the folder that holds the benchmark folders (gsm8k/, mmlu/, ...), or leave the "
        "option out",
    ),
    "llm_baseline": ("RUN", "give the baseline run directory, or leave the option out"),
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
    the same for ``--llm-baseline=`` (no comparison) and ``--llm-data-dir=`` (every
    benchmark looks not installed, its items skipped); of a repeatable option
    (``--llm-data-dir``), any one value given empty. A setting given empty is refused
    where it is parsed (pytest_llmeval/settings)."""
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
    """Whether this invocation runs items at all (not --help, --collect-only, a catalog)."""
    option = config.option
    return not (
        getattr(option, "help", False)
        or getattr(option, "collectonly", False)
        or str(_raw(config, "llm_show")) == "catalog"
    )


def _floors_without_model(config: pytest.Config, settings: Settings) -> None:
    """Floors given for this run on the command line, with no model to evaluate: every item
    would be skipped and the floors would hold nothing, so the run could not fail. Floors of
    the project (the ini's ``llm_floors``, the gate table's ``floors_from``, a spec's
    ``floor``) apply whenever a model runs; a run without one skips its items and warns."""
    if not _runs_items(config):
        return
    given = [f"--llm-floor {e}" for e in config.getoption("llm_floor") or []]
    if settings.source("gate.floors_from") == COMMAND_LINE:
        given.append(f"--llm-set gate.floors_from={settings['gate.floors_from']}")
    if given:
        raise pytest.UsageError(
            f"{', '.join(given)}: no model to evaluate (--llm-model is not set, nor llm_model "
            "in the ini file), so no item would run and the floor would hold nothing; pass "
            "--llm-model=M (a model directory or smollm2-135m)"
        )


def _rule_without_baseline(
    config: pytest.Config, settings: Settings, baseline: Path | None
) -> None:
    """``gate.baseline_rule`` given for this run (``--llm-set``) with no baseline to compare
    with (no ``--llm-baseline``, nor ``llm_baseline`` in the ini file): the gate would
    check nothing and the run would pass whatever the scores. A rule in the project's
    settings is the project's: it gates whenever a baseline is given."""
    if baseline is not None or not _runs_items(config):
        return
    rule = settings["gate.baseline_rule"]
    if rule and settings.source("gate.baseline_rule") == COMMAND_LINE:
        raise pytest.UsageError(
            f"--llm-set gate.baseline_rule={rule}: no baseline to compare with "
            "(--llm-baseline is not set, nor llm_baseline in the ini file), so the gate "
            "would check nothing and the run would pass whatever the scores; pass "
            "--llm-baseline=RUN (an earlier run directory), or leave the rule out"
        )


def _baseline_rule(settings: Settings) -> str | None:
    rule: str | None = settings["gate.baseline_rule"]
    if rule:
        from pytest_llmeval.gate import parse_gate

        try:  # a rule that does not parse is named now, before any model work
            parse_gate(rule)
        except ValueError as exc:
            raise pytest.UsageError(f"{settings.label('gate.baseline_rule')}: {exc}") from None
    return rule


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
    if raw is None and name == "llm_profile":
        raw = config.getini(name) or None
    if raw is None:
        return ()
    names = tuple(n.strip() for n in str(raw).split(",") if n.strip())
    if not names:
        raise pytest.UsageError(f"--{name.replace('_', '-')}: no name given")
    return names


def _include_paths(config: pytest.Config, settings: Settings) -> tuple[str, ...]:
    out = []
    for raw in settings["lmeval.include_path"]:
        path = Path(raw).expanduser()
        if not path.is_absolute():
            base = (
                Path(config.invocation_params.dir)
                if settings.source("lmeval.include_path") == COMMAND_LINE
                else _project_dir(config)
            )
            path = base / path
        if not path.is_dir():
            raise pytest.UsageError(
                f"{settings.label('lmeval.include_path')}: {path} is not a directory"
            )
        out.append(str(path.resolve()))
    if out and not config.getoption("llm_lmeval_tasks"):
        raise pytest.UsageError(
            f"{settings.label('lmeval.include_path')} is given without --llm-lmeval-tasks "
            "(name the tasks to run from it)"
        )
    return tuple(out)


COMMAND_LINE = "--llm-set"


def _removed(config: pytest.Config) -> None:
    """A removed option or ini key, given: a usage error naming what replaced it (for
    one release; never silently ignored)."""
    from pytest_llmeval.settings import REMOVED

    for option, replacement in REMOVED.items():
        if config.getoption("llm_removed_" + option.replace("-", "_")) is not None:
            raise pytest.UsageError(f"--llm-{option} was removed: use {replacement}")
    # Keys of the ini file that no plugin registered (pytest warns about each too).
    unknown: set[str] = getattr(config, "_get_unknown_ini_keys", set)()
    for option, replacement in REMOVED.items():
        key = "llm_" + option.replace("-", "_")
        if key in unknown:
            line = replacement.removeprefix("--llm-set ").partition(" ")[0]
            if option == "catalog":
                line = "llm_show = catalog"
            raise pytest.UsageError(
                f"{key} (ini) was removed: use the line {line} under llm_set, or the "
                "setting in pyproject.toml's [tool.llmeval] tables"
            )


def _settings(config: pytest.Config) -> Settings:
    """The run's settings: pyproject.toml's ``[tool.llmeval]`` tables, the ini's
    ``llm_set`` lines, the profiles named by ``--llm-profile``, then ``--llm-set``."""
    from pytest_llmeval.settings import SettingError, assignment_layer, read_pyproject, resolve

    pyproject = (
        config.inipath
        if config.inipath is not None and config.inipath.name == "pyproject.toml"
        else config.rootpath / "pyproject.toml"
    )
    try:
        layers = []
        if pyproject.is_file():
            table = read_pyproject(pyproject)
            if table is not None:
                layers.append(table)
        layers.append(assignment_layer(config.getini("llm_set"), "llm_set (ini)"))
        command_line = assignment_layer(config.getoption("llm_set") or [], COMMAND_LINE)
        return resolve(layers, _names(config, "llm_profile"), command_line)
    except SettingError as exc:
        raise pytest.UsageError(str(exc)) from None


def _loading(
    config: pytest.Config, settings: Settings, model: str | None, backend: str, reference: bool
) -> ModelSettings:
    """How to load the model (checked by ModelSettings itself, as a script's settings are):
    the core options and the backend's settings tables."""
    from pytest_llmeval.model import ModelSettings

    vllm_args = settings["vllm.args"]
    template = _template_file(
        settings, _setting_path(config, settings, "prompt.chat_template_file")
    )
    return ModelSettings(
        model=model or "",
        device=_text(config, "llm_device") or "auto",
        dtype=_text(config, "llm_dtype") or "auto",
        batch_size=_batch_size(config),
        seed=settings["run.seed"],
        max_length=settings["model.max_length"],
        backend=backend,
        base_url=_base_url(settings, backend),
        api_key_env=settings["openai.api_key_env"],
        concurrency=settings["openai.concurrency"],
        max_retries=settings["openai.max_retries"],
        request_timeout=settings["openai.request_timeout"],
        device_map=settings["hf.device_map"],
        chat_template_file=str(template) if template is not None else None,
        add_bos=settings["model.add_bos"],
        decode_step=settings["hf.decode_step"],
        prompt_lookup=settings["hf.prompt_lookup"],
        generation_config=settings["model.generation_config"],
        tensor_parallel=settings["vllm.tensor_parallel"],
        data_parallel=settings["vllm.data_parallel"],
        memory_share=settings["vllm.memory_share"],
        vllm_args=None if vllm_args is None else json.dumps(vllm_args),
        # The reference model's engine runs beside the model's, on the same devices.
        engines_per_device=2 if backend == "vllm" and reference else 1,
    )


def _chat(settings: Settings) -> ChatSettings:
    """How prompts reach a chat model: the prompt table."""
    from pytest_llmeval.eval import ChatSettings

    return ChatSettings(
        mode=settings["prompt.chat_template"],
        # Given for this run, it wins over a spec's prompt.chat pin (the project's does not).
        forced=settings.source("prompt.chat_template") == COMMAND_LINE,
        system_prompt=settings["prompt.system_prompt"],
        multiturn=settings["prompt.fewshot_multiturn"],
        strip_thinking=settings["prompt.strip_thinking"],
        thinking=settings["prompt.thinking_markers"],
    )


def _setting_fields(config: pytest.Config, settings: Settings) -> dict[str, Any]:
    """The plugin's own fields of :class:`Options` from the settings tables, checked."""
    path = functools.partial(_setting_path, config, settings)
    return {
        "model_revision": settings["openai.model_revision"],
        "chat": _chat(settings),
        "floors_from": path("gate.floors_from"),
        "floor_rule": _floor_rule(settings),
        "floor_policy": settings["gate.policy"],
        "baseline_fail": _baseline_rule(settings),
        "strict": settings["gate.strict"],
        "probe_items": settings["probe.items"],
        "probe_alpha": settings["probe.alpha"],
        "probe_fpr": settings["probe.fpr"],
        "reference_model": settings["probe.reference_model"],
        "repeat": settings["run.repeat"],
        "check_determinism": settings["run.check_determinism"],
        "resume": settings["run.resume"],
        "run_dir": path("run.dir"),
        "exclude": path("run.exclude"),
        "hub": settings["run.hub"],
        "failures": settings["report.failures"],
        "plan": settings["report.plan"],
        "agreement": path("report.agreement"),
        "lmeval_include_path": _include_paths(config, settings),
        "lmeval_num_fewshot": settings["lmeval.num_fewshot"],
        "allow_unisolated_code": settings["sandbox.allow_unisolated"],
    }


def _no_settings() -> Settings:
    from pytest_llmeval.settings import Settings

    return Settings({}, {})


@dataclass(frozen=True)
class Options:
    """The resolved llmeval options and settings of one pytest run. What loads the model
    is ``loading`` (the model package's :class:`ModelSettings`, built once); the other
    fields are the plugin's own."""

    model: str | None
    loading: ModelSettings
    chat: ChatSettings  # how prompts reach a chat model (the task runner's settings)
    limit: int | None
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
    exclude: Path | None = None
    probe_items: int = 50
    probe_alpha: float = 0.01
    probe_fpr: float = 0.05
    reference_model: str | None = None
    model_revision: str | None = None
    agreement: Path | None = None
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
    hub: bool = False
    # Every setting beyond the core options, with where each was given.
    settings: Settings = field(default_factory=_no_settings)

    def chat_settings(self) -> ChatSettings:
        """How prompts reach a chat model in this run (the task runner's settings)."""
        return self.chat

    def model_settings(self, worker: int | None = None) -> ModelSettings:
        """How to load the model of this run, in xdist worker ``worker``."""
        return dataclasses.replace(self.loading, worker=worker)

    # The settings both the plugin and the backend read, declared once (in ModelSettings).
    @property
    def backend(self) -> str:
        return self.loading.backend

    @property
    def device(self) -> str:
        return self.loading.device

    @property
    def dtype(self) -> str:
        return self.loading.dtype

    @property
    def batch_size(self) -> int:
        return self.loading.batch_size  # 0: auto

    @property
    def seed(self) -> int:
        return self.loading.seed

    @property
    def base_url(self) -> str | None:
        return self.loading.base_url

    @classmethod
    def from_config(cls, config: pytest.Config) -> Options:
        """Every option and setting resolved and checked: a bad value or path is a usage
        error now, before collection and long before a model loads."""
        _removed(config)
        output = _raw(config, "llm_output")
        for name in _EMPTY_HINTS:
            _empty_value(config, name)
        settings = _settings(config)
        backend = _text(config, "llm_backend") or "hf"
        floors, floor_sources = _floors(config)
        model = _raw(config, "llm_model") or None
        show = _choice(config, "llm_show", ("auto", "all", "wrong", "none", "catalog"))
        fields = _setting_fields(config, settings)
        try:  # checked once, by ModelSettings itself, before any model loads
            loading = _loading(
                config, settings, model, backend, fields["reference_model"] is not None
            )
        except SettingsError as exc:
            raise _settings_error(exc, settings) from None
        options = cls(
            model=str(model) if model else None,
            loading=loading,
            limit=_int(config, "llm_limit", 1),
            output=Path(output).expanduser() if output else config.rootpath / ".llmeval" / "runs",
            data_dirs=tuple(_data_dirs(config)),
            floors=floors,
            floor_sources=floor_sources,
            show="auto" if show == "catalog" else show,
            catalog=show == "catalog",
            baseline=_baseline(config),
            lmeval_tasks=_names(config, "llm_lmeval_tasks"),
            progress=_choice(config, "llm_progress", ("auto", "on", "off")),
            settings=settings,
            **fields,
        )
        _rule_without_baseline(config, settings, options.baseline)
        # The model's path and the folders the run writes are checked last, so that a bad
        # setting is named before a missing model; without a model nothing is loaded or
        # written.
        if options.model is None:
            _floors_without_model(config, settings)
        else:
            _model(options.model, backend, "--llm-model")
            _model(options.reference_model, backend, "probe.reference_model")
            if backend == "hf":
                _device(config, options.device)
            if backend == "vllm" and _runs_items(config):
                _engine(options)
            _writable_dir("--llm-output (ini llm_output)", options.output)
            if options.run_dir is not None:
                _writable_dir(settings.label("run.dir"), options.run_dir)
        return options
