"""Timeline drawing time at 10k, 100k and 1M events, built by replicating a real trace.

The shared V100 Kineto trace is repeated end to end in time until it holds N events (host
and device lanes, real names and durations), then the timeline Figure is drawn and rendered
to PNG. Prints seconds per size and the growth between sizes.

    python bench/render.py
Target: 1M events in under 3 s on this machine, growth no worse than linear.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import npumagic  # noqa: E402
from npumagic.analysis import schema  # noqa: E402
from npumagic.render.timeline import timeline_figure  # noqa: E402
from npumagic.render.views import figure_bytes  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT.parent / "shared" / "data" / "cuda" / "ns_resolution"


def replicate(trace: schema.Trace, n_events: int) -> schema.Trace:
    ev, st = trace.events, trace.steps
    span = int((ev["ts_ns"] + ev["dur_ns"]).max() - ev["ts_ns"].min()) + 1_000_000
    copies = max(1, int(np.ceil(n_events / len(ev))))
    events = pd.concat([ev.assign(ts_ns=ev["ts_ns"] + k * span) for k in range(copies)], ignore_index=True).head(n_events)
    steps = pd.concat([st.assign(start_ns=st["start_ns"] + k * span, end_ns=st["end_ns"] + k * span,
                                 step=st["step"] + 1000 * k) for k in range(copies)], ignore_index=True)
    steps = steps[steps["start_ns"] <= events["ts_ns"].max()]
    return schema.finish(events, steps, meta=trace.meta)


def main() -> None:
    if not SOURCE.exists():
        sys.exit(f"{SOURCE} not found (the shared data sits beside the project)")
    base = npumagic.load(SOURCE)
    top = npumagic.summarize(base).kernels["name"].astype(str).head(8).tolist()
    print(f"source: {SOURCE.name}, {len(base.events):,} events\n")
    print(f"{'events':>10}{'draw s':>9}{'png s':>8}{'total s':>9}{'growth':>9}")
    previous = None
    for n in (10_000, 100_000, 1_000_000):
        trace = replicate(base, n)
        t0 = time.perf_counter()
        fig = timeline_figure(trace, top_kernels=top)
        t1 = time.perf_counter()
        figure_bytes(fig)
        t2 = time.perf_counter()
        total = t2 - t0
        growth = f"{total / previous:.1f}x" if previous else "-"
        print(f"{n:>10,}{t1 - t0:>9.2f}{t2 - t1:>8.2f}{total:>9.2f}{growth:>9}")
        previous = total
    print(f"\n1M events: {total:.2f} s (target < 3 s): {'OK' if total < 3 else 'OVER TARGET'}; "
          "10x more events should cost at most 10x")


if __name__ == "__main__":
    main()
