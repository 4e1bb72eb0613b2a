"""How far a backend call has got: the one callback interface between a backend's loops
and whoever shows progress (the plugin's progress line).

A backend call can run for minutes (a chunk of a 13k-item MMLU, the rows of a
generation), and only the backend's own loop knows how far it is. It calls
:func:`report_progress` after each log-likelihood batch and each finished generation row;
the caller installs a callback for the duration of the call with :func:`progress_to`. No
callback installed (a script, the tests of a backend): the report costs one lookup.

A context variable, not a parameter of ``Backend.loglikelihood``/``generate``: every
backend (and every scripted test backend) keeps its signature, and a generator
(``generate_stream``) reports to whoever is iterating it at the time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

#: ``(done, total)`` of the backend call in progress, in the call's own units (the rows of
#: a log-likelihood call, the requests of a generation call); ``done`` never exceeds
#: ``total``, ``total`` is at least 1.
ProgressCallback = Callable[[int, int], None]

_CURRENT: ContextVar[ProgressCallback | None] = ContextVar("llmeval_progress", default=None)


def report_progress(done: int, total: int) -> None:
    """Tell the caller (if it listens) that ``done`` of ``total`` units of this call are
    finished. Called from a backend's loop, in the thread that called the backend."""
    callback = _CURRENT.get()
    if callback is not None and total > 0:
        callback(max(0, min(done, total)), total)


@contextmanager
def progress_to(callback: ProgressCallback | None) -> Iterator[None]:
    """Send the backend calls made inside the block to ``callback`` (None: to nobody)."""
    token = _CURRENT.set(callback)
    try:
        yield
    finally:
        _CURRENT.reset(token)
