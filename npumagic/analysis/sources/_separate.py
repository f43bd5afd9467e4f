"""The one refusal of both readers for files of separate runs that record the same rank."""

from __future__ import annotations

import os
from pathlib import Path

from ...errors import TraceError


def separate_runs(first: Path, second: Path, what: str, rank: int, why: str, one_job: str) -> TraceError:
    """TraceError naming ``first`` and ``second`` from the folder that holds both (a subfolder of
    the one given may hold only one of them): ``what`` they are ("traces", "rank directories"),
    ``why`` they cannot be one run after the rank, ``one_job`` what a job's folder holds."""
    where = Path(os.path.commonpath([first.parent, second.parent]))
    a, b = (p.relative_to(where).as_posix() for p in (first, second))
    return TraceError(where, f"holds {what} of separate runs: {a} and {b} both record rank {rank}{why}. A folder "
                             f"is read as one job ({one_job}): analyse each run's folder on its own")
