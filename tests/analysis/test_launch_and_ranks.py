"""Launch-bound steps, slow ranks judged on aligned steps, and communication kernels beyond NCCL,
on the shared genuine traces (analysis/whatif.py, analysis/cluster.py, the Kineto reader)."""

from __future__ import annotations

import dataclasses
import gzip
import json

import pytest

import npumagic
from npumagic.analysis import cluster, whatif

from ..conftest import ASCEND, CUDA, need, shared_summary


def test_a_launch_bound_step_gets_cuda_graphs_credited_with_its_launch_gaps():
    # GIVEN the B200 eager trace: kernels of median ~6 us, most of the idle in gaps under 200 us
    s = shared_summary(CUDA / "tracelens" / "b200_eager")
    gaps = whatif.idle_gaps(s)
    assert gaps["kernel_median_us"] < whatif.LAUNCH_KERNEL_US and gaps["short"] >= 0.5 * gaps["total"]
    f = next(f for f in npumagic.advise(s) if f.rule == "host_bound")
    # THEN it is called launch-bound, the fix is CUDA graphs, and the saving is the launch gaps only
    assert f.evidence["launch_bound"] and "launch-bound" in f.title and "CUDA graphs" in f.fix
    assert "Dataset" not in f.fix
    assert f.predicted_interval[1] == pytest.approx(gaps["short"], abs=1e-3)
    assert f.predicted_interval[1] < gaps["total"]


def test_long_gaps_are_not_launch_bound():
    # the OWL-ViT H100 trace idles mostly in gaps over 200 us: host work graphs would not remove
    s = shared_summary(CUDA / "tracelens" / "h100_owlv2")
    gaps = whatif.idle_gaps(s)
    assert gaps["short"] < 0.5 * gaps["total"] and whatif.launch_bound(s) is None


def test_a_slow_rank_on_one_common_step_says_so_and_names_the_late_ranks_cause():
    s = shared_summary(ASCEND / "level0")
    table, common = cluster.aligned(s)
    assert common == 1
    f = next(f for f in cluster.findings(s) if f.evidence.get("rule") == "slow_rank")
    assert f.title.endswith("it rests on one common step") and f.evidence["common_steps"] == 1
    # the late rank (1, which waits least) idles longer than rank 0: its own cause, by the table's numbers
    late, waiting = table.set_index("rank").loc[1], table.set_index("rank").loc[0]
    assert f.evidence["low_rank"] == 1 and f.evidence["late_cause"] == cluster.OWN_CAUSES["free_us"]
    assert f"({(late['free_us'] - waiting['free_us']) / 1000:,.2f} ms more than rank 0)" in f.title


def test_ranks_without_a_common_step_are_not_compared():
    # GIVEN the level0 job with rank 1's step numbered apart from rank 0's
    s = shared_summary(ASCEND / "level0")
    one = s.per_rank[1]
    apart = dataclasses.replace(one, steps=one.steps.assign(step=one.steps["step"] + 1000))
    unaligned = dataclasses.replace(s, per_rank={**s.per_rank, 1: apart})
    # THEN no slow rank is named on steps that are not the same steps
    assert cluster.aligned(unaligned)[1] == 0
    assert not [f for f in cluster.findings(unaligned) if f.evidence.get("rule") == "slow_rank"]


@pytest.mark.parametrize("renamed", ["void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*)",
                                     "nvshmemi_alltoall_kernel", "void vllm::cross_device_reduce_1stage<float, 8>",
                                     "rcclGenericKernel_AllReduce"])
def test_communication_kernels_beyond_nccl_are_communication(tmp_path, renamed):
    # GIVEN the shared NCCL trace with its NCCL kernels renamed to another library's
    path = next(need(CUDA / "nccl").glob("*.json.gz"))
    doc = json.load(gzip.open(path))
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and e.get("name", "").startswith("nccl"):
            e["name"] = renamed
    (tmp_path / "renamed.pt.trace.json").write_text(json.dumps(doc))
    # THEN the same kernels count as the same communication
    original, other = shared_summary(CUDA / "nccl"), npumagic.analyze(tmp_path / "renamed.pt.trace.json")
    assert other.steps["communication_us"].tolist() == pytest.approx(original.steps["communication_us"].tolist())
    assert other.steps["communication_us"].gt(0).all()


@pytest.mark.parametrize("path", [CUDA / "nccl", CUDA / "ns_resolution"], ids=lambda p: p.name)
def test_idle_gaps_lie_within_the_steps_idle_time(path):
    # the gaps between a step's own device tasks are part of its idle time; the gap from one
    # step's last task to the next step's first is neither step's
    s = shared_summary(path)
    gaps = whatif.idle_gaps(s)
    assert 0 < gaps["short"] <= gaps["total"] <= whatif.per_step_ms(s, "idle_us") + 1e-6
