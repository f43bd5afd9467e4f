"""Start-up: how much of an ``npumagic`` command's time goes to imports, from ``python -X importtime``.

Runs each command in a fresh process (``npumagic --help``, ``npumagic runs DIR [--json]`` on a
2-run history, ``npumagic analyze`` on the shared V100 trace) a few times, and prints the median
wall time, its ratio to ``python -c pass`` (the interpreter's own start, measured alike), the
median time its imports took (the top-level entries of ``-X importtime``, whose own overhead they
include) with their share, and the heaviest top-level imports of the last run. Targets (issue 45):
``--help`` and ``runs`` import no pandas, numpy, torch or matplotlib and answer under 0.3 s;
``analyze`` of a small trace under 0.6 s. The 2-run history is recorded by ``npumagic demo`` in a
temporary folder unless ``--history`` names one. The load average is printed: on a shared
machine every figure stretches with it.

    python bench/startup.py [--trace PATH] [--history DIR] [--repeat 5]
"""

from __future__ import annotations

import argparse
import re
import statistics
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT.parent / "shared" / "data" / "cuda" / "ns_resolution"
LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def run(argv: list[str]) -> tuple[float, dict[str, float]]:
    """Wall seconds of one run and the cumulative seconds of each top-level import."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "npumagic.cli", *argv], capture_output=True,
                          text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"npumagic {' '.join(argv)} failed: {done.stderr.strip().splitlines()[-1]}")
    top = {}
    for line in done.stderr.splitlines():
        m = LINE.match(line)
        if m and len(m[3]) == 1:  # one space after the bar: imported by the command, not by another module
            top[m[4]] = top.get(m[4], 0.0) + int(m[2]) / 1e6
    return wall, top


def bare_python() -> float:
    """Wall seconds of ``python -c pass`` in a fresh process."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - start


def two_run_history(folder: str) -> str:
    """A history of two runs (the demo's baseline and fix), recorded by the magics in a real shell."""
    out = str(Path(folder) / "history")
    subprocess.run([sys.executable, "-m", "npumagic.cli", "demo", "--out", out], check=True, capture_output=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(DEFAULT_TRACE))
    parser.add_argument("--history", default=None, help="a 2-run history (default: the demo's, recorded now)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        history = args.history or two_run_history(folder)
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
        bare = statistics.median(bare_python() for _ in range(args.repeat))
        print(f"python -c pass: {bare:.3f} s")
        for argv in (["--help"], ["runs", history], ["runs", history, "--json"], ["analyze", args.trace],
                     ["analyze", args.trace, "--json"]):
            runs = [run(argv) for _ in range(args.repeat)]
            wall = statistics.median(w for w, _ in runs)
            imports = statistics.median(sum(t.values()) for _, t in runs)
            heavy = sorted(runs[-1][1].items(), key=lambda kv: -kv[1])[:5]
            shown = ["DIR" if a == history else a for a in argv]
            print(f"npumagic {' '.join(shown)}: {wall:.2f} s ({wall / bare:.1f}x python -c pass), imports {imports:.2f} s "
                  f"({imports / wall:.0%}); heaviest: {', '.join(f'{name} {t * 1000:.0f} ms' for name, t in heavy)}")
        print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
