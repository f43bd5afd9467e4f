"""A click on a finding of ``%npuadvise`` where widgets show: the advice is a widget whose
"timeline" buttons ask the kernel (``pick``, as the browser's comm sets it), which moves the run's
open live view to the finding's largest mark (its ``shown``), or opens one under the advice when
none is. The text is the advice's own. Run in a real shell on the shared two-rank torch_npu job;
the click itself in a real browser is tests/test_live_browser.py's."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("anywidget", reason="need anywidget (a dependency of npumagic) — pip install -e .")

from npumagic.analysis.advice import Advice  # noqa: E402
from npumagic.render.live.advice_view import AdviceWidget, LinkedAdvice  # noqa: E402
from npumagic.render.live.bundle import WIDGET_MIME  # noqa: E402
from npumagic.render.live.frontend import timeline_widget  # noqa: E402
from npumagic.render.live.widget import TimelineWidget  # noqa: E402

from ..conftest import ASCEND, need, shared_trace  # noqa: E402
from ..render.test_live_findings import largest_idle  # noqa: E402


@pytest.fixture
def job(shell, monkeypatch):
    """The level1 job loaded in a shell where widgets show (as in a Jupyter kernel), no view of
    it open (an earlier test's views of the same folder would be this kernel's open ones)."""
    import ipywidgets

    ipywidgets.Widget.close_all()
    monkeypatch.setattr("npumagic.magics.widget_frontend", lambda: True)
    shell.run_line_magic("npuload", f"{need(ASCEND / 'level1')} --name job --no-plot")
    return shell


def _button(advice: LinkedAdvice) -> AdviceWidget:
    return advice.live_view.children[0]


def test_a_click_moves_the_runs_open_view_to_the_findings_mark(job):
    # GIVEN the job's live timeline open (zoomed elsewhere) and its advice, every rank
    view = job.run_line_magic("npushow", "job --timeline").live
    view.zoom(0.0, 1.0)
    advice = job.run_line_magic("npuadvise", "job --all")
    assert isinstance(advice, LinkedAdvice) and WIDGET_MIME in advice._repr_mimebundle_()
    k = [f.rule for f in advice.findings].index("host_bound")
    # WHEN its host-bound finding's button is clicked (the message the browser sends)
    _button(advice).pick = {"index": k, "seq": 3}
    # THEN that same view shows the longest idle gap of rank 1's device inside a step, found
    # here by a plain walk of the trace, with as much again either side, outlined and in sight
    a, b = largest_idle(shared_trace(ASCEND / "level1"), 1)
    origin = view.index.origin
    assert view.shown["kind"] == "idle gap" and view.shown["rank"] == 1
    assert (view.shown["start"], view.shown["end"]) == ((a - origin) / 1e6, (b - origin) / 1e6)
    assert (view.view["t0"], view.view["t1"]) == pytest.approx(((2 * a - b - origin) / 1e6, (2 * b - a - origin) / 1e6))
    assert view.reveal == 1
    assert _button(advice).picked == {"seq": 3, "index": k, "shown": view.shown["label"]}
    assert len(advice.live_view.children) == 1  # no second view opened


def test_without_an_open_view_a_click_opens_one_under_the_advice(job):
    advice = job.run_line_magic("npuadvise", "job")
    # WHEN its first finding (the wait for the slower rank) is clicked with no view of the run open
    _button(advice).pick = {"index": 0, "seq": 1}
    # THEN a view of the run opens under the advice, at that finding's mark
    opened = advice.live_view.children[1]
    assert isinstance(opened, TimelineWidget) and opened.shown["kind"] == "slow rank wait"
    expected = timeline_widget(shared_trace(ASCEND / "level1"))
    expected.show(advice.findings[0])
    expected.close()  # else the latest open view of the folder: the next click's
    assert opened.shown == expected.shown and opened.view["t0"] == expected.view["t0"]
    # and a later click moves it, rather than opening another; a closed one is forgotten
    _button(advice).pick = {"index": 0, "seq": 2}
    assert len(advice.live_view.children) == 2
    opened.close()
    _button(advice).pick = {"index": 0, "seq": 3}
    assert advice.live_view.children[1] is not opened and advice.live_view.children[1].shown == expected.shown


@pytest.mark.parametrize("message", [{"index": 99, "seq": 1}, {"index": "0"}, {"index": True}, "0", None])
def test_a_pick_of_no_finding_is_answered_with_an_error(job, message):
    advice = job.run_line_magic("npuadvise", "job")
    _button(advice).pick = message
    assert "no finding" in _button(advice).picked["error"] and len(advice.live_view.children) == 1


def test_a_finding_the_view_cannot_place_says_so(job):
    advice = job.run_line_magic("npuadvise", "job --all")
    k = [f.rule for f in advice.findings].index("environment")  # profiler_metadata.json: no time on the axis
    _button(advice).pick = {"index": k, "seq": 1}
    assert "names no step and no operator" in _button(advice).picked["error"]


def test_the_text_is_the_advices_own_and_a_terminal_gets_the_advice(job, monkeypatch):
    linked = job.run_line_magic("npuadvise", "job --all")
    monkeypatch.setattr("npumagic.magics.widget_frontend", lambda: False)
    plain = job.run_line_magic("npuadvise", "job --all")
    assert type(plain) is Advice and WIDGET_MIME not in job.display_formatter.format(plain)[0]
    assert str(linked) == str(plain) and linked.to_dict() == plain.to_dict()
    assert linked._repr_mimebundle_()["text/plain"] == str(plain)
    assert linked.findings == plain.findings
    # the widget's HTML is the notebook's static one, with a row per finding for its button
    uid = re.compile(r"T_[0-9a-f]+")  # pandas' Styler names each table's CSS anew
    assert uid.sub("T_", _button(linked).html) == uid.sub("T_", plain._repr_html_())
    assert [f["rule"] for f in _button(linked).findings] == [f.rule for f in plain.findings]


def test_a_hostile_operator_name_reaches_the_page_as_text_only():
    from npumagic.analysis.finding import Finding

    # GIVEN a finding naming an operator of a crafted trace (the widget puts the HTML in the page
    # as it is, past JupyterLab's sanitizer)
    name = '<img src=x onerror="alert(1)">'
    finding = Finding("host_bound", 0.4, f"{name} takes 40%", {}, f"fuse {name}", where=name, rule="host_bound")
    widget = AdviceWidget(Advice([finding], run="x"), open_view=lambda: None)
    # THEN it is there escaped, never as markup
    assert "<img" not in widget.html and widget.html.count("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;") == 3
    assert widget.findings == [{"rule": "host_bound", "ranks": [], "title": f"{name} takes 40%"}]
