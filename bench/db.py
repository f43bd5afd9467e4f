"""Reading a torch_npu rank: the db export against the text export of the same kind of job.

Times ``npumagic.load`` of one rank, best of --repeat in this process (imports excluded), for the
shared db export (db/level1, ascend_pytorch_profiler_N.db) and the shared text export at the same
profiler level (level1: trace_view.json + CSVs), and prints the files' sizes beside the times.

    python bench/db.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import npumagic

ASCEND = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "ascend"
CASES = {"db export (db/level1 rank 0)": ASCEND / "db" / "level1" / "rank0_ascend_pt",
         "text export (level1 rank 0)": ASCEND / "level1" / "rank0_ascend_pt"}


def best_of(path: Path, repeat: int) -> tuple[float, int]:
    times, events = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trace = npumagic.load(path)
        times.append(time.perf_counter() - start)
        events = len(trace.events)
    return min(times), events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'rank':32} {'files MiB':>9} {'events':>7} {'load s':>7}")
    for label, path in CASES.items():
        if not path.exists():
            print(f"{label:32} absent ({path})")
            continue
        size = sum(p.stat().st_size for p in (path / "ASCEND_PROFILER_OUTPUT").iterdir()) / 2**20
        seconds, events = best_of(path, args.repeat)
        print(f"{label:32} {size:9.2f} {events:7d} {seconds:7.3f}")


if __name__ == "__main__":
    main()
