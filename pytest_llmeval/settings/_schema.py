"""Every setting that is not one of the command line's core options: its dotted name
(``section.key``), what values it takes, its default and the option it replaced.

A setting lives in one place per concern, as TOML tables do in ruff, mypy or coverage:
one table per backend (``hf``, ``vllm``, ``openai``), ``model`` for what any in-process
backend loads, ``prompt`` for how prompts reach a chat model, ``gate`` for the gate
policy, ``probe`` for the contamination probes, ``run`` for how items run, ``report`` for
what is printed after the run, ``lmeval`` for lm-evaluation-harness tasks and ``sandbox``
for model-generated code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# The kinds of value a setting takes; each is parsed from TOML (typed) and from text
# (``--llm-set`` and the ini file's ``llm_set`` lines) alike.
INT, FLOAT, BOOL, CHOICE, TEXT, PATH, MARKERS, OBJECT, PATHS = (
    "int",
    "float",
    "bool",
    "choice",
    "text",
    "path",
    "markers",
    "object",
    "paths",
)


class SettingError(ValueError):
    """A setting that does not exist or whose value does not parse; the message names
    where it was given and the setting."""


@dataclass(frozen=True)
class Setting:
    name: str  # section.key
    kind: str
    default: Any
    help: str
    # The command-line option this setting replaced (without ``--llm-``), if any.
    replaces: str | None = None
    choices: tuple[str, ...] = ()
    minimum: float | None = None  # int/float: the least value allowed
    # float: the greatest value allowed, and whether the bounds themselves are allowed
    maximum: float | None = None
    open_interval: bool = False

    @property
    def section(self) -> str:
        return self.name.partition(".")[0]

    @property
    def key(self) -> str:
        return self.name.partition(".")[2]

    def parse(self, value: Any, where: str) -> Any:
        """The value as this setting's type; a SettingError naming ``where`` and the
        setting when it does not parse or is out of range."""
        if isinstance(value, str) and not value.strip():
            # An unset variable in `--llm-set run.exclude=$FILE`: never "no value" silently
            # (no exclusion, no reference run, a gate that checks nothing).
            raise SettingError(
                f"{self.name} (from {where}): the value is empty (an unset variable?); give "
                "a value, or leave the setting out"
            )
        return _PARSERS[self.kind](self, value, where)


def _fail(setting: Setting, value: Any, where: str, expected: str) -> SettingError:
    return SettingError(f"{setting.name} (from {where}): {expected}, got {value!r}")


def _int(setting: Setting, value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise _fail(setting, value, where, "expected an integer")
    try:
        number = int(str(value).strip())
    except ValueError:
        raise _fail(setting, value, where, "expected an integer") from None
    if setting.minimum is not None and number < setting.minimum:
        raise _fail(setting, value, where, f"must be >= {int(setting.minimum)}")
    return number


def _float(setting: Setting, value: Any, where: str) -> float:
    low, high = setting.minimum, setting.maximum
    if setting.open_interval:
        expected = f"expected a number in ({low:g}, {high:g})"
    elif high is not None:
        expected = f"expected a number in ({low:g}, {high:g}]"
    else:
        expected = f"expected a number > {low:g}"
    if isinstance(value, bool):
        raise _fail(setting, value, where, expected)
    try:
        number = float(str(value).strip())
    except ValueError:
        raise _fail(setting, value, where, expected) from None
    if not number == number:  # NaN
        raise _fail(setting, value, where, expected)
    if low is not None and not number > low:
        raise _fail(setting, value, where, expected)
    if high is not None and (number > high or (setting.open_interval and number >= high)):
        raise _fail(setting, value, where, expected)
    return number


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def _bool(setting: Setting, value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise _fail(setting, value, where, "expected true or false (also yes/no, on/off, 1/0)")


def _choice(setting: Setting, value: Any, where: str) -> str:
    text = str(value).strip()
    if text not in setting.choices:
        raise _fail(setting, value, where, f"expected one of {'|'.join(setting.choices)}")
    return text


def _text(setting: Setting, value: Any, where: str) -> str | None:
    if isinstance(value, (dict, list, bool)):
        raise _fail(setting, value, where, "expected a string")
    text = str(value)
    return text if text.strip() else None


def _path(setting: Setting, value: Any, where: str) -> str:
    if isinstance(value, (dict, list, bool)) or not str(value).strip():
        raise _fail(setting, value, where, "expected a path (the value is empty)")
    return str(value).strip()


def _markers(setting: Setting, value: Any, where: str) -> tuple[str, str]:
    parts = [str(v) for v in value] if isinstance(value, list) else str(value).split(",")
    if len(parts) != 2 or not all(p.strip() for p in parts):
        raise _fail(setting, value, where, "expected START,END (e.g. <think>,</think>)")
    return parts[0].strip(), parts[1].strip()


def _object(setting: Setting, value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, dict):
        return dict(value)
    try:
        parsed = json.loads(str(value))
    except ValueError as exc:
        raise _fail(setting, value, where, f"expected a JSON object ({exc})") from None
    if not isinstance(parsed, dict):
        raise _fail(setting, value, where, "expected a JSON object")
    return parsed


def _paths(setting: Setting, value: Any, where: str) -> tuple[str, ...]:
    items = value if isinstance(value, list) else str(value).split(",")
    paths = tuple(str(p).strip() for p in items if str(p).strip())
    if not paths:
        raise _fail(setting, value, where, "expected one or more paths")
    return paths


_PARSERS = {
    INT: _int,
    FLOAT: _float,
    BOOL: _bool,
    CHOICE: _choice,
    TEXT: _text,
    PATH: _path,
    MARKERS: _markers,
    OBJECT: _object,
    PATHS: _paths,
}


def _s(name: str, kind: str, default: Any, help: str, replaces: str | None, **kw: Any) -> Setting:
    return Setting(name, kind, default, help, replaces, **kw)


SETTINGS: tuple[Setting, ...] = (
    # What any in-process backend (hf, vllm) loads.
    _s("model.max_length", INT, None,
       "the model's context window in tokens (default: its max_position_embeddings); "
       "longer prompts are reported as not fitting, per task spec", "max-length", minimum=1),
    _s("model.add_bos", CHOICE, "auto",
       "auto|yes|no: put the BOS token before each prompt (auto: as the tokenizer's config "
       "does; never twice when a chat template writes it)", "add-bos",
       choices=("auto", "yes", "no")),
    _s("model.generation_config", CHOICE, "model",
       "model|neutral: greedy decoding follows the model's generation_config.json "
       "(repetition_penalty, no_repeat_ngram_size, suppressed tokens, minimum length) as "
       "model.generate and vLLM do, or takes a plain argmax; recorded per task",
       "generation-config", choices=("model", "neutral")),
    # The hf backend (transformers in this process).
    _s("hf.device_map", TEXT, None,
       "spread a model too big for one GPU over the visible devices with accelerate: "
       "auto|balanced|sequential (instead of --llm-device)", "device-map"),
    _s("hf.decode_step", TEXT, "auto",
       "auto|transformers: the fused generation step where the model type and device are "
       "supported, or the model's own forward pass", "decode-step"),
    _s("hf.prompt_lookup", INT, 5,
       "K: with the fused step, guess up to K next tokens of each sequence from its own "
       "prompt and output and check them in the same step (greedy output unchanged; 0: one "
       "token per step)", "prompt-lookup"),
    # The vllm backend (vLLM's engine in this process).
    _s("vllm.tensor_parallel", INT, 1,
       "devices one engine spreads the model over (vLLM's tensor_parallel_size)",
       "tensor-parallel"),
    _s("vllm.data_parallel", INT, 1,
       "engine replicas, each with its share of a task's requests, run as Ray actors (on the "
       "cluster in RAY_ADDRESS, else on this machine)", "data-parallel"),
    _s("vllm.memory_share", FLOAT, None,
       "the share of each device's memory an engine takes, in (0, 1] (vLLM's "
       "gpu_memory_utilization; default: vLLM's on a GPU, 0.3 on the CPU build)",
       "memory-share", minimum=0.0, maximum=1.0),
    _s("vllm.args", OBJECT, None,
       "further engine arguments, vLLM's EngineArgs fields (a TOML table, or a JSON object "
       "on the command line); recorded", "vllm-args"),
    # The openai backend (an OpenAI-compatible completions server).
    _s("openai.base_url", TEXT, None,
       "the server's API root, e.g. http://127.0.0.1:8000/v1 (--llm-model is then the "
       "served model name)", "base-url"),
    _s("openai.api_key_env", TEXT, "OPENAI_API_KEY",
       "the environment variable holding the API key (the key is never recorded)",
       "api-key-env"),
    _s("openai.concurrency", INT, 4,
       "requests in flight at once; also the items handed to the backend at a time",
       "concurrency"),
    _s("openai.max_retries", INT, 5,
       "retries of a request on connection errors, timeouts, 429 and 5xx, with exponential "
       "backoff", "max-retries"),
    _s("openai.request_timeout", FLOAT, 600.0, "seconds to wait for one HTTP answer",
       "request-timeout", minimum=0.0),
    _s("openai.model_revision", TEXT, None,
       "the revision of the served model's weights (servers report none): recorded and part "
       "of the resume key", "model-revision"),
    # How prompts reach a chat model.
    _s("prompt.chat_template", CHOICE, "auto",
       "auto|on|off: render prompts with the model's chat template (auto: when it has one); "
       "given with --llm-set it wins over a spec's prompt.chat pin, from the project's "
       "settings it does not", "chat-template", choices=("auto", "on", "off")),
    _s("prompt.chat_template_file", PATH, None,
       "a Jinja chat template (or a JSON file with a 'chat_template' key) used instead of "
       "the model's own (hf backend)", "chat-template-file"),
    _s("prompt.system_prompt", TEXT, None,
       "a system prompt for every task (before a spec's own system prompt and description)",
       "system-prompt"),
    _s("prompt.fewshot_multiturn", BOOL, True,
       "under a chat template, few-shot examples as alternating user/assistant turns "
       "(lm-eval's --fewshot_as_multiturn) or in one user turn", "fewshot-multiturn"),
    _s("prompt.thinking_markers", MARKERS, ("<think>", "</think>"),
       "START,END markers of a reasoning block", "thinking-markers"),
    _s("prompt.strip_thinking", BOOL, False,
       "remove a reasoning block from generations before extraction (the record keeps both "
       "texts; a block never closed is its own failure class)", "strip-thinking"),
    # The gate policy.
    _s("gate.floors_from", PATH, None,
       "make the floors of the tasks that run from a reference run directory (its "
       "metrics_summary.json), by gate.floor_rule; --llm-floor still wins", "floors-from"),
    _s("gate.floor_rule", TEXT, "lcb",
       "how gate.floors_from makes a floor: lcb (the lower end of the reference's 95 percent "
       "interval) or margin:N (the reference score minus N points)", "floor-rule"),
    _s("gate.policy", CHOICE, "point",
       "what fails a floor given the score's 95 percent interval: point (the score is below "
       "it), strict (the interval's lower end does not clear it), lenient (the interval's "
       "upper end is below it)", "floor-policy", choices=("point", "strict", "lenient")),
    _s("gate.baseline_rule", TEXT, None,
       "gate against --llm-baseline, e.g. drop:2:sig (rules: drop:N, drop:N:sig, sig, "
       "config, env)", "baseline-fail"),
    _s("gate.strict", BOOL, False,
       "wrong answers fail their test (by default only the task floor decides)", "strict"),
    # The contamination probes (-m contamination).
    _s("probe.items", INT, 50, "items per task, the first N", "probe-items", minimum=1),
    _s("probe.alpha", FLOAT, 0.01, "significance level of a task's verdict", "probe-alpha",
       minimum=0.0, maximum=1.0, open_interval=True),
    _s("probe.fpr", FLOAT, 0.05,
       "target false-positive rate of the item-level membership flags on known-clean "
       "controls", "probe-fpr", minimum=0.0, maximum=1.0, open_interval=True),
    _s("probe.reference_model", TEXT, None,
       "a model that is clean for the benchmarks (the base model before fine-tuning); "
       "verdicts compare the model with it item by item (recorded with its SHA256)",
       "reference-model"),
    # How the items run.
    _s("run.seed", INT, 1234, "seed for python, numpy and torch", "seed", minimum=0),
    _s("run.repeat", INT, 1, "run each task N times; report the median and spread", "repeat",
       minimum=1),
    _s("run.check_determinism", INT, 0,
       "rerun the first N items of each task; fail items whose output or log-likelihoods "
       "differ", "check-determinism", minimum=0),
    _s("run.resume", BOOL, True,
       "reuse the finished items of an interrupted run with the same config hash", None),
    _s("run.dir", PATH, None,
       "write into this run directory (combine one-task-per-process runs into one record)",
       "run-dir"),
    _s("run.exclude", PATH, None,
       "a file of item ids (one per line, '#' comments) left out of every task: the reduced "
       "set is scored and the list's SHA256 is recorded", "exclude"),
    _s("run.hub", BOOL, False,
       "let specs fall back to their Hugging Face hub dataset when no local copy is found "
       "(needs datasets and internet; same as LLMEVAL_ALLOW_HUB=1)", "hub"),
    # What is printed and written after the run.
    _s("report.failures", INT, 0,
       "classify failed items per task and show N sampled ones (seeded)", "failures",
       minimum=0),
    _s("report.plan", BOOL, False,
       "print per task the items a floor gate and a paired baseline gate need to catch a 2- "
       "and a 5-point drop (80% power), and write plan.json", "plan"),
    _s("report.agreement", PATH, None,
       "an agreement record of two backends (python -m pytest_llmeval.eval.agreement): its "
       "summary and SHA256 go into the run's eval config", "agreement"),
    # lm-evaluation-harness tasks run as items (--llm-lmeval-tasks).
    _s("lmeval.include_path", PATHS, (),
       "directories of lm-eval task YAMLs of your own (the harness's own tasks stay "
       "available)", "lmeval-include-path"),
    _s("lmeval.num_fewshot", INT, None,
       "few-shot examples, as lm_eval --num_fewshot (tasks that pin 0 keep 0)",
       "lmeval-num-fewshot", minimum=0),
    # Model-generated code.
    _s("sandbox.allow_unisolated", BOOL, False,
       "run model-generated code even where the kernel cannot give the sandbox a read-only "
       "filesystem view of its own; only the in-process guard and file permissions then "
       "protect your files", "allow-unisolated-code"),
)  # fmt: skip

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(s.section for s in SETTINGS))

# Options removed from the command line, and what replaces each: ``--llm-X`` -> text.
REMOVED: dict[str, str] = {
    **{
        s.replaces: (
            f"--llm-set {s.name}={'true' if s.kind == BOOL else 'VALUE'} for this run, or "
            f"{s.key} under [tool.llmeval.{s.section}] in pyproject.toml"
        )
        for s in SETTINGS
        if s.replaces
    },
    "no-resume": "--llm-set run.resume=false for this run, or resume = false under "
    "[tool.llmeval.run] in pyproject.toml",
    "catalog": "--llm-show=catalog",
}


def setting_for_option(option: str) -> Setting | None:
    """The setting that replaced ``--llm-<option>`` (as :class:`ModelSettings` errors name
    it), if one did."""
    for s in SETTINGS:
        if s.replaces == option:
            return s
    return None
