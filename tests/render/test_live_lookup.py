"""Search in the live timeline, answered in the kernel, on a real trace: the count of matches is
the count of the trace's events with that name (a text, or a regex), "next" and "previous" move
the view to each match in time order, and a malformed search from the browser is answered with
an error, never an exception."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("anywidget", reason="need anywidget (a dependency of npumagic) — pip install -e .")

from npumagic.render.live.frontend import timeline_widget  # noqa: E402
from npumagic.render.live.lookup import search  # noqa: E402

from ..conftest import CUDA, need, shared_trace  # noqa: E402

NW4 = CUDA / "legacy_kineto" / "resnet50_nw4.pt.trace.json.gz"


def _count(trace, test) -> int:
    """Events the timeline draws (host operators, waits, syncs, device work) whose name passes ``test``."""
    ev = trace.events
    ev = ev[ev["kind"].isin(["host_op", "annotation", "dataloader", "sync", "kernel", "comm", "memcpy"]).to_numpy()]
    names = ev["name"].astype(str)
    return int(sum(test(n) for n in names if not n.startswith("ProfilerStep#")))


@pytest.mark.parametrize("query, regex, test", [
    ("addmm", False, lambda n: "addmm" in n.lower()),
    ("CONV", False, lambda n: "conv" in n.lower()),
    (r"^aten::(add|mul)_?$", True, lambda n: re.search(r"^aten::(add|mul)_?$", n, re.I) is not None),
    ("no such operator", False, lambda n: False),
])
def test_the_count_of_matches_is_the_events_with_that_name(query, regex, test):
    trace = shared_trace(need(NW4))
    widget = timeline_widget(trace)
    assert widget.search(query, regex=regex) == _count(trace, test)
    assert widget.found["count"] == _count(trace, test)


def test_next_and_previous_move_the_view_to_each_match_in_time_order():
    # GIVEN the whole run shown and a search for the log-softmax of the loss (one a step)
    widget = timeline_widget(shared_trace(need(NW4)))
    matches = search(widget.index, "aten::log_softmax")
    starts = [s / 1e6 for s in matches.starts]
    assert widget.search("aten::log_softmax") == len(starts) >= 3
    shown = []
    for _ in range(3):
        # THEN the view holds the match shown, and only a little either side of it
        f, v = widget.found, widget.view
        assert v["t0"] < f["start"] <= f["end"] < v["t1"] and v["t1"] - v["t0"] <= 3 * (f["end"] - f["start"]) + 0.01
        assert widget.tiles["t0"] == v["t0"]  # and the kernel answered that view
        assert (f["t0"], f["t1"]) == (v["t0"], v["t1"])  # the count carries it (a browser may drop the view's update)
        shown.append(f["start"])
        widget.next()
    assert shown == starts[:3]
    widget.previous()
    assert widget.found["start"] == starts[2] and widget.found["at"] == 3
    # after the last match, the first again
    widget.zoom(starts[-1] - 1, starts[-1] + 1)
    widget.search("aten::log_softmax")
    assert widget.found["at"] == len(starts) and widget.next() == 1


def _from_browser(widget, **state):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        widget.set_state(state)


def test_a_search_from_the_browser_is_answered_and_moves_the_view():
    widget = timeline_widget(shared_trace(need(NW4)))
    _from_browser(widget, find={"query": "aten::log_softmax", "regex": False, "move": 0, "seq": 4})
    first = widget.found
    assert first["seq"] == 4 and first["count"] >= 3 and first["at"] == 1
    _from_browser(widget, find={"query": "aten::log_softmax", "regex": False, "move": 1, "seq": 5})
    assert widget.found["at"] == 2 and widget.view["t0"] > first["end"]


@pytest.mark.parametrize("find, error", [
    ({"query": "(", "regex": True}, "is no regular expression"),
    ({"query": ""}, "a search is a non-empty text"),
    ({"query": 5}, "a search is a non-empty text, not 5"),
    ({"query": "x" * 501}, "a search of 501 characters: at most 500"),
    ({"query": "add", "move": 2}, "move 2: 0"),
    ({"query": "add", "regex": "yes"}, "regex 'yes': true or false"),
    ([1], "a search is {query, regex, move}, not list"),
])
def test_a_malformed_search_is_answered_with_an_error(find, error):
    widget = timeline_widget(shared_trace(need(NW4)))
    _from_browser(widget, find=dict(find, seq=9) if isinstance(find, dict) else find)
    assert widget.found["error"].startswith("search refused: ") and error in widget.found["error"]
    json.dumps(widget.found, allow_nan=False)
