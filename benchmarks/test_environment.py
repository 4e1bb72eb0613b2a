"""Environment drift check for the benchmark suite.

Fails, with a line per changed field, when library versions, CUDA, the model's weights,
dtype, device type or a task's config/prompt hash differ from the committed snapshot in
``__snapshots__/``. Run it with the suite: ``-m "regression or environment"``; accept an
intended change with ``--snapshot-update``.
"""

import pytest

pytestmark = pytest.mark.environment


def test_environment_has_not_drifted(llm_drift, snapshot):  # type: ignore[no-untyped-def]
    llm_drift.assert_matches(snapshot)
