"""``analyze``: a path's or a run's step table, top kernels, rank table and checklist verdict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import TARGET, Arg, Command, Result, at_least_one, rank


@dataclass(frozen=True)
class Analysis(Result):
    label: str
    summary: Any
    verdict: Any
    top: int
    measured: dict[str, Any]  # a capture's step times and device neighbours, shown in the JSON's meta

    def to_dict(self) -> dict[str, Any]:
        from ..jsonout import analyze_doc

        return analyze_doc(self.summary, self.verdict, self.label, self.top, self.measured)

    def text(self, width: int | None = None) -> str:
        from ..render.tables import format_kernels, format_ranks, kernel_caption, rank_caption
        from ..render.text import summary_text, verdict_text

        summary = self.summary
        parts = [summary_text(summary, width), format_kernels(summary.kernels, self.top,
                                                              kernel_caption(summary)).to_text(width)]
        if len(summary.ranks) > 1:
            parts.append(format_ranks(summary.ranks, rank_caption(summary)).to_text(width))
        return "\n\n".join(parts + [verdict_text(self.verdict, width)])

    def html(self) -> str:
        return self.summary._repr_html_() + self.verdict._repr_html_()


def analyze(places, target: str, rank: int | None = None, top: int = 10) -> Analysis:
    at_least_one(top, "top (the kernels to list)")
    found = places.target(target, rank)  # a missing path is said before pandas is imported
    from ..analysis.checklist import checklist

    measured = found.facts.measured() if found.facts is not None else {}
    return Analysis(found.label, found.summary, checklist(found.summary, facts=found.facts), top, measured)


COMMAND = Command(
    "analyze", "step table, top kernels and the checklist verdict of a profiler output",
    (TARGET, rank("rank to describe (default the lowest)"), Arg("top", "kernels to list (default 10)", int, 10)),
    analyze, about="Analyze a profiler output path or a recorded run (name, or -1 for the latest): step times, top "
                   "kernels, the rank table of a multi-rank job and the checklist verdict naming the bottleneck.")
