"""The per-step host table (counters.host_table) from npumagic's own host samples."""

from __future__ import annotations

import numpy as np
import pandas as pd

from npumagic.analysis.counters import host_table


def _samples(rows: list[tuple[int, str, float]]) -> pd.DataFrame:
    ts, name, value = zip(*rows)
    return pd.DataFrame({"group": "Host", "name": list(name), "unit": "%", "ts_ns": list(ts), "value": list(value)})


def test_a_core_without_a_reading_in_a_short_step_still_counts():
    """A step shorter than the clock's tick: one core read 100%, the other no reading (its
    counters did not move). The machine has two cores all the same; neither is called idle."""
    ms = 1_000_000
    samples = _samples([(0, "Core 0/CPU", np.nan), (0, "Core 1/CPU", np.nan),
                        (2 * ms, "Core 0/CPU", 100.0), (2 * ms, "Core 1/CPU", np.nan),
                        (20 * ms, "Core 0/CPU", 50.0), (20 * ms, "Core 1/CPU", 5.0)])
    steps = pd.DataFrame({"step": [1, 2, 3], "start_ns": [0, 10 * ms, 30 * ms], "end_ns": [2 * ms, 20 * ms, 40 * ms]})
    table = host_table(samples, steps)
    assert table["cores"].tolist() == [2, 2, 0]  # step 3: nothing read, nothing known
    assert table["cores_idle"].tolist()[:2] == [0, 1]
