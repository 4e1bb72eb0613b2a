"""pytest-llmeval: LLM evaluations as pytest tests.

The public surface is small and importable without torch or pytest wiring:

- task specs: :class:`TaskSpec`, :func:`load_task_spec`, :func:`task_spec_from_dict`
- data: :class:`Item`, :func:`load_items`
- evaluation: :class:`TaskRunner`, :class:`ItemResult`
- models: :class:`Backend` (the protocol), :class:`ModelSettings`, :func:`load_backend`

Each name is imported from its package when first used (PEP 562), so that importing one
package (``pytest_llmeval.gate``, say) loads that package and what it uses, not the
evaluation stack these names come from.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pytest_llmeval._errors import DataError, LlmEvalError, ModelError, SpecError

if TYPE_CHECKING:
    from pytest_llmeval.dataset import Item, load_items
    from pytest_llmeval.eval import ItemResult, TaskRunner
    from pytest_llmeval.model import Backend, ModelSettings, load_backend
    from pytest_llmeval.task import TaskSpec, load_task_spec, task_spec_from_dict

__version__ = "0.1.0"

#: Where each lazily imported name lives.
_LAZY = {
    "Item": "pytest_llmeval.dataset",
    "load_items": "pytest_llmeval.dataset",
    "ItemResult": "pytest_llmeval.eval",
    "TaskRunner": "pytest_llmeval.eval",
    "Backend": "pytest_llmeval.model",
    "ModelSettings": "pytest_llmeval.model",
    "load_backend": "pytest_llmeval.model",
    "TaskSpec": "pytest_llmeval.task",
    "load_task_spec": "pytest_llmeval.task",
    "task_spec_from_dict": "pytest_llmeval.task",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_llmeval' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "Backend",
    "DataError",
    "Item",
    "ItemResult",
    "LlmEvalError",
    "ModelError",
    "ModelSettings",
    "SpecError",
    "TaskRunner",
    "TaskSpec",
    "__version__",
    "load_backend",
    "load_items",
    "load_task_spec",
    "task_spec_from_dict",
]
