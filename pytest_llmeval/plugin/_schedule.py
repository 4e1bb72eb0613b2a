"""pytest-xdist scheduling: one task is one unit of work.

A task's items must run on one worker: its model loads once there and its batches stay
full (the evaluator computes an item together with the task's next selected items, and a
generative task streams its whole selection, so a task split over workers computes items
that another worker runs again). xdist's ``loadgroup`` would keep them together through
the ``xdist_group`` marks the items carry, but it marks the groups by rewriting
``item._nodeid`` on the worker, which pytest 9 no longer reads (a node's id is ``_id``;
checked with pytest-xdist 3.8 and pytest 9): the groups are silently lost and every item
is scheduled on its own. So plain ``-n N`` (``--dist load``) and ``--dist loadgroup`` get
the schedulers below, whose unit of work for a benchmark item is its task, found from
the node id alone (the controller never collects):

- an item of a YAML task: its task file (``benchmarks/gsm8k.yaml::gsm8k-0042`` ->
  ``benchmarks/gsm8k.yaml``);
- an item of ``--llm-lmeval-tasks`` (no file stands for it): ``lmeval::`` and its task,
  the item id without its document number (``lmeval::lmeval-arc_easy-0007`` ->
  ``lmeval::lmeval-arc_easy``);
- any other test: itself (``load``), or its ``xdist_group`` when xdist could mark it
  (``loadgroup``).

``loadscope`` and ``loadfile`` keep a task whole by themselves (a spec file, or all
``lmeval::`` items, is one scope); ``worksteal`` moves items between workers, so the
evaluator then does not stream a generative task (``Evaluator.whole_tasks``).

Imported only from the ``pytest_xdist_make_scheduler`` hook, so only where xdist runs.
"""

from __future__ import annotations

import re
from typing import Any

from xdist.scheduler import LoadGroupScheduling, LoadScopeScheduling

TASK_FILE_SUFFIXES = (".yaml", ".yml")
# The collector of ``--llm-lmeval-tasks`` items (``_collect.lmeval_option_items``).
LMEVAL_PREFIX = "lmeval::"
# An lm-eval item id: its task (``lmeval-<task>``) and the document number.
_LMEVAL_ITEM = re.compile(r"(?P<task>lmeval-.+)-\d+")
# The dist modes the plugin schedules itself.
SCHEDULED_DIST = ("load", "loadgroup")


def task_unit(nodeid: str) -> str | None:
    """The task a benchmark item's node id belongs to, as a unit of work (see the
    module); None for a test that is not a benchmark item."""
    plain = nodeid.split("@", 1)[0]  # xdist's group suffix, where it still applies
    path, sep, name = plain.partition("::")
    if not sep:
        return None
    if path.endswith(TASK_FILE_SUFFIXES):
        return path
    if plain.startswith(LMEVAL_PREFIX):
        match = _LMEVAL_ITEM.fullmatch(name)
        return LMEVAL_PREFIX + (match["task"] if match else name)
    return None


def task_scope(nodeid: str) -> str:
    """The unit of work of a test under ``--dist load``: its task for a benchmark item
    (:func:`task_unit`), else itself."""
    return task_unit(nodeid) or nodeid


class TaskScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """``--dist load``: ``LoadScopeScheduling`` whose scopes are tasks, every other test
    its own scope, as ``load`` does (see the module)."""

    def _split_scope(self, nodeid: str) -> str:
        return task_scope(nodeid)


class TaskGroupScheduling(LoadGroupScheduling):  # type: ignore[misc]
    """``--dist loadgroup``: tasks as above, other tests grouped by xdist as before."""

    def _split_scope(self, nodeid: str) -> str:
        scope = task_unit(nodeid)
        if scope is not None:
            return scope
        found: str = super()._split_scope(nodeid)
        return found


def make_scheduler(config: Any, log: Any) -> Any:
    """The plugin's scheduler for ``config``'s dist mode, or None (left to xdist)."""
    dist = config.getvalue("dist")
    if dist == "load":
        return TaskScheduling(config, log)
    if dist == "loadgroup":
        return TaskGroupScheduling(config, log)
    return None
