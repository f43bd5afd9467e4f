"""``steps``: the per-step table of a path or a run, for steps FIRST..LAST."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import NpumagicError
from .base import TARGET, Arg, Command, Result, rank


@dataclass(frozen=True)
class Steps(Result):
    label: str
    frame: Any
    rank: int | None
    first: int | None
    last: int | None

    def to_dict(self) -> dict[str, Any]:
        from ..jsonout import document, records

        return document("steps", path=self.label, rank=self.rank, first=self.first, last=self.last,
                        steps=records(self.frame))

    def text(self, width: int | None = None) -> str:
        from ..render.tables import format_steps

        from ..analysis.finding import plural

        return f"{self.label}: {plural(len(self.frame), 'step', 'steps')}\n{format_steps(self.frame).to_text(width)}"

    def table(self):
        """The step table as the notebook shows it (``%npusteps`` without a statement)."""
        from ..render.tables import format_steps

        return format_steps(self.frame, caption=f"{self.label}: per-step time")

    def html(self) -> str:
        return self.table()._repr_html_()


def steps(places, target: str, first: int | None = None, last: int | None = None,
          rank: int | None = None) -> Steps:
    found = places.target(target, rank)
    frame = found.summary.steps
    if first is not None:
        frame = frame[frame["step"] >= first]
    if last is not None:
        frame = frame[frame["step"] <= last]
    if frame.empty:
        known = found.summary.steps["step"].tolist()
        asked = f"{first}..{last}" if None not in (first, last) else f"from {first}" if last is None else f"up to {last}"
        raise NpumagicError(f"no steps {asked} in {found.label}; its steps: "
                            f"{known[0]}..{known[-1]}" if known else f"{found.label} has no steps")
    return Steps(found.label, frame, found.summary.meta.get("rank"), first, last)


COMMAND = Command(
    "steps", "the per-step table (wall, compute, communication, idle, data loading, device busy) of a profiler output",
    (TARGET, Arg("first", "the first step id to list (default the first)", int),
     Arg("last", "the last step id to list (default the last)", int), rank("rank to list (default the lowest)")),
    steps, about="The per-step table (wall, compute, communication, idle, data-loading time, device busy) of a path "
                 "or run, for the steps first..last (ids as in the step column; default all).")
