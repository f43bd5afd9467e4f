"""What a fix saves a job: the replayed steps of every rank walked together, each collective
ending no sooner than its last rank reaches it plus the time it then takes.

Replayed alone (:mod:`.path_bound`), a rank's collective keeps the length it was recorded with,
its wait for the other ranks included: the early rank's host work removed moves its collective
earlier, though the collective still waits for the late rank, and a fix of the late rank alone
is not seen by the ranks waiting for it. Here each rank's step graph (:func:`.critical_path.step_graph`)
is walked beside the others: a collective matched across the ranks (the same collective, the
same occurrence in the window) starts on each rank when its own path reaches it, and ends on
every rank at the latest of those starts plus its transfer time (its shortest recorded duration:
the last rank to arrive waits for no one). Every fix removes its cause on every rank, as the same
code runs on each; the straggler's bound is what the job loses when the rank that arrives last
most often waits for no one and no one waits for it; fewer bytes', what it loses when each
transfer takes half its time (bf16 gradients). A job is replayed together only where its
clocks agree with that model (no rank's collective ends before its last rank's starts) and its
ranks reach their collectives in one order; else each rank's own bound stands.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .collectives import collective_name
from .critical_path import Removal, step_graph
from .path_bound import MAX_EVENTS, removals, removed_ops, replayed_steps, step_events

# A collective's end may read this much before its last rank's start (clock resolution, rounding)
CLOCK_SLACK_NS = 2_000
# What sending fewer bytes leaves of a collective's transfer at most: bf16 gradients halve them
FEWER_BYTES = 0.5


def bounds(per_rank: dict, chosen) -> dict[str, dict]:
    """The bounds of :func:`.path_bound.made`'s fixes and of ``"straggler"`` for a job of at least
    two ranks replayed together, made from the ranks' events; each entry as ``made``'s, with
    ``ranks`` (how many were walked) and, for the straggler, ``rank``. {} where the job cannot be
    replayed together: a rank without its events or the chosen steps, too many events, no
    collective every rank runs, or clocks and orders that disagree with the model."""
    if len(per_rank) < 2 or any(s.events is None for s in per_rank.values()):
        return {}
    steps = replayed_steps(chosen)
    if not steps:
        return {}
    ops = removed_ops(chosen)
    windows = {}
    for r, s in per_rank.items():
        got = {int(n): (int(a), int(b)) for n, a, b in s.meta.get("step_windows_ns") or []}
        if not all(n in got for n in steps):
            return {}
        windows[r] = (got[steps[0]][0], got[steps[1]][0], got[steps[1]][1])
    events, count = {}, 0
    for r, s in per_rank.items():
        events[r] = step_events(s.events, windows[r][0], windows[r][2])
        count += len(events[r])
        if count > MAX_EVENTS:
            return {}
    wanted = {r: removals(ops)(ev) for r, ev in events.items()}
    names = sorted(set().union(*wanted.values()))
    together = _Job({r: step_graph(ev, windows[r][0], windows[r][2]) for r, ev in events.items()})
    alone = _Job({r: step_graph(ev, windows[r][1], windows[r][2]) for r, ev in events.items()})
    if not together.matched or not alone.ok or not together.ok:
        return {}
    lost, lost_alone = {}, {}
    for job, out in ((together, lost), (alone, lost_alone)):
        base = job.length({r: Removal() for r in per_rank})
        out[""] = base
        for n in names:
            out[n] = base - job.length({r: wanted[r].get(n, Removal()) for r in per_rank})
        out["straggler"] = base - job.length({r: Removal() for r in per_rank}, without_rank=together.last)
        out["bytes"] = base - job.length({r: Removal() for r in per_rank}, transfer_share=FEWER_BYTES)
    length_ms = max(lost[""] - lost_alone[""], 0) / 1e6
    made = {n: {"saving_ms": max(lost[n] - lost_alone[n], 0) / 1e6, "length_ms": length_ms,
                "ops": ops.get(n, []), "ranks": len(per_rank)} for n in [*names, "straggler", "bytes"]}
    made["straggler"]["rank"] = int(together.last)
    return made


class _Job:
    """Every rank's step graph with its collectives matched: ``matched`` (how many), ``ok``
    (whether the clocks and orders allow a walk together), ``last`` (the rank that reaches the
    matched collectives last most often)."""

    def __init__(self, graphs: dict) -> None:
        self.graphs = graphs
        found = {r: self._keyed(g) for r, g in graphs.items()}
        keys = set.intersection(*(set(c.index) for c in found.values()))
        first = min(found)
        # in the walk's order on the first rank; every rank must reach their ends in that order
        order = found[first].loc[list(keys)].sort_values("end_order").index
        self.parts = {r: c.loc[order] for r, c in found.items()}
        self.matched = len(order)
        starts = pd.DataFrame({r: c["start_ns"].to_numpy() for r, c in self.parts.items()})
        ends = pd.DataFrame({r: c["end_ns"].to_numpy() for r, c in self.parts.items()})
        in_order = all(np.all(np.diff(c["end_order"].to_numpy()) > 0) for c in self.parts.values())
        latest = starts.max(axis=1).to_numpy()
        self.ok = bool(in_order and (ends.to_numpy() >= latest[:, None] - CLOCK_SLACK_NS).all())
        self.transfer = pd.DataFrame({r: c["dur_ns"].to_numpy() for r, c in self.parts.items()}).min(axis=1).to_numpy()
        self.last = int(starts.idxmax(axis=1).mode().iat[0]) if self.matched else first

    @staticmethod
    def _keyed(graph) -> pd.DataFrame:
        """A rank's collectives keyed by (collective, occurrence), with their end's place in its walk;
        point-to-point sends and receives pair two ranks, not all: left as recorded."""
        c = graph.collectives()
        op = c["name"].map(collective_name).astype(str)
        c = c.assign(op=op)[~op.str.contains("send|recv", case=False).to_numpy(dtype=bool)]
        return c.assign(occurrence=c.groupby("op").cumcount(),
                        end_order=graph.node_order[c["end_node"].to_numpy(dtype=np.int64)]).set_index(["op", "occurrence"])

    def length(self, removal: dict, without_rank: int | None = None, transfer_share: float = 1.0) -> int:
        """The job's critical-path length (ns) with each rank's ``removal``; ``without_rank``'s
        arrivals wait for no one and its path is not the job's; each collective's transfer takes
        ``transfer_share`` of its recorded time."""
        walks = {}
        for r, g in self.graphs.items():
            weight = g.without(removal[r], np.ones(len(g.ts), bool))
            part = self.parts[r]
            kept = weight[part["edge"].to_numpy()]
            weight[part["edge"].to_numpy()] = -1  # the collective's own edge: replaced by the join
            src, dst, w, at = g.edges_in_order(weight)
            stops = np.searchsorted(at, g.node_order[part["end_node"].to_numpy()], side="left")
            walks[r] = _Walk(src.tolist(), dst.tolist(), w.tolist(), len(g.node_order), stops.tolist(),
                             part["start_node"].tolist(), part["end_node"].tolist(), (kept > 0).tolist())
        for k in range(self.matched):
            arrived = max(walk.reach(k) for r, walk in walks.items() if r != without_rank)
            transfer = int(self.transfer[k] * transfer_share)
            for r, walk in walks.items():  # a collective whose launch a fix removed takes no time
                walk.join(k, arrived + transfer if walk.runs[k] else max(walk.best[walk.starts[k]], arrived))
        return max(walk.finish() for r, walk in walks.items() if r != without_rank)


class _Walk:
    """One rank's longest-path walk, taken in pieces: up to each matched collective's end, which
    the job then sets (:meth:`join`), then on."""

    def __init__(self, src, dst, weight, nodes, stops, starts, ends, runs) -> None:
        self.src, self.dst, self.weight = src, dst, weight
        self.best = [0] * nodes
        self.at, self.stops, self.starts, self.ends, self.runs = 0, stops, starts, ends, runs

    def _advance(self, upto: int) -> None:
        best, lo = self.best, self.at
        for s, d, w in zip(self.src[lo:upto], self.dst[lo:upto], self.weight[lo:upto]):
            length = best[s] + w
            if length > best[d]:
                best[d] = length
        self.at = max(upto, lo)

    def reach(self, k: int) -> int:
        """The path's length where this rank reaches collective ``k``."""
        self._advance(self.stops[k])
        return self.best[self.starts[k]]

    def join(self, k: int, ends: int) -> None:
        self.best[self.ends[k]] = max(self.best[self.ends[k]], ends)

    def finish(self) -> int:
        self._advance(len(self.src))
        return max(self.best)
