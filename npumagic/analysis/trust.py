"""Whether a run's step times can be trusted: other processes on the accelerator (the driver's
tool, read when the capture starts) and CPU contention while the cell ran, from
npumagic's host samples. Where Linux says it, contention is the time the cell's thread was
ready to run but waited for a core (schedstat's run delay): that time is in every step time
measured. Elsewhere it is judged from other processes' share of the cores beside this
process's own. A contended run's step times carry its neighbours' load, so its verdict says
so and a comparison with it is never called significant.

``NPUMAGIC_CONTENDED_WAIT_PCT`` sets the wait share (percent) from which a run is contended
(default :data:`~npumagic.analysis.thresholds.CONTENDED_WAIT_PCT`; 100 turns the check off, for
a machine that is always shared and whose comparisons are judged knowing it)."""

from __future__ import annotations

import math
import os
import statistics
from typing import TYPE_CHECKING, Any, Mapping

from ..wording import say
from . import thresholds as T

if TYPE_CHECKING:
    from .run_facts import RunFacts


def decide_anyway() -> str:
    """What a comparison that a neighbour's load left open says to do about it, in the shell's words."""
    return say("decide_anyway")


def wait_threshold() -> float:
    """The wait share (percent) from which a run is contended: ``NPUMAGIC_CONTENDED_WAIT_PCT``
    when it is a number, else the default."""
    try:
        return float(os.environ.get("NPUMAGIC_CONTENDED_WAIT_PCT", ""))
    except ValueError:
        return T.CONTENDED_WAIT_PCT


def contention(s) -> dict[str, Any]:
    """The host's CPU load from other processes over the steps of Summary ``s``: see
    :func:`host_contention`."""
    return host_contention(host_columns(s))


def host_columns(s) -> dict[str, list]:
    """Summary ``s``'s host samples as plain columns (what a stored Summary's read without
    pandas gives: ``HistoryStore.stored_table``)."""
    h = s.host
    return {} if h is None else {str(c): h[c].tolist() for c in h.columns}


def _numbers(values) -> list[float]:
    return [float(v) for v in values if v is not None and v == v]


def _nanmean(values) -> float:
    kept = _numbers(values)
    return statistics.fmean(kept) if kept else math.nan


def host_contention(h: Mapping[str, list]) -> dict[str, Any]:
    """The host's CPU load from other processes over the steps, from the host samples' columns
    (``cores``, ``cores_busy_pct``, ``process_cpu_pct``, ``main_thread_wait_pct``): ``others_core_pct``
    (percent of one core, averaged over the steps), ``cores``, ``machine_busy_pct`` (all cores,
    percent of one core) and ``contended``; {} when the run has no host samples. Plain Python:
    ``npumagic check`` imports neither numpy nor pandas."""
    cores = _numbers(h.get("cores", ()))
    if not any(c > 0 for c in cores):
        return {}
    most = max(cores)
    machine = _nanmean(h["cores_busy_pct"]) * most
    own = _nanmean(h["process_cpu_pct"]) if _numbers(h["process_cpu_pct"]) else 0.0
    others = max(machine - own, 0.0)
    waits = _numbers(h.get("main_thread_wait_pct", ()))
    if waits:
        wait = statistics.fmean(waits)
        contended = wait >= wait_threshold() and wait_threshold() < 100
    else:  # others hold at least half a core and the machine has under half a core to spare
        wait = float("nan")
        contended = (others >= T.CONTENDED_OTHERS_PCT and machine >= most * 100 - T.CONTENDED_SPARE_PCT
                     and wait_threshold() < 100)
    return {"others_core_pct": others, "cores": int(most), "machine_busy_pct": machine, "wait_pct": wait,
            "contended": bool(contended)}


def reasons(s, facts: RunFacts | None = None) -> list[str]:
    """Why a run's step times are unreliable, as short clauses; [] when nothing says so
    (``facts``: the run record's, with the other processes on the device)."""
    return host_reasons(host_columns(s), facts)


def host_reasons(host: Mapping[str, list], facts: RunFacts | None = None) -> list[str]:
    """:func:`reasons` from the host samples' columns (:func:`host_contention`)."""
    said = []
    others = facts.device_neighbours if facts is not None else []
    if others:
        listed = ", ".join(f"{p.get('name', '?')} (pid {p.get('pid')}, {p.get('memory_mib', float('nan')):,.0f} MiB)"
                           for p in others[:3])
        said.append(f"{len(others)} other process{'es' if len(others) > 1 else ''} used the device while it ran "
                    f"({listed}{', ...' if len(others) > 3 else ''})")
    c = host_contention(host)
    if c.get("contended"):
        waited = (f"the profiled thread waited for a core {c['wait_pct']:.0f}% of the time and "
                  if c["wait_pct"] == c["wait_pct"] else "")
        said.append(f"{waited}other processes kept {c['others_core_pct'] / 100:.1f} cores busy while the steps ran")
    return said


def caveat(s, facts: RunFacts | None = None) -> str:
    """A sentence saying the step times are unreliable, and why, or "" when nothing says so."""
    said = reasons(s, facts)
    if facts is not None and facts.device_neighbours:
        said[0] += ": they share its compute and memory bandwidth, so step times are unreliable"
    if contention(s).get("contended"):
        said[-1] += ": step times carry their load and are unreliable; profile again on a quiet machine"
    return "; ".join(said)
