"""``@pytest.mark.llm_probe(items=..., alpha=..., fpr=...)``: a probe test's own settings,
over the project's and under ``--llm-set``."""

from __future__ import annotations

import pytest

from pytest_llmeval.plugin._probe import probe_settings
from pytest_llmeval.settings import assignment_layer, resolve, table_layer


def _settings(project: dict[str, object], command_line: list[str]):  # type: ignore[no-untyped-def]
    return resolve(
        [table_layer({"probe": project}, "pyproject.toml [tool.llmeval]")],
        command_line=assignment_layer(command_line, "--llm-set"),
    )


def test_the_marker_sets_a_tests_own_and_the_command_line_wins() -> None:
    assert probe_settings(_settings({}, []), {}) == (50, 0.01, 0.05)
    project = _settings({"items": 100, "alpha": 0.05}, [])
    assert probe_settings(project, {}) == (100, 0.05, 0.05)
    assert probe_settings(project, {"items": 200, "fpr": 0.1}) == (200, 0.05, 0.1)
    one_off = _settings({"items": 100}, ["probe.items=7"])
    assert probe_settings(one_off, {"items": 200, "alpha": 0.02}) == (7, 0.02, 0.05)


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ({"items": 0}, "probe.items (from @pytest.mark.llm_probe): must be >= 1, got 0"),
        ({"alpha": 2}, "probe.alpha (from @pytest.mark.llm_probe): expected a number in (0, 1)"),
        ({"reference_model": "base"}, "@pytest.mark.llm_probe: unknown argument(s) reference_"),
    ],
)
def test_a_bad_marker_argument_is_named(marker: dict[str, object], message: str) -> None:
    with pytest.raises(pytest.UsageError) as caught:
        probe_settings(_settings({}, []), marker)
    assert str(caught.value).startswith(message), str(caught.value)
