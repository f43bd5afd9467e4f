"""``%npushow RUN --regions`` / ``--modules`` (and ``npumagic show``): the icicle of a run's regions
or modules and the table under it, on a real two-layer model profiled here with ``--modules``, real
nested ``record_function`` regions 35 and 45 levels deep, and the shared Kineto traces that carry
user annotations (nccl_data) and nn.Module spans (mi300_bert). Checked on structure: which blocks,
their widths against the region/module table, labels inside their blocks; never on times."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from npumagic.analysis.modules import modules
from npumagic.analysis.regions import regions
from npumagic.render.icicle import COLORS, MAX_ROWS, MERGED, ROWS_HEIGHT_IN, blocks, icicle_figure, place_table

from ..conftest import CUDA, need, shared_trace

NCCL = CUDA / "nccl" / "nccl_data.json.gz"
BERT = CUDA / "tracelens" / "mi300_bert" / "gaunernst_bert-small-uncased__1016001.json.gz"
# layers heavy enough (about 1 ms each) that a stall of the loaded machine inside a step cannot make
# one narrower than icicle.MIN_SHARE of it, where it would be merged (once seen with 64x64 layers)
TWO_LAYERS = """
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(256, 256)
"""
STEP = "loss = model(x).sum(); loss.backward(); opt.step(); opt.zero_grad()"


@pytest.fixture
def profiled(shell):
    """A shell whose history holds ``lin`` (two Linear layers, --modules) and ``plain`` (without)."""
    assert shell.run_cell(TWO_LAYERS).success
    for name, flag in (("lin", "--modules"), ("plain", "")):
        cell = f"%%npuprofile {flag} --repeat-cell --wait 0 --warmup 1 --steps 3 --no-plot --quiet --name {name}\n{STEP}"
        assert shell.run_cell(cell).success
    return shell


def test_npushow_modules_draws_each_linear_forward_and_backward_and_the_table_under_it(profiled):
    report = profiled.run_line_magic("npushow", "lin --modules")
    (figure,) = report.figures
    assert figure.view == "modules" and figure.data.startswith(b"\x89PNG") and figure.path.name == "lin_modules.png"
    rows = figure.table.data
    for layer in ("Linear_0", "Linear_1"):
        assert set(rows.loc[rows["name"] == layer, "pass"]) == {"forward", "backward"}
    text = str(report)
    assert "Linear_0" in text and "backward" in text and "host (ms)" in text and "device (ms)" not in text
    html = report._repr_mimebundle_()["text/html"]
    assert html.index("<img alt='modules'") < html.index("Linear_1")  # the table under the figure
    # the icicle: each layer's forward and backward is a block as wide as its host time, in its pass's colour
    table = place_table("modules", profiled.user_ns["npumagic"].load(figure.path.parent), None)
    drawn, spans, _ = blocks(table)
    assert [p for p, _, _ in spans] == ["forward", "backward", ""]
    med = table.median
    for part in ("forward", "backward"):
        mine = med[med["pass"] == part]
        # medians of parts need not add up to the median of the whole: the layers are scaled into it
        scale = min(1.0, mine.loc[mine["depth"] == 0, "host_ms"].sum() / mine.loc[mine["depth"] == 1, "host_ms"].sum())
        for layer in ("Linear_0", "Linear_1"):
            (block,) = [b for b in drawn if b.name == layer and b.color in COLORS[part]]
            want = mine.loc[mine["name"] == layer, "host_ms"].iloc[0] * scale
            assert block.depth == 1 and block.width == pytest.approx(want)
            start, end = next((a, z) for p, a, z in spans if p == part)
            assert start <= block.left and block.left + block.width <= end + 1e-9  # under its own pass


def test_a_run_without_modules_or_regions_says_what_to_record(profiled):
    (figure,) = profiled.run_line_magic("npushow", "plain --modules").figures
    assert figure.table is None and "%%npuprofile --modules" in figure.note
    # torch's own optimizer annotations are all the regions it has: said, and what to record
    report = profiled.run_line_magic("npushow", "plain --regions")
    (figure,) = report.figures
    assert figure.note.startswith("only torch's own annotations recorded; wrap the parts of the step in "
                                  "torch.profiler.record_function")
    assert "Optimizer.step#SGD.step (torch's)" in str(report)


def test_the_figure_says_it_needs_the_profiler_output_once_it_is_gone(profiled, tmp_path):
    import shutil

    from IPython.core.error import UsageError

    shutil.rmtree(tmp_path / "runs" / "lin")
    with pytest.raises(UsageError, match="lin"):
        profiled.run_line_magic("npushow", "lin --modules")


def _nested(out, depth: int) -> None:
    """A real profile of ``depth`` nested record_function regions with long names, and 40 narrow
    siblings under one region."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

    def nested(x, d):
        if d == depth:
            time.sleep(0.1)  # the deepest region holds the step's time: the 40 narrow ones are narrow
            return torch.relu(x)
        with record_function(f"level_{d}_" + "part_" * 40 * (d % 2) + f"end{d}"):
            return nested(x, d + 1) + 1

    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=2),
                 on_trace_ready=tensorboard_trace_handler(str(out))) as prof:
        for _ in range(3):
            with record_function("wide"):
                for i in range(40):
                    with record_function(f"narrow_{i}"):
                        torch.ones(3)
            nested(torch.ones(4), 0)
            prof.step()


def _labels_inside_their_blocks(fig) -> int:
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    ax = fig.axes[0]
    bars = [p.get_window_extent(renderer) for p in ax.patches]
    for t in ax.texts:
        box = t.get_window_extent(renderer)
        x, y = (box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2
        bar = next(b for b in bars if b.x0 <= x <= b.x1 and b.y0 <= y <= b.y1)
        assert bar.x0 - 1 <= box.x0 and box.x1 <= bar.x1 + 1, t.get_text()
    return len(ax.texts)


@pytest.mark.parametrize("depth", [35, 45])
def test_deep_trees_stay_readable(tmp_path, depth):
    import npumagic

    _nested(tmp_path, depth)
    table = regions(npumagic.load(tmp_path).events, npumagic.load(tmp_path).steps, warn=False)
    drawn, _, rows = blocks(table)
    assert rows == min(depth, MAX_ROWS)
    fig = icicle_figure(table, "deep")
    assert fig.get_figheight() <= ROWS_HEIGHT_IN + 1.3 + 1e-9  # the height caps
    assert _labels_inside_their_blocks(fig) >= 10
    # the 40 narrow siblings are one grey block; a label cut in the middle keeps both ends
    (merged,) = [b for b in drawn if b.color == MERGED and b.depth == 1]
    assert int(merged.name.split()[0]) >= 30 and merged.name.endswith(" smaller")
    texts = [t.get_text() for t in fig.axes[0].texts]
    cut = [t for t in texts if "…" in t]
    assert cut and all(re.fullmatch(r"level_\d+_[part_]*…[part_]*end\d+( \(\+\d+ levels below\))?", t) for t in cut), cut
    if depth > MAX_ROWS:  # what lies deeper is summed into the last row, and said
        (last,) = [b for b in drawn if b.depth == MAX_ROWS - 1]
        assert last.name.endswith(f"(+{depth - MAX_ROWS} levels below)")


def test_a_kineto_trace_is_drawn_by_device_time_charged_through_correlation_ids():
    trace = shared_trace(NCCL)
    table = regions(trace.events, trace.steps, warn=False)
    drawn, spans, _ = blocks(table)
    med = table.median
    for b in drawn:
        if b.depth == 0 and b.color != MERGED:
            assert b.width == pytest.approx(med.loc[med["name"] == b.name, "device_ms"].iloc[0])
    # torch's own annotations (a collective, the DDP forward) are told apart from the user's
    torchs = {b.name for b in drawn if b.color in COLORS["torch"]}
    assert {"nccl:all_reduce", "DistributedDataParallel.forward"} <= torchs and "## forward ##" not in torchs
    fig = icicle_figure(table, "nccl")
    assert "device time" in fig.axes[0].get_title(loc="left")


def test_a_kineto_trace_with_module_spans_draws_the_module_tree():
    trace = shared_trace(BERT)
    table = modules(trace.events, trace.steps, warn=False)
    drawn, _, rows = blocks(table)
    assert rows >= 6 and drawn[0].name == "BertLMHeadModel_0"
    children = [b for b in drawn if b.depth == 1]
    assert sum(b.width for b in children) <= drawn[0].width + 1e-9  # children lie under their parent


def test_cli_show_writes_the_icicle_and_its_table(tmp_path):
    out = tmp_path / "r.png"
    done = subprocess.run([sys.executable, "-m", "npumagic.cli", "show", str(need(NCCL)), "--regions", "-o", str(out),
                           "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["view"] == "regions" and doc["table"] == "regions" and out.read_bytes().startswith(b"\x89PNG")
    names = [r["name"] for r in doc["data"]]
    assert "## forward ##" in names and np.isfinite([r["device_ms"] for r in doc["data"]]).all()


def test_without_the_trace_the_view_says_it_needs_it():
    from npumagic.render.views import render_views

    from ..conftest import shared_summary

    with pytest.raises(ValueError, match="the regions view needs the run's trace files"):
        render_views(["regions"], None, shared_summary(need(NCCL)), None, "x")
