"""The shapes a kernel table names for each kernel, and the CSV cells torch_npu pads."""

from __future__ import annotations

import pandas as pd

from npumagic.analysis import schema
from npumagic.analysis.operators import kernel_table
from npumagic.analysis.sources.ascend.files import read_csv


def _kernels(rows: list[tuple[str, str]]) -> pd.DataFrame:
    names, shapes = zip(*rows)
    n = len(rows)
    frame = pd.DataFrame({"kind": ["kernel"] * n, "name": list(names), "type": "MatMul", "core": "AI_CORE",
                          "shapes": list(shapes), "ts_ns": range(0, 10 * n, 10), "dur_ns": 5, "device": 0})
    return schema.coerce(frame, schema.EVENT_COLUMNS)


def test_each_kernel_shows_its_commonest_shapes_and_the_first_in_order_on_a_tie():
    ev = _kernels([("k", "8,8"), ("k", "4,4"), ("k", "4,4"), ("k", "8,8"), ("k", "2,2"),
                   ("j", "9"), ("j", "1"), ("j", "1")])
    table = kernel_table(ev, device_mode=True, total_wall_us=1.0).set_index("name")
    assert table.loc["k", "shapes"] == "4,4"  # 2 each for 4,4 and 8,8: the first in order, as Series.mode
    assert table.loc["j", "shapes"] == "1"
    assert table.loc["k", "count"] == 5 and table.loc["j", "count"] == 3


def test_csv_cells_lose_the_whitespace_torch_npu_pads_them_with(tmp_path):
    path = tmp_path / "kernel_details.csv"
    path.write_text("Name,Type,Start Time(us)\nMatMul\t, MatMul ,1736408883704643.212\t\nAdd,Add\n")
    frame = read_csv(path)
    assert frame["Name"].tolist() == ["MatMul", "Add"]
    assert frame["Type"].tolist() == ["MatMul", "Add"]
    assert frame["Start Time(us)"].iat[0] == "1736408883704643.212"
    assert frame["Start Time(us)"].iat[1] == ""  # a short row is missing that cell, not broken
