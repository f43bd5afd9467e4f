"""The live timeline's answers in the kernel on a synthetic trace of N events.

The trace: one rank, steps of 20k events each; two host threads of nested ops (an outer op per
ten kernels holding two inner ones), two device streams of kernels from 300 names (the second
overlapping the first), a collective lane and memory samples. Prints, all measured in this process:

- the first view (the whole run at 1200 px) of a run never opened: the index (its lanes and
  their coarse pass; pyramids wait for a view that needs them; the critical path's lanes wait for
  the first view, as the widget builds them) and the first answer; then the time to add the
  critical path's lanes and to store the index beside the run (both after the first view, in the
  widget's own thread);
- the first view on reopening (a kernel restart, ``%npushow``): the index read back from that
  store, memory-mapped, and the first answer; then the time to make what it leaves to later (the
  events' frame a hover or click reads, the launches of the flows: the widget's thread makes them);
- the 50th/95th percentile and maximum of 300 zoom and pan answers (random windows from the whole
  run down to ~1 us per pixel, and pans of a tenth of a window; the pyramids built on demand
  are inside these times);
- peak RSS from the trace in memory on (the synthetic trace's own making left out: the kernel
  holds a trace it read), against the size of the same events as a Kineto JSON: a minimal one
  (ph, cat, name, pid, tid, ts, dur; kernels' device, stream and correlation args), from a
  sample of 20k events serialised and scaled, and at the bytes per event of the 10M-event
  Kineto file bench/parse.py builds from the shared V100 trace (193);
- a search (its count and time) and the aggregate of a range selection (the whole run, and one step).

The trace's stand-in source file (the store's key) and the store are in a temporary folder.
``--trace PATH`` opens a profiler output instead (e.g. bench/parse.py's file), linked into that
folder so that its store is written there, and compares peak RSS with the file's size.

    python bench/timeline.py --events 2000000
    python bench/timeline.py --trace /tmp/big/rank-0.big.pt.trace.json
Targets (issue 44): first view under 1 s never opened, under 0.2 s reopened; zoom/pan p95 under
100 ms at 2M and 10M events; peak RSS under the trace file's size at 10M.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from npumagic.analysis import schema
from npumagic.render.live.lod import TimelineIndex
from npumagic.render.live.lookup import search
from npumagic.render.live.selection import aggregate

EVENTS_PER_STEP = 20_000
# bytes per event of the 10M-event Kineto file bench/parse.py writes from the shared V100 trace
# (1.8 GiB, README): the file a real trace of these events would about be
REAL_KINETO_BYTES = 193
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
    thread = np.tile(np.where(np.arange(n_outer) % 4 == 0, 2, 1), 3)
    comm_ts = ts[::50]
    names = np.concatenate([[str(k) for k in kernel_names], ["aten::linear", "aten::t", "aten::addmm", "hcom_allReduce"]])
    lanes = np.array(["NPU 0/Stream 7", "NPU 0/Stream 8", "Python/Thread 1", "Python/Thread 2", "HCCL/Group 0"])
    # names and lanes as category codes: strings of 10M events would take more memory than the index
    columns = {
        "name": pd.Categorical.from_codes(np.concatenate([rng.integers(0, 300, kernels), np.repeat([300, 301, 302], n_outer),
                                                          np.full(comm_ts.size, 303)]).astype(np.int16), categories=names),
        "kind": pd.Categorical.from_codes(np.repeat([0, 1, 2], [kernels, host_ts.size, comm_ts.size]).astype(np.int8),
                                          categories=["kernel", "host_op", "comm"]),
        "ts_ns": np.concatenate([ts, host_ts, comm_ts]),
        "dur_ns": np.concatenate([dur, host_dur, np.full(comm_ts.size, 30_000)]),
        "lane": pd.Categorical.from_codes(np.concatenate([stream - 7, thread + 1, np.full(comm_ts.size, 4)]).astype(np.int8),
                                          categories=lanes),
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


def kineto_bytes(trace: schema.Trace, sample: int = 20_000, seed: int = 2) -> int:
    """The size of the events as a minimal Kineto JSON (see the module docstring), from a sample."""
    ev = trace.events
    rng = np.random.default_rng(seed)
    picked = ev.iloc[np.sort(rng.choice(len(ev), min(sample, len(ev)), replace=False))]
    out = []
    for r in picked.itertuples():
        e = {"ph": "X", "cat": "kernel" if r.kind == "kernel" else "cpu_op", "name": str(r.name), "pid": int(r.rank),
             "tid": str(r.lane), "ts": round(r.ts_ns / 1e3, 3), "dur": round(r.dur_ns / 1e3, 3)}
        if r.kind != "host_op":
            e["args"] = {"device": int(r.device), "stream": int(r.stream), "correlation": int(r.correlation)}
        out.append(json.dumps(e) + ",\n")
    return int(sum(map(len, out)) * len(ev) / len(out))


def _peak_reset() -> None:
    """Start peak RSS afresh from now (Linux: VmHWM goes back to the current RSS)."""
    Path("/proc/self/clear_refs").write_text("5")


def _peak_bytes() -> int:
    status = Path("/proc/self/status").read_text()
    return int(next(ln for ln in status.splitlines() if ln.startswith("VmHWM")).split()[1]) * 1024


def first_view(trace: schema.Trace, width: int) -> tuple[TimelineIndex, float, float]:
    """The index of ``trace`` and its first answer (the whole run), and the seconds both took:
    wall and this process's CPU (a neighbour's load stretches the first, hardly the second)."""
    began, cpu = time.perf_counter(), time.process_time()
    index = TimelineIndex.build(trace, critical_later=True)
    lo, hi = index.layout()["extent"]
    index.query(lo, hi, width)
    return index, time.perf_counter() - began, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000, help="events in the synthetic trace (up to 10M)")
    parser.add_argument("--width", type=int, default=1200, help="the view's width in pixels")
    parser.add_argument("--views", type=int, default=300, help="zoom and pan answers to time")
    parser.add_argument("--trace", type=Path, default=None, help="a profiler output to open instead of the synthetic trace")
    parser.add_argument("--search", default="kernel_01", help="the name searched")
    args = parser.parse_args()
    if not 1_000 <= args.events <= 10_000_000:
        parser.error(f"--events {args.events}: give 1000 to 10000000")
    if args.trace is not None and not args.trace.exists():
        parser.error(f"--trace {args.trace}: no such file or folder")
    with tempfile.TemporaryDirectory(prefix="npumagic-bench-") as folder:
        began = time.perf_counter()
        if args.trace is None:
            trace = synthetic(args.events)
            kineto = kineto_bytes(trace)
            source = Path(folder) / "trace.json"
            source.write_text("synthetic")  # the store's key: its size and mtime
            trace = dataclasses.replace(trace, meta=dataclasses.replace(trace.meta, path=str(source)))
        else:  # its store beside the link, not beside the file
            from npumagic.analysis import load

            source = Path(folder) / args.trace.name
            source.symlink_to(args.trace.resolve())
            trace = load(source)
            kineto = sum(f.stat().st_size for f in ([source] if source.is_file() else source.rglob("*")) if f.is_file())
        made = time.perf_counter()
        gc.collect()
        _peak_reset()
        held = _peak_bytes()
        index, never, never_cpu = first_view(trace, args.width)
        t = time.perf_counter()
        index.add_critical_path(trace)
        critical = time.perf_counter() - t
        t = time.perf_counter()
        index.keep()
        stored = time.perf_counter() - t
        del index
        gc.collect()
        index, reopened, reopened_cpu = first_view(trace, args.width)
        t = time.perf_counter()
        index.events, index.launches  # noqa: B018 - made after the first view, as the widget's thread makes them
        deferred = time.perf_counter() - t
        lo, hi = index.layout()["extent"]
        times, items = [], []
        for t0, t1 in views(index, args.views):
            t = time.perf_counter()
            answer = index.query(t0, t1, args.width)
            times.append((time.perf_counter() - t) * 1e3)
            items.append(sum(len(p.get("busy", ())) or len(p["start"]) for p in answer["lanes"]))
        ms = np.array(times)
        peak = _peak_bytes()
        print(f"events: {len(trace.events):,} in {len(index.lanes)} lanes, {len(trace.steps)} steps "
              f"({'synthetic trace made' if args.trace is None else f'{args.trace} read'} in {made - began:.1f} s)")
        print(f"first view (whole run, {args.width} px), index work included: never opened {never * 1e3:.0f} ms "
              f"({never_cpu * 1e3:.0f} ms CPU); reopened {reopened * 1e3:.0f} ms ({reopened_cpu * 1e3:.0f} ms CPU; "
              f"after the first view: critical path ({len(index.critical):,} spans) in {critical * 1e3:.0f} ms, "
              f"stored in {stored * 1e3:.0f} ms; the reopened index's events frame and launches in "
              f"{deferred * 1e3:.0f} ms); load average {os.getloadavg()[0]:.1f} on "
              f"{os.cpu_count()} cores")
        print(f"zoom/pan answers ({args.views}, pyramids built on demand inside them): p50 {np.percentile(ms, 50):.1f} ms, "
              f"p95 {np.percentile(ms, 95):.1f} ms, max {ms.max():.1f} ms; items per answer: max {max(items):,}")
        real = REAL_KINETO_BYTES * len(trace.events)
        if args.trace is not None:
            print(f"peak RSS {peak / 2**20:,.0f} MiB (the trace held: {held / 2**20:,.0f} MiB); the profiler output "
                  f"{kineto / 2**20:,.0f} MiB ({peak / kineto:.2f}x)")
        else:
            print(f"peak RSS {peak / 2**20:,.0f} MiB (the trace held: {held / 2**20:,.0f} MiB); these events as a Kineto JSON: "
                  f"minimal {kineto / 2**20:,.0f} MiB ({peak / kineto:.2f}x), at bench/parse.py's file's {REAL_KINETO_BYTES} "
                  f"bytes per event {real / 2**20:,.0f} MiB ({peak / real:.2f}x)")
        t = time.perf_counter()
        found = search(index, args.search)
        searched = time.perf_counter()
        aggregate(index, lo, hi)
        whole = time.perf_counter()
        step = index.layout()["steps"][len(trace.steps) // 2]
        aggregate(index, step["start"], step["end"])
        one = time.perf_counter()
        print(f"search {args.search!r} ({len(found):,} matches): {(searched - t) * 1e3:.0f} ms; range aggregate: "
              f"whole run {(whole - searched) * 1e3:.0f} ms, one step {(one - whole) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
