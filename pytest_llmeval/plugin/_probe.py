"""The ``llm_probe`` fixture: contamination probes as tests, with a verdict per task."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_llmeval import _json as strict_json
from pytest_llmeval._errors import LlmEvalError

if TYPE_CHECKING:
    from pytest_llmeval.contamination import OrderTestReport, PairedReport

    from ._session import LlmEvalSession

PROBES = ("option_shuffle", "canonical_order", "number_rewrite", "entity_rewrite")


def verdict(report: PairedReport | OrderTestReport, alpha: float) -> str | None:
    """Why ``report`` points at contamination at level ``alpha``, or None.

    A paired probe flags a task when the canonical form is answered better than its
    rewrites and McNemar's exact test rejects equal accuracy (p < alpha); the order test
    flags it when the canonical option order is the most likely one significantly more
    often than chance.
    """
    from pytest_llmeval.contamination import OrderTestReport

    if isinstance(report, OrderTestReport):
        if report.n and report.p_value < alpha:
            return (
                f"{report.task}: the published option order is the most likely of "
                f"{report.k + 1} orders for {report.canonical_first} of {report.n} items "
                f"(chance: {report.n / (report.k + 1):.1f}; p={report.p_value:.2g} < {alpha}): "
                "the model may have seen the items with their options"
            )
        return None
    if report.n and report.drop > 0 and report.p_value < alpha:
        return (
            f"{report.task}: {report.probe.replace('_', ' ')} drops accuracy from "
            f"{100 * report.canonical_accuracy:.1f}% to {100 * report.rewritten_accuracy:.1f}% "
            f"on {report.n} items (McNemar b={report.b}, c={report.c}, "
            f"p={report.p_value:.2g} < {alpha}); {100 * report.only_canonical:.0f}% of the "
            "items are solved only as published: possible contamination. Exclude the flagged "
            "items (--llm-exclude) if they are few and concentrated, else replace the "
            "benchmark (see --llm-catalog for fresher ones)"
        )
    return None


class ProbeRunner:
    """Runs a probe on a collected task's first ``--llm-probe-items`` items (after
    ``--llm-exclude``) with the session's model, records the report in the run directory and
    checks it against ``--llm-probe-alpha``."""

    def __init__(self, session: LlmEvalSession, backend: Any) -> None:
        self.session = session
        self.backend = backend

    def run(
        self, task: str, probe: str, *, n: int | None = None, k: int | None = None
    ) -> PairedReport | OrderTestReport:
        from pytest_llmeval import contamination
        from pytest_llmeval.dataset import first_n, load_items

        if probe not in PROBES:
            raise ValueError(f"unknown probe {probe!r}; known: {', '.join(PROBES)}")
        runner = self.session.runners.get(task)
        if runner is None:
            pytest.skip(f"task {task!r} is not collected (run the probes with its spec)")
        opts = self.session.options
        try:
            items = load_items(runner.spec, opts.data_dirs)
        except LlmEvalError as exc:
            pytest.skip(str(exc))
        items = [i for i in items if i.id not in self.session.excluded]
        chosen = first_n(items, n or opts.probe_items)
        seed = opts.seed
        report: PairedReport | OrderTestReport
        if probe == "option_shuffle":
            report = contamination.option_shuffle_probe(
                runner, chosen, self.backend, k=k or 1, seed=seed
            )
        elif probe == "canonical_order":
            report = contamination.canonical_order_test(
                runner, chosen, self.backend, k=k or 3, seed=seed
            )
        elif probe == "number_rewrite":
            report = contamination.number_rewrite_probe(runner, chosen, self.backend, seed=seed)
        else:
            report = contamination.entity_rewrite_probe(runner, chosen, self.backend, seed=seed)
        if not self.session.is_worker:
            folder = self.session.run_dir().path / "contamination"
            folder.mkdir(exist_ok=True)
            (folder / f"{task}-{probe}.json").write_text(
                strict_json.dumps({**report.to_dict(), "alpha": opts.probe_alpha}, indent=1)
            )
        return report

    def check(self, report: PairedReport | OrderTestReport) -> None:
        """Fail the calling test with the verdict when the report flags contamination."""
        reason = verdict(report, self.session.options.probe_alpha)
        if reason is not None:
            pytest.fail(reason, pytrace=False)
