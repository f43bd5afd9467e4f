"""What a fix can save on a device, bounded by the step's critical path: the median step
replayed without what the fix removes (:func:`.critical_path.replay`).

A host wait or host work removed while the device still computes shortens the step only by
what the device then has left to wait: the saving is what the critical path loses, not the
length of what the fix removes. On the CPU every operator runs on the host thread, so the path
loses exactly what is removed, which the levers in :mod:`.whatif` already count: the bound is
taken on device runs only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from .critical_path import HOST_KINDS, Removal, replay

# Events in the two replayed steps (host calls and the tasks they launched) beyond which no bound is
# computed: the path is walked in Python, about 0.3 us an edge and a walk per fix, so 150k events
# cost about a second of the analysis
MAX_EVENTS = 150_000
# The next step follows a step at once when it starts within this share of the step's length after it
ADJACENT_SHARE = 0.1


@dataclass(frozen=True)
class PathBound:
    """The step's critical path without a fix's cause: ``saving_ms`` per step, of a path
    ``length_ms`` long (the median step's, up to where the next step's path takes over)."""

    saving_ms: float
    length_ms: float
    ranks: int = 1  # the ranks replayed together (:mod:`.job_path`), each collective waiting for its last

    def said(self) -> str:
        together = (f" on its {self.ranks} ranks together (a collective ends once its last rank is there)"
                    if self.ranks > 1 else "")
        return (f"; replayed without it{together}, the median step's critical path ({self.length_ms:,.2f} ms) is "
                f"{self.saving_ms:,.2f} ms shorter, which bounds the saving")


def replayed_steps(s) -> list[int]:
    """The steps to replay: the step nearest the median wall time that has a step after it, and
    that step (what a fix removes at a step's end lets the next one start sooner: the saving is
    what the two lose together less what the second loses alone); [] on the CPU or without events."""
    ev = s.events
    windows = sorted(s.meta.get("step_windows_ns") or [], key=lambda w: w[1])
    if ev is None or ev.empty or not s.meta.get("device_mode") or len(windows) < 2 or not len(s.steps):
        return []
    # a step followed at once by the next (a repeating schedule's cycles lie apart)
    followed = {int(a[0]): int(b[0]) for a, b in zip(windows, windows[1:])
                if b[1] - a[2] <= ADJACENT_SHARE * (a[2] - a[1])}
    wall = s.steps.set_index("step")["wall_us"].dropna()
    wall = wall[wall.index.isin(list(followed))]
    if wall.empty:
        return []
    step = int((wall - wall.median()).abs().sort_values(kind="stable").index[0])
    return [step, followed[step]]


def made(s) -> dict[str, dict]:
    """The critical-path bound of each fix a device run's findings can offer, made once where the
    events are (:func:`~.summary.summarize_rank`) and stored with the Summary, so a run read back
    from the history predicts as the fresh analysis did: ``"dataloader"`` (the wait for data),
    ``"sync"`` (the operator behind the costliest blocking call, with its copy and its wait),
    ``"cpu_work"`` (the host operators under the largest idle gaps, as the host_bound rule names
    them on CUDA and ROCm), ``"host"`` (every host operator and the Python between them: no
    host-side fix saves more, as the device's own chain is left). Each: saving_ms, length_ms, ops
    (the operators removed); {} where no step can be replayed."""
    if not replayed_steps(s):
        return {}
    ops = removed_ops(s)
    return {key: {"saving_ms": b.saving_ms, "length_ms": b.length_ms, "ops": ops.get(key, [])}
            for key, b in bounds(s, removals(ops)).items()}


def removed_ops(s) -> dict[str, list[str]]:
    """The operators each fix of :func:`made` removes, by name: ``"sync"`` the operator behind the
    costliest blocking call, ``"cpu_work"`` those under the largest gaps (CUDA and ROCm)."""
    from .gaps import gap_operators

    ops: dict[str, list[str]] = {"host": []}
    if len(s.blocking):
        ops["sync"] = [str(s.blocking["op"].iat[0])]
    if str(s.meta.get("backend") or "cpu") in ("cuda", "rocm"):
        under = gap_operators(s.events)  # the rule asks for the same table: it is made once
        if len(under):
            ops["cpu_work"] = [str(op) for op in under["op"].head(3)]
    return ops


def removals(ops: dict[str, list[str]]) -> Callable[[pd.DataFrame], dict[str, Removal]]:
    """What each fix of :func:`made` removes from a window's events: every host call with the
    Python between them (``"host"``, taking no time but launching and waiting as recorded), the
    DataLoader wait, and the operators ``ops`` names."""
    def removed(ev: pd.DataFrame) -> dict[str, Removal]:
        out = {"host": Removal(host=np.isin(ev["kind"].to_numpy(), HOST_KINDS) & (ev["stream"].to_numpy() < 0),
                               python=True, only_time=True)}
        loader = (ev["kind"] == "dataloader").to_numpy()
        if loader.any():
            out["dataloader"] = Removal(host=loader)
        for key in ("sync", "cpu_work"):
            if key in ops:
                out[key] = Removal(host=ev["name"].isin(ops[key]).to_numpy())
        return out
    return removed


def bounds(s, removals: Callable[[pd.DataFrame], dict[str, Removal]]) -> dict[str, PathBound]:
    """The :class:`PathBound` of each removal ``removals`` names for the replayed steps' events
    (given those alone); empty where no step can be replayed."""
    steps = replayed_steps(s)
    if not steps:
        return {}
    windows = pd.DataFrame(s.meta["step_windows_ns"], columns=["step", "start_ns", "end_ns"]).set_index("step")
    start, middle, end = (int(windows.at[steps[0], "start_ns"]), int(windows.at[steps[1], "start_ns"]),
                          int(windows.at[steps[1], "end_ns"]))
    ev = step_events(s.events, start, end)
    if len(ev) > MAX_EVENTS:
        return {}
    wanted = removals(ev)
    names = list(wanted)
    rank = int(ev["rank"].iat[0]) if len(ev) else 0

    def replayed(lo: int, which: list[str]) -> tuple[int, dict[str, int]]:
        window = pd.DataFrame({"rank": [rank], "step": [0], "start_ns": [lo], "end_ns": [end]})
        length, without = replay(ev, window, 0, [wanted[n] for n in which], rank=rank)
        return length, {n: length - w for n, w in zip(which, without)}

    together, lost = replayed(start, names)
    # what loses nothing over both steps saves nothing: the second step alone is not asked about it
    alone, lost_alone = replayed(middle, [n for n in names if lost[n] > 0])
    return {n: PathBound(max(float(lost[n] - lost_alone.get(n, 0)) / 1e6, 0.0), max(together - alone, 0) / 1e6)
            for n in names}


def step_events(ev: pd.DataFrame, start: int, end: int) -> pd.DataFrame:
    """The events a replay of ``start``..``end`` reads: the host's there, and the device tasks
    their calls launched (however late they ran)."""
    ts, stream = ev["ts_ns"].to_numpy(), ev["stream"].to_numpy()
    host = (stream < 0) & (ts >= start) & (ts <= end)
    corr = ev["correlation"].to_numpy()
    launched = np.unique(corr[host & (corr >= 0)])
    device = (stream >= 0) & np.isin(corr, launched)
    return ev[host | device]


def stored(s, key: str, ops: list[str] | None = None) -> PathBound | None:
    """The bound of fix ``key`` stored with ``s`` (:func:`made`); None where none was made, or
    where it removed other operators than ``ops``."""
    got = (getattr(s, "path_bounds", None) or {}).get(key)
    if not got or (ops is not None and list(got.get("ops") or []) != list(ops)):
        return None
    return PathBound(float(got["saving_ms"]), float(got["length_ms"]), int(got.get("ranks") or 1))
