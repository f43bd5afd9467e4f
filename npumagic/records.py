"""The record of one run as the history keeps it: plain data that render and the session read
without touching the SQLite store (:mod:`npumagic.history` reads and writes it). Imports no
pandas: ``npumagic runs`` and ``export`` read and print these records as they are."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, Mapping

from .analysis.persist_verdict import VerdictRecord

RUN_LIST_COLUMNS = ["name", "created", "status", "backend", "device", "steps", "step_median_ms", "device_util",
                    "bottleneck", "note"]
_EPOCH = datetime(1970, 1, 1)


@dataclass(frozen=True)
class Headline:
    """A run's figures at a glance as the history keeps them (``Summary.headline`` when it was
    recorded): each one named, None where not measured; the hardware and host means that were
    recorded (``hbm_gbps``, ``host_workers``, ...) in ``counters``. Read by attribute, so a figure
    renamed in the Summary fails a test instead of blanking a column of the log."""

    steps: float | None = None
    step_median_us: float | None = None
    step_p90_us: float | None = None
    step_cv: float | None = None
    device_util: float | None = None
    computing_share: float | None = None
    communication_share: float | None = None
    free_share: float | None = None
    dataloader_share: float | None = None
    sync_share: float | None = None
    syncs_per_step: float | None = None
    counters: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, figures: Mapping[str, Any]) -> "Headline":
        """From a stored headline: its numbers only (a history edited by hand may hold anything)."""
        named = {f.name for f in fields(cls)} - {"counters"}
        numbers = {k: v for k, v in figures.items() if isinstance(k, str) and _number(v)}
        return cls(**{k: v for k, v in numbers.items() if k in named},
                   counters={k: v for k, v in numbers.items() if k not in named})

    def as_dict(self) -> dict[str, float]:
        """The figures as stored and written in JSON: the named ones measured, then the counters."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "counters"}
        return {**{k: v for k, v in out.items() if v is not None}, **self.counters}


@dataclass(frozen=True)
class Run:
    """One run in the history (a capture, or an imported output directory)."""

    id: int
    name: str
    kind: str
    status: str
    created: float
    finished: float | None
    backend: str | None
    device: str | None
    source: str | None
    arguments: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)
    run_dir: str | None = None
    message: str | None = None
    steps_seen: int | None = None
    headline: Headline = field(default_factory=Headline)
    verdict: VerdictRecord = field(default_factory=VerdictRecord)
    note: str | None = None
    dataloaders: list[dict[str, Any]] = field(default_factory=list)
    run_dir_owned: bool = False  # npumagic created run_dir (only then may %npurm --files delete it)
    # what a capture measured beside its trace (see npumagic.analysis.run_facts.RunFacts)
    step_times: dict[str, list[float]] = field(default_factory=dict)
    device_neighbours: list[dict[str, Any]] = field(default_factory=list)


def when(created: Any) -> datetime | None:
    """A stored creation time (epoch seconds) as a naive UTC datetime to the second (as
    ``pd.Timestamp(created, unit="s").floor("s")`` reads it: the fraction rounded to nanoseconds
    first); None if it is not one, or lies outside the years 1 to 9999."""
    if isinstance(created, bool) or not isinstance(created, (int, float)) or not abs(created) < 1e11:
        return None
    whole = int(created)
    nanoseconds = whole * 10**9 + int(round(created - whole, 9) * 10**9)
    try:
        return _EPOCH + timedelta(seconds=nanoseconds // 10**9)
    except OverflowError:
        return None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def run_row(run: Run) -> dict[str, Any]:
    """One row of the run list (:data:`RUN_LIST_COLUMNS`), plain values (``created`` a datetime)."""
    h = run.headline
    return {"name": run.name, "created": when(run.created), "status": run.status,
            "backend": run.backend, "device": run.device, "steps": h.steps,
            "step_median_ms": h.step_median_us / 1000.0 if h.step_median_us is not None else None,
            "device_util": h.device_util, "bottleneck": run.verdict.bottleneck, "note": run.note}


def run_list_frame(rows: list[dict[str, Any]]):
    """The run list as a DataFrame (``%npuruns``'s ``.data``), one row per run of :func:`run_row`."""
    import pandas as pd

    frame = pd.DataFrame([{**r, "created": pd.Timestamp(r["created"]) if r["created"] is not None else None}
                          for r in rows], columns=RUN_LIST_COLUMNS)
    frame["steps"] = frame["steps"].astype("Int64")  # a run without steps must not turn the column into floats
    return frame
