"""Strict JSON for every file the project writes.

Python's ``json`` writes ``NaN``, ``Infinity`` and ``-Infinity`` by default, which strict
readers (``jq``, JavaScript's ``JSON.parse``, most databases) reject. A number that is not
finite has no meaning in a record (a task with no scored item has no score): it is written
as ``null``.
"""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every float that is not finite replaced by None, recursively (dicts,
    lists and tuples; tuples become lists, as JSON has no tuples)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` that never writes NaN or Infinity (they become null)."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)
