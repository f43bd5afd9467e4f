"""Every view, for a real CPU run and for every shared Ascend sample; assertions on content."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.figure import Figure
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

import npumagic
from npumagic.analysis import schema
from npumagic.render import VIEWS, build_view, plot_kernels, plot_step_breakdown, plot_timeline
from npumagic.render.colors import MIN_DISTANCE, OTHER, color_distance, kernel_colors
from npumagic.render.tables import format_kernels, kernel_caption

from ..conftest import ASCEND_RANKS, CUDA, need, sampled, shared_summary, shared_trace


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cpu_run")
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(out)), profile_memory=True) as prof:
        for _ in range(4):
            model(torch.randn(32, 64)).sum().backward()
            opt.step()
            prof.step()
    trace = npumagic.load(out)
    return trace, npumagic.summarize(trace)


@pytest.fixture(scope="module", params=sampled(  # level1 and level0 in the quick loop
    [ASCEND_RANKS[2], ASCEND_RANKS[0]] + [p for i, p in enumerate(ASCEND_RANKS) if i not in (0, 2)], keep=2),
                ids=lambda p: f"{p.parent.name}-{p.name}")
def ascend_run(request):
    trace = npumagic.load(need(request.param))
    return trace, npumagic.summarize(trace)


@pytest.mark.parametrize("view", VIEWS)
def test_every_view_draws_for_a_cpu_run(cpu_run, view):
    fig = build_view(view, *cpu_run)
    assert isinstance(fig, Figure) and fig.axes


@pytest.mark.parametrize("view", VIEWS)
def test_every_view_draws_for_every_ascend_sample(ascend_run, view):
    fig = build_view(view, *ascend_run)
    assert isinstance(fig, Figure) and fig.axes


def test_ascend_timeline_has_host_device_and_hccl_lanes(ascend_run):
    trace, summary = ascend_run
    fig = Figure()
    out = plot_timeline(fig.add_subplot(), trace, top_kernels=summary.kernels["name"].head(5).tolist())
    assert any(lane.startswith("Python/Thread") for lane in out.lanes)
    assert "Ascend Hardware/Stream 2" in out.lanes
    assert out.lanes[-1] == "HCCL/Group 0 Communication"  # collectives drawn last
    assert len(out.steps) == 1  # step 50
    # the compute stream waits most of the (not overlapped) all-reduce: that hole is marked
    longest = max(g[2] for g in out.gaps if g[0] == "Ascend Hardware/Stream 2")
    assert longest > 0.5 * summary.steps["comm_not_overlapped_us"].iloc[0] / 1000


def test_cpu_timeline_shades_each_step(cpu_run):
    trace, _ = cpu_run
    fig = Figure()
    out = plot_timeline(fig.add_subplot(), trace)
    assert len(out.steps) == 3
    assert [t.get_text().strip() for t in fig.axes[0].texts if t.get_text().strip().startswith("step")] == \
        ["step 1", "step 2", "step 3"]


def test_step_range_and_lane_filter(cpu_run):
    trace, _ = cpu_run
    fig = Figure()
    out = plot_timeline(fig.add_subplot(), trace, steps=(2, 3), lanes=["Thread"])
    assert len(out.steps) == 2
    assert all("Thread" in lane for lane in out.lanes)
    with pytest.raises(ValueError, match="no steps in 7..9"):
        plot_timeline(Figure().add_subplot(), trace, steps=(7, 9))


def _synthetic_device_trace(gap_ms: float) -> schema.Trace:
    """Two kernels on one stream with an injected idle hole of ``gap_ms`` between them."""
    ms = 1_000_000
    gap = int(gap_ms * ms)
    events = pd.DataFrame({
        "name": ["k1", "k2", "aten::mm"], "kind": ["kernel", "kernel", "host_op"],
        "ts_ns": [0, 2 * ms + gap, 0], "dur_ns": [2 * ms, 2 * ms, 4 * ms + gap],
        "lane": ["GPU 0/Stream 7", "GPU 0/Stream 7", "Host/Thread 1"], "stream": [7, 7, -1], "device": [0, 0, -1],
        "rank": 0, "type": ["k1", "k2", "aten::mm"], "core": ["cuda", "cuda", "cpu"],
    })
    steps = pd.DataFrame({"rank": [0], "step": [1], "start_ns": [0], "end_ns": [4 * ms + gap]})
    return schema.finish(events, steps, meta={"backend": "cuda"})


def test_an_injected_idle_gap_is_annotated_with_its_length():
    fig = Figure()
    out = plot_timeline(fig.add_subplot(), _synthetic_device_trace(gap_ms=3.0))
    assert out.gaps == [("GPU 0/Stream 7", 2.0, 3.0)]
    assert any(t.get_text() == "idle 3.00 ms" for t in fig.axes[0].texts)


def test_gaps_below_the_threshold_are_not_marked():
    fig = Figure()
    out = plot_timeline(fig.add_subplot(), _synthetic_device_trace(gap_ms=0.05))
    assert out.gaps == []


def test_top_kernels_keep_their_colour_across_figures(ascend_run):
    trace, summary = ascend_run
    top = summary.kernels["name"].head(3).tolist()
    fig = Figure()
    out = plot_timeline(fig.add_subplot(), trace, top_kernels=top)
    colors = {b.get_label(): tuple(b.get_facecolor()[0]) for b in out.bars}
    drawn = plot_kernels(Figure().add_subplot(), summary.kernels, top=5, colored=3)
    bars = [tuple(p.get_facecolor()) for p in drawn["bars"]][::-1]
    assert bars[:3] == [pytest.approx(colors[name]) for name in top]
    assert bars[:3] == [pytest.approx(kernel_colors(top)[name]) for name in top]
    assert all(b == pytest.approx(OTHER) for b in bars[3:])  # grey, as in the timeline
    again = plot_timeline(Figure().add_subplot(), trace, top_kernels=top)
    assert {b.get_label(): tuple(b.get_facecolor()[0]) for b in again.bars} == colors


def test_no_two_legend_entries_look_alike(ascend_run):
    trace, summary = ascend_run
    fig = build_view("timeline", trace, summary)
    legend = fig.axes[0].get_legend()
    colors = [h.get_facecolor() for h in legend.legend_handles]
    assert len(colors) >= 3
    assert min(color_distance(a, b) for a, b in itertools.combinations(colors, 2)) >= MIN_DISTANCE


def test_kernel_bars_show_count_and_mean(cpu_run):
    _, summary = cpu_run
    fig = Figure()
    drawn = plot_kernels(fig.add_subplot(), summary.kernels, top=5)
    first = summary.kernels.iloc[0]
    assert drawn["names"][0] == first["name"]
    assert f"{int(first['count']):,} x" in drawn["labels"][-1].get_text()


def test_step_breakdown_stacks_to_the_busy_plus_idle_time(cpu_run):
    _, summary = cpu_run
    fig = Figure()
    drawn = plot_step_breakdown(fig.add_subplot(), summary.steps)
    stacked = [c for c in drawn["bars"] if c != "dataloader_us"]
    # each segment starts where the one below it ends, and the top one ends at the step time
    for below, above in zip(stacked, stacked[1:]):
        ends = [r.get_y() + r.get_height() for r in drawn["bars"][below]]
        assert [r.get_y() for r in drawn["bars"][above]] == pytest.approx(ends, rel=1e-9)
    assert [r.get_y() for r in drawn["bars"][stacked[0]]] == [0] * len(summary.steps)
    tops = [r.get_y() + r.get_height() for r in drawn["bars"][stacked[-1]]]
    assert tops == pytest.approx(summary.steps["wall_us"].to_numpy() / 1000, rel=1e-6)
    assert drawn["steps"] == 3


@pytest.mark.parametrize("steps", [0, 1])
def test_empty_and_single_step_runs_draw(steps):
    trace = _synthetic_device_trace(1.0)
    if steps == 0:
        trace = schema.finish(schema.empty(schema.EVENT_COLUMNS), schema.empty(schema.STEP_COLUMNS))
    summary = npumagic.summarize(trace)
    for view in VIEWS:
        assert build_view(view, trace, summary).axes


@pytest.mark.slow  # a scale test; its time is measured by bench/render.py
def test_a_million_events_draw_in_aggregate():
    n = 1_000_000
    rng = np.random.default_rng(0)
    ts = np.sort(rng.integers(0, 10**9, n))
    events = pd.DataFrame({"name": pd.Categorical(rng.choice([f"k{i}" for i in range(50)], n)), "kind": "kernel",
                           "ts_ns": ts, "dur_ns": 500, "lane": "GPU 0/Stream 7", "stream": 7, "device": 0, "rank": 0,
                           "type": "k", "core": "cuda"})
    trace = schema.finish(events, pd.DataFrame({"rank": [0], "step": [1], "start_ns": [0], "end_ns": [10**9]}))
    fig = Figure()
    out = plot_timeline(fig.add_subplot(), trace, top_kernels=["k1", "k2"])
    rectangles = sum(len(b.get_paths()) for b in out.bars)
    assert rectangles < 3 * 1600 * 3  # bounded by pixels x colour groups, not by events (time: bench/render.py)


def test_ascend_timeline_has_hbm_and_frequency_lanes_under_memory(ascend_run):
    from npumagic.render.timeline import timeline_figure

    trace, summary = ascend_run
    fig = timeline_figure(trace, summary.meta["rank"])
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert labels[-3:] == ["MiB", "HBM GB/s", "AI Core MHz"]
    hbm_ax = fig.axes[labels.index("HBM GB/s")]
    assert [line.get_label() for line in hbm_ax.get_lines()] == ["read (all channels)", "write (all channels)"]
    assert hbm_ax.get_shared_x_axes().joined(hbm_ax, fig.axes[0])


def test_a_timeline_without_counters_has_no_counter_lanes(cpu_run):
    from npumagic.render.timeline import timeline_figure

    trace, _ = cpu_run
    assert trace.counters.empty
    assert [ax.get_ylabel() for ax in timeline_figure(trace).axes][-1] == "MiB"


def test_matrix_heatmap_has_a_labelled_cell_per_recorded_pair():
    from npumagic.render.charts import plot_matrix

    summary = shared_summary(ASCEND_RANKS[2].parent)  # level1: ranks 0 and 1 to ranks 0..7
    fig = Figure()
    out = plot_matrix(fig.add_subplot(), summary.comm_matrix)
    assert out["cells"] == 14  # 2 sources x 7 other ranks; a rank's copies to itself are left out
    assert sorted(float(t.get_text()) for t in out["labels"])[0] == pytest.approx(
        summary.comm_matrix.min().min(), abs=0.05)


def test_matrix_heatmap_says_when_nothing_was_recorded():
    from npumagic.render.charts import plot_matrix

    fig = Figure()
    out = plot_matrix(fig.add_subplot(), pd.DataFrame())
    assert out["cells"] == 0 and "no communication matrix" in fig.axes[0].texts[0].get_text()
@pytest.mark.parametrize("view", VIEWS)
def test_figures_carry_twice_the_pixels_of_their_display_width(cpu_run, view):
    import struct

    from npumagic.render.views import RenderedFigure

    shown = RenderedFigure.of(view, build_view(view, *cpu_run))
    width_px = struct.unpack(">I", shown.data[16:20])[0]  # the PNG header's width
    assert shown.width <= 1200 and width_px == 2 * shown.width
    assert f"width='{shown.width}'" in shown.html() and "max-width:100%" in shown.html()


def test_long_titles_wrap_inside_the_figure():
    from npumagic.render.charts import _figure, _title

    fig = _figure(2)
    fig.add_subplot()
    _title(fig, "fixed is 10.3x faster than baseline (median step 1.83 vs 18.93 ms, 95% CI 9.9–10.9x, rank test "
                "p=0.029) and everything else that makes this title far longer than the figure is wide")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    box = fig._suptitle.get_window_extent(renderer)
    assert "\n" in fig._suptitle.get_text() and box.x1 <= fig.bbox.x1


def test_idle_labels_never_overlap_or_leave_the_window():
    ms = 1_000_000
    starts = np.array([0, 1, 2, 3, 4, 10, 10.6, 11.2, 20]) * ms  # many short gaps, one long
    events = pd.DataFrame({"name": "k", "kind": "kernel", "ts_ns": starts.astype(np.int64), "dur_ns": ms // 2,
                           "lane": "GPU 0/Stream 7", "stream": 7, "device": 0, "rank": 0, "type": "k", "core": "cuda"})
    steps = pd.DataFrame({"rank": [0], "step": [1], "start_ns": [0], "end_ns": [int(20.5 * ms)]})
    trace = schema.finish(events, steps, meta={"backend": "cuda"})
    fig = Figure(figsize=(11, 2))
    out = plot_timeline(fig.add_subplot(), trace, min_gap_ms=0.05, width_px=1100)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    boxes = [t.get_window_extent(renderer) for t in out.gap_labels]
    assert len(out.gaps) == 8 and 1 <= len(boxes) < len(out.gaps)
    assert not any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))
    axes = fig.axes[0].get_window_extent(renderer)
    assert all(axes.x0 <= b.x0 and b.x1 <= axes.x1 for b in boxes)


def test_an_empty_memory_view_is_one_line(cpu_run):
    trace, summary = cpu_run
    from npumagic.render.charts import memory_figure

    empty = memory_figure(npumagic.summarize(schema.finish(trace.events, trace.steps, meta=trace.meta)))
    assert empty.get_figheight() < 0.6
    assert [t.get_text() for t in empty.axes[0].texts] == ["no memory samples in this run (it was profiled without "
                                                           "profile_memory)"]


def test_redrawn_views_are_saved_under_names_that_say_their_options(cpu_run, tmp_path):
    from npumagic.render.views import render_views

    trace, summary = cpu_run
    plain = render_views(["timeline"], trace, summary, tmp_path, "r")
    zoomed = render_views(["timeline"], trace, summary, tmp_path, "r", rank=0, steps=(1, 2), window=(0.0, 1.5))
    assert plain[0].path.name == "r_timeline.png"
    assert zoomed[0].path.name == "r_timeline_rank0_steps1-2_zoom0-1.5.png"
    assert plain[0].path.exists() and zoomed[0].path.exists()


def test_kernel_history_uses_one_unit_on_both_axes():
    from npumagic.render.charts import kernel_history_figure

    history = pd.DataFrame({"run": ["a", "b"], "count": [100, 100], "total_us": [50_000.0, 30_000.0],
                            "mean_us": [500.0, 300.0]})
    fig = kernel_history_figure(history, "aten::addmm")
    left, right = fig.axes
    assert "(ms)" in left.get_ylabel() and "(ms)" in right.get_ylabel()
    assert right.lines[0].get_ydata().tolist() == [0.5, 0.3]


@pytest.mark.parametrize("total_us, unit", [(50_000.0, "ms"), (500.0, "µs")])
def test_kernel_history_table_and_figure_share_their_unit(total_us, unit):
    from npumagic.render.charts import kernel_history_figure
    from npumagic.render.tables import format_history

    # GIVEN a kernel's history WHEN its table and figure are drawn THEN both are in one unit
    history = pd.DataFrame({"run": ["a", "b"], "count": [100, 100], "total_us": [total_us, total_us / 2],
                            "mean_us": [total_us / 100, total_us / 200]})
    header = format_history(history, "aten::addmm").to_text(100).splitlines()[1]
    assert f"total ({unit})" in header and f"mean ({unit})" in header
    assert all(f"({unit})" in ax.get_ylabel() for ax in kernel_history_figure(history, "aten::addmm").axes)


def test_cpu_kernels_say_they_are_self_times_and_promise_no_colours(cpu_run):
    # GIVEN a CPU run: its "kernels" are operators by self time, and its timeline colours none
    trace, summary = cpu_run
    # WHEN its kernels view and kernel table are drawn
    fig = build_view("kernels", trace, summary)
    table = format_kernels(summary.kernels, 5, kernel_caption(summary)).to_text(120)
    # THEN both say self time, and nothing promises timeline colours
    assert "self time" in fig._suptitle.get_text() and "self time" in fig.axes[0].get_xlabel()
    assert "colour" not in fig.axes[0].get_xlabel()
    assert all(tuple(bar.get_facecolor()) == pytest.approx(OTHER) for bar in fig.axes[0].patches)
    assert table.splitlines()[0].startswith("top CPU operators by self time") and "operator" in table.splitlines()[1]


def test_device_kernels_keep_their_caption_and_colours(ascend_run):
    trace, summary = ascend_run
    fig = build_view("kernels", trace, summary)
    assert "colours" in fig.axes[0].get_xlabel() and kernel_caption(summary) == "top kernels by total time"


def test_the_rocm_timeline_legend_fits_inside_its_figure():
    # GIVEN the MI250 trace: three lanes beside fourteen legend entries (kinds and ten kernels)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    summary = shared_summary(CUDA / "rocm_mi250")
    fig = build_view("timeline", shared_trace(CUDA / "rocm_mi250"), summary)
    # WHEN it is laid out THEN the whole legend lies inside the figure
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw_without_rendering()
    box = fig.axes[0].get_legend().get_window_extent(renderer)
    assert len(fig.axes[0].get_legend().legend_handles) >= 12
    assert box.y0 >= 0 and box.y1 <= fig.bbox.y1 and box.x1 <= fig.bbox.x1


def test_a_device_wide_sync_is_not_on_a_stream_named_4294967295():
    # alexnet_sync: CUPTI's Context Sync records stream 4294967295 (-1 as uint32)
    lanes = list(shared_trace(CUDA / "alexnet_sync").events["lane"].cat.categories)
    assert "GPU 0/all streams (context sync)" in lanes and not [lane for lane in lanes if "4294967295" in lane]
