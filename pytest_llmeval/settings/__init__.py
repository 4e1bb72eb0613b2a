"""The settings beyond the command line's core options: one table per concern
(``[tool.llmeval.vllm]``, ``[tool.llmeval.prompt]``, ``[tool.llmeval.gate]``, ...) in
``pyproject.toml``, named profiles of them, and ``--llm-set SECTION.KEY=VALUE`` for a
one-off. Plain Python: the pytest plugin reads its config into :func:`resolve`."""

from ._resolve import (
    DEFAULT,
    Layer,
    Settings,
    assignment_layer,
    read_pyproject,
    resolve,
    table_layer,
)
from ._schema import BY_NAME, REMOVED, SECTIONS, SETTINGS, Setting, SettingError, setting_for_option

__all__ = [
    "BY_NAME",
    "DEFAULT",
    "REMOVED",
    "SECTIONS",
    "SETTINGS",
    "Layer",
    "Setting",
    "SettingError",
    "Settings",
    "assignment_layer",
    "read_pyproject",
    "resolve",
    "setting_for_option",
    "table_layer",
]
