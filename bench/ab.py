"""How soon and how often wrongly %npuab decides on this machine, before (main's rule) and after,
on the same step times of a tiny real model in a real shell.

Three kinds of experiment, alternated so they share the machine's load: identical variants (both
sleep 5 ms and run a training step; target: at most 5% called different), B about 10% faster
(target: decided in a median of at most 100 steps) and B about 8% faster. Each experiment's steps
are timed once, as %npuab times them (its warm-up and timer), and judged by three rules: main's
(a t interval at 5% / L after blocks 3, 5, 8, 12, ..., L looks: Bonferroni, on each block's mean
log ratio), the always-valid confidence sequence on the same block differences, and that sequence
on each side's faster call of the block (%npuab's rule). A rule that needs more steps than the
others took times them live on the same recording, so all see the same calls in the same order.

    python bench/ab.py [--experiments 20] [--max-steps 400] [--threshold 5]
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np
from IPython.core.interactiveshell import InteractiveShell
from scipy import special

from npumagic.analysis.ab import ConfidenceSequence, alternate, mean_of_logs
from npumagic.capture.alternate import timer, warm_up

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
def ten():  # about 10% faster than a on a ~6 ms step
    time.sleep(0.00445); train_step()
def eight():  # about 8% faster
    time.sleep(0.00455); train_step()
"""


class MainRule:
    """Main's rule before the confidence sequence: a t interval looked at after blocks 3, 5, 8,
    12, ... and the last, each look at alpha / (the number of looks the budget allows)."""

    alpha = 0.05
    block = staticmethod(mean_of_logs)

    @staticmethod
    def looks(blocks: int) -> list[int]:
        at, k = [], 3
        while k < blocks:
            at.append(k)
            k = max(k + 1, math.ceil(k * 1.5))
        return at + [blocks]

    def interval(self, d: np.ndarray, blocks: int):
        at = self.looks(blocks)
        if d.size not in at:
            return None
        half = float(special.stdtrit(d.size - 1, 1 - self.alpha / len(at) / 2)) * d.std(ddof=1) / math.sqrt(d.size)
        return float(d.mean()), float(d.mean()) - half, float(d.mean()) + half

    def more_steps(self, d: np.ndarray, t: float, blocks: int):
        return None


class Recording:
    """``measure(side)`` that times live calls the first time through and replays them after
    :meth:`rewind`, timing more live calls only where a rule goes beyond what was recorded."""

    def __init__(self, live):
        self.live, self.calls, self.at = live, [], 0

    def rewind(self) -> Recording:
        self.at = 0
        return self

    def __call__(self, side: str) -> float:
        if self.at == len(self.calls):
            self.calls.append((side, self.live(side)))
        recorded, took = self.calls[self.at]
        assert recorded == side, "the replay's block orders differ from the recording's"
        self.at += 1
        return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=20)
    parser.add_argument("--max-steps", type=int, default=400)
    parser.add_argument("--threshold", type=float, default=5)
    args = parser.parse_args()
    ip = InteractiveShell.instance(colors="NoColor")
    ip.run_line_magic("load_ext", "npumagic")
    ip.run_cell(SETUP, silent=True)
    ns = ip.user_ns
    rules = {"main": MainRule(), "seq-mean": ConfidenceSequence(block=mean_of_logs), "sequence": ConfidenceSequence()}
    kinds = {"same": "identical variants", "ten": "B about 10% faster", "eight": "B about 8% faster"}
    results = {(kind, rule): [] for kind in kinds for rule in rules}
    ratios = {kind: [] for kind in kinds}
    started = time.perf_counter()
    for seed in range(args.experiments):
        for kind in kinds:
            variants = {"a": ns["a"], "b": ns[kind]}
            warm_up(variants, 2)
            recording = Recording(timer(variants))
            for name, rule in rules.items():
                results[kind, name].append(alternate(recording.rewind(), args.threshold / 100, args.max_steps,
                                                     np.random.default_rng(seed), rule=rule))
            times = {side: np.array([t for s, t in recording.calls if s == side]) for side in "ab"}
            ratios[kind].append(np.median(times["a"]) / np.median(times["b"]))
    n = args.experiments
    print(f"{n} experiments of each kind, --max-steps {args.max_steps}, --threshold {args.threshold:g}%; "
          "main: Bonferroni-split looks on each block's mean log ratio; seq-mean: the always-valid confidence "
          "sequence on the same; sequence: the confidence sequence on each side's faster call (this branch)")
    for kind, label in kinds.items():
        print(f"{label} (ratio of the medians A/B {np.median(ratios[kind]):.3f}):")
        for name in rules:
            rs = results[kind, name]
            called = sum(r.significant for r in rs)
            faster = sum(r.significant and r.speedup > 1 for r in rs)
            undecided = sum(not r.decided for r in rs)
            steps = np.median([r.steps for r in rs])
            if kind == "same":
                print(f"  {name:<9} called different {called} of {n} ({called / n:.0%}; target at most 5%), "
                      f"{undecided} undecided, median {steps:.0f} steps")
            else:
                target = " (target at most 100)" if kind == "ten" else ""
                print(f"  {name:<9} median steps to decide {steps:.0f}{target} (undecided counted at the budget), "
                      f"called faster {faster} of {n}, {undecided} undecided")
    print(f"{3 * n} experiments in {time.perf_counter() - started:.0f} s; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
