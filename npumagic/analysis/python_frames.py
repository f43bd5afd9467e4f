"""Which of the user's Python frames take the host time outside torch operators: from
torch.profiler's with_stack ``python_function`` events, each moment of a step in which a
thread runs no operator is given to the innermost user frame running then (library frames,
``time.sleep`` or ``print``, count for the user frame that called them)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .intervals import Spans
from .syncs import library_frames

TOP = 5
MAX_FRAMES = 500_000  # user frames swept: a with_stack trace of a long loop holds millions


def python_self_time(ev: pd.DataFrame, steps: pd.DataFrame) -> list[dict]:
    """The user frames with the most time outside torch operators within ``steps`` (start_ns,
    end_ns), as ``{"frame", "us_per_step"}``, most first, at most :data:`TOP`; [] where no
    Python stacks were recorded. Only as many of the first steps as hold :data:`MAX_FRAMES`
    user frames are swept (a generator resumed in a loop is a frame per resumption)."""
    frames = ev[(ev["kind"] == "python").to_numpy()]
    if frames.empty or steps.empty:
        return []
    frames = frames[~library_frames(frames["name"])]
    start = frames["ts_ns"].to_numpy(np.int64)
    end = start + frames["dur_ns"].to_numpy(np.int64)
    windows = _first_steps(steps.sort_values("start_ns"), start, MAX_FRAMES)
    lo, hi = int(windows["start_ns"].min()), int(windows["end_ns"].max())
    frames = frames[(start < hi) & (end > lo)]  # the frames around the steps too: they nest the others
    ops = ev[((ev["kind"] == "host_op") & (ev["device"] < 0)).to_numpy()]
    ops = ops[((ops["ts_ns"] < hi) & (ops["ts_ns"] + ops["dur_ns"] > lo)).to_numpy()]
    # the thread that runs the steps: the one with the most operator time in them (another thread's
    # Python, or the profiler's pseudo-thread 0 holding a few outer frames, is not the step's time)
    lane = (ops.groupby("lane", observed=True)["dur_ns"].sum().idxmax() if len(ops)
            else frames["lane"].value_counts().idxmax())
    frames, ops = frames[(frames["lane"] == lane).to_numpy()], ops[(ops["lane"] == lane).to_numpy()]
    op_start = ops["ts_ns"].to_numpy(np.int64)
    in_steps = Spans.union_of(windows["start_ns"].to_numpy(np.int64), windows["end_ns"].to_numpy(np.int64))
    outside_ops = in_steps - Spans.union_of(op_start, op_start + ops["dur_ns"].to_numpy(np.int64))
    totals = _innermost(frames, outside_ops)
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])[:TOP]
    return [{"frame": name, "us_per_step": ns / 1000 / len(windows)} for name, ns in ranked if ns > 0]


def _first_steps(steps: pd.DataFrame, frame_start: np.ndarray, limit: int) -> pd.DataFrame:
    """The first steps that start at most ``limit`` frames together (at least one)."""
    counts = np.diff(np.searchsorted(np.sort(frame_start), np.r_[steps["start_ns"].to_numpy(), steps["end_ns"].iat[-1]]))
    return steps.iloc[: max(1, int(np.searchsorted(np.cumsum(counts), limit, side="right")))]


def _innermost(frames: pd.DataFrame, counted: Spans) -> dict[str, float]:
    """Per frame name, the time (ns) of ``counted`` in which it was the innermost frame."""
    start = frames["ts_ns"].to_numpy(np.int64)
    end = start + frames["dur_ns"].to_numpy(np.int64)
    names = frames["name"].astype(str).to_numpy()
    # boundaries in time order; at one instant ends before starts, outer starts before inner ones
    points = np.r_[start, end]
    closing = np.r_[np.zeros(start.size, bool), np.ones(end.size, bool)]
    which = np.r_[np.arange(start.size), np.arange(end.size)]
    order = np.lexsort((np.where(closing, 0, -np.r_[end, end]), ~closing, points))
    points, closing, which = points[order], closing[order], which[order]
    segment = counted.covered(points[:-1], points[1:])  # the counted time between two boundaries
    out: dict[str, float] = {}
    stack: list[int] = []
    for k in range(points.size - 1):
        if closing[k]:
            if stack and stack[-1] == which[k]:
                stack.pop()
            elif which[k] in stack:  # not properly nested (clock skew): drop it where it is
                stack.remove(which[k])
        else:
            stack.append(which[k])
        if stack and segment[k] > 0:
            name = names[stack[-1]]
            out[name] = out.get(name, 0.0) + float(segment[k])
    return out
