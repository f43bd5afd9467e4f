"""Re-reading an analysed many-rank job from its store against parsing it.

Builds an N-rank torch_npu job from the shared level1 ranks (as bench/cluster.py does), then runs,
each as a fresh process as a user runs it from a shell, ``npumagic analyze DIR --every-rank --json``
twice: the first parses every rank (and writes ``DIR/npumagic_store``), the second reads the store.
Then the store's read alone, in this process (no interpreter start-up or imports), --repeat times.

    python bench/store.py --ranks 256 [--repeat 3] [--scheduler serial] [--keep DIR]

Target: re-reading the 256-rank job with every rank under 2 s."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cluster import LEVEL1, build, timed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--scheduler", default="", help="npumagic analyze --scheduler for the parse (default: as a "
                                                         "user runs it, a local Dask cluster)")
    parser.add_argument("--keep", type=Path, default=None, help="build the job here and keep it")
    args = parser.parse_args()
    if not LEVEL1.is_dir():
        sys.exit(f"{LEVEL1} not found (the shared data sits beside the project)")
    os.environ["NPUMAGIC_STORE"] = "1"
    with tempfile.TemporaryDirectory(prefix="npumagic-store-") as tmp:
        job = args.keep or Path(tmp) / "job"
        if not job.is_dir():
            build(job, args.ranks)
        for folder, _, _ in os.walk(job):  # the shared data is read-only, its copy must not be
            os.chmod(folder, os.stat(folder).st_mode | 0o200)
        command = [sys.executable, "-m", "npumagic.cli", "analyze", str(job), "--every-rank", "--json"]
        if args.scheduler:
            command += ["--scheduler", args.scheduler]
        parse = timed(command, Path(tmp))
        store = [timed(command, Path(tmp)) for _ in range(max(1, args.repeat))]
        size = sum(f.stat().st_size for f in (job / "npumagic_store").iterdir())

        from npumagic.analysis import job as job_reader

        inside = []
        for _ in range(max(1, args.repeat)):
            t0 = time.perf_counter()
            summary = job_reader.analyze(job, every_rank=True)
            inside.append(time.perf_counter() - t0)
        assert len(summary.per_rank) == args.ranks, len(summary.per_rank)
    load = os.getloadavg()
    print(f"\n{args.ranks} ranks, every rank; {os.cpu_count()} cores, load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; "
          f"store {size / 2**20:.1f} MiB")
    print(f"{'npumagic analyze --every-rank':<44}{'wall s':>8}{'CPU s':>8}{'peak RSS MiB':>14}")
    for label, result in [("parsing every rank (writes the store)", parse),
                          ("from the store (median)", _median(store))]:
        print(f"{label:<44}{result[0]:>8.2f}{result[1]:>8.2f}{result[2]:>14.0f}" if isinstance(result, tuple)
              else f"{label:<44}  {result}")
    print(f"{'the store read alone, in process (median)':<44}{statistics.median(inside):>8.2f}")
    if isinstance(parse, tuple) and isinstance(store[0], tuple):
        print(f"ratio: {parse[0] / _median(store)[0]:.1f}x")


def _median(results):
    """The median wall and CPU seconds and the largest peak RSS of ``timed`` results (the first failure, if any)."""
    if not all(isinstance(r, tuple) for r in results):
        return next(r for r in results if not isinstance(r, tuple))
    return statistics.median(r[0] for r in results), statistics.median(r[1] for r in results), max(r[2] for r in results)

if __name__ == "__main__":
    main()
