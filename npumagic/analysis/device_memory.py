"""Peak device memory of one rank, against the device's capacity where it is known."""

from __future__ import annotations

import numpy as np
import pandas as pd


MEMORY_COLUMNS = ["device", "peak_allocated_bytes", "peak_reserved_bytes", "capacity_bytes"]


def memory_table(memory: pd.DataFrame, capacity_bytes: int | None) -> pd.DataFrame:
    """Each device's peak allocated and reserved bytes, with its capacity (``capacity_bytes``,
    the trace's ``device_memory_bytes``; NaN where unknown and on the CPU)."""
    if memory.empty:
        return pd.DataFrame(columns=MEMORY_COLUMNS)
    g = memory.groupby(memory["device"].astype(str), sort=True)
    table = g.agg(peak_allocated_bytes=("allocated_bytes", "max"), peak_reserved_bytes=("reserved_bytes", "max")).reset_index()
    table["capacity_bytes"] = np.where(table["device"].str.startswith("cpu"), np.nan,
                                       capacity_bytes or np.nan)
    return table[MEMORY_COLUMNS]
