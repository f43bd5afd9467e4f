"""The per-rank table of a multi-rank job and each rank's data/pipeline/tensor-parallel index."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from . import thresholds as T

RANK_COLUMNS = ["rank", "steps", "step_median_us", "computing_us", "communication_us", "comm_not_overlapped_us",
                "free_us", "dataloader_us", "device_util", "slowest", "dp", "pp", "tp", "stage"]


PARALLEL_KINDS = ("dp", "pp", "tp")


def parallel_indices(groups: dict[str, Any], rank: int) -> dict[str, int]:
    """dp/pp/tp index of ``rank`` from torch_npu's ``parallel_group_info`` (profiler_metadata.json
    or the db's META_DATA): ``{comm_name: {group_name, group_rank, global_ranks}}``. A group
    whose name starts with dp, pp or tp (Megatron/MindSpeed's names: "dp", "dp_cp", "pp", "tp",
    ...) gives the rank's index in it; stage is the pipeline index."""
    found: dict[str, int] = {}
    for info in (groups or {}).values():
        if not isinstance(info, dict):
            continue
        name = str(info.get("group_name", "")).lower()
        kind = next((k for k in PARALLEL_KINDS if name == k or name.startswith(k + "_") or name.startswith(k + "-")),
                    None)
        if kind is None or (kind in found and name != kind):
            continue
        members = [int(r) for r in info.get("global_ranks", []) if str(r).lstrip("-").isdigit()]
        index = info.get("group_rank")
        if index is None and rank in members:
            index = members.index(rank)
        if index is not None:
            found[kind] = int(index)
    if "pp" in found:
        found["stage"] = found["pp"]
    return found


AVERAGED = ["computing_us", "communication_us", "comm_not_overlapped_us", "free_us", "dataloader_us"]


def rank_table_of_steps(steps: pd.DataFrame, ranks: list[int], parallel: dict[int, dict[str, int]]) -> pd.DataFrame:
    """One row per rank of ``ranks`` (:data:`RANK_COLUMNS`) from the step tables of all of them
    at once (:data:`~.breakdown.STEP_COLUMNS` and ``rank``): steps, the median step wall time,
    the mean per step of each part, the device busy share of the wall time, the slowest rank;
    dp/pp/tp/stage from ``parallel`` (rank -> :func:`parallel_indices`), -1 where not known."""
    numbers = steps[["wall_us", "busy_us", *AVERAGED]].astype(float).assign(rank=steps["rank"].to_numpy())
    by_rank = numbers.groupby("rank")
    table = by_rank[AVERAGED].mean().reindex(ranks)
    table.insert(0, "steps", by_rank.size().reindex(ranks, fill_value=0).astype(np.int64))
    table.insert(1, "step_median_us", by_rank["wall_us"].median().reindex(ranks))
    wall, busy = by_rank["wall_us"].sum().reindex(ranks), by_rank["busy_us"].sum().reindex(ranks)
    table["device_util"] = np.where(wall > 0, busy / wall.where(wall > 0), np.nan)
    table = table.rename_axis("rank").reset_index()
    table["rank"] = table["rank"].astype(np.int64)
    # the slowest rank is named only when the ranks' steps differ by more than msprof-analyze's 5%
    # of the mean step; ranks that agree have no slowest one
    median = table["step_median_us"]
    spread = (median.max() - median.min()) / median.mean() if len(table) > 1 and median.mean() > 0 else 0.0
    table["slowest"] = (median == median.max()) & (spread > T.SLOW_RANK_RATIO)
    for kind in (*PARALLEL_KINDS, "stage"):
        table[kind] = np.array([int(parallel.get(r, {}).get(kind, -1)) for r in ranks], dtype=np.int64)
    return table[RANK_COLUMNS]
