"""Each rule's calibration: achieved / predicted saving over every verified fix of it (the
history's ``verified_fixes``), its median and count. A rule whose fixes achieved under half of
what it predicted, over at least two of them, over-promises, and is said to."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

OVER_PROMISE_RATIO = 0.5  # median achieved/predicted below this ...
OVER_PROMISE_FIXES = 2  # ... over at least this many verified fixes: one fix may have been noise


@dataclass(frozen=True)
class RuleCalibration:
    """A rule's achieved/predicted ratios, one per verified fix that predicted a saving."""

    rule: str
    ratios: tuple[float, ...]

    @property
    def count(self) -> int:
        return len(self.ratios)

    @property
    def median_ratio(self) -> float:
        return statistics.median(self.ratios) if self.ratios else float("nan")

    @property
    def over_promises(self) -> bool:
        return self.count >= OVER_PROMISE_FIXES and self.median_ratio < OVER_PROMISE_RATIO

    def sentence(self) -> str:
        if not self.count:
            return f"{self.rule}: not verified yet"
        text = (f"{self.rule}: achieved/predicted median {self.median_ratio:.2f} over {self.count} verified "
                f"fix{'es' if self.count != 1 else ''}")
        if self.over_promises:
            text += "; over-promises: its fixes achieved under half the saving it predicted"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "verified_fixes": self.count,
                "median_ratio": self.median_ratio if self.count else None, "over_promises": self.over_promises}


def calibrate(fixes: Iterable[Mapping[str, Any]]) -> dict[str, RuleCalibration]:
    """Each rule's calibration over ``fixes`` (rows with ``rule``, ``predicted_ms`` and
    ``achieved_ms``), in the order rules first appear; a fix that predicted nothing has no ratio."""
    ratios: dict[str, list[float]] = {}
    for fix in fixes:
        kept = ratios.setdefault(fix["rule"], [])
        if fix["predicted_ms"] > 0:
            kept.append(fix["achieved_ms"] / fix["predicted_ms"])
    return {rule: RuleCalibration(rule, tuple(r)) for rule, r in ratios.items()}
