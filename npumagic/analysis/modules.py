"""Where in the model the step goes: each ``nn.Module`` recorded with ``with_modules`` (Kineto's
``python_function`` spans named ``nn.Module: Name_N``, written by torch 2.13 only where
``with_stack`` is on too) as a tree per step, forward and backward.

Forward: the module's span, as :mod:`.regions` reads an annotation (host time inclusive and
exclusive, outermost operators, device time of the work launched inside). Backward: autograd runs
a module's backward after the module returned, so no span holds it; each backward node
(``autograd::engine::evaluate_function: AddmmBackward0``) carries the sequence number of the
forward operator it was made from, and is charged to the module that operator ran in (its host
time, and the device work launched inside it); Kineto's trace files and torch_npu's
``trace_view.json`` carry the numbers (:func:`sequence_files`). Where there are none (the db
export alone, files gone) backward is not attributed, and :attr:`Modules.note` says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .regions import ROW_COLUMNS, Regions, Tree, innermost, nest, table
from .schema import TraceMeta

MODULE_PREFIX = "nn.Module: "
BACKWARD_NODE = "autograd::engine::evaluate_function: "
NODE_NAME = re.compile(r"^\w+Backward\d*$")  # an autograd node's class: AddmmBackward0
OUTSIDE_MODULES = "(outside modules)"
MODULE_COLUMNS = ["pass"] + ROW_COLUMNS
NOT_ATTRIBUTED = "backward not attributed (the trace carries no autograd sequence numbers)"


@dataclass(frozen=True)
class Modules:
    """The module table of one rank: ``per_step`` (:data:`MODULE_COLUMNS`: ``pass`` forward or
    backward, "" for the step's time outside every module's forward span), ``median`` over the
    steps, and ``note`` (why backward is missing, else None)."""

    per_step: pd.DataFrame
    median: pd.DataFrame
    lane: str
    has_device: bool
    skipped: dict[str, int]
    note: str | None = None
    operators: pd.DataFrame | None = None  # each module's top forward operators and their shapes (module_ops)

    @property
    def empty(self) -> bool:
        return not (self.per_step["name"] != OUTSIDE_MODULES).any()


def modules(events: pd.DataFrame, steps: pd.DataFrame, files: list[str] | None = None, rank: int | None = None,
            warn: bool = True) -> Modules:
    """The module table (:class:`Modules`) of one rank (default the lowest) of a Trace's events
    and steps; ``files``: its Kineto trace files, read again for the sequence numbers."""
    rank = int(events["rank"].min()) if rank is None and len(events) else rank
    e = events[(events["rank"] == rank) & (events["step"] >= 0)]
    st = steps[steps["rank"] == rank]
    names = e["name"].astype(str)
    spans = e[(e["device"].to_numpy() < 0) & (e["kind"] == "python").to_numpy() & names.str.startswith(MODULE_PREFIX).to_numpy()]
    tree = nest(spans.assign(name=spans["name"].astype(str).str.slice(len(MODULE_PREFIX))))
    marks = e[(e["kind"] == "annotation").to_numpy() & names.str.match(r"^ProfilerStep#\d+$").to_numpy()]
    lane = str(marks["lane"].mode().iloc[0]) if len(marks) else (str(tree.spans["lane"].iloc[0]) if len(tree.spans) else "")
    forward = table(tree, e, st, lane, warn, "modules")
    outside = _relabel(forward.per_step)
    # the step's time outside every module's forward span belongs to no pass (backward runs there too)
    frames = [outside.assign(**{"pass": np.where(outside["name"] == OUTSIDE_MODULES, "", "forward")})]
    ops = _sequenced(files, rank) if files and len(tree.spans) else None
    note = NOT_ATTRIBUTED if len(tree.spans) and (ops is None or ops.empty) else None
    if ops is not None and not ops.empty:
        back = _backward(tree, ops, e, st)
        if back is not None:
            frames.append(back.assign(**{"pass": "backward"}))
    per_step = pd.concat(frames, ignore_index=True)[MODULE_COLUMNS]
    if not forward.has_device:
        per_step[["device_ms", "self_device_ms"]] = np.nan
    from .module_ops import module_operators

    return Modules(per_step, _median(per_step, st), lane, forward.has_device, forward.skipped, note,
                   module_operators(tree, e, int(st["step"].nunique())))


def sequence_files(meta: TraceMeta, rank: int | None) -> list[str] | None:
    """The files of a Trace (its ``meta``) that carry autograd's sequence numbers for ``rank``:
    Kineto's trace files; torch_npu's ``trace_view.json`` of the rank's directory. None where
    there are none."""
    files = [Path(f) for f in meta.files]
    if meta.format == "kineto":
        return [str(f) for f in files] or None
    if meta.format == "ascend":
        dirs = [d for d in files if d.is_dir()]
        if len(dirs) > 1:
            dirs = [d for d, number in zip(dirs, _rank_numbers(dirs)) if number == rank]
        found = [d / "ASCEND_PROFILER_OUTPUT" / "trace_view.json" for d in dirs]
        return [str(f) for f in found if f.is_file()] or None
    return None


def _rank_numbers(dirs: list[Path]) -> list[int | None]:
    """Each rank directory's rank as the torch_npu reader numbers it (profiler_info's rank_id, or
    the directory's place where ids repeat); None for all where a profiler_info cannot be read."""
    import warnings

    from .sources.ascend.discover import profiler_info, rank_id, rank_numbers

    try:
        ids = [rank_id(path, info.get("rank_id"), d) for d in dirs for path, info in [profiler_info(d)]]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the reader said it already
            return rank_numbers(dirs, ids)
    except Exception:  # noqa: BLE001 - no backward attribution rather than a failed summary
        return [None] * len(dirs)


def _relabel(per_step: pd.DataFrame) -> pd.DataFrame:
    outside = per_step["name"] == "(outside regions)"
    return per_step.assign(name=per_step["name"].where(~outside, OUTSIDE_MODULES),
                           path=per_step["path"].where(~outside, OUTSIDE_MODULES))


def _sequenced(files: list[str], rank: int | None) -> pd.DataFrame | None:
    from .sources._sequence import sequenced_ops

    paths = [Path(f) for f in files if Path(f).is_file()]
    if not paths:
        return None
    return sequenced_ops(paths)


def node_modules(tree: Tree, ops: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The backward nodes of ``ops`` (sequenced operators) made from a forward operator that ran
    in one of ``tree``'s module spans, and the index into ``tree.spans`` of that module."""
    name = ops["name"].astype(str)
    # Kineto numbers both the engine's evaluate_function span and the node inside it (the node,
    # nested, is left out below); torch_npu numbers only the node
    node = name.str.startswith(BACKWARD_NODE).to_numpy() | name.str.match(NODE_NAME.pattern).to_numpy()
    forward = ops[~node]
    where = innermost(tree, forward["thread"].to_numpy(), forward["ts_ns"].to_numpy())
    by_seq = pd.Series(where, index=forward["seq"].to_numpy())
    by_seq = by_seq[by_seq >= 0].groupby(level=0).first()
    nodes = ops[node]
    module = nodes["seq"].map(by_seq)
    return nodes[module.notna().to_numpy()], module.dropna().astype(np.int64).to_numpy()


def _backward(tree: Tree, ops: pd.DataFrame, e: pd.DataFrame, st: pd.DataFrame) -> pd.DataFrame | None:
    """Per step and module: its backward nodes (calls), their host time and the device work they
    launched; a module's row includes its submodules'."""
    nodes, module = node_modules(tree, ops)
    if nodes.empty:
        return None
    path = tree.spans["path"].to_numpy(object)[module]
    starts, ends = st["start_ns"].to_numpy(), st["end_ns"].to_numpy()
    at = np.searchsorted(starts, nodes["ts_ns"].to_numpy(), side="right") - 1
    inside = (at >= 0) & (nodes["ts_ns"].to_numpy() < ends[np.maximum(at, 0)])
    spans = pd.DataFrame({"name": path[inside], "lane": "autograd/" + nodes["thread"].to_numpy(object)[inside],
                          "ts_ns": nodes["ts_ns"].to_numpy()[inside], "dur_ns": nodes["dur_ns"].to_numpy()[inside],
                          "step": st["step"].to_numpy()[at[inside]]})
    if spans.empty:
        return None
    # the nodes as spans of their own (nested where reentrant), each charged as a region is,
    # then summed by the module their forward ran in
    charged = table(nest(spans), e, st, "", False, "modules").per_step
    charged = charged[(charged["name"] != "(outside regions)") & (charged["depth"] == 0)]
    own = charged.groupby(["step", "name"], sort=False).agg(
        calls=("calls", "sum"), host_ms=("host_ms", "sum"), ops=("ops", "sum"), device_ms=("device_ms", "sum")
    ).reset_index().rename(columns={"name": "path"})
    depth = dict(zip(tree.spans["path"], tree.spans["depth"]))
    rows = []
    for mod in tree.spans["path"].unique():  # a module's backward includes its submodules'
        mine = own[(own["path"] == mod) | own["path"].str.startswith(mod + "/")]
        self_ = own[own["path"] == mod].set_index("step")
        for step, part in mine.groupby("step"):
            rows.append({"step": step, "name": mod.rsplit("/", 1)[-1], "path": mod, "depth": depth[mod],
                         "lane": spans["lane"].iloc[0], "calls": part["calls"].sum(), "host_ms": part["host_ms"].sum(),
                         "self_host_ms": self_["host_ms"].get(step, 0.0), "ops": part["ops"].sum(),
                         "device_ms": part["device_ms"].sum(), "self_device_ms": self_["device_ms"].get(step, 0.0)})
    return pd.DataFrame(rows, columns=ROW_COLUMNS)


def _median(per_step: pd.DataFrame, st: pd.DataFrame) -> pd.DataFrame:
    from .regions import _median as median

    parts = [median(part.drop(columns="pass"), st).assign(**{"pass": p})
             for p, part in per_step.groupby("pass", sort=False)]
    if not parts:  # no steps at all
        from .regions import MEDIAN_COLUMNS

        return pd.DataFrame(columns=["pass"] + MEDIAN_COLUMNS)
    return pd.concat(parts, ignore_index=True)[["pass"] + list(parts[0].columns[:-1])]


__all__ = ["MODULE_COLUMNS", "Modules", "Regions", "modules"]
