"""The outline of a many-rank torch_npu job, read as msprof-analyze's cluster analysis reads it.

Per rank only the small files: its id and settings (profiler_info_N.json, profiler_metadata.json),
torch_npu's own step breakdown (step_trace_time.csv) and its collectives' links
(communication.json, communication_matrix.json); never trace_view.json or kernel_details.csv.
Every rank's rows are gathered first and each table built once for the whole job, so a rank
costs a few small file reads. The rank table it gives is torch_npu's breakdown, not npumagic's
own step model (which needs the rank's whole trace).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ... import schema
from ...breakdown import vendor_step_table
from .._notes import reading
from .communication import communication_rows, matrix_rows
from .csv_tables import STEP_TRACE_REQUIRED, step_trace_rows
from .db import find_db
from .discover import OUTPUT, export_type, profiler_info, rank_id, rank_numbers, read_each_rank
from .files import json_object, read_json
from .reader import DEVICE_NAME

STEP_TRACE = "step_trace_time.csv"


@dataclass
class Outline:
    """What the outline of a job holds; ``steps`` has torch_npu's breakdown per (rank, step) as
    :data:`~npumagic.analysis.breakdown.STEP_COLUMNS` plus ``rank``."""

    ranks: list[int]
    dirs: dict[int, Path]
    steps: pd.DataFrame
    links: pd.DataFrame
    matrix: pd.DataFrame
    metas: dict[int, dict[str, Any]]  # per rank in directory order, as the full reader's rank meta
    unreadable: dict[str, str] = field(default_factory=dict)


def unfit(paths: list[Path]) -> list[Path]:
    """The rank directories of ``paths`` the outline cannot read: without step_trace_time.csv (the
    outline reads nothing else for the breakdown) or a db export; they need the full reader."""
    found = []
    for rank_dir in paths:
        out = rank_dir / OUTPUT
        if not (out / STEP_TRACE).is_file() or (
                find_db(out) is not None and export_type(profiler_info(rank_dir)[1]) == "db"):
            found.append(rank_dir)
    return found


def read(paths: list[Path], progress=None) -> Outline:
    """The outline of the rank directories ``paths``; a rank that cannot be read is left out,
    warned, with its error in ``unreadable`` (TraceError when none can be read). Ranks whose ids
    repeat are numbered in directory order, as the full reader numbers them."""
    read_ranks, unreadable = read_each_rank(paths, _read_rank, progress)
    ids = rank_numbers(paths, [r["rank"] for r in read_ranks])
    rows = lambda key: [dict(row, rank=i) for i, r in zip(ids, read_ranks) for row in r[key]]  # noqa: E731
    metas = [{"device_name": DEVICE_NAME, "settings": r["settings"], "environment": r["environment"],
              "sources": {i: {"breakdown": f"{STEP_TRACE} (vendor)", "links": "communication.json (each link's own "
                              "transit time)"}},
              "parallel_groups": {i: r["groups"]} if r["groups"] else {}} for i, r in zip(ids, read_ranks)]
    metas = dict(zip(ids, metas))
    return Outline(ranks=sorted(ids), dirs={i: r["dir"] for i, r in zip(ids, read_ranks)},
                   steps=_step_table(rows("steps")), links=_frame(rows("links"), schema.LINK_COLUMNS),
                   matrix=_frame(rows("matrix"), schema.MATRIX_COLUMNS), metas=metas, unreadable=unreadable)


def _read_rank(rank_dir: Path) -> dict[str, Any]:
    out = rank_dir / OUTPUT
    info_path, info = profiler_info(rank_dir)
    metadata_path = rank_dir / "profiler_metadata.json"
    metadata = read_json(metadata_path)
    with reading(out / STEP_TRACE):
        steps = step_trace_rows(out / STEP_TRACE)[1]
    with reading(out / "communication.json"):
        links = communication_rows(out / "communication.json", 0, calls=False)[1]
        matrix = matrix_rows(out / "communication_matrix.json", 0)
    return {"rank": rank_id(info_path, info.get("rank_id"), rank_dir), "dir": rank_dir, "steps": steps,
            "links": links, "matrix": matrix,
            "settings": json_object(info.get("config", {}), info_path, "config"),
            "environment": json_object(metadata.get("ENV_VARIABLES", {}), metadata_path, "ENV_VARIABLES"),
            "groups": json_object(metadata.get("parallel_group_info", {}), metadata_path, "parallel_group_info")}


def _step_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    columns = dict.fromkeys(["rank", *STEP_TRACE_REQUIRED, *(k for r in rows for k in r)])
    raw = pd.DataFrame(rows, columns=list(columns))
    table = vendor_step_table(raw.drop(columns="rank"), pd.DataFrame(columns=["start_ns"]))
    return table.assign(rank=raw["rank"].to_numpy(dtype="int64"))


def _frame(rows: list[dict[str, Any]], columns: dict[str, str]) -> pd.DataFrame:
    return schema.coerce(pd.DataFrame(rows), columns) if rows else schema.empty(columns)
