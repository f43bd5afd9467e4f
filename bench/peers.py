"""npumagic against its peers on the same real data, each run as a user would run it: a fresh
process, imports included, wall time and peak RSS.

- Kineto trace (the shared V100 trace): npumagic analyze+advise, HolisticTraceAnalysis
  (load + temporal breakdown), PyTorch's TensorBoard plugin (torch-tb-profiler RunLoader).
- torch_npu output, two ranks (shared level1): npumagic analyze+advise, msprof-analyze cluster
  (-m all) and msprof-analyze advisor (all, rank 0).

    pip install holistictraceanalysis torch-tb-profiler msprof-analyze   # peers; missing ones are skipped
    python bench/peers.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
KINETO = DATA / "cuda" / "ns_resolution"
ASCEND = DATA / "ascend" / "level1"

NPUMAGIC = """
import sys, npumagic
s = npumagic.analyze(sys.argv[1]); npumagic.checklist(s); npumagic.advise(s)
"""
HTA = """
import sys, logging
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
TraceAnalysis(trace_dir=sys.argv[1]).get_temporal_breakdown(visualize=False)
"""
TB_PLUGIN = """
import sys
if __name__ == "__main__":
    from torch_tb_profiler.io.cache import Cache
    from torch_tb_profiler.profiler.loader import RunLoader
    with Cache() as cache:
        RunLoader("run", sys.argv[1], cache).load()
"""


def timed(command: list[str], cwd: Path) -> tuple[float, float] | str:
    """Wall seconds and peak RSS (MiB, from wait4: this small bench process forks each tool)."""
    t0 = time.perf_counter()
    proc = _Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate()
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        last = (err.strip() or out.strip() or f"exit {proc.returncode}").splitlines()[-1]
        return "failed: " + last[:80]
    return seconds, proc.peak_rss_mib


class _Popen(subprocess.Popen):
    """Popen that reaps its child with wait4, keeping the child's own peak RSS."""

    peak_rss_mib = float("nan")

    def _try_wait(self, wait_flags):
        pid, status, usage = os.wait4(self.pid, wait_flags)
        if pid:
            self.peak_rss_mib = usage.ru_maxrss / 1024
        return pid, status


def python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


def have(module: str) -> bool:
    return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode == 0


def table(title: str, rows: list[tuple[str, object]]) -> None:
    print(f"\n{title}\n{'tool':<46}{'wall s':>8}{'peak RSS MiB':>14}{'vs npumagic':>13}")
    ours = rows[0][1] if isinstance(rows[0][1], tuple) else None
    for label, result in rows:
        if isinstance(result, tuple):
            ratio = f"{result[0] / ours[0]:.1f}x" if ours else "-"
            rss = "-" if result[1] != result[1] else f"{result[1]:.0f}"
            print(f"{label:<46}{result[0]:>8.2f}{rss:>14}{ratio:>13}")
        else:
            print(f"{label:<46}  {result}")


def main() -> None:
    for path in (KINETO, ASCEND):
        if not path.exists():
            sys.exit(f"{path} not found (the shared data sits beside the project)")
    with tempfile.TemporaryDirectory(prefix="npumagic-peers-") as tmp:
        tmp = Path(tmp)
        kineto = tmp / "kineto"
        shutil.copytree(KINETO, kineto)
        rows = [("npumagic analyze + checklist + advise", timed(python(NPUMAGIC, str(kineto)), ROOT))]
        rows.append(("HTA load + temporal breakdown", timed(python(HTA, str(kineto)), tmp) if have("hta") else "not installed"))
        rows.append(("torch-tb-profiler RunLoader.load", timed(python(TB_PLUGIN, str(kineto)), tmp)
                     if have("torch_tb_profiler") else "not installed"))
        table(f"Kineto trace: {next(KINETO.glob('*')).name} (V100, 69k events)", rows)

        ascend = tmp / "ascend"
        shutil.copytree(ASCEND, ascend)
        for p in ascend.rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        rows = [("npumagic analyze + checklist + advise", timed(python(NPUMAGIC, str(ascend)), ROOT))]
        tool = shutil.which("msprof-analyze")
        rows.append(("msprof-analyze cluster -m all", timed([tool, "cluster", "-d", str(ascend), "-m", "all"], tmp)
                     if tool else "not installed"))
        rows.append(("msprof-analyze advisor all (rank 0)",
                     timed([tool, "advisor", "all", "-d", str(ascend / "rank0_ascend_pt")], tmp) if tool else "not installed"))
        table("torch_npu output: shared level1, 2 ranks", rows)
    print("\nEach figure is one fresh process (imports included), as the tool is used from a shell; peak RSS "
          "is that process's own (wait4).")


if __name__ == "__main__":
    main()
