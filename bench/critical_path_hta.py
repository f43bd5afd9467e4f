"""npumagic's critical path (analysis/critical_path.py) against HolisticTraceAnalysis' own, side by side.

For each shared single-rank Kineto trace HTA can follow, the first step's path length and the
share of it each bound kind holds: npumagic with ``like_hta=True`` (HTA's weights, the comparison
proper; and again with the trace cut to whole microseconds, as HTA reads it), HTA 0.5.0,
and npumagic's own weights (host time between top-level operators counted,
syncs followed without CUDA sync records). npumagic's kinds are mapped onto HTA's: launch_delay
is gpu_kernel_launch_overhead, kernel_gap gpu_kernel_kernel_overhead, gpu_memcpy counts as
gpu_compute_bound (HTA's memcpys are kernels on a stream), host_gap as cpu_bound.

HTA 0.5.0 needs pandas 2: ``python -m venv /tmp/hta && /tmp/hta/bin/pip install "pandas<3"
HolisticTraceAnalysis==0.5.0``, then ``python bench/critical_path_hta.py --hta-python /tmp/hta/bin/python``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from critical_path import run_hta  # noqa: E402
from snapshot import DATA, inputs  # noqa: E402

KINDS = ("cpu_bound", "gpu_compute_bound", "gpu_communication_bound", "gpu_kernel_kernel_overhead",
         "gpu_kernel_launch_overhead")
AS_HTA = {"cpu_bound": "cpu_bound", "host_gap": "cpu_bound", "gpu_compute_bound": "gpu_compute_bound",
          "gpu_memcpy": "gpu_compute_bound", "gpu_communication_bound": "gpu_communication_bound",
          "kernel_gap": "gpu_kernel_kernel_overhead", "launch_delay": "gpu_kernel_launch_overhead"}

HTA = """
import json, logging, sys, time, warnings
logging.disable(logging.WARNING); warnings.simplefilter("ignore")
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
t = time.perf_counter()
graph, ok = ta.critical_path_analysis(rank=sorted(ta.t.traces)[0], annotation="ProfilerStep", instance_id=None)
parts = graph.get_critical_path_breakdown().groupby("bound_by").duration.sum()
print(json.dumps({"s": time.perf_counter() - t, **{str(k): float(v) for k, v in parts.items() if str(k)}}))
"""


def hta_path(python: str, trace: Path) -> tuple[dict[str, float] | None, str]:
    """HTA's critical path of the first step of the trace's first rank: us by bound kind, and 's'."""
    return run_hta(python, trace, HTA)


def in_whole_us(events):
    """The events with their starts and durations cut to whole microseconds, as HTA 0.5.0 reads a
    trace (it casts Kineto's microseconds to int: sub-microsecond operators last 0 and drop out,
    and each gap between kernels gains what the cut takes off the kernel before it)."""
    events = events.copy()
    events["ts_ns"] = events["ts_ns"] // 1000 * 1000
    events["dur_ns"] = events["dur_ns"] // 1000 * 1000
    return events


def ours(trace, like_hta: bool, whole_us: bool = False) -> tuple[dict[str, float], float]:
    """npumagic's path of the first step, us by HTA's bound kinds, and the seconds it took."""
    from npumagic.analysis.critical_path import critical_path

    events = in_whole_us(trace.events) if whole_us else trace.events
    t = time.perf_counter()
    path = critical_path(events, trace.steps, like_hta=like_hta)
    took = time.perf_counter() - t
    parts = {kind: 0.0 for kind in KINDS}
    for kind, ns in path.totals().items():
        if kind in AS_HTA:
            parts[AS_HTA[kind]] += ns / 1e3
    return parts, took


def row(label: str, parts: dict[str, float], seconds: float) -> str:
    total = sum(parts.get(k, 0.0) for k in KINDS)
    shares = " ".join(f"{100 * parts.get(k, 0.0) / total if total else 0:9.1f}" for k in KINDS)
    return f"  {label:16} {total / 1e3:10.3f} {shares} {seconds:7.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hta-python", default=sys.executable, help="an interpreter with HTA 0.5.0 and pandas 2")
    args = parser.parse_args()
    import npumagic

    print(f"load average {os.getloadavg()[0]:.2f}")
    print(f"  {'':16} {'length ms':>10} {'cpu %':>9} {'compute %':>9} {'comm %':>9} {'k-k gap %':>9} "
          f"{'launch %':>9} {'seconds':>7}")
    for trace_path in [p for p in inputs(DATA) if "ascend" not in p.parts]:
        print(trace_path.relative_to(DATA))
        theirs, why = hta_path(args.hta_python, trace_path)
        if theirs is None:
            print(f"  HTA cannot follow it: {why}")
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trace = npumagic.load(trace_path)
        print(row("npumagic as HTA", *ours(trace, True)))
        print(row("  same, whole us", *ours(trace, True, whole_us=True)))
        print(row("HTA 0.5.0", theirs, theirs.pop("s")))
        print(row("npumagic own", *ours(trace, False)))
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
