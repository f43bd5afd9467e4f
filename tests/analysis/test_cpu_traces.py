"""CPU traces made by really running torch.profiler on small models."""

from __future__ import annotations

import time

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

import npumagic

from ..conftest import CUDA, need

SLEEP_S = 0.005
BATCH = 4


class SlowDataset(torch.utils.data.Dataset):
    """Sleeps in __getitem__ and remembers how long each sleep really took (sleep overshoots)."""

    def __init__(self):
        self.slept = []

    def __len__(self):
        return 64

    def __getitem__(self, i):
        t0 = time.perf_counter()
        time.sleep(SLEEP_S)
        self.slept.append(time.perf_counter() - t0)
        return torch.randn(32), torch.randn(1)


def _profile(tmp_path, loader, steps=4):
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=steps, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(tmp_path))) as prof:
        for i, (x, y) in enumerate(loader):
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            prof.step()
            if i == steps + 2:
                break
    return npumagic.analyze(tmp_path)


def test_dataloader_share_matches_the_injected_sleep(tmp_path):
    dataset = SlowDataset()
    summary = _profile(tmp_path, torch.utils.data.DataLoader(dataset, batch_size=BATCH))
    assert len(summary.steps) == 4
    for step, waited, wall in zip(summary.steps["step"], summary.steps["dataloader_us"], summary.steps["wall_us"]):
        # batch k is fetched inside ProfilerStep#k: its wait holds the sleeps of those samples,
        # plus whatever a busy machine adds around them, and fits in the step
        injected_us = sum(dataset.slept[step * BATCH:(step + 1) * BATCH]) * 1e6
        assert injected_us >= SLEEP_S * BATCH * 1e6
        assert injected_us * 0.99 <= waited <= wall
    assert npumagic.checklist(summary).bottleneck == "dataloader"


def test_cpu_compute_excludes_the_dataloader_wait(tmp_path):
    summary = _profile(tmp_path, torch.utils.data.DataLoader(SlowDataset(), batch_size=BATCH))
    steps = summary.steps
    assert (steps["computing_us"] + steps["dataloader_us"] <= steps["wall_us"] * 1.001).all()
    assert (steps["free_us"] >= steps["dataloader_us"] * 0.99).all()
    assert summary.meta["backend"] == "cpu"
    assert not summary.kernels.empty and summary.kernels["core"].eq("cpu").all()


def test_a_cpu_only_gloo_jobs_collectives_are_its_communication():
    # GIVEN a CPU-only job whose gloo:all_reduce record_function spans cover most of each step
    summary = npumagic.analyze(need(CUDA / "hta_more" / "cpu_only_2024"))
    # THEN they are communication (80-91% of each step, not 0%), the collective is named, and
    # the verdict says communication-bound (it said jitter)
    share = summary.steps["communication_us"] / summary.steps["wall_us"]
    assert share.between(0.79, 0.92).all()
    assert (summary.steps["busy_us"] <= summary.steps["wall_us"]).all()
    assert summary.comm[["op", "count"]].values.tolist() == [["all_reduce", 10]]
    assert npumagic.checklist(summary).bottleneck == "communication"


def test_a_real_gloo_capture_counts_its_collectives_as_communication(tmp_path):
    import torch.distributed as dist

    # GIVEN a one-process gloo group whose collectives run under the CPU profiler
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        tensor = torch.randn(1 << 18)
        with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=2),
                     on_trace_ready=tensorboard_trace_handler(str(tmp_path / "out"))) as prof:
            for _ in range(3):
                dist.all_reduce(tensor)
                dist.broadcast(tensor, 0)
                prof.step()
    finally:
        dist.destroy_process_group()
    summary = npumagic.analyze(tmp_path / "out")
    # THEN each step has communication, named by its collectives
    assert (summary.steps["communication_us"] > 0).all()
    assert set(summary.comm["op"]) == {"all_reduce", "broadcast"}
