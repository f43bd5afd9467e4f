"""Where in the code the step goes: every user annotation (``record_function``, torch_npu's mstx
ranges) as a tree per step, with its calls, its host time (inclusive and exclusive) and the
device time of the work launched inside it, plus a row for the step's time outside every region.

Device work is charged as ``compare --by-operator`` charges it (:func:`.crossbackend.launch_points`):
through its correlation id to the launch, then to the innermost region around the launch on the
launch's thread. ``self_device_ms`` is what was launched in the region itself, ``device_ms`` adds
its descendants'. A run with no device work (the CPU) has no device time: NaN, not 0.

Spans that cannot make a tree are skipped and counted in ``skipped`` (said in a warning): a
span that overlaps another on its thread without nesting in it, one of no positive length, one
whose name holds control characters.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .crossbackend import _enclosing, _outermost, _thread, launch_points
from .schema import DEVICE_WORK, kind_in

STEP_MARK = re.compile(r"^ProfilerStep#\d+$")
OUTSIDE = "(outside regions)"
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# annotations torch (and torch_npu) write themselves, as the real traces show them: the optimizer's
# step and zero_grad, the DataLoader's next, DDP/FSDP's forward hooks, each collective
# (``nccl:all_reduce``, ``gloo:barrier``, ``hccl:allgather``), torch.compile's graph calls. They
# stay in the region table (often the only record of the optimizer's or a collective's time, and
# without them "outside regions" would swallow it), marked; a finding is never placed in one.
TORCH_OWN = re.compile(r"^(Optimizer\.\w+#\w+\.\w+$|enumerate\(DataLoader\)#|(Distributed)?DataParallel\.forward$"
                       r"|FullyShardedDataParallel\.|FSDP::|(nccl|gloo|hccl|mpi|ucc|xccl|lccl):|## Call CompiledFxGraph "
                       r"|Torch-Compiled Region|CompiledFunction|graph_\d+_inductor_wrapper_call$|TORCHDYNAMO$"
                       r"|.* \(dynamo_timed\)$)")
ROW_COLUMNS = ["step", "name", "path", "depth", "lane", "calls", "host_ms", "self_host_ms", "ops", "device_ms",
               "self_device_ms"]
MEDIAN_COLUMNS = ROW_COLUMNS[1:]


@dataclass(frozen=True)
class Tree:
    """Spans of one rank nested per thread: ``spans`` (thread, lane, ts, end, name, step, parent,
    depth, path; parent -1 at a root, the index into ``spans``), and the spans left out by reason."""

    spans: pd.DataFrame
    skipped: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Regions:
    """The region table of one rank: ``per_step`` (:data:`ROW_COLUMNS`, one row per region path and
    step, and the ``OUTSIDE`` row of each step), ``median`` over the steps (a region missing
    from a step counts 0 there), the ``lane`` whose step the regions and outside add up to, and
    what was skipped."""

    per_step: pd.DataFrame
    median: pd.DataFrame
    lane: str
    has_device: bool
    skipped: dict[str, int]

    @property
    def empty(self) -> bool:
        return not (self.per_step["name"] != OUTSIDE).any()


def torch_own(name: str) -> bool:
    """Whether ``name`` is an annotation torch writes itself (:data:`TORCH_OWN`), not the user's."""
    return bool(TORCH_OWN.match(str(name)))


def nest(spans: pd.DataFrame) -> Tree:
    """``spans`` (lane, ts_ns, dur_ns, name, step) as a tree per thread (see :class:`Tree`)."""
    skipped: dict[str, int] = {}
    names = spans["name"].astype(str)
    bad = {"no positive length": (spans["dur_ns"] <= 0).to_numpy(),
           "control characters in the name": names.str.contains(CONTROL).to_numpy()}
    keep = np.ones(len(spans), bool)
    for why, mask in bad.items():
        if mask.any():
            skipped[why] = int((mask & keep).sum())
        keep &= ~mask
    s = pd.DataFrame({"thread": _thread(spans["lane"])[keep], "lane": spans["lane"].astype(str).to_numpy()[keep],
                      "ts": spans["ts_ns"].to_numpy(np.int64)[keep],
                      "end": (spans["ts_ns"] + spans["dur_ns"]).to_numpy(np.int64)[keep],
                      "name": names.to_numpy()[keep], "step": spans["step"].to_numpy(np.int64)[keep]})
    s = s.sort_values(["thread", "ts", "end"], ascending=[True, True, False], kind="stable").reset_index(drop=True)
    parent = np.full(len(s), -1, np.int64)
    path = s["name"].to_numpy(object).copy()
    good = np.ones(len(s), bool)
    stack: list[int] = []
    thread = None
    ends = s["end"].to_numpy()
    for i, (th, ts, end) in enumerate(zip(s["thread"].tolist(), s["ts"].tolist(), ends.tolist())):
        if th != thread:
            stack, thread = [], th
        while stack and ends[stack[-1]] <= ts:
            stack.pop()
        if stack and end > ends[stack[-1]]:  # overlaps the open span without nesting in it
            good[i] = False
            continue
        if stack:
            parent[i] = stack[-1]
            path[i] = f"{path[stack[-1]]}/{path[i]}"
        stack.append(i)
    if not good.all():
        skipped["overlapping without nesting"] = int((~good).sum())
    s = s.assign(parent=parent, path=path)[good]
    # renumber the parents into the kept rows (a skipped span has no children: its overlap failed first)
    renumber = pd.Series(np.arange(good.sum()), index=np.flatnonzero(good))
    s["parent"] = s["parent"].map(renumber).fillna(-1).astype(np.int64).to_numpy()
    s = s.reset_index(drop=True)
    depth = np.zeros(len(s), np.int64)
    for i, p in enumerate(s["parent"].to_numpy()):  # parents come before their children
        depth[i] = depth[p] + 1 if p >= 0 else 0
    return Tree(s.assign(depth=depth), skipped)


def innermost(tree: Tree, thread: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """The index into ``tree.spans`` of the innermost span enclosing each point (thread, ts),
    -1 where none does."""
    s = tree.spans
    if not len(s) or not len(ts):
        return np.full(len(ts), -1, np.int64)
    at, span_ts = np.asarray(ts, np.int64), s["ts"].to_numpy(np.int64)
    # per thread, the last span (of those starting together, the last in the tree's order) to
    # start at or before each point: what a merge_asof by thread found, at a fraction of its cost
    codes, _ = pd.factorize(np.concatenate([s["thread"].astype(str).to_numpy(object),
                                            np.asarray(thread).astype(str).astype(object)]))
    span_code, point_code = codes[:len(s)], codes[len(s):]
    spans = np.lexsort((span_ts, span_code))  # by thread, then start; stable: ties keep the tree's order
    points = np.argsort(point_code, kind="stable")
    span_edges = np.searchsorted(span_code[spans], np.arange(span_code.max() + 2))
    point_edges = np.searchsorted(point_code[points], np.arange(span_code.max() + 2))
    out = np.full(len(at), -1, np.int64)
    for c in range(span_code.max() + 1):  # the threads that have spans
        mine, here = spans[span_edges[c]:span_edges[c + 1]], points[point_edges[c]:point_edges[c + 1]]
        k = np.searchsorted(span_ts[mine], at[here], side="right") - 1
        out[here] = np.where(k >= 0, mine[np.maximum(k, 0)], -1)
    end, parent = s["end"].to_numpy(np.int64), s["parent"].to_numpy(np.int64)
    while True:  # the last span to start may have ended: its ancestors may still be open
        ended = (out >= 0) & (end[np.maximum(out, 0)] <= at)
        if not ended.any():
            break
        out[ended] = parent[out[ended]]
    return out


def _inclusive(values: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Each span's value plus its descendants' (children come after their parents)."""
    total = values.astype(float).copy()
    for i in range(len(parent) - 1, -1, -1):
        if parent[i] >= 0:
            total[parent[i]] += total[i]
    return total


def charge(tree: Tree, e: pd.DataFrame) -> tuple[np.ndarray, pd.Series, np.ndarray, bool]:
    """From one rank's events ``e``: each span's self device ns, the device ns no span launched
    per step (by the step of the work), each span's outermost host operators, and whether ``e``
    holds device work at all."""
    host = e["device"].to_numpy() < 0
    work = e[~host & kind_in(e["kind"], DEVICE_WORK)]
    n = len(tree.spans)
    device = np.zeros(n)
    uncharged = pd.Series(dtype=float)
    if len(work):
        launch = launch_points(e).drop_duplicates("correlation")
        where = pd.Series(innermost(tree, launch["thread"].to_numpy(), launch["ts"].to_numpy()),
                          index=launch["correlation"].to_numpy())
        spans = work["correlation"].map(where).fillna(-1).to_numpy(np.int64)
        dur = work["dur_ns"].to_numpy(float)
        np.add.at(device, spans[spans >= 0], dur[spans >= 0])
        uncharged = pd.Series(dur[spans < 0]).groupby(work["step"].to_numpy()[spans < 0]).sum()
    ops = _outermost(e[host & (e["kind"] == "host_op").to_numpy()])
    op_span = innermost(tree, ops["thread"].to_numpy(), ops["ts"].to_numpy())
    count = np.bincount(op_span[op_span >= 0], minlength=n).astype(float)
    return device, uncharged, count, bool(len(work))


def regions(events: pd.DataFrame, steps: pd.DataFrame, rank: int | None = None, warn: bool = True) -> Regions:
    """The region table (:class:`Regions`) of one rank (default the lowest) of a Trace's
    ``events`` and ``steps``."""
    rank = int(events["rank"].min()) if rank is None and len(events) else rank
    e = events[(events["rank"] == rank) & (events["step"] >= 0)]
    st = steps[steps["rank"] == rank]
    host = e["device"].to_numpy() < 0
    names = e["name"].astype(str)
    marks = e[host & (e["kind"] == "annotation").to_numpy() & names.str.match(STEP_MARK.pattern).to_numpy()]
    tree = nest(e[host & (e["kind"] == "annotation").to_numpy() & ~names.str.match(STEP_MARK.pattern).to_numpy()])
    lane = str(marks["lane"].mode().iloc[0]) if len(marks) else _busiest_lane(tree, e)
    return table(tree, e, st, lane, warn, "regions")


def table(tree: Tree, e: pd.DataFrame, st: pd.DataFrame, lane: str, warn: bool, what: str) -> Regions:
    """The per-step and median tables of ``tree``'s spans charged with ``e``'s work, the
    ``OUTSIDE`` row of each step of ``st`` taken on ``lane``."""
    s = tree.spans
    device, uncharged, ops, has_device = charge(tree, e)
    parent = s["parent"].to_numpy(np.int64)
    dur = (s["end"] - s["ts"]).to_numpy(float)
    children = np.zeros(len(s))
    np.add.at(children, parent[parent >= 0], dur[parent >= 0])
    rows = pd.DataFrame({"step": s["step"], "name": s["name"], "path": s["path"], "depth": s["depth"],
                         "lane": s["lane"], "calls": 1, "host_ms": dur / 1e6, "self_host_ms": (dur - children) / 1e6,
                         "ops": _inclusive(ops, parent), "device_ms": _inclusive(device, parent) / 1e6,
                         "self_device_ms": device / 1e6})
    per_step = rows.groupby(["step", "path", "lane"], sort=False, observed=True).agg(
        name=("name", "first"), depth=("depth", "first"), calls=("calls", "sum"), host_ms=("host_ms", "sum"),
        self_host_ms=("self_host_ms", "sum"), ops=("ops", "sum"), device_ms=("device_ms", "sum"),
        self_device_ms=("self_device_ms", "sum")).reset_index()
    outside = _outside(s[(s["lane"] == lane) & (s["parent"] < 0)], st, uncharged)
    per_step = pd.concat([per_step, outside], ignore_index=True) if len(per_step) else outside
    if not has_device:
        per_step[["device_ms", "self_device_ms"]] = np.nan
    per_step = per_step.sort_values(["step", "lane", "path"], kind="stable").reset_index(drop=True)[ROW_COLUMNS]
    if tree.skipped and warn:
        warnings.warn(f"{what}: skipped " + ", ".join(f"{n} {why}" for why, n in tree.skipped.items()), stacklevel=3)
    return Regions(per_step, _median(per_step, st), lane, has_device, dict(tree.skipped))


def _outside(top: pd.DataFrame, st: pd.DataFrame, uncharged: pd.Series) -> pd.DataFrame:
    """Per step of ``st``: its time outside every top-level region ``top`` of its lane (the
    regions clipped to the step), and the device work of the step no region launched."""
    rows = []
    for step, start, end in zip(st["step"], st["start_ns"], st["end_ns"]):
        inside = np.clip(top["end"].to_numpy(), start, end) - np.clip(top["ts"].to_numpy(), start, end)
        left = (end - start - inside.sum()) / 1e6
        device = float(uncharged.get(step, 0.0)) / 1e6
        rows.append({"step": int(step), "name": OUTSIDE, "path": OUTSIDE, "depth": 0, "lane": "", "calls": 0,
                     "host_ms": left, "self_host_ms": left, "ops": np.nan, "device_ms": device,
                     "self_device_ms": device})
    return pd.DataFrame(rows, columns=ROW_COLUMNS)


def _median(per_step: pd.DataFrame, st: pd.DataFrame) -> pd.DataFrame:
    """Each path's median over the steps of ``st`` (absent from a step: 0 there)."""
    if per_step.empty:
        return pd.DataFrame(columns=MEDIAN_COLUMNS)
    steps = st["step"].to_numpy() if len(st) else per_step["step"].unique()
    keys = per_step[["path", "lane"]].drop_duplicates()
    full = keys.merge(pd.DataFrame({"step": steps}), how="cross").merge(per_step, on=["path", "lane", "step"], how="left")
    first = per_step.drop_duplicates(["path", "lane"]).set_index(["path", "lane"])[["name", "depth"]]
    numbers = ["calls", "host_ms", "self_host_ms", "ops", "device_ms", "self_device_ms"]
    full[numbers] = full[numbers].fillna({c: 0.0 for c in numbers if c not in ("device_ms", "self_device_ms", "ops")})
    med = full.groupby(["path", "lane"], sort=False)[numbers].median().join(first).reset_index()
    return med[MEDIAN_COLUMNS]


def _busiest_lane(tree: Tree, e: pd.DataFrame) -> str:
    """Without step marks: the lane holding the most region time (else the most operator time)."""
    s = tree.spans
    if len(s):
        return str((s["end"] - s["ts"]).groupby(s["lane"]).sum().idxmax())
    ops = e[e["kind"] == "host_op"]
    return str(ops["dur_ns"].groupby(ops["lane"].astype(str)).sum().idxmax()) if len(ops) else ""
