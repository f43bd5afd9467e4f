"""Device events whose time cannot belong to the capture (a device clock glitch: a kernel stamped
an hour after the trace, or at time zero), left out and counted instead of stretching a step.

The bound is physical, not a tuned threshold: device work runs after its launch, and once the
host stops launching the device can stay busy at most as long as all the recorded device work
together takes (and as long before the host's first event, for work queued before the capture).
A second of slack, or the capture's own length where that is longer, covers small clock offsets;
most device events outside is a clock offset, not a glitch, and leaves them all. A task longer than
the capture and all the other device work together is as impossible (a duration glitch)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..schema import device_work_rows

SLACK_NS = 1_000_000_000


def without_stray_device_events(events: pd.DataFrame) -> tuple[pd.DataFrame, int, tuple[int, int] | None]:
    """``events`` (one rank's) without the device events that start outside the capture's
    plausible window: (the events, how many were left out, the window ``[lo, hi]`` in ns, None
    when nothing was). Where most device events fall outside, the device clock is offset from
    the host's (as on some ROCm systems), not glitched: they are all kept."""
    device = device_work_rows(events)
    host = (events["device"] < 0).to_numpy()
    if not device.any() or not host.any():  # no capture window to judge by
        return events, 0, None
    ts, dur = events["ts_ns"].to_numpy(), events["dur_ns"].to_numpy()
    # reductions over the masked rows in place, not over copies of them (10M events: 0.35 -> 0.1 s)
    host_start = int(ts.min(where=host, initial=np.iinfo(np.int64).max))
    host_end = int(np.add(ts, dur, where=host, out=np.zeros_like(ts)).max(where=host, initial=host_start))
    capture = max(SLACK_NS, host_end - host_start)
    reach = int(dur.sum(where=device)) + capture
    lo, hi = host_start - reach, host_end + reach
    # nor can one task outlast the capture and all the other device work (a duration of 2^53 us:
    # its own length must not widen the window that judges it): 2 dur > reach + capture
    stray = device & ((ts < lo) | (ts > hi) | (dur > (reach + capture) // 2))
    n = int(stray.sum())
    if n == 0 or 2 * n >= int(device.sum()):
        return events, 0, None
    return events[~stray].reset_index(drop=True), n, (lo, hi)


def within(frame: pd.DataFrame, window: tuple[int, int]) -> pd.DataFrame:
    """The rows of ``frame`` (with ``ts_ns``) inside ``window``: a left-out task's other records."""
    ts = frame["ts_ns"].to_numpy()
    keep = (ts >= window[0]) & (ts <= window[1])
    return frame if keep.all() else frame[keep].reset_index(drop=True)


def stray_remark(n: int) -> str:
    """What a reader says of the device events it left out."""
    return (f"{n} device event{'s' if n > 1 else ''} left out: {'their timestamps lie' if n > 1 else 'its timestamp lies'} "
            "outside the capture (further from the host's events than all the device work could reach)")
