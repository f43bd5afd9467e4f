"""What is known of a run beside its trace, handed explicitly to the analyses that read it: the
step times a capture took with and without the profiler (:func:`.compare.profiling_inflation`),
the other processes on the device (:mod:`.trust`) and the run record's environment snapshot (the
environment rule). A Summary holds only what its trace says; these travel on the run's record.

Histories written before (schema 3 and older) kept the first two inside the stored Summary's
meta: :func:`take_from_meta` moves them out as such a Summary is read."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a record's facts are read without the tables (`npumagic check`)
    from .summary import Summary

# the keys the recorder once wrote into a Summary's meta after analysis
MOVED_META_KEYS = ("step_times", "device_neighbours")


@dataclass(frozen=True)
class RunFacts:
    """``step_times``: ``{"profiled": [us, ...], "unprofiled": [us, ...]}`` (npumagic's captures);
    ``device_neighbours``: ``[{"pid", "name", "memory_mib"}, ...]`` other processes on the device
    when the capture started; ``environment``: the record's snapshot (variable -> value)."""

    step_times: dict[str, list[float]] = field(default_factory=dict)
    device_neighbours: list[dict[str, Any]] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)

    def measured(self) -> dict[str, Any]:
        """The capture's measurements as the Summary's meta showed them before they moved (both
        keys where either was measured, else none): what ``analyze --json`` prints in ``meta``."""
        if not (self.step_times or self.device_neighbours):
            return {}
        return {"step_times": self.step_times, "device_neighbours": self.device_neighbours}


NO_FACTS = RunFacts()


def take_from_meta(summary: Summary) -> tuple[Summary, dict[str, Any]]:
    """A Summary stored with :data:`MOVED_META_KEYS` in its meta, without them, and what they
    held (``{}`` and the same Summary when it has none)."""
    moved = {k: summary.meta[k] for k in MOVED_META_KEYS if k in summary.meta}
    if not moved:
        return summary, {}
    meta = {k: v for k, v in summary.meta.items() if k not in MOVED_META_KEYS}
    per_rank = dict(summary.per_rank)
    clean = dataclasses.replace(summary, meta=meta, per_rank=per_rank)
    for rank, s in per_rank.items():  # a one-rank Summary is its own rank's
        if s is summary:
            per_rank[rank] = clean
    return clean, moved
