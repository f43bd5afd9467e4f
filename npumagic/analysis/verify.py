"""Predict, then verify: a baseline's finding predicted a saving per step (:mod:`.whatif`); the
next run, with its fix applied, achieved one. ``verify`` sets the two side by side ("predicted
-8.10 ms (6.20-9.90), achieved -7.40 ms: within"), so a rule that over-promises shows it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .predicted_text import change_ms
from .thresholds import MIN_EFFECT
from .whatif import noise_ms

if TYPE_CHECKING:
    from .finding import Finding
    from .summary import Summary


@dataclass(frozen=True)
class Verification:
    """A finding's predicted saving (ms per step, with its interval) against the achieved one:
    the baseline's median step less the fixed run's, judged within the interval widened by the
    run-to-run noise (``noise_ms``)."""

    rule: str
    predicted_ms: float
    low_ms: float
    high_ms: float
    achieved_ms: float
    noise_ms: float = 0.0  # run-to-run noise of the step time: a saving this close to the interval is in it

    @property
    def outcome(self) -> str:
        """``within`` the interval, ``short`` of it (the fix saved less) or ``beyond`` it."""
        if self.achieved_ms < self.low_ms - self.noise_ms:
            return "short"
        return "beyond" if self.achieved_ms > self.high_ms + self.noise_ms else "within"

    @property
    def ratio(self) -> float:
        """Achieved / predicted (the rule's calibration on this fix); NaN where nothing was predicted."""
        return self.achieved_ms / self.predicted_ms if self.predicted_ms > 0 else float("nan")

    def sentence(self) -> str:
        said = {"within": "within the interval", "short": "short of the interval: the fix removed less than predicted",
                "beyond": "beyond the interval: more changed than this fix"}[self.outcome]
        noise = f", noise ±{self.noise_ms:,.2f} ms" if self.noise_ms else ""
        return (f"{self.rule}: predicted {change_ms(self.predicted_ms, self.low_ms, self.high_ms)}, "
                f"achieved {-self.achieved_ms:+,.2f} ms per step ({said}{noise})")

    def as_dict(self) -> dict[str, object]:
        return {"rule": self.rule, "predicted_saving_ms": self.predicted_ms,
                "predicted_interval_ms": [self.low_ms, self.high_ms], "achieved_saving_ms": self.achieved_ms,
                "outcome": self.outcome}


def pick(findings: list[Finding], fix: str | None = None) -> Finding | None:
    """The finding whose fix was applied: the one of rule (or category) ``fix``, else the first."""
    if fix:
        return next((f for f in findings if fix in (f.rule, f.category)), None)
    return findings[0] if findings else None


def named(findings: list[Finding], rule: str, run: str) -> Finding:
    """The finding of ``rule`` (or category) among run ``run``'s, else ValueError naming its rules."""
    found = pick(findings, rule)
    if found is None:
        rules = ", ".join(dict.fromkeys(f.rule or f.category for f in findings)) or "none: it has no findings"
        raise ValueError(f"{run} has no finding of rule {rule!r}; its rules: {rules}")
    return found


def verify(baseline: Summary, after: Summary, finding: Finding | None) -> Verification | None:
    """The ``finding`` of ``baseline`` (with a prediction) against what ``after`` achieved; None
    without a finding, a prediction or steps on both sides."""
    if finding is None or finding.predicted_interval is None or finding.predicted_saving_ms is None:
        return None
    a, b = baseline.step_stats["median_us"], after.step_stats["median_us"]
    if not (a == a and b == b):
        return None
    lo, hi = finding.predicted_interval
    # the chance error of the two medians from both runs' step spreads (:func:`.whatif.noise_ms`); where
    # a run has too few steps to measure it, the comparison's own assumption: 5% of the step
    noise = noise_ms(baseline, after)
    return Verification(finding.rule or finding.category, finding.predicted_saving_ms, lo, hi, (a - b) / 1000,
                        noise if noise is not None else MIN_EFFECT * a / 1000)
