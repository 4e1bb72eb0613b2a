"""Repository-wide test options (the plugin's own options live in pytest_llmeval.plugin)."""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["pytester"]

try:
    from hypothesis import settings
except ImportError:  # the dev extra is not installed: no property tests to configure
    pass
else:
    # "ci" (tox sets it): the same examples on every run of the same code, so that a
    # merge's CI result is reproducible; a property the random search breaks is found
    # by a plain `pytest` (the default profile), and pinned as a test once fixed.
    settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-slow",
        action="store_true",
        default=False,
        help="run tests marked slow (heavy model runs)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: pass --run-slow to run heavy model tests")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
