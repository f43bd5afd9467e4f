"""The module table: a real two-layer model profiled here with modules recorded; each nn.Linear
gets its own forward rows, and its own backward rows through autograd's sequence numbers."""

from __future__ import annotations

import pytest

from npumagic.analysis import sources
from npumagic.analysis.modules import NOT_ATTRIBUTED, OUTSIDE_MODULES, modules

from .test_regions import record_loop


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("modules")
    record_loop(out, modules=True)
    return sources.load(out)


def test_each_linear_layer_gets_its_own_forward_and_backward_rows(run):
    table = modules(run.events, run.steps, run.meta.files)
    assert table.note is None and not table.empty
    rows = table.per_step.set_index(["pass", "step", "path"])
    for step in run.steps["step"]:
        for layer in ("Sequential_0/Linear_0", "Sequential_0/Linear_1"):
            forward, backward = rows.loc[("forward", step, layer)], rows.loc[("backward", step, layer)]
            assert forward["calls"] == 1 and forward["ops"] >= 1 and forward["host_ms"] > 0
            assert backward["calls"] == 2  # AddmmBackward0 and TBackward0, made from this layer's aten::linear
            assert backward["host_ms"] > 0
        assert rows.loc[("backward", step, "Sequential_0/ReLU_0"), "calls"] == 1
        # the container's backward holds its layers' (MseLossBackward0 ran outside every module)
        assert rows.loc[("backward", step, "Sequential_0"), "calls"] == 5
        assert rows.loc[("forward", step, "Sequential_0"), "host_ms"] >= rows.loc[
            ("forward", step, "Sequential_0/Linear_0"), "host_ms"]
    assert set(table.median["pass"]) == {"forward", "backward", ""}
    ops = table.operators.set_index("path")
    assert ops.loc["Sequential_0/Linear_1", "operator"] == ops.loc["Sequential_0/Linear_0", "operator"] == "aten::linear"


def test_without_the_trace_files_backward_is_not_attributed_and_said(run):
    table = modules(run.events, run.steps)
    assert table.note == NOT_ATTRIBUTED
    assert set(table.per_step["pass"]) == {"forward", ""}  # "": the step outside every module
    assert {"Sequential_0/Linear_0", "Sequential_0/Linear_1", OUTSIDE_MODULES} <= set(table.per_step["path"])


def test_a_run_recorded_without_modules_has_none(tmp_path):
    record_loop(tmp_path, steps=1)
    trace = sources.load(tmp_path)
    table = modules(trace.events, trace.steps, trace.meta.files)
    assert table.empty and table.note is None  # nothing to attribute: no word about backward


def test_a_torch_npu_sample_gets_forward_and_backward_rows_with_their_device_time():
    from npumagic.analysis.modules import sequence_files

    from ..conftest import ASCEND, need

    path = need(ASCEND / "level1" / "rank0_ascend_pt")
    trace = sources.load(path)
    files = sequence_files(trace.meta, 0)
    assert files == [str(path / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")]
    table = modules(trace.events, trace.steps, files)
    assert table.note is None and table.has_device
    rows = table.median.set_index(["pass", "path"])
    net = "DistributedDataParallel_0/AlexNet_0"
    for layer, nodes in ((f"{net}/Sequential_0/Conv2d_0", 1), (f"{net}/Sequential_1/Linear_0", 2)):
        forward, backward = rows.loc[("forward", layer)], rows.loc[("backward", layer)]
        assert forward["calls"] == 1 and forward["device_ms"] > 0  # its AI Core tasks, through the task queue
        assert backward["calls"] == nodes and backward["device_ms"] > 0  # ConvolutionBackward0; AddmmBackward0, TBackward0
    # a container holds its layers' device time, forward and backward
    for p in ("forward", "backward"):
        layers = rows.loc[p].loc[[i for i in rows.loc[p].index if i.startswith(f"{net}/Sequential_0/")]]
        assert rows.loc[(p, f"{net}/Sequential_0"), "device_ms"] == pytest.approx(layers["device_ms"].sum())
    # the seed's step two: the module's operators with their input shapes, its device time theirs
    ops = table.operators.set_index(["path", "operator"])
    conv = ops.loc[(f"{net}/Sequential_0/Conv2d_0", "aten::conv2d")]
    assert conv["shapes"] == "32,3,224,224;64,3,11,11;64;;;;"
    assert conv["device_ms"] == pytest.approx(rows.loc[("forward", f"{net}/Sequential_0/Conv2d_0"), "device_ms"])
    # DistributedDataParallel.forward, an operator around the whole model on torch_npu, keeps no layer's work
    assert not any(p.endswith("Conv2d_0") and o.startswith("DistributedDataParallel") for p, o in ops.index)
