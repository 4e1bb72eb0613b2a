"""Repository-wide test options (the plugin's own options live in pytest_llmeval.plugin)."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]


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
