"""Where in the model: the kernel table's ``module`` column and the place a finding names, on a
real model profiled here with modules recorded (a submodule of sixty tiny elementwise operators
between two nn.Linear, and ``.item()`` inside a ``record_function`` region); checked on the
structure (the module named is the submodule that runs the operator), never on times or shares."""

from __future__ import annotations

import json

import numpy as np
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
    # the tiny operators are almost all the Tiny submodule's, forward and backward (one pass of it,
    # or the two together where neither holds half)
    assert small.place in (f"module {TINY}", f"module {TINY}, forward", f"module {TINY}, backward")
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
    # (.item() is in no module and no region; torch's own Optimizer.step / zero_grad are no places)
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


def test_a_place_is_the_narrowest_block_holding_half_the_time():
    from npumagic.analysis.where import largest

    labels = np.array(["net/block_0/attn, forward", "net/block_1/attn, forward", "net/block_1/mlp, backward",
                       "net/block_1/mlp, forward", ""], object)
    # one layer holding most: it, with its pass
    assert largest(labels, np.array([1.0, 1.0, 1.0, 7.0, 0.0])) == ("net/block_1/mlp, forward", 0.7)
    # a layer's forward and backward together: the layer, without a pass
    assert largest(labels, np.array([1.0, 1.0, 4.0, 4.0, 0.0])) == ("net/block_1/mlp", 0.8)
    # spread over layers: the block holding them, not the largest layer
    assert largest(labels, np.array([1.0, 2.0, 2.0, 2.0, 3.0])) == ("net/block_1", 0.6)
    # no place holds half (the rest outside every module): none named
    assert largest(labels, np.array([1.0, 1.0, 1.0, 1.0, 6.0])) == ("", 0.0)


def test_each_top_level_host_operator_weighs_the_device_idle_time_it_covers():
    from npumagic.analysis.gaps import gap_cover_ns

    # device work 0-100 and 300-400 and 500-600 (ns) on one stream; the host runs op A 50-350
    # (B nested in it, 120-200) and op C 420-700; D is outside the steps
    ev = pd.DataFrame({"kind": ["kernel", "kernel", "kernel", "host_op", "host_op", "host_op", "host_op"],
                       "device": [0, 0, 0, -1, -1, -1, -1], "lane": ["s", "s", "s", "t", "t", "t", "t"],
                       "name": ["k", "k", "k", "A", "B", "C", "D"],
                       "ts_ns": [0, 300, 500, 50, 120, 420, 900], "dur_ns": [100, 100, 100, 300, 80, 280, 50],
                       "step": [1, 1, 1, 1, 1, 1, -1]})
    # A covers the gap 100-300 whole (200), B is nested in A (0), C covers 420-500 (80), D no step
    assert gap_cover_ns(ev).tolist() == [0, 0, 0, 200, 0, 80, 0]


def test_a_device_bound_by_its_host_names_the_module_the_host_runs_under_the_gaps():
    from ..conftest import ASCEND, need

    summary = npumagic.analyze(need(ASCEND / "level0"))
    host = next(f for f in npumagic.advise(summary).findings if f.rule == "host_bound")
    # the model's forward under DDP holds most of the host operators running while the NPU idles
    assert host.place.startswith("module DistributedDataParallel_0") and host.place_share >= 0.5
    assert f"in: {host.place}" in str(npumagic.advise(summary))


def test_torchs_own_annotations_are_no_place_the_users_region_around_them_is(tmp_path):
    # .item() inside an optimizer's step: torch writes Optimizer.step#SyncSGD.step around it, inside
    # the user's "update" region; the finding names the user's region (real traces: nccl:*, the DDP
    # forward, enumerate(DataLoader)#... are torch's too)
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

    class SyncSGD(torch.optim.SGD):
        def step(self, closure=None):
            super().step(closure)
            for _ in range(3):
                self.param_groups[0]["params"][0].sum().item()

    model = torch.nn.Linear(8, 1)
    opt = SyncSGD(model.parameters(), lr=0.01)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=2),
                 on_trace_ready=tensorboard_trace_handler(str(tmp_path))) as prof:
        for _ in range(3):
            model(torch.randn(4, 8)).sum().backward()
            with record_function("update"):
                opt.step()
            opt.zero_grad()
            prof.step()
    summary = npumagic.summarize(sources.load(tmp_path))
    sync = next(f for f in npumagic.advise(summary).findings if f.rule == "sync")
    assert sync.place == "region update"
    from npumagic.analysis.regions import regions

    trace = sources.load(tmp_path)
    table = regions(trace.events, trace.steps, warn=False)
    assert "update/Optimizer.step#SyncSGD.step" in set(table.median["path"])  # still in the region table


def test_a_run_with_only_torchs_own_annotations_has_no_places(tmp_path):
    record(tmp_path, modules=False, steps=1, region=False)
    assert npumagic.summarize(sources.load(tmp_path)).places is None


def test_a_run_read_back_from_the_history_names_the_same_places(tmp_path):
    from npumagic.session import Session

    record(tmp_path / "trace")
    fresh = {f.rule: (f.place, f.place_share) for f in npumagic.advise(npumagic.analyze(tmp_path / "trace")).findings}
    assert fresh["sync"] == ("region forward_backward", pytest.approx(1.0)) and fresh["small_ops"][0].startswith(
        "module " + TINY)
    Session(tmp_path / "runs").recorder.load(tmp_path / "trace", "r")
    import shutil

    shutil.rmtree(tmp_path / "trace")  # the events are gone: the places come from the history
    again = Session(tmp_path / "runs")
    assert again.runs.summary("r").events is None
    reread = {f.rule: (f.place, f.place_share) for f in again.advise("r").findings}
    assert reread == fresh


def test_a_summary_stored_before_places_were_kept_reads_back_without_them(summary):
    import zlib

    from npumagic.analysis.persist import dump_summary, load_summary

    doc = json.loads(zlib.decompress(dump_summary(summary)))
    assert doc["summary"]["placed"]["sync"][0] == "region forward_backward"
    del doc["summary"]["placed"]  # as an older npumagic stored it
    old = load_summary(zlib.compress(json.dumps(doc).encode()))
    assert old.placed == {} and all(f.place == "" for f in npumagic.advise(old).findings)


def test_the_checklist_says_how_to_record_places_where_none_were_recorded(tmp_path, plain):
    from npumagic.analysis.checklist import record_places

    record(tmp_path, modules=False, steps=1, region=False)  # only torch's own Optimizer.* annotations
    bare = npumagic.summarize(sources.load(tmp_path))
    verdict = npumagic.checklist(bare)
    assert verdict.where == record_places() and "%%npuprofile --modules" in verdict.where
    text = str(verdict)
    assert text.index("5. Record") < text.index("   Where ") and "Where" in verdict._repr_html_()
    assert verdict.to_dict()["where_in_model"] == verdict.where
    assert all("--modules" not in f.fix for f in verdict.advice.findings)  # a line, not a finding
    # a run with a region, and a run stored before it was known, are told nothing
    assert npumagic.checklist(plain).where == "" and "where_in_model" not in npumagic.checklist(plain).to_dict()
    from dataclasses import replace

    assert npumagic.checklist(replace(bare, places_recorded=None)).where == ""


def test_a_cells_report_carries_the_line(trainer):
    result = trainer.run_cell("r = %%npuprofile --repeat-cell --wait 0 --warmup 0 --steps 2 --no-plot --quiet\n"
                              "train_step()")
    assert result.success
    report = trainer.user_ns["r"]
    assert "%%npuprofile --modules" in str(report) and "%%npuprofile --modules" in report._repr_html_()


def test_npu_operator_and_gap_findings_are_placed():
    from npumagic.analysis.where import _selectors

    from ..conftest import ASCEND, CUDA, need

    summary = npumagic.analyze(need(ASCEND / "level1" / "rank0_ascend_pt"))
    found = {f.rule: f for f in npumagic.advise(summary).findings}
    net = "module DistributedDataParallel_0/AlexNet_0"
    # the TransData finding rests on exactly the TransData tasks of kernel_details.csv
    details = pd.read_csv(ASCEND / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    trans_us = details.loc[details["Type"] == "TransData", "Duration(us)"].sum()
    assert _selectors()["transdata"](summary, summary.events).sum() / 1e3 == pytest.approx(trans_us, rel=1e-6)
    for rule in ("transdata", "aicore_utilization"):
        assert found[rule].place.startswith(net) and 0.5 <= found[rule].place_share <= 1.0
    # CUDA's device gaps rest on the host operators under them, as host_bound's do
    owl = npumagic.analyze(need(CUDA / "tracelens" / "h100_owlv2"))
    gaps = next(f for f in npumagic.advise(owl).findings if f.rule == "gpu_gaps")
    assert gaps.place == "module Owlv2ForObjectDetection_0, forward" and gaps.place_share >= 0.5
