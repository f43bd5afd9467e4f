"""How often %npucompare is wrong at the README's default, ``--steps 3``, on the CPU.

20 pairs of runs of the identical cell (each pair a fresh history, so no replicates to measure
run-to-run noise from: the first comparison a new user makes): how many are called a
difference (false positives; target at most 1 of 20). 20 pairs where the second run's DataLoader
no longer sleeps 3 ms per batch: how many are called faster with the DataLoader named (target at
least 19 of 20). Pairs are interleaved so both kinds share the machine's load.

    python bench/noise.py [--pairs 20] [--steps 3] [--verbose]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from IPython.core.interactiveshell import InteractiveShell

SETUP = """
import time, torch
torch.manual_seed(0)
torch.set_num_threads(1)
class Batches(torch.utils.data.Dataset):
    '''Ready batches; each costs DELAY seconds to "load" (decoding, augmentation).'''
    def __init__(self, delay, n=40):
        self.delay, self.x, self.y = delay, torch.randn(n, 32, 256), torch.randn(n, 32, 1)
    def __len__(self):
        return len(self.x)
    def __getitem__(self, i):
        if self.delay:
            time.sleep(self.delay)
        return self.x[i], self.y[i]
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
def train(delay):
    for x, y in torch.utils.data.DataLoader(Batches(delay), batch_size=None):
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step(); opt.zero_grad()
"""


def _run(ip: InteractiveShell, name: str, delay: float, steps: int):
    cell = f"%%npuprofile --steps {steps} --no-plot --quiet --name {name}\ntrain({delay})"
    result = ip.run_cell(cell, silent=True)
    if not result.success:
        raise SystemExit(f"{name} failed: {result.error_in_exec or result.error_before_exec}")


def _pair(ip: InteractiveShell, root: Path, label: str, delays: tuple[float, float], steps: int):
    ip.run_line_magic("config", f"NpuMagics.output_dir = {str(root / label)!r}")
    _run(ip, "a", delays[0], steps)
    _run(ip, "b", delays[1], steps)
    return ip.run_line_magic("npucompare", "a b --no-plot")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--delay", type=float, default=0.003, help="DataLoader sleep per batch removed (s)")
    parser.add_argument("--verbose", action="store_true", help="print every comparison's sentence")
    args = parser.parse_args()
    ip = InteractiveShell.instance(colors="NoColor")
    ip.run_line_magic("load_ext", "npumagic")
    ip.run_cell(SETUP, silent=True)
    ip.run_line_magic("config", "NpuMagics.plot = False")
    false_pos = found = 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _pair(ip, root, "warm", (args.delay, args.delay), args.steps)  # first-run effects stay out
        for i in range(args.pairs):
            same = _pair(ip, root, f"same{i}", (args.delay, args.delay), args.steps)
            fixed = _pair(ip, root, f"fixed{i}", (args.delay, 0.0), args.steps)
            false_pos += same.significant
            named = fixed.explained_by is not None and fixed.explained_by.column == "dataloader_us"
            found += fixed.significant and fixed.speedup > 1 and named
            if args.verbose:
                print(f"same  {i:2d}: {same.sentence()}")
                print(f"fixed {i:2d}: {fixed.sentence()}")
    print(f"identical cell, --steps {args.steps}: {false_pos} of {args.pairs} pairs called a difference "
          f"(target at most {args.pairs // 20})")
    print(f"DataLoader sleep of {args.delay * 1000:g} ms removed, --steps {args.steps}: {found} of {args.pairs} "
          f"called faster naming the DataLoader (target at least {args.pairs - args.pairs // 20})")
    load = os.getloadavg()
    print(f"{4 * args.pairs + 2} runs in {time.perf_counter() - started:.0f} s; load average {load[0]:.1f} on "
          f"{os.cpu_count()} CPUs (a loaded machine stretches CPU steps and hides real changes)")


if __name__ == "__main__":
    main()
