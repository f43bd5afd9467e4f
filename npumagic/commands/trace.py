"""``trace``: a path or run written as a trace file that Perfetto and chrome://tracing open, with
npumagic's steps, idle gaps (with their cause), blocking syncs, waits, memory peak and findings
as tracks of their own (:mod:`npumagic.render.perfetto`).

Its own command, not an option of ``export``: ``export`` writes the history's log (its target is
the output directory), this one a single run or profiler output (its target is a path or run
name, as ``steps`` and ``advise`` take)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..names import PERFETTO_SUFFIX as SUFFIX
from .base import TARGET, Arg, Command, Result


@dataclass(frozen=True)
class TraceFile(Result):
    label: str
    written: dict

    def to_dict(self) -> dict[str, Any]:
        from ..jsonout import document

        return document("trace", target=self.label, **self.written)

    def text(self, width: int | None = None) -> str:
        from ..analysis.finding import plural

        w = self.written
        marks = ", ".join(f"{n} {kind}{'' if n == 1 else 's'}" for kind, n in w["marks"].items()) or "no marks"
        return (f"wrote {w['path']}: {w['slices']:,} slices of {self.label}, "
                f"{plural(w['steps'], 'step', 'steps')}, {marks}, {plural(w['findings'], 'finding', 'findings')}, "
                f"{w['flows']:,} launch flows"
                + (f", {w['queue_flows']:,} task queue flows" if w["queue_flows"] else "") + "\n"
                "open it in https://ui.perfetto.dev or chrome://tracing")


def trace(places, target: str, perfetto: str | None = None) -> TraceFile:
    from ..render.perfetto import write_perfetto

    found = places.target(target)
    events = places.runs.trace(found.run) if found.run is not None else _load(found.path)
    findings = places.advise(found, every_rank=True).findings
    out = places.destination(perfetto or _default_name(found))
    done = write_perfetto(events, out, findings, title=found.label)
    return TraceFile(found.label, done.as_dict())


def _load(path: Path):
    from ..analysis import load

    return load(path)


def _default_name(found) -> str:
    from ..named_runs import name_for

    return (found.run or name_for(Path(found.path))) + SUFFIX


COMMAND = Command(
    "trace", "write a run or profiler output as a trace file Perfetto and chrome://tracing open",
    (TARGET, Arg("perfetto", f"the Chrome Trace Event JSON file to write (default NAME{SUFFIX} here)",
                 metavar="FILE")),
    trace, about="Write a path or run as a Chrome Trace Event JSON file that Perfetto (ui.perfetto.dev) and "
                 "chrome://tracing open: every event of every rank, launch flows, device memory, and npumagic's "
                 "own tracks per rank (steps, device idle gaps with their cause, blocking syncs, waits for a "
                 "slower rank, the memory peak, the findings).")
