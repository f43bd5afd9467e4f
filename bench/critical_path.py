"""npumagic's verdict against HolisticTraceAnalysis' critical path on the shared Kineto traces.

HTA's critical path (hta/analyzers/critical_path_analysis.py) follows the chain of CPU operators,
launches and kernels that sets the trace's length and says what bounds each stretch of it: the
CPU (``cpu_bound``), kernels (``gpu_compute_bound``), the gaps between kernels or after a launch.
A verdict that names a host-side lever (host-bound, DataLoader, syncs, tiny launch-bound kernels)
should see most of that path on the CPU; one that names the device (compute, communication,
memory) most of it on the GPU. An independent check of the verdict: it shares no code with it.

HTA 0.5.0's critical path needs pandas 2 (it fails under pandas 3 on a ``drop(axis=...,
columns=...)``): give it an interpreter that has both,

    python -m venv /tmp/hta && /tmp/hta/bin/pip install "pandas<3" HolisticTraceAnalysis==0.5.0
    python bench/critical_path.py --hta-python /tmp/hta/bin/python

Traces HTA cannot follow (no ProfilerStep annotation, launches it cannot find) are listed with
its reason and left out of the count.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from snapshot import DATA, inputs  # noqa: E402

HOST_SIDE = {"host_bound", "dataloader", "sync", "small_ops"}
DEVICE_SIDE = {"compute_bound", "npu_compute", "communication", "memory", "balanced"}
CPU_PARTS = ("cpu_bound", "gpu_kernel_launch_overhead")  # the host holds the path

HTA = """
import json, logging, sys, warnings
logging.disable(logging.WARNING); warnings.simplefilter("ignore")
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
graph, ok = ta.critical_path_analysis(rank=sorted(ta.t.traces)[0], annotation="ProfilerStep", instance_id=None)
print(json.dumps({str(k): float(v) for k, v in graph.summary().items() if str(k)}))
"""


def hta_path_shares(python: str, trace: Path) -> tuple[dict[str, float] | None, str]:
    """HTA's critical path of the trace's first rank, in % of its length by what bounds it."""
    return run_hta(python, trace, HTA)


def run_hta(python: str, trace: Path, script: str) -> tuple[dict | None, str]:
    """The JSON that ``script`` prints last, run by ``python`` (an interpreter with HTA) on a folder
    holding ``trace`` (a file, or a folder's traces); or None and HTA's last line of error."""
    with tempfile.TemporaryDirectory() as folder:
        for f in [trace] if trace.is_file() else sorted(trace.glob("*.json*")):
            shutil.copy(f, folder)
        done = subprocess.run([python, "-c", script, folder], capture_output=True, text=True, timeout=900)
    if done.returncode:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        return None, lines[-1][:110] if lines else f"exit {done.returncode}"
    return json.loads(done.stdout.strip().splitlines()[-1]), ""


def verdict(trace: Path) -> tuple[str, float]:
    """npumagic's bottleneck and the share of the median step the device sat idle (%)."""
    import npumagic
    from npumagic.analysis.checklist import classify

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        summary = npumagic.analyze(trace)
        steps = summary.steps
        idle = float((steps["idle_us"] / steps["wall_us"]).median() * 100) if len(steps) else float("nan")
        return str(classify(summary)[0]), idle


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hta-python", default=sys.executable, help="an interpreter with HTA 0.5.0 and pandas 2")
    args = parser.parse_args()
    agree = judged = 0
    print(f"{'trace':58} {'npumagic':14} {'device idle':>11} {'HTA path on CPU':>16}  agrees")
    for trace in [p for p in inputs(DATA) if "ascend" not in p.parts]:
        name = str(trace.relative_to(DATA))[:58]
        shares, why = hta_path_shares(args.hta_python, trace)
        ours, idle = verdict(trace)
        if shares is None:
            print(f"{name:58} {ours:14} {idle:10.1f}% {'-':>16}  HTA: {why}")
            continue
        cpu = sum(shares.get(part, 0.0) for part in CPU_PARTS)
        side = "host" if ours in HOST_SIDE else "device" if ours in DEVICE_SIDE else None
        if side is None:
            print(f"{name:58} {ours:14} {idle:10.1f}% {cpu:15.1f}%  (no side)")
            continue
        judged += 1
        ok = (cpu > 50) == (side == "host")
        agree += ok
        print(f"{name:58} {ours:14} {idle:10.1f}% {cpu:15.1f}%  {'yes' if ok else 'NO'}")
    print(f"\nverdict on the side that holds most of HTA's critical path: {agree} of {judged} traces HTA could follow")
    return 0


if __name__ == "__main__":
    sys.exit(main())
