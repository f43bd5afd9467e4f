"""Start-up: how much of an ``npumagic`` command's time goes to imports, from ``python -X importtime``.

Runs each command in a fresh process (``npumagic --help``, ``npumagic runs DIR [--json]``,
``npumagic rules DIR``, ``npumagic export DIR`` and ``npumagic check fixed --history DIR`` on a
2-run history, ``npumagic analyze`` on the shared V100 trace) a few
times, and prints the median wall time of plain runs, its ratio to ``python -c pass`` (the
interpreter's own start, measured alike), the median time its imports took in runs with ``-X
importtime`` (interleaved with the plain ones; the top-level entries, whose own overhead they
include) with their share of those runs' wall time, which of pandas, numpy, torch
and matplotlib it imported, and the heaviest top-level imports of the last run; and ``python -c
"import pandas, numpy"`` alike, the floor under ``analyze`` (it reads the trace with them). Targets (issue
45): ``--help``, ``runs``, ``export`` and ``check`` import no pandas, numpy, torch or matplotlib,
``--help`` and ``runs`` answer under 0.3 s;
``analyze`` of a small trace under 0.6 s. ``analyze`` is timed once more with one decode process
(``NPUMAGIC_DECODE_WORKERS=1``), which reads the trace after importing pandas instead of having a
worker read it meanwhile (:mod:`npumagic.analysis.read_ahead`).

Each command is timed with its bytecode compiled once, as an installed package has it (pip
writes the ``.pyc`` files at install), in a cache in the temporary folder
(``PYTHONPYCACHEPREFIX``), after one untimed run: with ``PYTHONDONTWRITEBYTECODE`` set, as in a
checkout's test environment, every run would compile npumagic's modules again (about 0.1 s for
``analyze``). ``--no-bytecode-cache`` times that instead. The 2-run history is recorded by ``npumagic demo`` in a
temporary folder unless ``--history`` names one. The load average is printed: on a shared
machine every figure stretches with it.

    python bench/startup.py [--trace PATH] [--history DIR] [--repeat 5] [--no-bytecode-cache]
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
HEAVY = ("pandas", "numpy", "torch", "matplotlib")
FLOOR = "import pandas, numpy"
LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def run(argv: list[str], env: dict[str, str], importtime: bool = True) -> tuple[float, dict[str, float], list[str]]:
    """Wall seconds of one run, and with ``importtime`` the cumulative seconds of each top-level
    import and the heavy modules it imported (printing them costs time of its own)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "npumagic.cli", *argv],
                          capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"npumagic {' '.join(argv)} failed: {done.stderr.strip().splitlines()[-1]}")
    top, heavy = {}, set()
    for line in done.stderr.splitlines():
        m = LINE.match(line)
        if m and len(m[3]) == 1:  # one space after the bar: imported by the command, not by another module
            top[m[4]] = top.get(m[4], 0.0) + int(m[2]) / 1e6
        if m and m[4] in HEAVY:
            heavy.add(m[4])
    return wall, top, sorted(heavy)


def bare_python(env: dict[str, str], code: str = "pass") -> float:
    """Wall seconds of ``python -c CODE`` in a fresh process."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
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
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="compile every module at every run where the environment says so (PYTHONDONTWRITEBYTECODE)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        env = dict(os.environ)
        if not args.no_bytecode_cache:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(Path(folder) / "pycache")
        history = args.history or two_run_history(folder)
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; "
              f"{'bytecode compiled at every run' if args.no_bytecode_cache else 'bytecode cached, as installed'}")
        bare = statistics.median(bare_python(env) for _ in range(args.repeat))
        print(f"python -c pass: {bare:.3f} s")
        # what analyze cannot go below: the interpreter and the two libraries that read the trace
        floor = statistics.median(bare_python(env, FLOOR) for _ in range(args.repeat))
        print(f"python -c '{FLOOR}': {floor:.3f} s ({floor / bare:.1f}x python -c pass), analyze's floor")
        # analyze once more with one decode process: the trace read after pandas' import, not ahead of it
        read_here = {**env, "NPUMAGIC_DECODE_WORKERS": "1"}
        for argv, its_env, said in ((["--help"], env, ""), (["runs", history], env, ""),
                                    (["runs", history, "--json"], env, ""), (["rules", history], env, ""),
                                    (["export", history], env, ""), (["check", "fixed", "--history", history], env, ""),
                                    (["analyze", args.trace], env, ""), (["analyze", args.trace, "--json"], env, ""),
                                    (["analyze", args.trace], read_here, " (no read-ahead: NPUMAGIC_DECODE_WORKERS=1)")):
            run(argv, its_env)  # untimed: writes the bytecode cache
            runs, plain = [], []
            for _ in range(args.repeat):
                runs.append(run(argv, its_env))
                plain.append(run(argv, its_env, importtime=False)[0])
            wall = statistics.median(plain)
            imports = statistics.median(sum(t.values()) for _, t, _ in runs)
            traced = statistics.median(w for w, _, _ in runs)
            top = sorted(runs[-1][1].items(), key=lambda kv: -kv[1])[:5]
            shown = ["DIR" if a == history else a for a in argv]
            over = f", {wall - floor:.2f} s over the floor" if argv[0] == "analyze" else ""
            print(f"npumagic {' '.join(shown)}{said}: {wall:.2f} s ({wall / bare:.1f}x python -c pass{over}), imports {imports:.2f} s "
                  f"({imports / traced:.0%} of {traced:.2f} s with -X importtime), importing {', '.join(runs[-1][2]) or 'none'} of {', '.join(HEAVY)}; "
                  f"heaviest: {', '.join(f'{name} {t * 1000:.0f} ms' for name, t in top)}")
        print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
