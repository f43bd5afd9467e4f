"""Summary (+ baseline) -> Verdict: the five-step performance checklist.

1 Baseline (step time, utilisation, communication share), 2 Classification (the bottleneck
category and the numbers that decide it: the top finding of :mod:`.advice`), 3 Next change
(that finding's fix), 4 Verification against a baseline, 5 Record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any


from .. import presentation
from .advice import Advice, advise, class_name, lead
from .run_facts import RunFacts
from .summary import Summary
from .verify import verify

if TYPE_CHECKING:
    from .changed import AppliedFix
    from .compare import Comparison


@dataclass(frozen=True)
class Verdict:
    """The checklist's conclusion for one run: ``bottleneck`` is one of the categories in DESIGN.md."""

    bottleneck: str
    evidence: dict[str, Any]
    steps: list[tuple[str, str]]
    next_change: str
    advice: Advice = field(default_factory=Advice, repr=False, compare=False)
    where: str = ""  # one line after the steps: how to see where in the model the time goes ("": none)

    def as_dict(self) -> dict[str, Any]:
        return {"bottleneck": self.bottleneck, "evidence": self.evidence, "next_change": self.next_change,
                "steps": [list(s) for s in self.steps], "findings": [f.as_dict() for f in self.advice],
                **({"where_in_model": self.where} if self.where else {})}

    def to_dict(self) -> dict[str, Any]:
        """``as_dict()`` as a versioned JSON document (the ``schema`` field)."""
        from ..jsonout import verdict_doc

        return verdict_doc(self)

    def __str__(self) -> str:
        return presentation.text(self)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))

    def _repr_html_(self) -> str | None:
        return presentation.html(self)


# said under the steps of a run that recorded no nn.Module and no user region: a hint, not a finding
RECORD_PLACES = ("no nn.Module or region recorded, so its time cannot be placed in the model: profile with "
                 "{0} (torch_npu: with_modules=True, or mstx ranges) or wrap the step's parts in "
                 "torch.profiler.record_function")


def record_places() -> str:
    """:data:`RECORD_PLACES` in the words of the user's shell (a terminal is told no magic)."""
    from ..wording import say

    return RECORD_PLACES.format(say("record_modules"))


def classify(summary: Summary, advice: Advice | None = None) -> tuple[str, dict[str, Any]]:
    """The bottleneck category and its evidence: the advice's lead (:func:`.advice.lead`), so the
    checklist and ``%npuadvise`` never disagree."""
    advice = advice if advice is not None else advise(summary)
    judged = advice.lead if advice.lead is not None else lead(summary, advice.findings)
    evidence = dict(judged.finding.evidence) if judged.finding is not None else {}
    if judged.category == "compute_bound":
        evidence["computing_share"] = summary.share("computing_us")
    elif judged.category == "balanced":
        evidence["device_util"] = summary.device_util
    return judged.category, dict(evidence, title=judged.title)


def checklist(summary: Summary, baseline: Summary | None = None, run_name: str | None = None,
              stored_at: str | None = None, advice: Advice | None = None,
              comparison: "Comparison | None" = None, facts: RunFacts | None = None,
              applied: "AppliedFix | None" = None) -> Verdict:
    """Run the five-step checklist on ``summary``, verifying against ``baseline`` (or a ready
    ``comparison`` baseline -> this run, which also knows what changed) when given; ``facts``:
    what the run's record knows beside its trace (its unprofiled step times, other processes on
    its device, its environment); ``applied``: the baseline's finding whose fix this run applied
    (read from what changed, or the baseline's Next change), whose prediction Verify checks (the
    baseline's Next change where not given)."""
    advice = advice if advice is not None else advise(summary, run_name or "", facts)
    bottleneck, evidence = classify(summary, advice)
    judged = advice.lead if advice.lead is not None else lead(summary, advice.findings)
    s = summary.step_stats
    h = summary.headline
    step1 = (f"step {_ms(s['median_us'])} median, p90 {_ms(s['p90_us'])}, jitter {_pct(s['cv'])}; "
             f"{summary.busy_label} {_pct(summary.median_step_util)}, communication {_pct(h['communication_share'])} ({s['n']} step{'' if s['n'] == 1 else 's'})")
    inflation = _inflation(facts)
    if inflation is not None and inflation.ci[0] > 1:  # said only where profiling measurably slowed the step
        lo, hi = inflation.ci
        step1 += (f"; profiling inflated the step by {inflation.ratio - 1:.0%} (95% CI {lo - 1:.0%} to {hi - 1:.0%}, "
                  "its profiled steps against its unprofiled ones)")
    if advice.untrusted:
        step1 += f"; {advice.untrusted}"
    backend = summary.meta.get("backend")
    step2 = f"{class_name(bottleneck, backend)}: {evidence['title']}"
    step3 = judged.fix
    step4 = _verify(summary, baseline, comparison, applied)
    # how to add a note is the interface's business (render says it in the magics' terms)
    step5 = ((f"recorded as {run_name}" + (f" in {stored_at}" if stored_at else "")) if run_name
             else "not recorded: this output was only read, into no history")
    steps = [("Baseline", step1), ("Classify", step2), ("Next change", step3), ("Verify", step4), ("Record", step5)]
    where = record_places() if summary.places_recorded is False and s["n"] else ""
    return Verdict(bottleneck, evidence, steps, step3, advice, where)


def _inflation(facts: RunFacts | None):
    """:func:`.compare.profiling_inflation`, its module imported only for a capture that timed
    its steps (a trace read from disk has none: ``npumagic analyze`` starts without it)."""
    if facts is None or not facts.step_times:
        return None
    from .compare import profiling_inflation

    return profiling_inflation(facts)


def _verify(summary: Summary, baseline: Summary | None, cmp: "Comparison | None", applied: "AppliedFix | None") -> str:
    if cmp is None and baseline is None:
        return "no baseline yet: this run is the reference; change one thing and profile again"
    if cmp is None:
        from .compare import compare

        cmp = compare(baseline, summary, "baseline", "this run")
    explained = cmp.explained_by.column if cmp.explained_by is not None and cmp.significant else None
    moved = "; ".join(f"{r.metric.split(' (')[0]} " + (f"{r.a:.0%}->{r.b:.0%}" if r.column == "device_util" else
                                                      f"{r.a:,.2f}->{r.b:,.2f} ms") + f" ({r.direction})"
                      for r in cmp.breakdown.itertuples()
                      if r.direction != "unchanged" and r.every_step and r.column != explained)
    text = cmp.sentence() + (f"; {moved}" if moved else "")
    if len(cmp.changed) > 1:
        text += f"; note: {len(cmp.changed)} things changed ({', '.join(cmp.changed[:3])}...) — change one at a time"
    elif cmp.changed:
        text += f"; changed: {cmp.changed[0]}"
    if baseline is not None:  # the fix this run applied, predicted against what this run achieved
        told = applied.finding if applied is not None else lead(baseline, advise(baseline).findings).finding
        checked = verify(baseline, summary, told)
        if checked is not None:
            read = applied.evidence if applied is not None else ""
            text += (f"; the fix read from what changed ({read}), " if read else "; the baseline's Next change, ") + \
                checked.sentence()
    return text


def _ms(us: float) -> str:
    return "-" if us != us else f"{us / 1000:,.2f} ms"


def _pct(v: float) -> str:
    return "-" if v != v else f"{v:.0%}"
