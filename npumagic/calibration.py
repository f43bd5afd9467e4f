"""Predict, then verify, kept: a fix named with ``--fix RULE`` is verified (baseline A's finding
of RULE predicted against what B achieved, :mod:`.analysis.verify`) and kept in the history's
``verified_fixes``, from which each rule's calibration (:mod:`.analysis.calibration`) is read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .analysis.verify import Verification, named, verify
from .errors import NpumagicError
from .render.report import CompareReport

if TYPE_CHECKING:
    from .analysis.finding import Finding
    from .analysis.summary import Summary
    from .history import HistoryStore
    from .session import Session


def verify_fix(rule: str, a: str, b: str, summary_a: Summary, summary_b: Summary,
               findings_a: list[Finding]) -> Verification:
    """A's finding of ``rule`` (its id or category) against what B achieved; NpumagicError for a
    rule A has no finding of (naming A's rules) or one without a prediction."""
    try:
        finding = named(findings_a, rule, a)
    except ValueError as exc:
        raise NpumagicError(str(exc)) from None
    checked = verify(summary_a, summary_b, finding)
    if checked is None:
        raise NpumagicError(f"{a}'s finding {rule!r} carries no predicted saving, or a run has no steps: "
                            "nothing to verify")
    return checked


def keep(store: HistoryStore | None, a: str, b: str, checked: Verification) -> bool:
    """Keep the verification of runs ``a`` -> ``b`` in ``store``; False where it cannot be (no
    history, or one opened read-only)."""
    if store is None or store.readonly:
        return False
    store.add_fix(a, b, checked.rule, checked.predicted_ms, checked.low_ms, checked.high_ms, checked.achieved_ms,
                  checked.noise_ms)
    return True


def fix_line(checked, kept: bool, html: bool = False, read_from: str = "") -> str:
    """The verified fix under a comparison (nothing without one); ``read_from``: the change it
    was read from when the user named none (shown, never kept)."""
    if checked is None:
        return ""
    if read_from:
        text = (f"fix read from what changed ({read_from}): {checked.sentence()}; shown, not kept in the history "
                f"(--fix {checked.rule} keeps it)")
    else:
        text = f"fix verified: {checked.sentence()}" + ("; kept in the history" if kept else "")
    if html:
        import html as escape

        return f"<p>{escape.escape(text)}</p>"
    return "\n\n" + text


def verify_runs(session: Session, a: str, b: str, rule: str) -> tuple[Verification, bool]:
    """Run ``a``'s finding of ``rule`` against what run ``b`` achieved, kept in the session's
    history where it can be written (and whether it was)."""
    checked = verify_fix(rule, a, b, session.runs.summary(a), session.runs.summary(b), session.advise(a).findings)
    return checked, keep(session.store, a, b, checked)


def guess_fix(context_a, context_b, summary_a: Summary, summary_b: Summary,
              findings_a) -> tuple[Verification, str] | None:
    """The one finding of A whose fix B evidently applied (:mod:`.analysis.changed`), predicted
    against what B achieved, and the change it was read from; None where the change names no
    single finding, or that finding carries no prediction."""
    from .analysis.changed import applied_fix

    applied = applied_fix(context_a, context_b, summary_a, summary_b, findings_a)
    checked = verify(summary_a, summary_b, applied.finding) if applied is not None else None
    return (checked, applied.evidence) if checked is not None else None


def guess_runs(session: Session, a: str, b: str) -> tuple[Verification, str] | None:
    """:func:`guess_fix` on two runs of the session's history."""
    runs = session.runs
    return guess_fix(runs.context(a), runs.context(b), runs.summary(a), runs.summary(b),
                     lambda: session.advise(a).findings)


@dataclass(frozen=True)
class VerifiedCompareReport(CompareReport):
    """``%npucompare A B --fix RULE``: the comparison, then the fix's predicted saving against
    the achieved one (``.verification``); without ``--fix``, the fix read from what changed
    (``.read_from`` says the change)."""

    verification: Verification | None = None
    kept: bool = False
    read_from: str = ""  # the fix was read from this change, not named with --fix (never kept)

    def __str__(self) -> str:
        return super().__str__() + fix_line(self.verification, self.kept, read_from=self.read_from)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        bundle = super()._repr_mimebundle_(include, exclude)
        return {**bundle, "text/plain": str(self),
                "text/html": bundle["text/html"] + fix_line(self.verification, self.kept, html=True,
                                                               read_from=self.read_from)}
