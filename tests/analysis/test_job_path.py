"""What a fix saves a job, its ranks replayed together (analysis/job_path.py): worked by hand on
two ranks, one late to every all-reduce; on a genuine NCCL trace beside a copy of itself; and
left to each rank's own bound where the clocks disagree with the model."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pandas as pd
import pytest

from npumagic.analysis import job_path, path_bound, whatif
from npumagic.analysis.finding import Finding
from npumagic.analysis.summary import combine

from ..conftest import CUDA, shared_summary

US = 1000
KINDS = pd.CategoricalDtype(["host_op", "kernel", "comm", "memcpy", "sync", "runtime", "annotation", "dataloader"])


def _rank(r: int, data_us: int, n: int = 3, period: int = 750) -> SimpleNamespace:
    """Rank ``r`` of a job whose ranks wait ``{0: 100, 1: 400}`` us for data each step: then a
    200 us GEMM, an all-reduce launched behind it on another stream that ends 100 us after the
    last rank's starts (615 us), and a cudaDeviceSynchronize that waits for it (to 720 us)."""
    rows, windows = [], []
    last_start = 400 + 215
    for k in range(n):
        t, h = period * k, data_us
        start = t + h + 215  # the GEMM launched at h + 0 starts 15 us later, 200 us long
        rows += [("next_data", "dataloader", "main", -1, t, h, -1),
                 ("aten::mm", "host_op", "main", -1, t + h, 12, -1),
                 ("cudaLaunchKernel", "runtime", "main", -1, t + h, 10, 10 * k + 1),
                 ("gemm", "kernel", "GPU 0/Stream 7", 7, t + h + 15, 200, 10 * k + 1),
                 ("nccl:all_reduce", "host_op", "main", -1, t + h + 20, 20, -1),
                 ("cudaLaunchKernel", "runtime", "main", -1, t + h + 25, 10, 10 * k + 2),
                 ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "comm", "GPU 0/Stream 9", 9, start,
                  t + last_start + 100 - start, 10 * k + 2),
                 ("cudaDeviceSynchronize", "sync", "main", -1, t + h + 50, last_start + 105 - (h + 50), -1)]
        windows.append([k, t * US, (t + period - 1) * US])
    frame = pd.DataFrame(rows, columns=["name", "kind", "lane", "stream", "ts", "dur", "correlation"])
    ev = frame.assign(ts_ns=frame.pop("ts") * US, dur_ns=frame.pop("dur") * US, rank=r, kind=frame["kind"].astype(KINDS),
                      name=frame["name"].astype("category"), lane=frame["lane"].astype("category"))
    return SimpleNamespace(events=ev, steps=pd.DataFrame({"step": range(n), "wall_us": [float(period)] * n}),
                           blocking=pd.DataFrame({"op": []}), meta={"device_mode": True, "step_windows_ns": windows})


def test_a_fix_on_every_rank_saves_what_the_late_rank_waits_not_what_one_rank_does():
    # GIVEN two ranks: rank 0 waits 100 us for its data, rank 1 400 us, and the all-reduce waits for rank 1
    ranks = {0: _rank(0, 100), 1: _rank(1, 400)}
    # rank 0 replayed alone keeps its all-reduce as long as it was recorded (the wait for rank 1
    # inside it): without its own 100 us of data wait, only those 100 us are saved
    assert path_bound.made(ranks[0])["dataloader"]["saving_ms"] == pytest.approx(0.1)
    # WHEN the two are replayed together
    made = job_path.bounds(ranks, ranks[0])
    # THEN the data wait gone from both ranks saves rank 1's 400 us: the all-reduce no longer waits for it
    assert made["dataloader"]["saving_ms"] == pytest.approx(0.4) and made["dataloader"]["ranks"] == 2
    # and rank 1 arriving with rank 0 saves the 300 us rank 0 waited in the all-reduce
    assert made["straggler"]["rank"] == 1
    assert made["straggler"]["saving_ms"] == pytest.approx(0.3)
    # half the bytes on the wire: each all-reduce's 100 us transfer (rank 1's, which waits for no one) halved
    assert made["bytes"]["saving_ms"] == pytest.approx(0.05)


def test_a_job_replayed_together_bounds_the_straggler_fix_and_says_how():
    ranks = {0: _rank(0, 100), 1: _rank(1, 400)}
    job = SimpleNamespace(path_bounds=job_path.bounds(ranks, ranks[0]))
    late = Finding("communication", 0.4, "slow rank", {"rule": "slow_rank", "low_rank": 1, "gap_ms": 0.5}, "balance")
    bound = whatif.path_bound_of(job, late)
    assert bound.saving_ms == pytest.approx(0.3)
    lever = whatif.bounded(whatif.Lever("straggler", 0.25, 0.5, "what the other ranks wait"), bound)
    assert lever.high_ms == pytest.approx(0.3)
    assert "replayed without it on its 2 ranks together" in lever.basis
    # a bound of another late rank than the finding's does not bound it
    assert whatif.path_bound_of(job, dataclasses.replace(late, evidence={**late.evidence, "low_rank": 0})) is None


@pytest.fixture(scope="module")
def nccl_rank():
    s = shared_summary(CUDA / "nccl")
    return s.per_rank[0] if s.per_rank else s


def test_a_genuine_rank_beside_a_copy_of_itself_is_bounded_as_alone(nccl_rank):
    # GIVEN a genuine A100 DDP rank (NCCL all-reduces on their own stream) and a copy of it: two
    # ranks that reach every collective at once
    copy = dataclasses.replace(nccl_rank, events=nccl_rank.events.assign(rank=1))
    made = job_path.bounds({0: nccl_rank, 1: copy}, nccl_rank)
    # THEN each fix saves the job what it saves the rank, and no rank holds the other up
    assert set(made) == {*nccl_rank.path_bounds, "straggler", "bytes"}
    for key, own in nccl_rank.path_bounds.items():
        assert made[key]["saving_ms"] == pytest.approx(own["saving_ms"]), key
        assert made[key]["length_ms"] == pytest.approx(own["length_ms"]) and made[key]["ranks"] == 2
    assert made["straggler"]["saving_ms"] == 0
    assert made["bytes"]["saving_ms"] == 0  # its path is the host's (HTA's too): no all-reduce lies on it
    job = combine({0: nccl_rank, 1: copy})
    assert job.path_bounds == made
    # so sending fewer bytes is ranked last among the communication fixes, with nothing to save
    levers = whatif.communication_levers(job)
    assert [lv.name for lv in levers][-1] == "bytes" and levers[-1].high_ms == 0
    assert "on its 2 ranks together" in levers[-1].basis
    alone = {lv.name: lv for lv in whatif.communication_levers(nccl_rank)}
    assert alone["bytes"].high_ms > 0  # the rank alone: half the time it moves bytes


def test_ranks_whose_clocks_disagree_keep_their_own_bounds(nccl_rank):
    # GIVEN the copy's clock 1 ms ahead: its all-reduces would end before the rank's own began
    ahead = nccl_rank.events.copy()
    ahead["ts_ns"] += 1_000_000
    windows = [[n, a + 1_000_000, b + 1_000_000] for n, a, b in nccl_rank.meta["step_windows_ns"]]
    copy = dataclasses.replace(nccl_rank, events=ahead.assign(rank=1),
                               meta=dict(nccl_rank.meta, step_windows_ns=windows))
    assert job_path.bounds({0: nccl_rank, 1: copy}, nccl_rank) == {}
    assert combine({0: nccl_rank, 1: copy}).path_bounds == nccl_rank.path_bounds


def test_a_job_of_sends_and_receives_alone_keeps_each_ranks_own_bounds():
    # GIVEN the two ranks, their collective a point-to-point exchange (pipeline stages pair up, not all ranks)
    ranks = {r: _rank(r, wait) for r, wait in ((0, 100), (1, 400))}
    for s in ranks.values():
        s.events["name"] = s.events["name"].cat.rename_categories(
            {"ncclDevKernel_AllReduce_Sum_f32_RING_LL": "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8"})
    assert job_path.bounds(ranks, ranks[0]) == {}


def test_a_job_that_cannot_be_walked_together_is_analysed_with_each_ranks_own_bounds(nccl_rank, monkeypatch):
    copy = dataclasses.replace(nccl_rank, events=nccl_rank.events.assign(rank=1))

    def broken(*_):
        raise IndexError("a trace nobody here has seen")

    monkeypatch.setattr(job_path, "bounds", broken)
    with pytest.warns(UserWarning, match="not replayed together .IndexError: a trace nobody here has seen"):
        job = combine({0: nccl_rank, 1: copy})
    assert job.path_bounds == nccl_rank.path_bounds
