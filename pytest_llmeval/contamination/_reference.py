"""A probe's per-item indicator on the tested model against a reference model, paired by item.

Some probes have no honest chance level on their own (how often should a model guess a
masked option's exact words?); others have one only under assumptions the data may break.
Running the same probe, on the same items, with a reference model that cannot have seen
them (trained before the benchmark was published, or on a corpus known to exclude it)
gives the comparison instead: McNemar's test on the items where exactly one of the two
models shows the indicator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_llmeval.scorer import mcnemar_one_sided


@dataclass(frozen=True)
class ReferenceComparison:
    """The tested model's indicator against the reference's, on the items both reports hold.

    ``b``: items where the tested model shows the indicator and the reference does not;
    ``c``: the reverse. ``p_value`` is the one-sided exact McNemar p-value
    ``P(X >= b | X ~ Binomial(b + c, 1/2))`` for the alternative that the tested model
    shows it more often (:func:`~pytest_llmeval.scorer.mcnemar_one_sided`).
    ``unpaired`` lists the item ids found in one report only (left out).
    """

    probe: str
    indicator: str
    n_paired: int
    test_count: int
    ref_count: int
    b: int
    c: int
    unpaired: tuple[str, ...] = ()

    @property
    def p_value(self) -> float:
        return mcnemar_one_sided(self.b, self.c)

    def to_dict(self) -> dict[str, Any]:
        return {
            "probe": self.probe,
            "indicator": self.indicator,
            "n_paired": self.n_paired,
            "test_count": self.test_count,
            "ref_count": self.ref_count,
            "mcnemar_b": self.b,
            "mcnemar_c": self.c,
            "p_value": self.p_value,
            "unpaired": list(self.unpaired),
        }


def compare_indicator(
    probe: str, indicator: str, test: Mapping[str, bool], ref: Mapping[str, bool]
) -> ReferenceComparison:
    """Pair two ``{item_id: indicator}`` maps by item id (see :class:`ReferenceComparison`)."""
    paired = [i for i in test if i in ref]
    unpaired = sorted(set(test).symmetric_difference(ref))
    return ReferenceComparison(
        probe=probe,
        indicator=indicator,
        n_paired=len(paired),
        test_count=sum(1 for i in paired if test[i]),
        ref_count=sum(1 for i in paired if ref[i]),
        b=sum(1 for i in paired if test[i] and not ref[i]),
        c=sum(1 for i in paired if ref[i] and not test[i]),
        unpaired=tuple(unpaired),
    )
