"""The memory figure of ``%npushow --memory``, checked against the vendor files read here with
pandas: on the shared torch_npu samples its curves are memory_record.csv's components and
npu_module_mem.csv's modules, its marked peak memory_record's PTA maximum, the table under it
operator_memory.csv's sums; on a Kineto trace the curves are allocated and reserved per device and
the peak the largest "Total Allocated" of the ``[memory]`` events. A real shell draws it from a
loaded run, and from the history alone once the run's output is gone."""

from __future__ import annotations

import gzip
import json
import shutil

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from npumagic.analysis.memory_view import memory_view
from npumagic.analysis.sources.memory import read_memory
from npumagic.render.charts import memory_origin, plot_memory_records
from npumagic.render.tables import format_allocators
from npumagic.render.timeline import _window

from ..conftest import ASCEND, CUDA, need, shared_summary, shared_trace

MIB = 2**20
LEVELS = ["level1", "level0", "level2"]


def _csv(rank, name: str) -> pd.DataFrame:
    frame = pd.read_csv(rank / "ASCEND_PROFILER_OUTPUT" / name, dtype={"Timestamp(us)": str})
    frame["ts_ns"] = frame["Timestamp(us)"].str.strip().map(_ns)  # the timestamps end in a tab
    return frame.sort_values("ts_ns", kind="stable")


def _ns(us: str) -> int:
    """Microseconds with up to three decimals, as written, to the nanosecond."""
    whole, _, frac = us.partition(".")
    return int(whole) * 1000 + int((frac + "000")[:3])


def _expected_curves(rank) -> dict[str, pd.DataFrame]:
    """label -> (ts_ns, MiB) of each curve the figure should draw, from the CSVs alone."""
    record, modules = _csv(rank, "memory_record.csv"), _csv(rank, "npu_module_mem.csv")
    both = set(record["Component"]) & set(modules["Component"])
    out = {}

    def add(label: str, rows: pd.DataFrame, column: str) -> None:
        rows = rows.dropna(subset=[column])
        if (rows[column] != 0).any():  # a component always at zero is left out
            out[label] = pd.DataFrame({"ts_ns": rows["ts_ns"].to_numpy(), "mib": rows[column].to_numpy(float)})

    for component, rows in record.groupby("Component", sort=False):
        label = f"{component} (memory_record)" if component in both else component
        if component == "PTA":
            add("PTA allocated", rows, "Total Allocated(MB)")
            add("PTA reserved", rows, "Total Reserved(MB)")
        else:
            reserved = rows["Total Reserved(MB)"].fillna(0).any()
            add(label, rows, "Total Reserved(MB)" if reserved else "Total Allocated(MB)")
    for module, rows in modules.groupby("Component", sort=False):
        add(f"{module} (npu_module_mem)" if module in both else module, rows, "Total Reserved(MB)")
    return out


@pytest.mark.parametrize("level", LEVELS)
def test_the_curves_are_the_components_and_modules_of_the_csvs(level):
    rank = need(ASCEND / level / "rank0_ascend_pt")
    records = read_memory(rank)
    view = memory_view(records)
    summary = shared_summary(ASCEND / level / "rank0_ascend_pt")
    origin = memory_origin(summary, records)
    # x counts from the first step as the timeline does, on its clock
    assert origin == _window(shared_trace(ASCEND / level / "rank0_ascend_pt").for_rank(0), None, None)[0]
    out = plot_memory_records(Figure().add_subplot(), records, view, origin)
    expected = _expected_curves(rank)
    assert set(out["lines"]) == set(expected)
    assert {"PTA allocated", "HCCL", "RUNTIME", "APP (memory_record)", "APP (npu_module_mem)"} <= set(expected)
    for label, want in expected.items():
        line = out["lines"][label]
        np.testing.assert_allclose(line.get_ydata(), want["mib"], rtol=0, atol=1e-9, err_msg=label)
        np.testing.assert_allclose(line.get_xdata(), (want["ts_ns"] - origin) / 1e6, rtol=0, atol=1e-6, err_msg=label)
    # the peak: memory_record's PTA maximum, where it is reached, with the operator running then
    pta = _csv(rank, "memory_record.csv").query("Component == 'PTA'")
    top = pta.loc[pta["Total Allocated(MB)"].idxmax()]
    x, y = out["peak"].xy
    assert y == top["Total Allocated(MB)"] and x == pytest.approx((top["ts_ns"] - origin) / 1e6, abs=1e-6)
    assert out["peak"].get_text().endswith(f"at {view.peak_operator}") and view.peak_operator == "aten::_foreach_add"
    assert out["capacity"] is None  # torch_npu's CSVs do not say the device's capacity


@pytest.mark.parametrize("level", LEVELS)
def test_the_table_is_operator_memorys_sums_in_mib(level):
    rank = need(ASCEND / level / "rank0_ascend_pt")
    table = format_allocators(memory_view(read_memory(rank)).operators)
    rows = pd.read_csv(rank / "ASCEND_PROFILER_OUTPUT" / "operator_memory.csv")
    sums = rows.groupby("Name")["Size(KB)"].sum() * 1024
    data = table.data.set_index("name")
    assert set(data.index) == set(sums.index)
    np.testing.assert_allclose(data["bytes"].reindex(sums.index), sums, rtol=1e-12)
    counts = rows.groupby("Name").size()
    assert (data["allocations"].reindex(counts.index) == counts).all()
    text = table.to_text(200).splitlines()
    top10 = sums.sort_values(ascending=False, kind="stable").head(10)
    assert len(text) == 1 + 1 + 10 + 1 and text[-1] == f"(top 10 of {len(sums)})"
    for line, (name, size) in zip(text[2:12], top10.items()):
        assert line.startswith(name) and f"{size / MIB:,.2f}" in line.split()


def test_a_kineto_trace_draws_allocated_and_reserved_per_device_with_its_peak():
    folder = need(CUDA / "tracelens" / "h100_owlv2")
    path = next(folder.glob("*.json.gz"))
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh)
    events = pd.DataFrame([e["args"] for e in doc["traceEvents"] if e.get("name") == "[memory]"])
    cuda = events[events["Device Type"] == 1]  # 0: the CPU, 1: CUDA
    records = read_memory(folder)
    view = memory_view(records)
    ax = Figure().add_subplot()
    out = plot_memory_records(ax, records, view, None)
    assert set(out["lines"]) == {"cuda:0 allocated", "cuda:0 reserved", "cpu allocated"}
    x, y = out["peak"].xy
    assert y * MIB == cuda["Total Allocated"].max() == out["lines"]["cuda:0 allocated"].get_ydata().max() * MIB
    assert out["lines"]["cuda:0 reserved"].get_ydata().max() * MIB == cuda["Total Reserved"].max()
    # 80 GiB of H100 above a 3.4 GiB curve: said, not drawn, the y axis fitted to the curves
    capacity = doc["deviceProperties"][0]["totalGlobalMem"]
    share = cuda["Total Allocated"].max() / capacity
    assert out["capacity"].get_text() == f"\u2191 capacity {capacity / 2**30:,.1f} GiB, off the scale, peak uses {share:.0%}"
    assert round(share * 100) == 3 and not ax.get_lines()[-1].get_label().startswith("capacity")
    low, high = ax.get_ylim()
    assert cuda["Total Reserved"].max() / MIB < high < 1.1 * cuda["Total Reserved"].max() / MIB


def test_a_capacity_close_above_the_curves_is_drawn_as_a_line():
    import dataclasses

    records = read_memory(need(CUDA / "tracelens" / "h100_owlv2"))
    view = memory_view(records)
    reserved = records.totals["reserved_bytes"].max()
    ax = Figure().add_subplot()
    near = dataclasses.replace(view, capacity_bytes=1.4 * reserved)
    out = plot_memory_records(ax, records, near, None)
    assert out["capacity"].get_ydata()[0] * MIB == pytest.approx(1.4 * reserved)
    assert out["capacity"].get_label().endswith(f"peak uses {view.peak_allocated_bytes / (1.4 * reserved):.0%}")
    assert ax.get_ylim()[1] >= 1.4 * reserved / MIB  # the axis reaches up to it


def test_npushow_memory_draws_the_loaded_run_and_the_history_once_its_output_is_gone(shell, tmp_path):
    job = tmp_path / "job"
    shutil.copytree(need(ASCEND / "level1" / "rank0_ascend_pt"), job / "rank0_ascend_pt")
    assert shell.run_cell(f"%npuload {job} --name x --no-plot").success
    report = shell.run_line_magic("npushow", "x --memory")
    (figure,) = report.figures
    assert figure.view == "memory" and figure.note == "" and figure.data.startswith(b"\x89PNG")
    assert figure.table.data.iloc[0]["name"] == "aten::mm" and figure.table.rows == 10
    bundle = report._repr_mimebundle_()
    assert "<img alt='memory'" in bundle["text/html"] and "top allocators by bytes on NPU:0" in bundle["text/html"]
    assert bundle["text/html"].index("<img") < bundle["text/html"].index("aten::mm")  # the table under the figure
    assert "aten::mm" in bundle["text/plain"] and "(top 10 of 58)" in bundle["text/plain"]
    shutil.rmtree(job)
    report = shell.run_line_magic("npushow", "x --memory")
    (figure,) = report.figures
    assert figure.table is None and "the components and the top allocators table need the run's profiler output" \
        in figure.note and str(job) in figure.note
    assert figure.note in report._repr_mimebundle_()["text/plain"]


def test_an_output_rewritten_since_says_which_devices_peak_each_holds(shell, tmp_path):
    # the run's output folder now holds another rank's files: its peak is not the run's
    job = tmp_path / "job"
    shutil.copytree(need(ASCEND / "level1" / "rank0_ascend_pt"), job / "rank0_ascend_pt")
    assert shell.run_cell(f"%npuload {job} --name x --no-plot").success
    shutil.rmtree(job / "rank0_ascend_pt")
    shutil.copytree(need(ASCEND / "level1" / "rank1_ascend_pt"), job / "rank1_ascend_pt")
    (figure,) = shell.run_line_magic("npushow", "x --memory").figures
    assert figure.table is None
    assert figure.note.startswith("PyTorch's pool from the history only: the run's peak is NPU:0 "), figure.note
    assert f"the profiler output at {job}" in figure.note and figure.note.endswith(" MiB on NPU:1"), figure.note


def test_the_rank_drawn_is_the_rank_asked_for(tmp_path):
    from npumagic.session import Session

    session = Session(tmp_path / "runs")
    session.recorder.load(need(ASCEND / "level1"), "job")
    for rank in (0, 1):
        (figure,) = session.figures("job", ["memory"], rank=rank)
        assert figure.note == "" and figure.table.caption == f"top allocators by bytes on NPU:{rank} (rank{rank}_ascend_pt)"


def _svg_texts(svg: str) -> list[str]:
    """The texts of a matplotlib SVG (each glyph run is preceded by a comment holding its text)."""
    import re

    return [t.strip() for t in re.findall(r"<!-- (.*?) -->", svg)]


def test_npuprofiles_own_memory_figure_is_the_per_component_one(trainer, plots):
    magics = trainer.magics_manager.registry["NpuMagics"]  # set on this instance: %config would outlive the test
    magics.views, magics.figure_format = ["memory"], "svg"
    report = trainer.run_cell("%%npuprofile --repeat-cell --wait 0 --steps 3 --memory --name mem\ntrain_step()").result
    figure = report.figure("memory")
    # the run's operators under the figure, as %npushow --memory gives them
    view = memory_view(read_memory(report.run.run_dir))
    assert figure.note == "" and figure.table is not None
    assert figure.table.data["name"].tolist() == view.operators["name"].tolist() and figure.table.rows == 10
    texts = _svg_texts(figure.data.decode())
    # the peak is marked with the operator running at it (the history's curve names none)
    assert f"peak {view.peak_allocated_bytes / MIB:,.1f} MiB at {view.peak_operator}" in texts
    shown = trainer.run_line_magic("npushow", "mem --memory --svg").figures[0]
    assert _svg_texts(shown.data.decode()) == texts and shown.table.data.equals(figure.table.data)


def test_npumagic_show_memory_draws_the_components_and_lists_the_allocators(tmp_path, capsys):
    from npumagic.cli import main

    rank = need(ASCEND / "level1" / "rank0_ascend_pt")
    out = tmp_path / "memory.svg"
    assert main(["show", str(rank), "--memory", "-o", str(out)]) == 0
    texts = _svg_texts(out.read_text())
    assert set(_expected_curves(rank)) <= set(texts)  # every component's curve in the legend
    pta = _csv(rank, "memory_record.csv").query("Component == 'PTA'")["Total Allocated(MB)"]
    assert f"peak {pta.max():,.1f} MiB at aten::_foreach_add" in texts
    printed = capsys.readouterr().out
    assert printed.startswith(f"wrote {out}\n") and "top allocators by bytes on NPU:0" in printed
    top = pd.read_csv(rank / "ASCEND_PROFILER_OUTPUT" / "operator_memory.csv").groupby("Name")["Size(KB)"].sum()
    assert top.idxmax() in printed.splitlines()[3]
    # the rank asked for is the rank drawn
    assert main(["show", str(ASCEND / "level1"), "--memory", "--rank", "1", "-o", str(out)]) == 0
    assert "top allocators by bytes on NPU:1 (rank1_ascend_pt)" in capsys.readouterr().out
