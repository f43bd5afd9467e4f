"""Device time by framework operator, on the shared V100 trace and the shared torch_npu level1 job."""

from __future__ import annotations

import json

import pytest

from npumagic.analysis.crossbackend import COLLECTIVES, NO_OPERATOR, match_operators, operator_device_time
from npumagic.analysis.schema import DEVICE_WORK
from tests.conftest import ASCEND, CUDA, need, shared_trace

V100 = CUDA / "ns_resolution"
LEVEL1 = ASCEND / "level1" / "rank0_ascend_pt"


def _device_us_per_step(trace) -> float:
    e = trace.events
    e = e[(e["rank"] == e["rank"].min()) & (e["step"] >= 0)]
    work = e[(e["device"] >= 0) & e["kind"].isin(DEVICE_WORK)]
    return work["dur_ns"].sum() / 1e3 / e["step"].nunique()


@pytest.mark.parametrize("path", [V100, LEVEL1], ids=["v100", "level1"])
def test_every_device_task_is_charged_once(path):
    trace = shared_trace(need(path))
    table = operator_device_time(trace.events)
    assert table["device_us"].sum() == pytest.approx(_device_us_per_step(trace))


def test_a_resnet_step_on_cuda_has_its_53_convolutions_forward_and_backward():
    table = operator_device_time(shared_trace(need(V100)).events).set_index("operator")
    for op in ("aten::conv2d", "aten::convolution_backward", "aten::batch_norm", "aten::cudnn_batch_norm_backward"):
        assert table.loc[op, "calls"] == 53  # ResNet-50: 53 convolutions, each with its batch norm
    assert table.loc["aten::convolution_backward", "device_us"] > table.loc["aten::conv2d", "device_us"]
    assert NO_OPERATOR not in table.index  # every launch sits in an aten operator


def test_torch_npu_kernels_reach_their_operator_through_the_task_queue():
    # a torch_npu launch runs in a Dequeue on a worker thread; its Enqueue sits in the aten op
    table = operator_device_time(shared_trace(need(LEVEL1)).events).set_index("operator")
    assert table.loc["aten::conv2d", "kernels"] == 20 and table.loc["aten::convolution_backward", "kernels"] == 61
    assert table.loc[COLLECTIVES, "device_us"] == pytest.approx(105_991.878)  # the step's four allReduces
    compute = table.drop(index=COLLECTIVES)["device_us"].sum()
    assert table.loc[NO_OPERATOR, "device_us"] < 0.05 * compute  # two copies launched outside any operator


def test_a_cuda_run_and_a_torch_npu_run_match_by_operator_through_the_cli(capsys):
    from npumagic.cli import main

    assert main(["compare", str(need(V100)), str(need(LEVEL1)), "--by-operator", "--json"]) == 0
    operators = {r["operator"]: r for r in json.loads(capsys.readouterr().out)["operators"]}
    conv = operators["aten::conv2d"]
    assert conv["calls_a"] == 53 and conv["calls_b"] == 5
    assert conv["b_over_a"] == pytest.approx(conv["device_b_us"] / conv["device_a_us"])
    assert operators["aten::cudnn_batch_norm_backward"]["b_over_a"] is None  # CUDA only: no ratio


def test_match_orders_by_the_larger_time():
    import pandas as pd

    a = pd.DataFrame({"operator": ["x", "y"], "calls": [1, 1], "kernels": [1, 1], "device_us": [10.0, 1.0]})
    b = pd.DataFrame({"operator": ["y", "z"], "calls": [1, 1], "kernels": [1, 2], "device_us": [30.0, 5.0]})
    table = match_operators(a, b)
    assert list(table["operator"]) == ["y", "x", "z"] and table.loc[0, "b_over_a"] == 30.0


# msprof-analyze 26.2.0's compare_tools (performance_compare.py V100 LEVEL1 --enable_operator_compare
# --disable_module), its OperatorCompareStatistic sheet for the torch_npu side: device ms of
# the top-level torch operators it matched. Its top level is any torch operator (autograd's
# evaluate_function, the DDP reducer, Optimizer.step), ours the outermost aten op: where the two
# hold the same kernels, the times agree.
@pytest.mark.parametrize("ours, msprof_ms", [
    (["aten::to"], 0.844977),
    (["aten::max_pool2d_with_indices_backward"], 0.554291),  # MaxPool2DWithIndicesBackward0
    (["aten::copy_"], 0.540611),  # torch.distributed.ddp.reducer::copy_bucket_to_grad
    (["aten::threshold_backward"], 0.115462),  # ReluBackward0
    (["aten::_foreach_add_", "aten::_foreach_add", "aten::_foreach_mul_"], 2.264945),  # Optimizer.step#SGD.step
])
def test_torch_npu_operator_times_agree_with_msprof_analyze(ours, msprof_ms):
    table = operator_device_time(shared_trace(need(LEVEL1)).events).set_index("operator")
    assert table.loc[ours, "device_us"].sum() / 1000 == pytest.approx(msprof_ms, abs=2e-6)
