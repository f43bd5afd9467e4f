"""Where in the model: the kernel table's ``module`` column and the place a finding names, on a
real model profiled here with modules recorded (a submodule of sixty tiny elementwise operators
between two nn.Linear, and ``.item()`` inside a ``record_function`` region); checked on the
structure (the module named is the submodule that runs the operator), never on times or shares."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import npumagic
from npumagic.analysis import sources
from npumagic.jsonout import advice_doc

LINEARS = {"Sequential_0/Linear_0", "Sequential_0/Linear_1"}
TINY = "Sequential_0/Tiny_0"


def record(out, modules: bool = True, steps: int = 3, region: bool = True) -> None:
    import contextlib

    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

    class Tiny(torch.nn.Module):
        def forward(self, x):
            for _ in range(60):  # tiny operators: the small-op finding's
                x = x * 1.0001 + 0.01
            return x

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), Tiny(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=steps),
                 on_trace_ready=tensorboard_trace_handler(str(out)), with_modules=modules, with_stack=modules) as prof:
        for _ in range(steps + 1):
            with record_function("forward_backward") if region else contextlib.nullcontext():
                loss = model(torch.randn(4, 8)).sum()
                loss.backward()
                loss.item()  # the sync finding's call, in the region and in no module
            opt.step()
            opt.zero_grad()
            prof.step()


@pytest.fixture(scope="module")
def summary(tmp_path_factory):
    out = tmp_path_factory.mktemp("where")
    record(out)
    return npumagic.summarize(sources.load(out))


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    out = tmp_path_factory.mktemp("where_plain")
    record(out, modules=False, steps=1)
    return npumagic.summarize(sources.load(out))


def _module(summary, name: str) -> str:
    return summary.kernels.set_index("name").loc[name, "module"]


def test_each_operator_is_charged_to_the_module_that_ran_it(summary):
    kernels = summary.kernels
    assert "module" in kernels
    # forward: the Linear layers' matmul; the tiny submodule's elementwise operators
    path, pass_ = _module(summary, "aten::addmm").split(", ")
    assert path in LINEARS and pass_ == "forward"
    assert _module(summary, "aten::add").startswith(TINY + ", ")
    # backward, through autograd's sequence numbers: AddmmBackward0 was made from a Linear's addmm
    path, pass_ = _module(summary, "AddmmBackward0").split(", ")
    assert path in LINEARS and pass_ == "backward"
    assert _module(summary, "MulBackward0") == TINY + ", backward"
    # what runs outside every module (the loss, the optimizer) names none
    assert _module(summary, "aten::item") == ""


def test_a_run_without_modules_has_no_module_column(plain):
    assert "module" not in plain.kernels


def test_findings_name_the_module_or_region_holding_their_operators(summary):
    advice = npumagic.advise(summary)
    found = {f.rule: f for f in advice.findings}
    small, sync = found["small_ops"], found["sync"]
    # the tiny operators are almost all the Tiny submodule's, forward and backward
    assert small.place.startswith(f"module {TINY}, ")
    # .item() runs in the region and in no module: the region is named
    assert sync.place == "region forward_backward" and sync.place_share == pytest.approx(1.0)
    doc = json.loads(json.dumps(advice_doc(advice, "run"), default=str))
    places = {f["rule"]: f.get("place") for f in doc["findings"]}
    assert places["small_ops"] == small.place and places["sync"] == sync.place
    text = str(advice)
    assert f"in: {small.place}" in text and "in: region forward_backward" in text


def test_without_modules_a_finding_is_placed_in_its_region(plain):
    sync = next(f for f in npumagic.advise(plain).findings if f.rule == "sync")
    assert sync.place == "region forward_backward"


def test_a_finding_outside_every_module_and_region_gives_no_place(tmp_path):
    # (torch's own Optimizer.step / zero_grad annotations are regions; .item() is in neither)
    record(tmp_path, modules=False, steps=1, region=False)
    summary = npumagic.summarize(sources.load(tmp_path))
    assert "module" not in summary.kernels
    advice = npumagic.advise(summary)
    assert any(f.rule == "sync" for f in advice.findings)
    doc = advice_doc(advice, "run")
    sync = next(f for f in doc["findings"] if f["rule"] == "sync")
    assert "place" not in sync and "place_share" not in sync  # the JSON of a run without places, as before


def test_a_torch_npu_samples_kernels_are_charged_through_the_task_queue_to_their_module():
    from ..conftest import ASCEND, need

    summary = npumagic.analyze(need(ASCEND / "level1" / "rank0_ascend_pt"))
    modules = summary.kernels.set_index("name")["module"]
    net = "DistributedDataParallel_0/AlexNet_0"
    assert modules["Conv2D1"] == f"{net}/Sequential_0/Conv2d_0, forward"  # AlexNet's first convolution
    path, pass_ = modules["aclnnAddmm_MatMulCommon_MatMulV2"].split(", ")
    assert path.startswith(f"{net}/Sequential_1/Linear_") and pass_ == "forward"
    path, pass_ = modules["aclnnMm_MatMulCommon_MatMulV2"].split(", ")  # the Linear layers' gradients
    assert path.startswith(f"{net}/Sequential_1/Linear_") and pass_ == "backward"


def test_text_mask_judges_each_category_once_and_missing_names_as_false():
    from npumagic.analysis.schema import text_mask

    names = pd.Series(pd.Categorical(["nn.Module: A_0", None, "aten::mm", "nn.Module: B_1"]))
    assert text_mask(names, lambda n: n.str.startswith("nn.Module: ")).tolist() == [True, False, False, True]
    plain = pd.Series(["Enqueue", "Dequeue@x"])
    assert text_mask(plain, lambda n: n.str.startswith("Dequeue")).tolist() == [False, True]
