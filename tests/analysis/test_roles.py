"""Operator roles (analysis/roles.py) choose the fix: DDP's bucket packing under the host gaps of
the shared NCCL trace gets a bucketing fix, and ``.item()`` inside ``Dataset.__getitem__`` of a
real CPU run is no sync in the step."""

from __future__ import annotations

import tempfile

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

import npumagic
from npumagic.analysis import roles

from ..conftest import CUDA, shared_summary


@pytest.mark.parametrize("name, expected", [
    ("aten::unflatten_dense_tensors", "bucketing"), ("aten::flatten_dense_tensors", "bucketing"),
    ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "data_preparation"),
    ("Optimizer.step#AdamW.step", "optimizer"), ("aten::_foreach_sqrt", "optimizer"),
    ("autograd::engine::evaluate_function: AddmmBackward0", "autograd"), ("nccl:all_reduce", "collective"),
    ("gloo:all_reduce", "collective"), ("aten::conv2d", "user"), ("main.py(12): preprocess", "user")])
def test_operator_roles(name, expected):
    assert roles.role(name) == expected


def test_ddp_bucketing_under_the_host_gaps_gets_a_bucketing_fix_not_the_dataset():
    # GIVEN the shared A100 NCCL trace, whose largest host gaps hold aten::unflatten_dense_tensors
    f = npumagic.advise(shared_summary(CUDA / "nccl"))[0]
    # THEN the host-bound finding names DDP's bucketing and its fix, not the Dataset
    assert f.rule == "host_bound" and f.evidence["cpu_work_role"] == "bucketing"
    assert "gradient_as_bucket_view=True" in f.fix and "unflatten_dense_tensors" in f.fix
    assert "into the Dataset" not in f.fix


def _profile(step) -> npumagic.Summary:
    folder = tempfile.mkdtemp()
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=4, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(folder)) as prof:
        for _ in range(6):
            step()
            prof.step()
    return npumagic.analyze(folder)


class _ReadsItems(torch.utils.data.Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        x = torch.randn(8)
        return torch.tensor([x[j].item() for j in range(8)])


@pytest.mark.parametrize("in_step", [False, True], ids=["in_getitem", "in_step"])
def test_item_calls_in_the_dataset_are_not_syncs_in_the_step(in_step):
    # GIVEN a real CPU run whose Dataset.__getitem__ calls .item() 8 times a sample, and (the
    # control) the same run also calling loss.item() in the step
    batches = iter(torch.utils.data.DataLoader(_ReadsItems(), batch_size=4))
    model = torch.nn.Linear(8, 2)

    def step():
        loss = model(next(batches)).sum()
        loss.backward()
        if in_step:
            loss.item()

    summary = _profile(step)
    assert summary.syncs["per_step"].max() >= 32  # the profiler saw the Dataset's calls
    syncs = [f for f in npumagic.advise(summary) if f.category == "sync"]
    # THEN only the step's own .item() is a sync finding, one call per step
    if in_step:
        assert len(syncs) == 1 and syncs[0].evidence["syncs_per_step"] == pytest.approx(1)
    else:
        assert syncs == []
