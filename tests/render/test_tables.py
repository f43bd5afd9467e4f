"""Formatted tables on real outputs: units in headers, run names as labels, % and integers,
names shortened with the full name on hover, a caption, and text that fits a terminal."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pandas as pd
import pytest

import npumagic
from npumagic.render.tables import (MAX_COLUMNS, NAME_CHARS, Column, Table, format_breakdown, format_kernel_diff,
                                    format_kernels, format_ranks, format_runs, format_steps)

from ..conftest import ASCEND, CUDA, shared_summary


class _Cells(HTMLParser):
    """Header texts, body rows (cell texts), title attributes and the caption of one table."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.headers, self.rows, self.titles, self.caption = [], [], [], ""
        self._part, self._cell = None, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag in ("thead", "tbody", "caption"):
            self._part = tag
        elif tag == "tr" and self._part == "tbody":
            self.rows.append([])
        elif tag in ("th", "td"):
            self._cell = ""
        elif tag == "span" and dict(attrs).get("title"):
            self.titles.append(dict(attrs)["title"])

    def handle_endtag(self, tag):
        if tag in ("th", "td") and self._cell is not None:
            (self.headers if self._part == "thead" else self.rows[-1]).append(self._cell)
            self._cell = None
        elif tag == "caption":
            self._part = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data
        elif self._part == "caption":
            self.caption += data


def _table(html: str) -> _Cells:
    return _Cells(html)


@pytest.fixture(scope="module")
def level1():
    return shared_summary(ASCEND / "level1")


@pytest.fixture(scope="module")
def cuda():
    return shared_summary(CUDA / "nccl" / "nccl_data.json.gz")


def test_the_step_table_shows_ms_and_percent_with_units_in_its_headers(level1):
    table = format_steps(level1.steps)
    cells = _table(table._repr_html_())
    # the Ascend sample copies memory every step (MEMCPY_ASYNC tasks), so the copy column is shown
    assert (level1.steps["memcpy_us"] > 0).all()
    assert cells.headers == ["step", "wall (ms)", "compute (ms)", "comm (ms)", "copy (ms)", "idle (ms)", "data (ms)",
                             "busy"]
    assert cells.caption == "per-step time"
    first = level1.steps.iloc[0]
    assert cells.rows[0][0] == str(int(first["step"]))  # an integer, no index column before it
    assert cells.rows[0][1] == f"{first['wall_us'] / 1000:,.2f}"
    assert cells.rows[0][-1] == f"{first['device_util']:.0%}"
    assert table.data is level1.steps and len(table.data.columns) > len(cells.headers)


def test_long_kernel_names_are_shortened_with_the_full_name_on_hover(cuda):
    table = format_kernels(cuda.kernels, top=10)
    html = table._repr_html_()
    cells = _table(html)
    longest = max(cuda.kernels["name"].head(10).astype(str), key=len)
    assert len(longest) > NAME_CHARS
    assert longest in cells.titles
    assert all(len(row[0]) <= NAME_CHARS for row in cells.rows)
    assert re.search(r"td\.col0\s*\{[^}]*text-align: left", html)  # names left-aligned
    assert re.search(r"td\.col2\s*\{[^}]*text-align: right", html)  # numbers right-aligned
    assert cells.headers[:2] == ["kernel", "type"] or cells.headers[0] == "kernel"
    assert "mean (µs)" in cells.headers and "total (ms)" in cells.headers
    assert "top 10 of" in cells.caption


@pytest.mark.parametrize("width", [80, 120])
def test_kernel_tables_fit_the_terminal(cuda, width):
    text = format_kernels(cuda.kernels, top=10).to_text(width)
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" in text


def test_a_table_never_shows_more_than_fits_a_notebook_cell():
    wide = pd.DataFrame([range(20)], columns=[f"c{i}" for i in range(20)])
    assert len(_table(Table(wide)._repr_html_()).headers) == MAX_COLUMNS


@pytest.mark.parametrize("where", ["msinsight_2024/db_level0", "level1"])
def test_the_step_tables_times_add_up_to_the_wall_where_copies_run_beside_kernels(where):
    # db_level0 copies 8.86 ms, all but 0.02 ms of it beside kernels: the copy column is the copies alone
    steps = shared_summary(ASCEND / where).steps
    cells = _table(format_steps(steps)._repr_html_())
    assert cells.headers[2:6] == ["compute (ms)", "comm (ms)", "copy (ms)", "idle (ms)"]
    for row, (_, step) in zip(cells.rows, steps.iterrows()):
        parts = [float(c.replace(",", "")) for c in row[2:6]]
        assert sum(parts) == pytest.approx(step["wall_us"] / 1000, abs=0.02)
        assert parts[2] <= step["memcpy_us"] / 1000 + 0.005


def test_the_comparison_is_labelled_with_the_run_names(level1):
    ranks = level1.per_rank
    cmp = npumagic.compare(ranks[0], ranks[1], "rank0", "rank1")
    cells = _table(format_breakdown(cmp)._repr_html_())
    assert cells.headers[:4] == ["per step (ms)", "rank0", "rank1", "change"]
    rows = {r[0]: r for r in cells.rows}
    util = rows["device busy"]
    assert util[1].endswith("%") and util[3].endswith("pts")
    computing = cmp.breakdown.iloc[0]
    assert rows["computing"][3] == f"{computing['change']:+.0%}"
    assert "communication, not overlapped" in rows


def test_a_metric_that_stays_at_zero_changes_by_zero_percent(level1):
    import dataclasses

    cmp = npumagic.compare(level1.per_rank[0], level1.per_rank[1], "a", "b")
    breakdown = cmp.breakdown.copy()
    breakdown.loc[3, ["a", "b", "delta", "change"]] = [0.0, 0.0, 0.0, float("nan")]  # what 0 -> 0 gives
    breakdown.loc[2, ["a", "change"]] = [0.0, float("nan")]  # and 0 -> something
    rows = _table(format_breakdown(dataclasses.replace(cmp, breakdown=breakdown))._repr_html_()).rows
    assert rows[3][3] == "0%" and rows[2][3] == "new"


def test_the_kernel_diff_shows_counts_as_integers_and_only_real_statuses(level1):
    cmp = npumagic.compare(level1.per_rank[0], level1.per_rank[1], "rank0", "rank1")
    cells = _table(format_kernel_diff(cmp)._repr_html_())
    assert "rank0 count" in cells.headers and "Δ total (ms)" in cells.headers
    count = cells.headers.index("rank0 count")
    assert all(re.fullmatch(r"[\d,]+", row[count]) for row in cells.rows)
    assert not any("changed" in cell for row in cells.rows for cell in row)


def test_the_runs_table_formats_the_history():
    runs = pd.DataFrame({"name": ["baseline", "fixed"], "created": pd.to_datetime([1.7e9, 1.7e9 + 60], unit="s"),
                         "status": ["ok", "ok"], "backend": ["cpu", "cpu"], "device": ["x86_64"] * 2,
                         "steps": [4, 4], "step_median_ms": [43.181921, 4.0], "device_util": [0.205732, 0.9],
                         "bottleneck": ["dataloader", "balanced"], "note": [None, "num_workers=4"]})
    table = format_runs(runs)
    cells = _table(table._repr_html_())
    assert cells.headers[:2] == ["run", "created"]
    assert cells.rows[0][5:7] == ["43.18", "21%"]
    assert cells.rows[0][-1] == "" and "None" not in str(cells.rows)
    assert table["name"].tolist() == ["baseline", "fixed"] and table.data is runs
    # the note stays in text too narrow for it whole (shortened, not left out as a kernel's type is)
    narrow, wide = table.to_text(80), table.to_text(200)
    assert narrow.splitlines()[1].endswith("note") and narrow.splitlines()[-1].endswith("num_wor…rs=4")
    assert wide.splitlines()[-1].endswith("num_workers=4")


def test_a_column_can_format_by_row():
    frame = pd.DataFrame({"what": ["a", "b"], "v": [0.5, 1500.0]})
    table = Table(frame, [Column("what", "what", "text"),
                          Column("v", "value", fmt=lambda v, row: f"{v:.0%}" if row["what"] == "a" else f"{v:,.0f}")])
    assert [r[1] for r in _table(table._repr_html_()).rows] == ["50%", "1,500"]


def test_the_rank_table_says_what_free_is_and_shows_a_slowest_column_only_when_a_rank_is():
    # level0: rank 0's step is 13% longer than rank 1's; level1: the two ranks are within 2%
    uneven = format_ranks(shared_summary(ASCEND / "level0").ranks).to_text(300).splitlines()
    assert uneven[0].startswith("ranks — free: neither computing nor communicating, after the step's first device task")
    assert uneven[1].split()[-1] == "slowest" and uneven[2].endswith("slowest") and not uneven[3].endswith("slowest")
    even = shared_summary(ASCEND / "level1").ranks
    # (a caption wider than the terminal wraps: these lines are read at 300 columns)
    lines = format_ranks(even).to_text(300).splitlines()
    assert lines[0].endswith("none is the slowest") and "slowest" not in lines[1]
    # one rank with steps: nothing to compare, nothing said of it
    alone = even.assign(steps=[1, 0], step_median_us=[even["step_median_us"].iloc[0], float("nan")])
    assert "slowest" not in format_ranks(alone).to_text()


def test_the_advice_table_says_whose_figures_a_shared_finding_shows():
    from npumagic.analysis.advice import advise_run
    from npumagic.render.tables import format_advice

    # GIVEN a finding on both ranks of level1, shown with the figures of the rank where it weighs most
    advice = advise_run(shared_summary(ASCEND / "level1"), every_rank=True)
    ranks = format_advice(advice).data["ranks"]
    # THEN the ranks cell says so in words, not "(figures: 0)"
    assert ranks.str.match(r"0, 1 \(figures of rank [01]\)").any() and not ranks.str.contains("figures:").any()
