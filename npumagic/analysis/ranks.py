"""The per-rank table of a multi-rank job and each rank's data/pipeline/tensor-parallel index."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from . import thresholds as T

if TYPE_CHECKING:
    from .metrics import Summary


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


def rank_table(per_rank: dict[int, Summary]) -> pd.DataFrame:
    rows = []
    averaged = ["computing_us", "communication_us", "comm_not_overlapped_us", "free_us", "dataloader_us"]
    for rank, s in per_rank.items():
        means = {c: float(s.steps[c].mean()) if len(s.steps) else np.nan for c in averaged}
        rows.append({"rank": rank, "steps": len(s.steps), "step_median_us": s.step_stats["median_us"], **means,
                     "device_util": s.device_util})
    table = pd.DataFrame(rows)
    # the slowest rank is named only when the ranks' steps differ by more than msprof-analyze's 5%
    # of the mean step; ranks that agree have no slowest one
    median = table["step_median_us"]
    spread = (median.max() - median.min()) / median.mean() if len(table) > 1 and median.mean() > 0 else 0.0
    table["slowest"] = (median == median.max()) & (spread > T.SLOW_RANK_RATIO)
    for kind in (*PARALLEL_KINDS, "stage"):
        table[kind] = [int(s.meta.get("parallel", {}).get(kind, -1)) for s in per_rank.values()]
    return table[RANK_COLUMNS]
