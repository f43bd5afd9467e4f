"""npumagic's own host samples (``npumagic_host.csv``, written beside the trace by the capture's
psutil sampler) -> counters of group "Host" on device -1.

Columns ``ts_ns`` (epoch ns, the clock torch.profiler and torch_npu stamp their events with),
``name`` and ``value``, one row per reading of a series: ``Process/CPU``, ``Main thread/CPU``,
``Worker PID/CPU``, ``Core N/CPU`` (percent of one core over the interval since that series'
previous reading; empty where a series opens or resumes after a pause), ``Workers/waiting`` and
``Workers/blocked`` (percent of the workers' readings at the interval's ends that found them waiting for
work, or blocked in another system call) and ``Process/RSS`` (bytes).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ...errors import TraceError
from .. import schema

FILE_NAME = "npumagic_host.csv"


def read_host(path: Path, rank: int) -> pd.DataFrame:
    """The host samples in ``path`` as counters (:data:`~npumagic.analysis.schema.COUNTER_COLUMNS`)."""
    try:
        long = pd.read_csv(path, dtype={"name": str})
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as exc:
        raise TraceError(path, f"not a readable CSV ({exc})") from None
    if list(long.columns) != ["ts_ns", "name", "value"] or not pd.api.types.is_integer_dtype(long["ts_ns"]):
        raise TraceError(path, "expected the columns ts_ns (integer), name, value (npumagic's host samples)")
    # NaN rates are kept: a series' reading after a start or a pause opens its next interval
    if long.empty:
        return schema.empty(schema.COUNTER_COLUMNS)
    unit = long["name"].str.endswith("/RSS").map({True: "B", False: "%"})
    return pd.DataFrame({"rank": rank, "device": -1, "group": "Host", "name": long["name"], "unit": unit,
                         "ts_ns": long["ts_ns"], "value": long["value"].astype(float)})
