"""Errors that pytest-llmeval reports to users.

Each error names what is at fault (a spec file and field, a data file, an option)
so that the message alone says what to fix.
"""

from __future__ import annotations


class LlmEvalError(Exception):
    """Base class of every error pytest-llmeval raises on bad input."""


class SpecError(LlmEvalError):
    """A task spec is invalid: the message names the file and the field."""

    def __init__(self, source: str, field: str, message: str) -> None:
        self.source = source
        self.field = field
        self.message = message
        super().__init__(f"{source}: field '{field}': {message}")


class JudgeNotInstalled(SpecError):
    """A spec names a scorer whose package (or data) is not installed: like benchmark
    data that is not installed, the task is reported as not runnable (skipped, or failed
    when it has a floor) instead of breaking the collection of every other task."""


class DataError(LlmEvalError):
    """Benchmark data could not be found or read."""


class SandboxError(LlmEvalError):
    """Model-generated code could not be run in the sandbox (the message says why and what to
    do); the item is an error, not a wrong answer."""


class ModelError(LlmEvalError):
    """The model could not be resolved or loaded."""


def one_line(exc: BaseException, limit: int = 300) -> str:
    """Another library's exception as one line: its type and its message with the line
    breaks folded (transformers and torch spread a reason over lines, ``... from one of:``
    then the list; the first line alone can say nothing), cut at ``limit`` characters."""
    text = " ".join(str(exc).split())
    if len(text) > limit:
        text = text[:limit] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
