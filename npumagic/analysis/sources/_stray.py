"""Device events whose time cannot belong to the capture (a device clock glitch: a kernel stamped
an hour after the trace, or at time zero), left out and counted instead of stretching a step.

The bound is physical, not a tuned threshold: device work runs after its launch, and once the
host stops launching the device can stay busy at most as long as all the recorded device work
together takes (and as long before the host's first event, for work queued before the capture).
A second of slack, or the capture's own length where that is longer, covers clock offsets."""

from __future__ import annotations

import pandas as pd

DEVICE_KINDS = ("kernel", "comm", "memcpy")
SLACK_NS = 1_000_000_000


def without_stray_device_events(events: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """``events`` (one rank's) without the device events that start outside the capture's
    plausible window, and how many those were (the same frame when none)."""
    device = (events["kind"].isin(DEVICE_KINDS) & (events["device"] >= 0)).to_numpy()
    if not device.any() or device.all():  # no host events: no capture window to judge by
        return events, 0
    ts, dur = events["ts_ns"].to_numpy(), events["dur_ns"].to_numpy()
    host_start, host_end = ts[~device].min(), (ts[~device] + dur[~device]).max()
    reach = int(dur[device].sum()) + max(SLACK_NS, int(host_end - host_start))
    stray = device & ((ts < host_start - reach) | (ts > host_end + reach))
    if not stray.any():
        return events, 0
    return events[~stray].reset_index(drop=True), int(stray.sum())


def stray_remark(n: int) -> str:
    """What a reader says of the device events it left out."""
    return (f"{n} device event{'s' if n > 1 else ''} left out: {'their timestamps lie' if n > 1 else 'its timestamp lies'} "
            "outside the capture (further from the host's events than all the device work could reach)")
