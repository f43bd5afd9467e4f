"""What `npumagic run` costs an unmodified script outside the active window: wall time per
iteration of a small CPU training loop run plainly (`python loop.py`), under `npumagic run`
after its window closed (`--wait 1 --warmup 1 --steps 3`: only the optimizer hook remains, one
call per step), and under `npumagic run --on-demand` never triggered (the hook plus one
`os.stat` of the control file per step). Each variant is a fresh process; rounds rotate the
order, and each variant is compared with the plain run of the same round (median of the paired
ratios), since a shared machine drifts by more than the effect. Beside wall time, the loop's own
thread CPU time per iteration: time spent descheduled by other processes' load is not in it.

    python bench/run_overhead.py [--iterations 400] [--rounds 8]
Target: within 3% of the plain script. Prints figures; asserts nothing.

On a loaded machine those ratios move by more than 3% from run to run, so the cost itself is
also measured in this process, where the minimum of many repeats is robust to load: the time
one call of npumagic's step hook, as torch makes it at every ``optimizer.step()``, after the
window (a plain run's) and idle (on demand, with its ``os.stat``), in microseconds and as a
share of the loop's median iteration. (The difference of two timed ``optimizer.step()`` loops,
with and without the hook, moved by more than the hook costs on this machine.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

LOOP = """
import json, sys, time, torch
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 128), torch.randn(64, 1)
wall, cpu = [], []
for _ in range(int(sys.argv[1])):
    t0, c0 = time.perf_counter(), time.thread_time()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step(); opt.zero_grad()
    wall.append(time.perf_counter() - t0)
    cpu.append(time.thread_time() - c0)
json.dump({"wall": wall, "cpu": cpu}, open(sys.argv[2], "w"))
"""
SKIP = 50  # the window (wait 1 + warmup 1 + steps 3) and the allocator's warm-up lie before this


def hook_cost_us(on_demand: bool, number: int = 20000, repeat: int = 15) -> float:
    """What npumagic's step hook costs per optimizer.step() outside the window (us, min of
    repeats): the call torch makes to it, after the window (a plain run's) or idle on demand."""
    import timeit

    from npumagic.capture import CaptureOptions
    from npumagic.capture.inject import Config, Injected

    injected = Injected(Config(tempfile.mkdtemp(), CaptureOptions().as_dict(), on_demand=on_demand))
    injected.finished = not on_demand  # a plain run's window has closed
    return min(timeit.repeat(injected.optimizer_step, number=number, repeat=repeat)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=8, help="0: the hook's cost alone")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="npumagic-run-bench-"))
    (work / "loop.py").write_text(LOOP)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    npumagic = [sys.executable, "-m", "npumagic.cli", "run", "--out", str(work / "runs"), "--no-host"]
    variants = {
        "plain python": [],
        "npumagic run, after the window closed": [*npumagic, "--wait", "1", "--warmup", "1", "--steps", "3", "--"],
        "npumagic run --on-demand, never triggered": [*npumagic, "--on-demand", "--"],
    }
    medians: dict[tuple[str, str], list[float]] = {}
    names = list(variants)
    for r in range(args.rounds):
        for label in names[r % 3:] + names[:r % 3]:
            out = work / "times.json"
            subprocess.run([*variants[label], sys.executable, "loop.py", str(args.iterations), str(out)], cwd=work,
                           env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for clock, times in json.loads(out.read_text()).items():
                medians.setdefault((label, clock), []).append(statistics.median(times[SKIP:]))
    if medians:
        print(f"{'per iteration (median of iterations ' + str(SKIP) + '..)':<46}{'wall us':>9}{'ratio':>7}{'cpu us':>9}"
              f"{'ratio':>7}")
        for label in names:
            cells = []
            for clock in ("wall", "cpu"):
                mine, base = medians[(label, clock)], medians[("plain python", clock)]
                ratio = statistics.median(m / b for m, b in zip(mine, base))
                cells.append(f"{statistics.median(mine) * 1e6:>9.1f}{ratio:>7.3f}")
            print(f"{label:<46}{''.join(cells)}")
        print(f"({args.rounds} rounds of {args.iterations} iterations; ratio: median over rounds of variant / plain of "
              "the same round; target within 3%)")
    step_us = statistics.median(medians[("plain python", "wall")]) * 1e6 if medians else None
    for label, on_demand in (("after the window closed", False), ("on demand, idle", True)):
        cost = hook_cost_us(on_demand)
        share = f" = {cost / step_us:.2%} of a {step_us:.0f} us iteration" if step_us else ""
        print(f"hook per optimizer.step(), {label}: {cost:.2f} us{share}")

if __name__ == "__main__":
    main()
