"""How often %npuab is wrong on this machine, in a real shell with a tiny real model.

N experiments with identical variants (both sleep 5 ms and run a training step): how many are
called different (target at most 5%). N experiments where B sleeps 20% less: how many are called
faster, and in how many steps. Experiments alternate between the two kinds so both share the load.

    python bench/ab.py [--experiments 20] [--max-steps 200] [--threshold 5]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from IPython.core.interactiveshell import InteractiveShell

SETUP = """
import time, torch
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
def train_step():
    x, y = torch.randn(16, 32), torch.randn(16, 1)
    torch.nn.functional.mse_loss(model(x), y).backward(); opt.step(); opt.zero_grad()
def a():
    time.sleep(0.005); train_step()
def same():
    time.sleep(0.005); train_step()
def faster():
    time.sleep(0.004); train_step()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=20)
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--threshold", type=float, default=5)
    args = parser.parse_args()
    ip = InteractiveShell.instance(colors="NoColor")
    ip.run_line_magic("load_ext", "npumagic")
    ip.run_cell(SETUP, silent=True)
    line = f"--max-steps {args.max_steps} --threshold {args.threshold:g}"
    false_calls, found, steps, undecided = 0, 0, [], 0
    started = time.perf_counter()
    for _ in range(args.experiments):
        same = ip.run_line_magic("npuab", f"a same {line}")
        fast = ip.run_line_magic("npuab", f"a faster {line}")
        false_calls += same.significant
        undecided += not same.decided
        found += fast.significant and fast.speedup > 1
        steps.append(fast.steps)
    n = args.experiments
    print(f"identical variants: {false_calls} of {n} called different (target at most {n // 20}); "
          f"{undecided} undecided after {args.max_steps} steps")
    print(f"B 1 ms (about 17%) faster: {found} of {n} called faster, median {np.median(steps):.0f} steps")
    print(f"{2 * n} experiments in {time.perf_counter() - started:.0f} s; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
