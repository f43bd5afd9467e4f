"""``memcompare``: B's memory against A's (:mod:`npumagic.analysis.memory_compare`): the step peaks'
difference with its 95% interval and a verdict, and the operators whose allocations changed most."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import Arg, Command, Result, at_least_one


@dataclass(frozen=True)
class MemoryDelta(Result):
    label_a: str
    label_b: str
    comparison: Any  # MemoryComparison
    top: int = 10

    def to_dict(self) -> dict[str, Any]:
        from ..jsonout import document, records

        c = self.comparison
        return document("memcompare", a=self.label_a, b=self.label_b, verdict=c.verdict, peak_a_bytes=c.peak_a,
                        peak_b_bytes=c.peak_b, delta_bytes=c.delta_bytes, interval_bytes=c.interval,
                        floor_bytes=c.floor_bytes, per_step=c.per_step, operators=records(c.operators.head(self.top)),
                        changed_operators=records(c.operator_changes))

    def text(self, width: int | None = None) -> str:
        from ..analysis.memory_view import _size
        from ..render.tables import format_memory_changes

        c = self.comparison
        unit = " a step" if c.per_step else ""
        lines = [c.sentence(self.label_a, self.label_b)]
        if len(c.operator_changes):  # judged as the peak is; the raw list below
            lines.append(format_memory_changes(c, self.label_a, self.label_b, self.top).to_text(width))
        changed = c.operators[c.operators["delta_bytes"] != 0].head(self.top)
        if len(changed):
            lines.append(f"operators whose allocations changed most (bytes{unit}, {self.label_a} -> {self.label_b}):")
            lines += [f"  {str(r.name)[:48]:<48}  {_size(r.bytes_a)} -> {_size(r.bytes_b)} "
                      f"({'+' if r.delta_bytes >= 0 else ''}{_size(r.delta_bytes)}), allocations "
                      f"{r.allocations_a:,.1f} -> {r.allocations_b:,.1f}" for r in changed.itertuples(index=False)]
        return "\n".join(lines)


def memcompare(places, a: str, b: str, rank: int | None = None, top: int | None = None) -> MemoryDelta:
    from ..analysis.memory_compare import compare_memory
    from .memory import read_view

    label_a, view_a = read_view(places, a, rank)
    label_b, view_b = read_view(places, b, rank)
    return MemoryDelta(label_a, label_b, compare_memory(view_a, view_b), at_least_one(top, "--top") or 10)


COMMAND = Command(
    "memcompare", "compare two runs' memory: the peak's change with a verdict, the operators allocating more or less",
    (Arg("a", "the reference: an output path recorded with profile_memory=True, or a run", positional=True,
         metavar="path_a"),
     Arg("b", "the run to check: an output path or a run", positional=True, metavar="path_b"),
     Arg("rank", "rank of a job to read on both sides (the rank-th, default the first)", int),
     Arg("top", "operators to list (default 10)", int)),
    memcompare, about="Compare the memory of B against the reference A: the mean step peak (allocated) of each, "
                      "the difference with its 95% interval (Welch, over the steps' peaks), a verdict (higher, "
                      "lower, the same within noise and 1% of A's peak, at least 2 MiB), and the operators whose "
                      "allocations per step changed most.")
