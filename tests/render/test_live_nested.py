"""The live timeline's regions and modules lanes, on a real capture: a tiny CPU model (two
nn.Linear layers) profiled with ``%%npuprofile --modules`` inside ``record_function`` regions
nested three deep. Each group's lane has a row per depth of its tree, every span once, at the
times the trace file itself (read with json) gives; the kernel answers the lanes at every zoom."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from npumagic.analysis.intervals import Spans
from npumagic.render.live import lod
from npumagic.render.live.lod import TimelineIndex

LOOP = """%%npuprofile --wait 0 --warmup 1 --steps 2 --no-plot --modules --name lanes
from torch.profiler import record_function
for _ in range(3):
    with record_function("outer"):
        with record_function("middle"):
            with record_function("inner"):
                train_step()
"""


@pytest.fixture
def run(trainer):
    result = trainer.run_cell(LOOP)
    assert result.success, result.error_in_exec
    trace = trainer.magics_manager.registry["NpuMagics"].session.runs.trace("lanes")
    return trace, TimelineIndex.build(trace)


def raw_spans(trace, keep) -> list[dict]:
    """The trace files' complete events that ``keep`` takes, read with json."""
    out = []
    for f in trace.meta.files:
        text = gzip.open(f, "rt").read() if str(f).endswith(".gz") else Path(f).read_text()
        out += [e for e in json.loads(text)["traceEvents"] if e.get("ph") == "X" and keep(e)]
    return out


def ns(us) -> int:
    return int(round(float(us) * 1000))


def depths(spans: list[dict]) -> list[int]:
    """Each span's nesting depth on its thread, in the order of ``spans``."""
    out, open_ = {}, {}
    for k in sorted(range(len(spans)), key=lambda k: (spans[k]["tid"], ns(spans[k]["ts"]), -ns(spans[k]["dur"]))):
        e = spans[k]
        stack = open_.setdefault(e["tid"], [])
        while stack and stack[-1] <= ns(e["ts"]):
            stack.pop()
        out[k] = len(stack)
        stack.append(ns(e["ts"]) + ns(e["dur"]))
    return [out[k] for k in range(len(spans))]


def rows(spans: list[dict], prefix: str = "") -> list[tuple]:
    """(name, start ns, end ns, depth) of each span, sorted, its name without ``prefix``."""
    return sorted((e["name"][len(prefix):], ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), d) for e, d in zip(spans, depths(spans)))


def lane_spans(index, group: str) -> list[tuple]:
    """(name, start ns, end ns, depth) of every span of the group's lanes, on the trace's clock."""
    out = []
    for lane in index.lanes:
        if lane.group == group:
            out += [(str(index.names[c]), int(s) + index.origin, int(e) + index.origin, int(d))
                    for c, s, e, d in zip(lane.codes, lane.starts, lane.ends, lane.depth)]
    return sorted(out)


def test_regions_and_modules_lanes_hold_each_span_once_a_row_per_depth(run):
    trace, index = run
    # GIVEN the trace file's user annotations (the three regions and the optimizer's), its step
    # marks (npumagic steps at optimizer.step(): they cross the regions) and its module spans
    notes = raw_spans(trace, lambda e: e.get("cat") == "user_annotation" and not e["name"].startswith("ProfilerStep#"))
    marks = raw_spans(trace, lambda e: e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    mods = raw_spans(trace, lambda e: e.get("cat") == "python_function" and e["name"].startswith("nn.Module: "))
    assert {"outer", "middle", "inner"} <= {e["name"] for e in notes}
    assert {"nn.Module: Linear_0", "nn.Module: Linear_1"} <= {e["name"] for e in mods}
    layout = {ln["name"]: ln for ln in index.layout()["lanes"] if ln["group"] == "regions"}
    # THEN the regions lane has a row per depth of its tree (outer > middle > inner > Optimizer.step) ...
    assert max(depths(notes)) == 3 and layout["regions"]["depth"] == 3
    # ... and every annotation once, at the file's times, at its depth; the step marks in their lane, one row
    assert lane_spans(index, "regions") == sorted(rows(notes) + rows(marks))
    assert len(marks) >= 2 and layout["steps"]["depth"] == 0
    # AND the modules group: the forward lane's rows the module tree's depths (Sequential_0 > Linear_N)
    forward = [ln for ln in index.lanes if ln.group == "modules" and ln.name == "forward"]
    assert len(forward) == 1 and int(forward[0].depth.max()) + 1 == max(depths(mods)) + 1 == 2
    expected = rows(mods, "nn.Module: ")
    assert [s for s in lane_spans(index, "modules") if s in set(expected)] == expected
    # and each layer's backward, charged through autograd's sequence numbers, in a lane of its own
    backward = next(ln for ln in index.lanes if ln.group == "modules" and ln.name == "backward")
    assert {"Linear_0", "Linear_1"} <= {str(index.names[c]) for c in backward.codes}
    # AND a span's details name its tree path and its duration with units; torch's own are marked
    regions = next(ln for ln in index.lanes if ln.group == "regions" and ln.name == "regions")
    inner = int(np.flatnonzero(index.names[regions.codes] == "inner")[0])
    detail = index.details(int(regions.rows[inner]))
    assert detail["path"].endswith("outer/middle/inner") and detail["lines"][1] == f"path {detail['path']}"
    assert detail["lines"][2].startswith("annotation: ") and detail["lines"][2].split(": ")[1].split()[1] in ("ms", "µs")
    own = {str(index.names[c]) for c, o in zip(regions.codes, regions.own) if o}
    assert own and all(n.startswith(("ProfilerStep#", "Optimizer.")) for n in own)
    assert not {"outer", "middle", "inner"} & own


def test_the_kernel_answers_the_nested_lanes_at_every_zoom(run, monkeypatch):
    trace, index = run
    k = next(k for k, ln in enumerate(index.lanes) if ln.group == "regions" and ln.name == "regions")
    lane = index.lanes[k]
    # zoomed in: the events themselves, each at its row, torch's own flagged
    answer = index.query(index.lo / 1e6, index.hi / 1e6, 2000)
    part = answer["lanes"][k]
    assert part["mode"] == "events" and len(part["start"]) == lane.starts.size
    assert part["depth"] == lane.depth.tolist() and part["own"] == lane.own.astype(int).tolist()
    # at overview (columns): each column's busy share is the union of the lane's spans within it
    monkeypatch.setattr(lod, "EVENTS_MAX_PER_LANE", -1)
    answer = index.query(index.lo / 1e6, index.hi / 1e6, 50)
    part = answer["lanes"][k]
    assert part["mode"] == "columns"
    edges = np.linspace(index.lo, index.hi, 51)
    union = Spans.union_of(lane.starts, lane.ends)
    for c in range(50):
        piece = union & Spans(np.array([int(np.ceil(edges[c]))]), np.array([int(np.floor(edges[c + 1]))]))
        assert part["busy"][c] == pytest.approx(piece.total / (edges[c + 1] - edges[c]), abs=2e-3)
    # each busy column names a region with time in it (ties between nested ones go as the host lanes')
    names = [answer["names"][d] if d >= 0 else None for d in part["dominant"]]
    assert all((n is not None) == (b > 0) for n, b in zip(names, part["busy"]))
    assert {n for n in names if n} <= {str(index.names[c]) for c in lane.codes}
    # no gaps on a region lane (idle holes are the device's)
    assert "gaps" not in part


def test_a_run_with_only_step_marks_and_no_modules_has_neither_group(trainer):
    # GIVEN a capture of plain operators: no annotation but the profiler's step marks, no modules
    assert trainer.run_cell("%%npuprofile --repeat-cell --wait 0 --warmup 1 --steps 1 --no-plot --name bare\n"
                            "torch.randn(64, 64) @ torch.randn(64, 64)").success
    trace = trainer.magics_manager.registry["NpuMagics"].session.runs.trace("bare")
    marks = trace.events[(trace.events["kind"] == "annotation").to_numpy()]["name"].astype(str)
    assert len(marks) and marks.str.startswith("ProfilerStep#").all()
    # THEN its lanes are the host's alone (the step bands show the marks)
    assert {ln.group for ln in TimelineIndex.build(trace).lanes} == {"host"}


def test_a_click_on_a_torch_npu_modules_span_draws_the_device_work_it_launched():
    import npumagic
    from npumagic.render.live.flows import flows

    from ..conftest import ASCEND, need

    # GIVEN the shared level1 job (torch_npu, modules recorded): rank 0's first Conv2d forward span
    index = TimelineIndex.build(npumagic.load(need(ASCEND / "level1")))
    lane = next(ln for ln in index.lanes if ln.rank == 0 and ln.group == "modules" and ln.name == "forward")
    k = next(k for k in range(lane.starts.size) if str(index.names[lane.codes[k]]) == "Conv2d_0")
    assert index.details(int(lane.rows[k]))["path"] == "DistributedDataParallel_0/AlexNet_0/Sequential_0/Conv2d_0"
    # WHEN it is clicked THEN arrows run from its thread's Enqueues to the device work its
    # launches started there: the convolution among them (the launches of its thread, not of a lane named "forward")
    answer = flows(index, int(lane.rows[k]))
    assert answer["count"] > 0 and "Conv2D" in answer["lines"][1], answer["lines"]
    for arrow in answer["arrows"]:
        source, target = index.lanes[arrow["from"]["lane"]], index.lanes[arrow["to"]["lane"]]
        assert source.rank == target.rank == 0 and source.group == "host" and target.group == "device"
        assert lane.starts[k] <= arrow["from"]["t"] * 1e6 <= lane.ends[k]
