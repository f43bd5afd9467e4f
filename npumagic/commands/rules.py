"""``rules``: every advice rule with its calibration over the history's verified fixes (achieved /
predicted saving: median and count; a rule whose median is under 0.5 over two or more fixes
over-promises). ``%npuadvise --calibration`` shows the same for one run's findings, beside their
predictions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..analysis.predicted_text import change_ms
from .base import Command, Result


@dataclass(frozen=True)
class RuleTable(Result):
    rows: tuple[dict[str, Any], ...]
    out: str
    run: str | None = None  # the rules of this run's findings, with their predictions

    def to_dict(self) -> dict[str, Any]:
        from ..jsonout import document

        return document("rules", out=str(self.out), run=self.run, rules=[dict(r) for r in self.rows])

    def text(self, width: int | None = None) -> str:
        head = (f"the rules of {self.run}'s findings" if self.run else "advice rules") + \
            f", calibrated over the verified fixes (%npucompare A B --fix RULE) in {self.out}"
        return "\n".join([head, *(_line(r) for r in self.rows)])


def _line(row: dict[str, Any]) -> str:
    said = row["calibration"].partition(": ")[2]
    if "predicted_saving_ms" in row:
        lo, hi = row["predicted_interval_ms"] or (float("nan"),) * 2
        said = f"predicted {change_ms(row['predicted_saving_ms'], lo, hi)}; {said}"
    return f"  {row['rule']:<22} {row['family'] or '':<9} {said}"


def _row(rule: str, family: str | None, calibrations: dict) -> dict[str, Any]:
    from ..analysis.calibration import RuleCalibration

    calibrated = calibrations.get(rule, RuleCalibration(rule, ()))
    return {**calibrated.as_dict(), "family": family, "calibration": calibrated.sentence()}


def _calibrations(places) -> dict:
    """Each rule's calibration over the history's verified fixes (none without a history)."""
    from ..analysis.calibration import calibrate

    store = places.runs.store if places.has_history() and places.runs is not None else None
    return calibrate(store.fixes()) if store is not None else {}


def rules(places) -> RuleTable:
    # from the list of rule names, not the registry: its rules' modules import pandas
    from ..analysis.rule_names import RULES

    calibrations = _calibrations(places)
    families = dict(RULES)
    named = list(families) + [rule for rule in calibrations if rule not in families]  # a rule since renamed
    return RuleTable(tuple(_row(rule, families.get(rule), calibrations) for rule in named), str(places.out))


def advice_calibration(places, advice, run: str) -> RuleTable:
    """Each finding of ``advice`` (run ``run``'s): its predicted saving beside its rule's calibration."""
    from ..analysis.rule_names import RULES

    calibrations = _calibrations(places)
    families = dict(RULES)
    rows = []
    for f in advice.findings:
        rule = f.rule or str(f.category)
        rows.append({**_row(rule, families.get(rule), calibrations), "predicted_saving_ms": f.predicted_saving_ms,
                     "predicted_interval_ms": list(f.predicted_interval) if f.predicted_interval else None})
    return RuleTable(tuple(rows), str(places.out), run)


COMMAND = Command("rules", "every advice rule and its calibration over the verified fixes of the history",
                  (), rules,
                  about="List every advice rule with its calibration: achieved / predicted saving per step over "
                        "each fix verified with `compare A B --fix RULE` (median and count), and whether the rule "
                        "over-promises (median under 0.5 over 2 or more fixes).")
