"""Start-up: how much of an ``npumagic`` command's time goes to imports, from ``python -X importtime``.

Runs each command in a fresh process (default: ``npumagic analyze`` on the shared V100 trace, and
``npumagic --help``) a few times, and prints the median wall time, the median time its imports
took (the top-level entries of ``-X importtime``, whose own overhead they include) with their
share, and the heaviest top-level imports of the last run. Target: ``--help`` imports no pandas,
numpy, torch or matplotlib; ``analyze`` spends well under half its time in imports.

    python bench/startup.py [--trace PATH] [--repeat 5]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(DEFAULT_TRACE))
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for argv in (["--help"], ["analyze", args.trace], ["analyze", args.trace, "--json"]):
        runs = [run(argv) for _ in range(args.repeat)]
        wall = statistics.median(w for w, _ in runs)
        imports = statistics.median(sum(t.values()) for _, t in runs)
        heavy = sorted(runs[-1][1].items(), key=lambda kv: -kv[1])[:5]
        print(f"npumagic {' '.join(argv)}: {wall:.2f} s, imports {imports:.2f} s ({imports / wall:.0%}); "
              f"heaviest: {', '.join(f'{name} {t * 1000:.0f} ms' for name, t in heavy)}")


if __name__ == "__main__":
    main()
