"""Task specs: what to evaluate and how (data, prompt, mode, floor, markers)."""

from pytest_llmeval.task._spec import (
    CAPABILITIES,
    KNOWN_MARKERS,
    DatasetSpec,
    DateWindow,
    ExecutionSpec,
    Extractor,
    FewShotSpec,
    GenerateSpec,
    HubSource,
    MultipleChoiceSpec,
    ProbeSpec,
    PromptSpec,
    TaskSpec,
    is_task_file,
    load_task_spec,
    task_spec_from_dict,
)

__all__ = [
    "CAPABILITIES",
    "KNOWN_MARKERS",
    "DatasetSpec",
    "DateWindow",
    "ExecutionSpec",
    "Extractor",
    "FewShotSpec",
    "GenerateSpec",
    "HubSource",
    "MultipleChoiceSpec",
    "ProbeSpec",
    "PromptSpec",
    "TaskSpec",
    "is_task_file",
    "load_task_spec",
    "task_spec_from_dict",
]
