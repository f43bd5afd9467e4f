"""The live timeline's answers in the kernel on a synthetic trace of N events.

The trace: one rank, steps of 20k events each; two host threads of nested ops (an outer op per
ten kernels holding two inner ones), two device streams of kernels from 300 names (the second
overlapping the first), a collective lane and memory samples. Prints the index build, the first
view (the whole run at 1200 px) and the 50th/95th percentile and maximum of 300 zoom and pan
answers (random windows from the whole run down to ~1 us per pixel, and pans of a tenth of a
window), then a search (its count and time) and the aggregate of a range selection (the whole
run, and one step), all measured in this process.

    python bench/timeline.py --events 2000000
Target (issue 33): first view (build + first answer) under 1 s and each answer under 100 ms at the 95th percentile, 2M events.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from npumagic.analysis import schema
from npumagic.render.live.lod import TimelineIndex
from npumagic.render.live.lookup import search
from npumagic.render.live.selection import aggregate

EVENTS_PER_STEP = 20_000
KERNEL_NS = 2_000


def synthetic(n: int, seed: int = 0) -> schema.Trace:
    """About ``n`` events laid out as a training loop's (see the module docstring)."""
    rng = np.random.default_rng(seed)
    kernels = int(n / 1.32)  # with 0.3 host ops and 0.02 collectives per kernel: n in all
    gaps = rng.exponential(1_000, kernels).astype(np.int64) + 200
    ts = np.cumsum(gaps + KERNEL_NS)
    dur = rng.integers(KERNEL_NS // 2, KERNEL_NS * 2, kernels)
    stream = np.where(rng.random(kernels) < 0.8, 7, 8)
    kernel_names = np.array([f"kernel_{i:03d}" for i in range(300)])
    outer = ts[::10] - 5_000
    n_outer = outer.size
    host_ts = np.concatenate([outer, outer + 100, outer + 9_000])
    host_dur = np.concatenate([np.full(n_outer, 18_000), np.full(n_outer, 8_000), np.full(n_outer, 8_000)])
    host_names = np.repeat(["aten::linear", "aten::t", "aten::addmm"], n_outer)
    thread = np.tile(np.where(np.arange(n_outer) % 4 == 0, 2, 1), 3)
    comm_ts = ts[::50]
    columns = {
        "name": np.concatenate([kernel_names[rng.integers(0, 300, kernels)], host_names,
                                np.full(comm_ts.size, "hcom_allReduce")]),
        "kind": np.concatenate([np.full(kernels, "kernel"), np.full(host_ts.size, "host_op"), np.full(comm_ts.size, "comm")]),
        "ts_ns": np.concatenate([ts, host_ts, comm_ts]),
        "dur_ns": np.concatenate([dur, host_dur, np.full(comm_ts.size, 30_000)]),
        "lane": np.concatenate([np.char.add("NPU 0/Stream ", stream.astype(str)), np.char.add("Python/Thread ", thread.astype(str)),
                                np.full(comm_ts.size, "HCCL/Group 0")]),
        "stream": np.concatenate([stream, np.full(host_ts.size, -1), np.full(comm_ts.size, 9)]),
        "device": np.concatenate([np.zeros(kernels, np.int64), np.full(host_ts.size, -1), np.zeros(comm_ts.size, np.int64)]),
    }
    events = pd.DataFrame(columns).assign(rank=0)
    events = events.sort_values("ts_ns", kind="stable").reset_index(drop=True)
    bounds = events["ts_ns"].to_numpy()[::EVENTS_PER_STEP]
    end = int((events["ts_ns"] + events["dur_ns"]).max())
    steps = pd.DataFrame({"rank": 0, "step": np.arange(1, bounds.size + 1), "start_ns": bounds,
                          "end_ns": np.append(bounds[1:], end)})
    events["step"] = np.searchsorted(bounds, events["ts_ns"].to_numpy(), side="right")
    memory = pd.DataFrame({"rank": 0, "device": "npu:0", "ts_ns": ts[::200], "allocated_bytes": rng.random(ts[::200].size) * 2**30,
                           "reserved_bytes": 2.0**31})
    return schema.Trace(schema.coerce(events, schema.EVENT_COLUMNS), schema.coerce(steps, schema.STEP_COLUMNS),
                        memory=schema.coerce(memory, schema.MEMORY_COLUMNS))


def views(index: TimelineIndex, count: int, seed: int = 1):
    """Random zooms (log-uniform spans from the whole run to ~1 us per pixel) and pans."""
    rng = np.random.default_rng(seed)
    lo, hi = index.layout()["extent"]
    t0, t1 = lo, hi
    for i in range(count):
        if i % 3 == 2:  # pan by a tenth of the window
            shift = (t1 - t0) * rng.choice([-0.1, 0.1])
            t0, t1 = t0 + shift, t1 + shift
        else:
            span = float(np.exp(rng.uniform(np.log(1.2e-3), np.log(hi - lo))))
            t0 = float(rng.uniform(lo, max(hi - span, lo)))
            t1 = t0 + span
        yield t0, t1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000, help="events in the synthetic trace (up to 10M)")
    parser.add_argument("--width", type=int, default=1200, help="the view's width in pixels")
    parser.add_argument("--views", type=int, default=300, help="zoom and pan answers to time")
    args = parser.parse_args()
    if not 1_000 <= args.events <= 10_000_000:
        parser.error(f"--events {args.events}: give 1000 to 10000000")
    began = time.perf_counter()
    trace = synthetic(args.events)
    made = time.perf_counter()
    index = TimelineIndex.build(trace)
    built = time.perf_counter()
    lo, hi = index.layout()["extent"]
    first = index.query(lo, hi, args.width)
    answered = time.perf_counter()
    times, items = [], []
    for t0, t1 in views(index, args.views):
        t = time.perf_counter()
        answer = index.query(t0, t1, args.width)
        times.append((time.perf_counter() - t) * 1e3)
        items.append(sum(len(p.get("busy", ())) or len(p["start"]) for p in answer["lanes"]))
    ms = np.array(times)
    print(f"events: {len(trace.events):,} in {len(index.lanes)} lanes, {len(trace.steps)} steps "
          f"(synthetic trace made in {made - began:.1f} s)")
    print(f"index build: {(built - made) * 1e3:.0f} ms; first view (whole run, {args.width} px): "
          f"{(answered - built) * 1e3:.0f} ms; build + first view: {(answered - made) * 1e3:.0f} ms")
    print(f"zoom/pan answers ({args.views}): p50 {np.percentile(ms, 50):.1f} ms, p95 {np.percentile(ms, 95):.1f} ms, "
          f"max {ms.max():.1f} ms; items per answer: max {max(items):,} "
          f"(first view {sum(len(p.get('busy', ())) or len(p['start']) for p in first['lanes']):,})")
    t = time.perf_counter()
    found = search(index, "kernel_01")
    searched = time.perf_counter()
    aggregate(index, lo, hi)
    whole = time.perf_counter()
    step = index.layout()["steps"][len(trace.steps) // 2]
    aggregate(index, step["start"], step["end"])
    one = time.perf_counter()
    print(f"search 'kernel_01' ({len(found):,} matches): {(searched - t) * 1e3:.0f} ms; range aggregate: "
          f"whole run {(whole - searched) * 1e3:.0f} ms, one step {(one - whole) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
