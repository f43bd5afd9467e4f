"""The live timeline's legend and colours per kind, on a real trace (a ResNet-50 run with four
DataLoader workers): the legend names the kinds the lanes draw, no two alike, and at overview zoom
a DataLoader wait is answered as one (its column's kind), so it is drawn in its own colour."""

from __future__ import annotations

import pytest

from npumagic.render.colors import KIND_COLORS, MIN_DISTANCE, color_distance
from npumagic.render.live import lod
from npumagic.render.live.legend import OWN_COLORS, legend
from npumagic.render.live.lod import TimelineIndex

from ..conftest import CUDA, need, shared_trace

NW4 = CUDA / "legacy_kineto" / "resnet50_nw4.pt.trace.json.gz"


@pytest.fixture(scope="module")
def index():
    return TimelineIndex.build(shared_trace(need(NW4)))


def test_the_legend_names_the_kinds_drawn_and_the_idle_gaps(index):
    # GIVEN the run's kinds of indexed events (ProfilerStep marks are steps, not annotations; the
    # critical path's waits are its lane's own)
    kinds = {str(k) for k in index.events["kind"].unique()}
    assert kinds == {"host_op", "dataloader", "sync", "kernel", "memcpy", "critical"}
    # WHEN its legend is made
    entries = legend(index)
    # THEN it has each of them, host first, and the device's idle gaps, each in its kind's colour
    assert [e["label"] for e in entries] == ["host operator", "DataLoader wait", "sync", "kernel", "memcpy", "idle gap",
                                             "critical path: waiting"]
    assert all(e["color"] == {**KIND_COLORS, **OWN_COLORS}[e["kind"]] for e in entries)


def test_no_two_kinds_of_the_legend_look_alike():
    colors = list(KIND_COLORS.values()) + list(OWN_COLORS.values())
    for i, a in enumerate(colors):
        for b in colors[i + 1:]:
            assert color_distance(a, b) >= MIN_DISTANCE, (a, b)


def test_a_dataloader_wait_at_overview_zoom_is_answered_as_its_kind(index, monkeypatch):
    # GIVEN the first step's DataLoader wait (4.4 ms from 0.05 ms after the step's start)
    wait = index.events[index.events["kind"] == "dataloader"].iloc[0]
    start = (wait["ts_ns"] - index.origin) / 1e6
    # WHEN the whole wait is shown in columns (as at overview zoom)
    monkeypatch.setattr(lod, "EVENTS_MAX_PER_LANE", -1)
    answer = index.query(start, start + wait["dur_ns"] / 1e6, 40)
    lane = next(k for k, ln in enumerate(index.lanes) if wait.name in set(ln.rows.tolist()))
    part = answer["lanes"][lane]
    # THEN every column of its thread is busy with the wait, and says so by its kind
    assert [answer["kinds"][c] for c in part["dominant"]] == ["dataloader"] * 40
    assert [answer["names"][c] for c in part["dominant"]] == [str(wait["name"])] * 40
    assert min(part["busy"]) == pytest.approx(1.0)
