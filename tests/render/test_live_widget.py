"""The live timeline widget in the kernel: every view the browser sets is answered in ``tiles``
from the index, the synced state stays the same size whatever the trace's size (the browser
never receives the trace), steps open in the view, hover asks for one event's details."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("anywidget", reason="need anywidget (a dependency of npumagic) — pip install -e .")

from npumagic.analysis import schema  # noqa: E402
from npumagic.render.live.frontend import timeline, timeline_widget, widget_frontend  # noqa: E402
from npumagic.render.live.widget import TimelineWidget  # noqa: E402

from ..conftest import ASCEND, need, shared_trace  # noqa: E402


def _synthetic(n: int) -> schema.Trace:
    """``n`` kernels of 20 names on one stream, and a host thread launching them, in 4 steps."""
    rng = np.random.default_rng(0)
    ts = np.sort(rng.integers(0, n * 1_000, n))
    names = np.array([f"kernel_{i}" for i in range(20)])[rng.integers(0, 20, n)]
    device = pd.DataFrame({"name": names, "kind": "kernel", "ts_ns": ts, "dur_ns": 600, "lane": "GPU 0/Stream 7",
                           "stream": 7, "device": 0, "rank": 0})
    host = pd.DataFrame({"name": "aten::op", "kind": "host_op", "ts_ns": ts[::10], "dur_ns": 5_000,
                         "lane": "Python/Thread 1", "stream": -1, "device": -1, "rank": 0})
    quarter = n * 250
    steps = pd.DataFrame({"rank": 0, "step": [1, 2, 3, 4], "start_ns": [i * quarter for i in range(4)],
                          "end_ns": [(i + 1) * quarter for i in range(4)]})
    return schema.finish(pd.concat([device, host], ignore_index=True), steps)


def test_a_view_set_by_the_browser_is_answered_in_tiles():
    # GIVEN the widget over the shared level1 job (two ranks)
    widget = timeline_widget(shared_trace(need(ASCEND / "level1")), "level1")
    # WHEN the browser sets a window of 10 ms at 700 px
    widget.view = {"t0": 20.0, "t1": 30.0, "width": 700, "seq": 5}
    # THEN the answer is for that window, with one part per lane of both ranks
    tiles = widget.tiles
    assert (tiles["seq"], tiles["t0"], tiles["t1"], tiles["width"]) == (5, 20.0, 30.0, 700)
    assert len(tiles["lanes"]) == len(widget.frame["lanes"]) and {ln["rank"] for ln in widget.frame["lanes"]} == {0, 1}
    assert all(len(p["busy"]) == 700 for p in tiles["lanes"] if p["mode"] == "columns")


def test_the_synced_state_does_not_grow_with_the_trace():
    # GIVEN two traces, one with ten times the events of the other
    small = timeline_widget(_synthetic(20_000))
    large = timeline_widget(_synthetic(200_000))
    # WHEN both show their whole run at 1000 px
    sizes = [len(json.dumps({k: w.get_state()[k] for k in ("frame", "view", "tiles")})) for w in (small, large)]
    # THEN what the browser holds is about the same size: columns, not events
    assert sizes[1] < 1.5 * sizes[0] and sizes[1] < 400_000
    assert all(p["mode"] == "columns" for p in large.tiles["lanes"])


def test_a_step_opens_in_the_view():
    widget = timeline_widget(_synthetic(4_000))
    widget.show_step(3)
    step = next(s for s in widget.frame["steps"] if s["step"] == 3)
    assert (widget.view["t0"], widget.view["t1"]) == (step["start"], step["end"])
    assert (widget.tiles["t0"], widget.tiles["t1"]) == (step["start"], step["end"])
    with pytest.raises(ValueError, match=r"no step 9; the run has steps \[1, 2, 3, 4\]"):
        widget.show_step(9)


def test_hover_asks_the_kernel_for_one_events_details():
    widget = timeline_widget(_synthetic(4_000))
    widget.zoom(0.0, 0.01)  # 10 us: a few events, sent as themselves
    part = next(p for p in widget.tiles["lanes"] if p["mode"] == "events")
    widget.probe = {"id": part["id"][0]}
    assert widget.detail["name"] == widget.tiles["names"][part["name"][0]]
    assert widget.detail["id"] == part["id"][0] and widget.detail["step"] == 1


def test_outside_a_jupyter_kernel_the_timeline_is_the_static_figure():
    # GIVEN this test process: no ipykernel running
    assert not widget_frontend()
    # WHEN the public call is made on a trace
    shown = timeline(_synthetic(2_000))
    # THEN it is the PNG figure, and the widget only when asked for
    assert shown.figures[0].data[:4] == b"\x89PNG" and "<img" in shown._repr_mimebundle_()["text/html"]
    assert isinstance(timeline(_synthetic(2_000), live=True), TimelineWidget)


def test_a_findings_where_opens_in_the_view():
    widget = timeline_widget(_synthetic(4_000))
    # a step named in the text
    assert widget.show("slowest: step 2 (3.1 ms)") == "step 2"
    step = next(s for s in widget.frame["steps"] if s["step"] == 2)
    assert (widget.view["t0"], widget.view["t1"]) == (step["start"], step["end"])
    # an operator: its longest event, with as much again either side
    assert widget.show("aten::op x400 at train.py:12") == "aten::op"
    assert widget.view["t1"] - widget.view["t0"] == pytest.approx(3 * 0.005)
    with pytest.raises(ValueError, match="names no step and no operator"):
        widget.show("nothing here")


def _from_browser(widget, **state):
    """Set ``state`` as the comm handler does on a message from the browser (ipywidgets'
    ``_handle_msg`` calls ``set_state``), failing on any exception or numpy warning raised in it."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        widget.set_state(state)


@pytest.mark.parametrize("view, error", [
    ({"t0": 0.0, "t1": 1.0, "width": float("nan")}, "width nan: a number of pixels"),
    ({"t0": 0.0, "t1": 1.0, "width": "wide"}, "width 'wide': a number of pixels"),
    ({"t0": None, "t1": 1.0}, "t0 None: a number of ms"),
    ({"t0": [1], "t1": 2.0}, r"t0 \[1\]: a number of ms"),
    ({"t0": "0", "t1": 2.0}, "t0 '0': a number of ms"),
    ({"t1": 2.0}, "t0 None: a number of ms"),
    ({"t0": 0.0, "t1": float("nan")}, "t1 nan: a number of ms"),
    ({"t0": True, "t1": 2.0}, "t0 True: a number of ms"),
    ({"t0": 3.0, "t1": 1.0}, "t1 1.0 is not after t0 3.0"),
    ([0, 1], "a view is {t0, t1, width, seq}, not list"),
    (None, "a view is {t0, t1, width, seq}, not NoneType"),
])
def test_a_malformed_view_is_answered_with_an_error_not_an_exception(view, error):
    # GIVEN the widget showing its whole run
    widget = timeline_widget(_synthetic(4_000))
    # WHEN the browser sends a view of the wrong shape (with seq 7 where it is a dict)
    _from_browser(widget, view=dict(view, seq=7) if isinstance(view, dict) else view)
    # THEN the answer is an error naming what is wrong, strict JSON, with nothing to draw
    tiles = widget.tiles
    assert tiles["error"].startswith("view refused: ")
    import re

    assert re.search(error, tiles["error"]), tiles["error"]
    assert tiles["seq"] == (7 if isinstance(view, dict) else None) and tiles["lanes"] == []
    json.dumps(tiles, allow_nan=False)


@pytest.mark.parametrize("view, t0, t1", [
    ({"t0": -1e308, "t1": 1e308}, -1e300, 1e300),
    ({"t0": -float("inf"), "t1": float("inf")}, -1e300, 1e300),
    ({"t0": -10**400, "t1": 10**400}, -1e300, 1e300),
    ({"t0": 1e301, "t1": 1e302}, 1e300, None),  # wholly beyond: the narrowest window at the limit
    ({"t0": 0.0, "t1": 1e300, "width": 10**30}, 0.0, 1e300),
    ({"t0": 0.0, "t1": 1.0, "width": -5, "seq": float("nan")}, 0.0, 1.0),
])
def test_a_view_beyond_1e300_ms_is_clamped_and_answered_in_strict_json(view, t0, t1):
    widget = timeline_widget(_synthetic(4_000))
    _from_browser(widget, view=view)
    tiles = widget.tiles
    assert "error" not in tiles and tiles["t0"] == t0 and (t1 is None or tiles["t1"] == t1)
    assert tiles["t1"] > tiles["t0"] and 1 <= tiles["width"] <= 8192
    assert len(tiles["lanes"]) == len(widget.frame["lanes"])
    json.dumps(tiles, allow_nan=False)  # no Infinity, no NaN (a busy share of 0/0 would be one)
    assert all(0 <= b <= 1 for p in tiles["lanes"] if p["mode"] == "columns" for b in p["busy"])


@pytest.mark.parametrize("probe, error", [
    ({"id": -1}, "no event -1; ids run from 0 to 4399"),
    ({"id": 4_400}, "no event 4400; ids run from 0 to 4399"),
    ({"id": 10**30}, "no event 1000000000000000000000000000000; ids run"),
    ({"id": 1e300}, r"no event 1e\+300; ids run"),
    ({"id": "3"}, "id '3': an event id"),
    ({"id": "x"}, "id 'x': an event id"),
    ({"id": 2.5}, "id 2.5: an event id"),
    ({"id": float("nan")}, "id nan: an event id"),
    ({"id": float("inf")}, "id inf: an event id"),
    ({"id": None}, "id None: an event id"),
    ({"id": True}, "id True: an event id"),
    ([], r'a probe is \{"id": N\}, not list'),
    (None, r'a probe is \{"id": N\}, not NoneType'),
])
def test_a_malformed_probe_is_answered_with_an_error_not_an_exception(probe, error):
    import re

    widget = timeline_widget(_synthetic(4_000))
    _from_browser(widget, probe=probe)
    detail = widget.detail
    assert detail["error"].startswith("probe refused: ") and re.search(error, detail["error"]), detail["error"]
    assert "name" not in detail  # never another event's details (id -1 read the last event's)
    json.dumps(detail, allow_nan=False)


def test_after_an_error_answer_the_next_good_message_is_answered():
    widget = timeline_widget(_synthetic(4_000))
    _from_browser(widget, view={"t0": None, "t1": 1.0, "seq": 1})
    _from_browser(widget, view={"t0": 0.0, "t1": 0.5, "width": 400, "seq": 2})
    assert "error" not in widget.tiles and (widget.tiles["seq"], widget.tiles["t1"], widget.tiles["width"]) == (2, 0.5, 400)
    _from_browser(widget, probe={"id": -1})
    _from_browser(widget, probe={"id": 0})
    assert "error" not in widget.detail and widget.detail["id"] == 0


@pytest.mark.parametrize("t0, t1", [(0, float("inf")), (float("-inf"), 1.0), (float("nan"), 1.0), (0.0, float("nan")),
                                    ("0", 1.0)])
def test_zoom_to_a_window_without_finite_ends_is_refused(t0, t1):
    widget = timeline_widget(_synthetic(4_000))
    before = dict(widget.view)
    with pytest.raises(ValueError, match=r"must be a finite number of ms from the first step"):
        widget.zoom(t0, t1)
    assert widget.view == before
