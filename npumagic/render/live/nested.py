"""Regions and modules as lanes of the live timeline, built once with the index: per rank, the
user's annotations (``record_function``, torch_npu's mstx ranges) and the ``nn.Module`` spans, each
nested as :mod:`~npumagic.analysis.regions` and :mod:`~npumagic.analysis.modules` nest them (one
tree per thread; spans that cannot nest left out), a lane per thread with a row per depth. A
module's backward is a lane of its own where the analysis attributes it (autograd's sequence
numbers in the trace files). torch's own annotations (``ProfilerStep#``, ``Optimizer.step#``)
are kept and marked ``own``, so the widget dims them; the step marks in a lane of their own."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd

from ...analysis.modules import MODULE_PREFIX, node_modules, sequence_files
from ...analysis.regions import STEP_MARK, Tree, nest, torch_own

log = logging.getLogger(__name__)
REGIONS, MODULES = "regions", "modules"
CRITICAL = "critical"  # each step's critical path (critical.py): a lane of one row, built as these are
NESTED_GROUPS = (REGIONS, MODULES, CRITICAL)
BACKWARD = " (backward)"  # a backward span's path: its module's, and this
COLUMNS = ["rank", "group", "lane", "thread", "ts_ns", "dur_ns", "name", "path", "step", "own", "depth"]


def nested_spans(trace) -> pd.DataFrame:
    """Every region and module span of ``trace`` (:data:`COLUMNS`; ``lane``: the lane's name,
    ``thread``: the host thread it ran on, ``depth``: its depth in its thread's tree), sorted by rank, group, lane and start; none where
    the run recorded none."""
    ev = trace.events
    host = ev["device"].to_numpy() < 0
    # per category, not per event: a trace of millions holds few names
    categories = ev["name"].cat.categories
    module_names = categories[categories.astype(str).str.startswith(MODULE_PREFIX)]
    annotations = ev[host & (ev["kind"] == "annotation").to_numpy()]
    modules = ev[host & (ev["kind"] == "python").to_numpy() & ev["name"].isin(module_names).to_numpy()]
    parts = []
    for rank in sorted(set(annotations["rank"].unique()) | set(modules["rank"].unique())):
        mine = annotations[annotations["rank"] == rank]
        marks = mine["name"].astype(str).str.match(STEP_MARK.pattern).to_numpy()
        # the step marks alone make no regions group: every run has them (the step bands show them).
        # Else they are a lane of their own: where npumagic steps at optimizer.step() a mark crosses
        # the user's regions, and nested with them it would cost them their tree (as regions() nests)
        if not marks.all():
            parts.append(_lanes(nest(mine[~marks]), rank, REGIONS, "regions"))
            parts.append(_lanes(nest(mine[marks]), rank, REGIONS, "steps"))
        mods = modules[modules["rank"] == rank]
        if len(mods):
            tree = nest(mods.assign(name=mods["name"].astype(str).str.slice(len(MODULE_PREFIX))))
            parts.append(_lanes(tree, rank, MODULES, "forward"))
            parts.append(_backward(trace, tree, int(rank)))
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(parts, ignore_index=True)[COLUMNS]


def _lanes(tree, rank: int, group: str, label: str) -> pd.DataFrame:
    """A tree's spans, a lane per thread ("regions", or "regions: <lane>" where there are several)."""
    s = tree.spans
    if not len(s):
        return pd.DataFrame(columns=COLUMNS)
    threads = s["thread"].astype(str)
    several = threads.nunique() > 1
    lane_of = {t: f"{label}: {lane}" if several else label
               for t, lane in zip(threads, s["lane"].astype(str))}
    own = np.array([torch_own(n) or bool(STEP_MARK.match(n)) for n in s["name"]]) if group == REGIONS \
        else np.zeros(len(s), bool)
    return pd.DataFrame({"rank": int(rank), "group": group, "lane": threads.map(lane_of).to_numpy(), "thread": threads.to_numpy(),
                         "ts_ns": s["ts"].to_numpy(np.int64), "dur_ns": (s["end"] - s["ts"]).to_numpy(np.int64),
                         "name": s["name"].to_numpy(object), "path": s["path"].to_numpy(object),
                         "step": s["step"].to_numpy(np.int64), "own": own, "depth": s["depth"].to_numpy(np.int64)})


def _backward(trace, tree, rank: int) -> pd.DataFrame:
    """The backward nodes charged to each module (:func:`~npumagic.analysis.modules.node_modules`),
    as spans named by their module, in a lane per autograd thread; none where the trace files
    carry no sequence numbers."""
    files = sequence_files(trace.meta, rank) if len(tree.spans) else None
    if not files:
        return pd.DataFrame(columns=COLUMNS)
    from ...analysis.sources._sequence import sequenced_ops

    try:
        ops = sequenced_ops([Path(f) for f in files if Path(f).is_file()])
    except Exception as exc:  # noqa: BLE001 - the forward lanes rather than no timeline
        log.debug("timeline: no module backward lanes: %s", exc)
        return pd.DataFrame(columns=COLUMNS)
    if ops.empty:
        return pd.DataFrame(columns=COLUMNS)
    nodes, module = node_modules(tree, ops)
    if nodes.empty:
        return pd.DataFrame(columns=COLUMNS)
    path = tree.spans["path"].to_numpy(object)[module]
    steps = trace.steps[trace.steps["rank"] == rank].sort_values("start_ns")
    ts = nodes["ts_ns"].to_numpy(np.int64)
    at = np.searchsorted(steps["start_ns"].to_numpy(), ts, side="right") - 1
    inside = (at >= 0) & (ts < steps["end_ns"].to_numpy()[np.maximum(at, 0)]) if len(steps) else np.zeros(len(ts), bool)
    step = np.where(inside, steps["step"].to_numpy()[np.maximum(at, 0)] if len(steps) else -1, -1)
    spans = pd.DataFrame({"name": path, "lane": "autograd/" + nodes["thread"].astype(str).to_numpy(object),
                          "ts_ns": ts, "dur_ns": nodes["dur_ns"].to_numpy(np.int64), "step": step})
    # the engine's evaluate_function and the node inside it are both numbered: the outer one only
    t = nest(spans).spans
    t = t[t["depth"] == 0].reset_index(drop=True)
    t = t.assign(name=t["name"].str.rsplit("/", n=1).str[-1], path=t["name"] + BACKWARD, parent=-1)
    return _lanes(Tree(t), rank, MODULES, "backward")


def with_nested(nested: pd.DataFrame, names: np.ndarray, details: pd.DataFrame, codes: np.ndarray, ts: np.ndarray,
                 end: np.ndarray, origin: int):
    """The index's arrays with the spans of ``nested`` (:func:`~.nested.nested_spans`) appended as
    rows of their own (kind "annotation", "module" or "critical"; names already known keep their codes), and
    a lane each. Returns names, details, codes, ts, end, own, depth and the lanes (rank,
    group, lane, rows)."""
    n = len(details)
    names, both, mine, start, stop, own, depth, lanes = nested_rows(nested, names, details, origin)
    return (names, both, np.concatenate([codes, mine]), np.concatenate([ts, start]), np.concatenate([end, stop]),
            np.concatenate([np.zeros(n, bool), own]), np.concatenate([np.zeros(n, np.int64), depth]),
            [(rank, group, lane, n + rows) for rank, group, lane, rows in lanes])


def nested_rows(nested: pd.DataFrame, names: np.ndarray, details: pd.DataFrame, origin: int):
    """:func:`with_nested`'s work, its arrays of the new rows only: names, details (all rows), and of
    the rows of ``nested`` their codes, ts, end, own and depth, and the lanes with rows counted from
    the first of them (an index grown after its first view adds no copy of its events' arrays)."""
    m = len(nested)
    names, mine = nested_names(nested, names)
    kind = kind_of_group(nested["group"].to_numpy())
    kinds = details["kind"].cat.categories.astype(str).tolist()
    kinds += [k for k in ("annotation", "module", "critical") if k not in kinds]
    rows = pd.DataFrame({
        "ts_ns": nested["ts_ns"].to_numpy(np.int64), "dur_ns": nested["dur_ns"].to_numpy(np.int64),
        "step": nested["step"].to_numpy(np.int64), "shapes": None, "source": None,
        "correlation": np.full(m, -1, np.int64)})
    both = pd.concat([details.drop(columns=["name", "kind"]), rows], ignore_index=True)
    both.insert(0, "name", pd.Categorical.from_codes(np.concatenate([details["name"].cat.codes.to_numpy(), mine]),
                                                    categories=pd.Index(names)))
    kind_codes = np.concatenate([details["kind"].cat.codes.to_numpy(),  # the categories only grew at their end
                                 pd.Index(kinds).get_indexer(kind)])
    both.insert(6, "kind", pd.Categorical.from_codes(kind_codes, categories=kinds))
    start = nested["ts_ns"].to_numpy(np.int64) - origin
    stop = start + np.maximum(nested["dur_ns"].to_numpy(np.int64), 0)
    lanes = [(int(rank), str(group), str(lane), rows)  # in the order each lane first comes
             for (rank, group, lane), rows in nested.groupby(["rank", "group", "lane"], sort=False).indices.items()]
    return (names, both, mine, start, stop, nested["own"].to_numpy(bool), nested["depth"].to_numpy(np.int64), lanes)


def nested_names(nested: pd.DataFrame, names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``names`` with those of ``nested``'s spans it lacks after them, and each span's code."""
    # by distinct name (a path of millions of spans has a few thousand), in the order they first come
    of_name, distinct = pd.factorize(nested["name"])
    fresh = distinct[pd.Index(names).get_indexer(distinct) < 0]
    names = np.concatenate([names, np.asarray(fresh, dtype=object)]).astype(object)
    return names, pd.Index(names).get_indexer(distinct).astype(np.int64)[of_name]


def nested_kinds(names: np.ndarray, kinds: np.ndarray, name_codes: np.ndarray, nested: pd.DataFrame) -> np.ndarray:
    """Each name's kind (``kinds``: those of the indexed events' names, ``name_codes`` their
    codes), the names no indexed event has (new ones, and the step marks left out of the host
    lanes) taking their nested lane's (:func:`kind_of_group`)."""
    counts = np.bincount(name_codes.astype(np.int64) + 1, minlength=kinds.size + 1)[1:]
    out = np.concatenate([kinds, np.full(names.size - kinds.size, "annotation", dtype=object)])
    unused = np.concatenate([counts == 0, np.ones(names.size - kinds.size, bool)])
    mine = pd.Index(names).get_indexer(nested["name"])
    group = nested["group"].to_numpy()
    out[mine[unused[mine]]] = kind_of_group(group[unused[mine]])
    return out


def kind_of_group(group: np.ndarray) -> np.ndarray:
    """The kind a nested lane's own spans are drawn as: "module", "critical" (the critical path's
    waits; its operators and kernels keep their own kinds) or "annotation"."""
    return np.where(group == MODULES, "module", np.where(group == CRITICAL, "critical", "annotation"))
