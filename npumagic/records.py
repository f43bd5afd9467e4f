"""The record of one run as the history keeps it: plain data that render and the session read
without touching the SQLite store (:mod:`npumagic.history` reads and writes it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from .analysis.persist_verdict import VerdictRecord


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
    headline: dict[str, Any] = field(default_factory=dict)
    verdict: VerdictRecord = field(default_factory=VerdictRecord)
    note: str | None = None
    dataloaders: list[dict[str, Any]] = field(default_factory=list)
    run_dir_owned: bool = False  # npumagic created run_dir (only then may %npurm --files delete it)


def when(created: Any) -> pd.Timestamp | None:
    """A stored creation time (epoch seconds) as a Timestamp to the second; None if it is not one."""
    if isinstance(created, bool) or not isinstance(created, (int, float)) or not abs(created) < 1e11:
        return None
    return pd.Timestamp(created, unit="s").floor("s")
