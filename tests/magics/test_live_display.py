"""Which timeline the magics show: the live widget where a widget front end is present (its PNG
kept as the text/html fallback and the exported file), the static figure elsewhere or with
--static. The front end's presence is what widget_frontend() says (tested in a real kernel in
tests/test_live_browser.py); here it is set either way."""

from __future__ import annotations

import pytest

pytest.importorskip("anywidget", reason="need anywidget (a dependency of npumagic) — pip install -e .")

from npumagic.render.live.bundle import WIDGET_MIME  # noqa: E402
from npumagic.render.live.widget import TimelineWidget  # noqa: E402

from ..conftest import ASCEND, need  # noqa: E402

CELL = "%%npuprofile --repeat-cell --wait 0 --steps 2 {}\ntrain_step()"


@pytest.fixture
def frontend(monkeypatch):
    """A widget front end present, as in a Jupyter kernel."""
    monkeypatch.setattr("npumagic.magics.widget_frontend", lambda: True)


def test_without_a_widget_front_end_the_report_carries_the_png_only(trainer, plots):
    report = trainer.run_cell(CELL.format("")).result
    assert report.live is None
    assert WIDGET_MIME not in report._repr_mimebundle_()


def test_with_a_widget_front_end_the_timeline_is_live_and_the_png_its_fallback(trainer, plots, frontend):
    # WHEN a cell is profiled where widgets show
    report = trainer.run_cell(CELL.format("")).result
    # THEN the report carries the live widget, shown first by a widget front end ...
    assert isinstance(report.live, TimelineWidget)
    bundle = report._repr_mimebundle_()
    assert bundle[WIDGET_MIME]["model_id"] == report.live_view.model_id
    assert report.live in report.live_view.children
    # ... and still the PNG timeline, for nbconvert and GitHub, and in the run's folder
    assert "<img alt='timeline'" in bundle["text/html"]
    assert report.figure("timeline").path.read_bytes()[:4] == b"\x89PNG"
    # and the widget already answers the whole run
    assert report.live.tiles["lanes"] and report.live.tiles["t1"] > report.live.tiles["t0"]


def test_static_forces_the_png(trainer, plots, frontend):
    report = trainer.run_cell(CELL.format("--static")).result
    assert report.live is None and WIDGET_MIME not in report._repr_mimebundle_()


def test_the_live_config_switch_turns_the_widget_off(trainer, plots, frontend):
    trainer.run_line_magic("config", "NpuMagics.live = False")
    try:
        assert trainer.run_cell(CELL.format("")).result.live is None
    finally:  # the shell is the process's singleton: its config outlives the test
        trainer.run_line_magic("config", "NpuMagics.live = True")


def test_npushow_opens_the_live_view_at_the_zoom_asked_for(shell, frontend):
    shell.run_line_magic("npuload", f"{need(ASCEND / 'level1')} --name job --no-plot")
    report = shell.run_line_magic("npushow", "job --timeline --zoom 10:20")
    assert (report.live.view["t0"], report.live.view["t1"]) == (10.0, 20.0)
    assert (report.live.tiles["t0"], report.live.tiles["t1"]) == (10.0, 20.0)
    assert report.figures[0].view == "timeline" and WIDGET_MIME in report._repr_mimebundle_()
    assert shell.run_line_magic("npushow", "job --timeline --static").live is None


def test_the_live_views_perfetto_file_is_named_after_the_run(trainer, plots, frontend, tmp_path):
    # GIVEN a profiled cell's live view (its trace file is named after the host and process)
    report = trainer.run_cell(CELL.format("--name fast")).result
    # WHEN its Perfetto button's export runs THEN the file is the run's name, in the working folder
    written = report.live.export_perfetto()
    assert written["path"] == str(tmp_path / "fast.perfetto.json") and (tmp_path / "fast.perfetto.json").is_file()
