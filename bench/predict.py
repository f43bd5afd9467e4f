"""Predicted against achieved: five CPU programs with a known injected cause, each profiled, its
top finding's fix applied, and profiled again. Prints each finding's predicted saving per step
(with its interval) beside the saving the fix achieved (median step before - after).

    python bench/predict.py            # all five
    python bench/predict.py item gloo  # some of them

A benchmark, not a test: run it on a quiet machine (its timings are the point). The causes: a
DataLoader whose Dataset sleeps, a .item() each step, a Python loop of small operators, a 2-rank
gloo job with one late rank, and more DataLoader workers than the cores can run.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
import warnings
from typing import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

import npumagic
from npumagic.analysis.advice import advise_run
from npumagic.analysis.verify import verify

STEPS = 8


def profiled(step: Callable[[], None], folder: str | None = None) -> npumagic.Summary:
    folder = folder or tempfile.mkdtemp(prefix="npumagic_predict_")
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=STEPS, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(folder)) as prof:
        for _ in range(STEPS + 2):
            step()
            prof.step()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return npumagic.analyze(folder)


class Samples(torch.utils.data.Dataset):
    """Samples that take ``sleep`` seconds of waiting and ``work`` matmuls of CPU each."""

    def __init__(self, sleep: float = 0.0, work: int = 0):
        self.sleep, self.work = sleep, work

    def __len__(self) -> int:
        return 1 << 16

    def __getitem__(self, i):
        if self.sleep:
            time.sleep(self.sleep)
        x = torch.randn(64, 64)
        for _ in range(self.work):
            x = torch.tanh(x @ x)
        return x[0]


def _training(loader: torch.utils.data.DataLoader) -> Callable[[], None]:
    batches = iter(loader)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    return lambda: model(next(batches)).sum().backward()


def _workers_in(fix: str) -> int | None:
    """The worker count a fix names; 'num_workers=N' (no host samples to fit it by): the cores but one."""
    found = re.search(r"num_workers=(?:\d+ -> )?(\d+|N)[,)]", fix)
    if not found:
        return None
    return max((os.cpu_count() or 2) - 1, 1) if found.group(1) == "N" else int(found.group(1))


def dataloader(fix: str | None = None) -> Callable[[], None]:
    workers = _workers_in(fix or "") if fix else 0
    sleep = 0.002 if fix is None or workers else 0.0  # no worker count offered: cheaper samples
    return _training(torch.utils.data.DataLoader(Samples(sleep=sleep), batch_size=4, num_workers=workers or 0,
                                                 persistent_workers=bool(workers)))


def too_many_workers(fix: str | None = None) -> Callable[[], None]:
    cores = os.cpu_count() or 2
    workers = 4 * cores if fix is None else (_workers_in(fix) or 0)
    return _training(torch.utils.data.DataLoader(Samples(work=3), batch_size=4, num_workers=workers,
                                                 persistent_workers=bool(workers)))


def item(fix: str | None = None) -> Callable[[], None]:
    model = torch.nn.Linear(256, 256)
    x = torch.randn(64, 256)

    def step():
        loss = model(x).square().mean()
        loss.backward()
        if fix is None:
            for _ in range(50):
                loss.item()
    return step


def small_ops(fix: str | None = None) -> Callable[[], None]:
    x = torch.randn(32)

    def step():
        y = x
        if fix is None:
            for _ in range(400):
                y = y * 1.0001 + 0.0001
        else:  # the same arithmetic in one vectorised pass
            y = y * 1.0001 ** 400 + 0.0001 * sum(1.0001 ** k for k in range(400))
        y.sum()
    return step


def _gloo_rank(rank: int, folder: str, late_ms: float) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29517")
    dist.init_process_group("gloo", rank=rank, world_size=2)
    model = torch.nn.Linear(256, 256)
    x = torch.randn(32, 256)

    def step():
        model(x).sum().backward()
        if rank == 1 and late_ms:
            time.sleep(late_ms / 1000)
        for p in model.parameters():
            dist.all_reduce(p.grad)
    profiled(step, folder)
    dist.destroy_process_group()


def gloo(fix: str | None = None) -> npumagic.Summary:
    folder = tempfile.mkdtemp(prefix="npumagic_predict_gloo_")
    mp.spawn(_gloo_rank, args=(folder, 5.0 if fix is None else 0.0), nprocs=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return npumagic.analyze(folder)


CASES = {"dataloader": dataloader, "item": item, "small_ops": small_ops, "gloo": gloo,
         "too_many_workers": too_many_workers}
# what each program's fixed variant changes (the injected cause's fix, as the top finding should name it)
APPLIED = {"dataloader": "the finding's num_workers (N: the cores but one), or no sleep where it offers no workers",
           "item": "no .item() in the step", "small_ops": "the loop's 400 operators as one vectorised expression",
           "gloo": "rank 1 no longer sleeps 5 ms before the all-reduce",
           "too_many_workers": "the finding's num_workers (0 where it names none)"}


def run(name: str) -> str:
    make = CASES[name]
    before = make() if name == "gloo" else profiled(make())
    advice = advise_run(before, every_rank=True)
    top = advice.lead.finding if advice.lead is not None and advice.lead.finding is not None else \
        (advice.findings[0] if len(advice) else None)
    if top is None:
        return f"{name}: no finding"
    after = make(top.fix) if name == "gloo" else profiled(make(top.fix))
    checked = verify(before, after, top)
    again = advise_run(after, every_rank=True).lead
    return (f"{name}: {checked.sentence() if checked else top.rule + ': no prediction'}\n"
            f"    top finding: {top.title[:150]}\n    its fix: {top.fix[:150]}\n    applied: {APPLIED[name]}\n"
            f"    next verdict: {again.label}: {again.title[:120]}")


def main(argv: list[str]) -> int:
    torch.set_num_threads(1)
    names = argv or list(CASES)
    outcomes = []
    for name in names:
        line = run(name)
        print(line, flush=True)
        outcomes.append("(within the interval" in line)
    print(f"achieved within the predicted interval: {sum(outcomes)} of {len(outcomes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
