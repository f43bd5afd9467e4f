"""The region table: every user annotation as a tree per step, on a real CPU training loop
profiled here (the seed's two ``record_function`` regions and a loader that sleeps) and on a
real shared CUDA trace (device time charged through correlation ids, checked against a direct
computation from the file)."""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict

import numpy as np
import pandas as pd
import pytest

from npumagic.analysis import sources
from npumagic.analysis.regions import OUTSIDE, innermost, nest, regions

from ..conftest import CUDA, need

SLEEP_S = 0.02


def record_loop(out, modules: bool = False, width: int = 64, steps: int = 3) -> None:
    """A real training loop under torch.profiler: a loader sleeping SLEEP_S a batch inside
    record_function("data_load_and_transform"), the model inside record_function("forward_backward")."""
    import time

    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, width), torch.nn.ReLU(), torch.nn.Linear(width, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def loader():
        while True:
            time.sleep(SLEEP_S)
            yield torch.randn(16, 32), torch.randn(16, 8)

    batches = loader()
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=steps),
                 on_trace_ready=tensorboard_trace_handler(str(out)), with_modules=modules,
                 with_stack=modules) as prof:  # torch 2.13 writes the module spans only with the stacks
        for _ in range(steps + 1):
            with record_function("data_load_and_transform"):
                x, y = next(batches)
            with record_function("forward_backward"):
                torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            prof.step()


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    out = tmp_path_factory.mktemp("loop")
    record_loop(out)
    return sources.load(out)


def test_the_loaders_sleep_lands_in_data_loading_and_the_operators_in_forward_backward(loop):
    table = regions(loop.events, loop.steps)
    rows = table.per_step.set_index(["step", "path"])
    steps = loop.steps["step"].tolist()
    assert len(steps) == 3 and not table.has_device  # a CPU run: no device time, not zero
    for step in steps:
        data, model = rows.loc[(step, "data_load_and_transform")], rows.loc[(step, "forward_backward")]
        assert data["calls"] == model["calls"] == 1
        assert data["host_ms"] >= SLEEP_S * 1000  # the sleep is inside the region
        assert data["ops"] == 2  # the loader's two torch.randn calls, and no model operator
        assert model["ops"] > 2  # linear, relu, mse_loss, their backward
        assert np.isnan(model["device_ms"])
    # the tree's top level and the outside row add up to the step
    walls = (loop.steps["end_ns"] - loop.steps["start_ns"]).to_numpy() / 1e6
    p = table.per_step
    top = p[(p["depth"] == 0) & ((p["lane"] == table.lane) | (p["name"] == OUTSIDE))].groupby("step")["host_ms"].sum()
    assert np.allclose(top.loc[steps].to_numpy(), walls, rtol=0.01)
    assert (p.loc[p["name"] == OUTSIDE, "host_ms"] >= 0).all()
    med = table.median.set_index("path")
    assert med.loc["data_load_and_transform", "host_ms"] >= SLEEP_S * 1000
    assert set(med.index) >= {"data_load_and_transform", "forward_backward", OUTSIDE}


def raw_events(path):
    with gzip.open(next(path.glob("*.json.gz"))) as f:
        return json.load(f)["traceEvents"]


def test_a_cuda_traces_annotations_are_each_counted_once_per_call_with_the_device_time_they_launched():
    path = need(CUDA / "alexnet_sync")
    trace = sources.load(path)
    table = regions(trace.events, trace.steps)
    raw = raw_events(path)
    notes = [e for e in raw if e.get("cat") == "user_annotation" and e.get("ph") == "X"
             and not e["name"].startswith("ProfilerStep#")]
    assert notes and table.has_device
    # directly: the kernels whose runtime launch, on the annotation's thread, falls inside it
    launch = {e["args"]["correlation"]: e for e in raw if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    kernels = [e for e in raw if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X"]
    direct_ms = defaultdict(float)
    for note in notes:
        for k in kernels:
            at = launch.get(k["args"].get("correlation"))
            if at is not None and at["tid"] == note["tid"] and note["ts"] <= at["ts"] < note["ts"] + note["dur"]:
                direct_ms[note["name"]] += k["dur"] / 1000
    rows = table.per_step[table.per_step["name"] != OUTSIDE]
    assert rows.groupby("name")["calls"].sum().to_dict() == dict(Counter(n["name"] for n in notes))
    charged = rows.groupby("name")["device_ms"].sum()
    assert charged.sum() > 0
    for name, ms in charged.items():
        assert ms == pytest.approx(direct_ms[name], rel=1e-6, abs=1e-6), name
    # every device task of the step is in a region or in the outside row
    work = trace.events[trace.events["kind"].isin(["kernel", "memcpy", "comm"])]
    top = table.per_step[(table.per_step["depth"] == 0)]
    assert top["device_ms"].sum() == pytest.approx(work["dur_ns"].sum() / 1e6)


def span_frame(rows):
    return pd.DataFrame(rows, columns=["name", "lane", "ts_ns", "dur_ns", "step"])


def test_spans_that_cannot_nest_are_skipped_and_counted_never_a_traceback():
    bad = span_frame([("outer", "p/Thread 1", 0, 100, 1), ("inner", "p/Thread 1", 10, 20, 1),
                      ("crosses", "p/Thread 1", 90, 50, 1),  # starts inside outer, ends after it
                      ("never closed", "p/Thread 1", 30, -1, 1), ("bell\x07", "p/Thread 1", 40, 5, 1),
                      ("other thread", "p/Thread 2", 95, 50, 1)])
    tree = nest(bad)
    assert dict(zip(tree.spans["name"], tree.spans["path"])) == {
        "outer": "outer", "inner": "outer/inner", "other thread": "other thread"}
    assert tree.skipped == {"overlapping without nesting": 1, "no positive length": 1,
                            "control characters in the name": 1}
    # a point is charged to the innermost span open there: after inner ended, to outer again
    index = dict(enumerate(tree.spans["name"]))
    found = innermost(tree, np.array(["Thread 1", "Thread 1", "Thread 1", "Thread 2", "Thread 1"]),
                      np.array([15, 50, 200, 100, 0]))
    assert [index.get(i) for i in found] == ["inner", "outer", None, "other thread", "outer"]


def test_a_point_where_spans_start_together_is_charged_to_the_inner_one():
    # GIVEN an outer and an inner span starting at the same ns on one thread, a span on another
    # WHEN points fall at that start, inside the inner, after it, before any span and on a thread
    # with none (in no order) THEN each is charged to the innermost span open there, if any
    tree = nest(span_frame([("outer", "p/Thread 1", 10, 100, 1), ("inner", "p/Thread 1", 10, 20, 1),
                            ("late", "p/Thread 2", 50, 10, 1)]))
    index = dict(enumerate(tree.spans["name"]))
    found = innermost(tree, np.array(["Thread 1", "Thread 2", "Thread 1", "Thread 1", "Thread 3", "Thread 2"]),
                      np.array([40, 55, 10, 29, 15, 49]))
    assert [index.get(i) for i in found] == ["outer", "late", "inner", "inner", None, None]


def test_a_real_trace_with_a_crossing_annotation_warns_and_counts_it(loop):
    # a copy of the first forward_backward region that starts inside it and ends after it
    events = loop.events
    first = events[events["name"] == "forward_backward"].iloc[[0]]
    crossing = first.astype({"name": str}).assign(ts_ns=first["ts_ns"] + first["dur_ns"] // 2, name="crossing")
    bad = pd.concat([events.astype({"name": str}), crossing], ignore_index=True)
    with pytest.warns(UserWarning, match="regions: skipped 1 overlapping without nesting"):
        table = regions(bad, loop.steps)
    assert table.skipped == {"overlapping without nesting": 1}
    assert "crossing" not in set(table.per_step["name"])
