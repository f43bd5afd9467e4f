"""Where in the model each event ran: the innermost ``nn.Module`` (forward: the module's span
around it; backward: the module whose forward made the autograd node around it, matched through
autograd's sequence numbers as :mod:`.modules` matches them) and the innermost user region
(:mod:`.regions`). Device work is placed where it was launched (its correlation id's launch,
:func:`.crossbackend.launch_points`).

The kernel table's ``module`` column and a finding's place (:func:`locate`) are read from here:
each is the module (or region) holding the largest share of the time it rests on. A run that
recorded neither modules nor regions has no :class:`Places` (None), and nothing gains a column.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import pandas as pd

from .crossbackend import _thread, launch_points
from .finding import Finding
from .modules import MODULE_PREFIX, node_modules
from .regions import STEP_MARK, TORCH_OWN, Tree, innermost, nest
from .schema import DEVICE_WORK, LAUNCH_KINDS, kind_in, text_mask
from .task_masks import memory_bound

# the pass a module label ends with, as :meth:`Places.at` writes it ("path, forward")
PASSES = FORWARD, BACKWARD = (", forward", ", backward")


@dataclass(frozen=True)
class Places:
    """One rank's module trees (``forward``: the module spans; ``backward``: the autograd nodes,
    each named by the module path its forward ran in, or None without sequence numbers), its
    region tree, and where each correlation id was launched (thread, ts)."""

    forward: Tree
    backward: Tree | None
    regions: Tree
    launches: pd.DataFrame

    @property
    def has_modules(self) -> bool:
        return bool(len(self.forward.spans))

    def at(self, thread: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """At each point (thread, ts): the innermost module as "path, forward" or "path, backward"
        and the innermost region's path; "" where none."""
        thread, ts = np.asarray(thread).astype(str), np.asarray(ts, np.int64)
        module = _labels(self.forward, innermost(self.forward, thread, ts), FORWARD)
        if self.backward is not None:  # a node is named by its module's path (nested nodes: one module)
            back = _labels(self.backward, innermost(self.backward, thread, ts), BACKWARD, "name")
            module = np.where(back != "", back, module)
        return module, _labels(self.regions, innermost(self.regions, thread, ts), "")

    def of(self, ev: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`at` for events: a host event where it starts, device work where it was launched."""
        host = ev["device"].to_numpy() < 0
        thread = np.full(len(ev), "", object)
        ts = np.full(len(ev), -1, np.int64)
        thread[host] = _thread(ev["lane"][host]) if host.any() else thread[host]
        ts[host] = ev["ts_ns"].to_numpy(np.int64)[host]
        if (~host).any() and len(self.launches):
            launch = self.launches.set_index("correlation")
            corr = pd.Series(ev["correlation"].to_numpy()[~host])
            thread[~host] = corr.map(launch["thread"]).fillna("").to_numpy(object)
            ts[~host] = corr.map(launch["ts"]).fillna(-1).to_numpy(np.int64)
        module, region = self.at(thread, ts)
        unplaced = ts < 0
        module[unplaced] = region[unplaced] = ""
        return module, region



def _labels(tree: Tree, index: np.ndarray, suffix: str, column: str = "path") -> np.ndarray:
    paths = tree.spans[column].to_numpy(object) if len(tree.spans) else np.zeros(0, object)
    out = np.full(len(index), "", object)
    found = index >= 0
    out[found] = paths[index[found]] + suffix if found.any() else out[found]
    return out


def places(events: pd.DataFrame, files: list[str] | None = None) -> Places | None:
    """The :class:`Places` of one rank's ``events`` (python spans included); ``files``: its
    trace files, read again for the sequence numbers (:func:`.modules.sequence_files`). None
    where the rank recorded no module span and no user region."""
    host = events["device"].to_numpy() < 0
    kind = events["kind"]
    is_module = host & (kind == "python").to_numpy() & text_mask(events["name"],
                                                                 lambda n: n.str.startswith(MODULE_PREFIX))
    # a user region: neither a step mark nor one of torch's own annotations (an optimizer step, a
    # collective: what runs there is said by the finding itself, not a place in the user's code)
    is_region = host & (kind == "annotation").to_numpy() & ~text_mask(
        events["name"], lambda n: n.str.match(STEP_MARK.pattern) | n.str.match(TORCH_OWN.pattern))
    if not (is_module.any() or is_region.any()):
        return None
    spans = events[is_module]
    forward = nest(spans.assign(name=spans["name"].astype(str).str.slice(len(MODULE_PREFIX))))
    backward = _backward(forward, files) if len(forward.spans) and files else None
    launches = launch_points(events).drop_duplicates("correlation") if (~host).any() else pd.DataFrame(
        columns=["thread", "ts", "correlation"])
    return Places(forward, backward, nest(events[is_region]), launches)


def _backward(forward: Tree, files: list[str]) -> Tree | None:
    """The autograd nodes of ``files`` as spans named by the path of the module their forward
    operator (the same sequence number) ran in; None where the files carry no numbers."""
    from pathlib import Path

    from .sources._sequence import sequenced_ops

    paths = [Path(f) for f in files if Path(f).is_file()]
    ops = sequenced_ops(paths) if paths else None
    if ops is None or ops.empty:
        return None
    nodes, module = node_modules(forward, ops)
    if nodes.empty:
        return None
    path = forward.spans["path"].to_numpy(object)[module]
    return nest(pd.DataFrame({"name": path, "lane": "autograd/" + nodes["thread"].astype(str).to_numpy(object),
                              "ts_ns": nodes["ts_ns"].to_numpy(), "dur_ns": nodes["dur_ns"].to_numpy(),
                              "step": 0}))


def largest(labels: np.ndarray, weight: np.ndarray) -> tuple[str, float]:
    """The narrowest place holding at least :data:`~.thresholds.PLACE_MIN_SHARE` of ``weight``,
    and that share of the whole weight. A label ("path, pass" or a region path) counts toward each
    enclosing path, with its pass and without it (a module's forward and backward together), so
    time spread over many layers is named by the block holding them, not by the one layer holding
    5% of it. ("", 0.0) where no place holds that much."""
    from .thresholds import PLACE_MIN_SHARE

    total = float(np.sum(weight))
    placed = labels != ""
    if not placed.any() or total <= 0:
        return "", 0.0
    sums = pd.Series(np.asarray(weight, float)[placed]).groupby(labels[placed]).sum()
    within: dict[tuple[int, int, str], float] = {}  # (path depth, with its pass, label) -> weight
    for label, w in sums.items():
        path, _, pass_ = str(label).rpartition(", ") if str(label).endswith(PASSES) else (str(label), "", "")
        parts = path.split("/")
        for depth in range(1, len(parts) + 1):
            prefix = "/".join(parts[:depth])
            for key in ((depth, 1, f"{prefix}, {pass_}"), (depth, 0, prefix)) if pass_ else ((depth, 1, prefix),):
                within[key] = within.get(key, 0.0) + float(w)
    held = [(key, w / total) for key, w in within.items() if w / total >= PLACE_MIN_SHARE]
    if not held:
        return "", 0.0
    (_, _, label), share = max(held, key=lambda kv: (kv[0][0], kv[0][1], kv[1]))
    return label, share


# -- findings -----------------------------------------------------------------------------------
def _tiny_kernels(s, ev: pd.DataFrame) -> np.ndarray:
    """The small-op rule's tiny kernels (on the CPU: operators, weighed by their self time, as
    the kernel table weighs them: a call nested in another is not counted twice)."""
    from . import thresholds as T
    from .operators import self_time_ns

    k = s.kernels
    typical = k["median_us"].fillna(k["mean_us"]) if "median_us" in k else k["mean_us"]
    small = set(k.loc[typical < T.TINY_KERNEL_US, "name"].astype(str))
    tiny = text_mask(ev["name"], lambda n: n.isin(small))
    if s.meta.get("device_mode"):
        tiny &= (ev["kind"] == "kernel").to_numpy()
        weight = ev["dur_ns"].to_numpy(float)
    else:
        ops = ((ev["kind"] == "host_op") & (ev["device"] < 0)).to_numpy()
        weight = np.zeros(len(ev))
        weight[ops] = self_time_ns(ev[ops])
    # each call weighs its name's median: one call the OS stalled for a millisecond is not a place
    out = np.zeros(len(ev))
    names = ev["name"]
    keys = names.cat.codes.to_numpy() if isinstance(names.dtype, pd.CategoricalDtype) else names.to_numpy()
    out[tiny] = pd.Series(weight[tiny]).groupby(keys[tiny]).transform("median").to_numpy()
    return out


def _syncs(s, ev: pd.DataFrame) -> np.ndarray:
    from .syncs import is_host_sync

    return np.where(is_host_sync(ev).to_numpy(), ev["dur_ns"].to_numpy(float), 0.0)


def _under_gaps(s, ev: pd.DataFrame) -> np.ndarray:
    """host_bound on a device: the idle time each top-level host operator covers (a CPU run's
    host time outside operators has no operator to weigh)."""
    from .gaps import gap_cover_ns

    return gap_cover_ns(ev) if s.meta.get("device_mode") else np.zeros(len(ev))


def _named(names: tuple[str, ...]) -> Callable:
    def pick(s, ev: pd.DataFrame) -> np.ndarray:
        mask = (ev["device"].to_numpy() < 0) & kind_in(ev["kind"], LAUNCH_KINDS) & text_mask(
            ev["name"], lambda n: n.isin(names))
        return np.where(mask, ev["dur_ns"].to_numpy(float), 0.0)
    return pick


def _npu_tasks(rows: Callable[[pd.DataFrame], pd.Series]) -> Callable:
    """An NPU operator rule's tasks: the kernel metrics' rows it flags (``rows``), found among the
    events' device kernels by name and start, each weighing its duration."""
    def pick(s, ev: pd.DataFrame) -> np.ndarray:
        out = np.zeros(len(ev))
        d = s.kernel_metrics
        flagged = d[rows(d).to_numpy(bool)] if len(d) else d
        kernels = np.flatnonzero(((ev["kind"] == "kernel") & (ev["device"] >= 0)).to_numpy())
        if flagged.empty or not len(kernels):
            return out
        have = pd.MultiIndex.from_arrays([ev["name"].to_numpy()[kernels].astype(str),
                                          ev["ts_ns"].to_numpy(np.int64)[kernels]])
        want = pd.MultiIndex.from_arrays([flagged["name"].to_numpy().astype(str), flagged["ts_ns"].to_numpy(np.int64)])
        hit = kernels[have.isin(want)]
        out[hit] = ev["dur_ns"].to_numpy(float)[hit]
        return out
    return pick


def _selectors() -> dict[str, Callable]:
    """Rule id -> the time (ns) of each event that a finding of the rule rests on; 0 elsewhere.
    The device's idle gaps (host_bound, CUDA's gpu_gaps) rest on the host operators running under
    them; an NPU operator rule on the tasks it flags."""
    from .syncs import SYNC_APIS, SYNC_COPIES

    return {"small_ops": _tiny_kernels, "sync": _syncs, "sync_memcpy": _named(SYNC_COPIES),
            "sync_apis": _named(SYNC_APIS), "host_bound": _under_gaps, "gpu_gaps": _under_gaps,
            "transdata": _npu_tasks(lambda d: d["type"] == "TransData"),
            "memory_bound_kernels": _npu_tasks(memory_bound),
            "aicore_utilization": _npu_tasks(lambda d: d["core"] == "AI_CORE"),
            "aicpu": _npu_tasks(lambda d: d["core"] == "AI_CPU")}


def placed(s) -> dict[str, list]:
    """Rule id -> [place, share] for each rule whose events are known (:func:`_selectors`) and rest in
    the steps of Summary ``s``: the module, else the region, that holds the largest share of those
    events' time. Made once, where the events are (:func:`~.summary.summarize_rank`), and stored with
    the Summary, so a run read back from the history places its findings as the fresh analysis did;
    empty where ``s`` recorded neither module nor region."""
    where: Places | None = getattr(s, "places", None)
    ev = s.events
    if where is None or ev is None or ev.empty:
        return {}
    out = {}
    in_steps = ev["step"].to_numpy() >= 0
    selectors = _selectors()
    # host_bound and gpu_gaps share one selector: weighed and placed once
    done: dict[Callable, list | None] = {}
    for rule, select in selectors.items():
        if select not in done:
            done[select] = _place(where, ev, select(s, ev), in_steps)
        if done[select] is not None:
            out[rule] = list(done[select])  # a list: it reads back from JSON as it was stored
    return out


def _place(where: Places, ev: pd.DataFrame, weight: np.ndarray, rows: np.ndarray) -> list | None:
    """[place, share] of the events of ``rows`` (a mask) weighing ``weight`` (the module, else the
    region, holding the largest share of it); None where none weighs anything or no place holds enough."""
    chosen = (weight > 0) & rows
    if not chosen.any():
        return None
    module, region = where.of(ev.loc[chosen, ["device", "lane", "ts_ns", "correlation"]])  # what it reads
    name, share = largest(module, weight[chosen])
    kind = "module"
    if not name:
        (name, share), kind = largest(region, weight[chosen]), "region"
    return [f"{kind} {name}", float(share)] if name else None


def locate(s, findings: list[Finding]) -> list[Finding]:
    """``findings`` of Summary ``s``, each of a rule :func:`placed` placed given its ``place`` and
    ``place_share`` (from ``s.placed``: fresh or read back from the history alike); unchanged where
    ``s`` has none (no module or region recorded; a run stored before places were kept)."""
    known = getattr(s, "placed", None) or {}
    out = []
    for f in findings:
        place = known.get(f.rule)
        out.append(replace(f, place=str(place[0]), place_share=float(place[1])) if place else f)
    return out


def kernel_modules(p: Places) -> Callable[[pd.DataFrame], np.ndarray]:
    """For :func:`.operators.kernel_table`: each kernel row's module ("" outside every module)."""
    return lambda rows: p.of(rows)[0]
