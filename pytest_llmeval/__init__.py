"""pytest-llmeval: LLM evaluations as pytest tests.

The public surface is small and importable without torch or pytest wiring:

- task specs: :class:`TaskSpec`, :func:`load_task_spec`, :func:`task_spec_from_dict`
- data: :class:`Item`, :func:`load_items`
- evaluation: :class:`TaskRunner`, :class:`ItemResult`
- models: :class:`Backend` (the protocol), :class:`ModelSettings`, :func:`load_backend`
"""

from pytest_llmeval._errors import DataError, LlmEvalError, ModelError, SpecError
from pytest_llmeval.dataset import Item, load_items
from pytest_llmeval.eval import ItemResult, TaskRunner
from pytest_llmeval.model import Backend, ModelSettings, load_backend
from pytest_llmeval.task import TaskSpec, load_task_spec, task_spec_from_dict

__version__ = "0.1.0"

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
