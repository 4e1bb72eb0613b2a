"""The compute side of a run: the model loaded once per process, each task's state (its
config, hashes and resumable records), batched results with the determinism check (plain
Python: no pytest; the plugin drives it from its items)."""

from pytest_llmeval.compute._evaluator import (
    LOGPROB_TOLERANCES,
    WHOLE_TASK_DIST,
    Evaluator,
    RunOptions,
    TaskState,
    load_failure,
    logprob_tolerance,
)
from pytest_llmeval.compute._progress import (
    FileSink,
    ProgressBoard,
    TaskProgress,
    read_progress_files,
)

__all__ = [
    "LOGPROB_TOLERANCES",
    "WHOLE_TASK_DIST",
    "Evaluator",
    "FileSink",
    "ProgressBoard",
    "RunOptions",
    "TaskProgress",
    "TaskState",
    "load_failure",
    "logprob_tolerance",
    "read_progress_files",
]
