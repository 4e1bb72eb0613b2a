"""Gates that decide: floors from a reference run, verdicts with their uncertainty, and the
item budget a gate needs (plain Python: no pytest, no torch). See docs/GATES.md."""

from pytest_llmeval.gate._plan import (
    DROPS,
    PlanSettings,
    TaskPlan,
    detectable_floor_drop,
    floor_gate_power,
    floor_need,
    format_plan,
    paired_need,
    plan_task,
)
from pytest_llmeval.gate._power import (
    binom_cdf,
    binom_pmf,
    binom_sf,
    binomial_critical_lower,
    binomial_power_lower,
    binomial_sample_size,
    connor_size,
    mcnemar_critical,
    mcnemar_power,
    mcnemar_power_conditional,
    mcnemar_sample_size,
)
from pytest_llmeval.gate._reference import (
    ReferenceFloor,
    ReferenceRun,
    parse_floor_entry,
    write_floors,
)
from pytest_llmeval.gate._verdict import (
    POLICIES,
    FloorRule,
    interval_verdict,
    parse_floor_rule,
    pass_threshold,
    policy_fails,
)

__all__ = [
    "DROPS",
    "POLICIES",
    "FloorRule",
    "PlanSettings",
    "ReferenceFloor",
    "ReferenceRun",
    "TaskPlan",
    "binom_cdf",
    "binom_pmf",
    "binom_sf",
    "binomial_critical_lower",
    "binomial_power_lower",
    "binomial_sample_size",
    "connor_size",
    "detectable_floor_drop",
    "floor_gate_power",
    "floor_need",
    "format_plan",
    "interval_verdict",
    "mcnemar_critical",
    "mcnemar_power",
    "mcnemar_power_conditional",
    "mcnemar_sample_size",
    "paired_need",
    "parse_floor_entry",
    "parse_floor_rule",
    "pass_threshold",
    "plan_task",
    "policy_fails",
    "write_floors",
]
