"""The seed's step two: the operators a module's forward ran, with their input shapes, so the
top modules by time lead to the operators and shapes to look at.

A module's operators are the outermost host operators inside it: those whose enclosing operator,
if any, lies in another module (torch_npu writes ``DistributedDataParallel.forward`` as an
operator around the whole model; the layers' operators are still their own). Device work is
charged to the innermost such operator around its launch (through the launch's correlation id,
as ``compare --by-operator`` charges it)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .crossbackend import launch_points
from .regions import Tree, innermost, nest
from .schema import DEVICE_WORK, kind_in

OPERATOR_COLUMNS = ["path", "operator", "shapes", "calls", "host_ms", "device_ms"]


def module_operators(tree: Tree, e: pd.DataFrame, steps: int, top: int = 3) -> pd.DataFrame:
    """Per module path of ``tree`` (spans of one rank's events ``e``), its ``top`` operators by
    device time (host time where there is no device work), per step over ``steps`` steps
    (:data:`OPERATOR_COLUMNS`; shapes "" unless recorded with record_shapes)."""
    host = e["device"].to_numpy() < 0
    calls = e[host & (e["kind"] == "host_op").to_numpy()]
    if not len(tree.spans) or not len(calls):
        return pd.DataFrame(columns=OPERATOR_COLUMNS)
    # nested by row number (names and shapes may hold line breaks, which nest() refuses)
    ops = nest(calls.assign(name=np.arange(len(calls)).astype(str))).spans
    module = innermost(tree, ops["thread"].to_numpy(), ops["ts"].to_numpy())
    parent = ops["parent"].to_numpy()
    outer_module = np.where(parent >= 0, module[np.maximum(parent, 0)], -2)
    keep = (module >= 0) & (outer_module != module)
    kept = nest(pd.DataFrame({"name": ops["name"], "lane": ops["lane"], "ts_ns": ops["ts"],
                              "dur_ns": ops["end"] - ops["ts"], "step": ops["step"]})[keep])
    mine = kept.spans
    device = np.zeros(len(mine))
    work = e[~host & kind_in(e["kind"], DEVICE_WORK)]
    if len(work) and len(mine):
        launch = launch_points(e).drop_duplicates("correlation")
        where = pd.Series(innermost(kept, launch["thread"].to_numpy(), launch["ts"].to_numpy()),
                          index=launch["correlation"].to_numpy())
        charged = work["correlation"].map(where).fillna(-1).to_numpy(np.int64)
        np.add.at(device, charged[charged >= 0], work["dur_ns"].to_numpy(float)[charged >= 0])
    row = mine["name"].astype(np.int64).to_numpy()
    span = innermost(tree, mine["thread"].to_numpy(), mine["ts"].to_numpy())
    table = pd.DataFrame({"path": tree.spans["path"].to_numpy(object)[span],
                          "operator": calls["name"].astype(str).to_numpy()[row],
                          "shapes": calls["shapes"].astype(str).str.replace(r"\s+", "", regex=True).to_numpy()[row],
                          "host_ns": (mine["end"] - mine["ts"]).to_numpy(float),
                          "device_ns": device})
    table = table.groupby(["path", "operator", "shapes"], sort=False).agg(
        calls=("host_ns", "size"), host_ns=("host_ns", "sum"), device_ns=("device_ns", "sum")).reset_index()
    steps = max(steps, 1)
    table = table.assign(calls=table["calls"] / steps, host_ms=table["host_ns"] / 1e6 / steps,
                         device_ms=table["device_ns"] / 1e6 / steps)
    table = table.sort_values("device_ms" if len(work) else "host_ms", ascending=False, kind="stable")
    return table.groupby("path", sort=False).head(top).reset_index(drop=True)[OPERATOR_COLUMNS]
