"""Steps of a rank whose trace has no ``ProfilerStep#`` marks (profiled without a schedule, or
``prof.step()`` never called), found from what every training iteration leaves in it.

``ProfilerStep#N`` runs from one ``prof.step()`` call to the next, and a loop calls it after the
optimizer: its steps tile the host timeline and each ends just after an optimizer step. So here:

- where ``Optimizer.step#<Class>.step`` recurs (torch.optim's own record_function), step k runs
  from the end of optimizer step k-1 to the end of optimizer step k (the first from the rank's
  first event): the next iteration's data loading, forward and backward fall in it, as they
  fall in a ProfilerStep; what follows the last optimizer step (a log line, the profiler's stop)
  is outside every step, as the host tail after the last ProfilerStep is;
- else, where a top-level user annotation (``record_function``) recurs, step k runs from the
  start of its k-th span to the start of the next (the last to its own end): spans that tile the
  loop as ProfilerStep does, gaps between them (the DataLoader outside the annotation) included;
- else the rank is one step, the whole trace.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")
# spans that recur every iteration but are no iteration: a collective's process-group span, the
# optimizer's other hooks, torch_npu's GC spans
NOT_ITERATION = re.compile(r"^(?:(?:gloo|nccl|hccl|mpi|ucc|xccl):|Optimizer\.|GC$)")
WHOLE_TRACE = "whole trace"


def infer_steps(events: pd.DataFrame, rank: int) -> tuple[pd.DataFrame, str]:
    """The steps (``rank, step, start_ns, end_ns``) of one rank's ``events``, and what cut them:
    ``"Optimizer.step#SGD.step"``, ``"annotation train_step"`` or :data:`WHOLE_TRACE`."""
    host = events[(events["device"].to_numpy() < 0)
                  & events["kind"].isin(["annotation", "host_op"]).to_numpy()]
    names = host["name"].astype(str)
    first = int(events["ts_ns"].min())
    optimizer = _outermost(host[names.str.match(OPTIMIZER_STEP.pattern).to_numpy()])
    if len(optimizer) >= 2:
        name = optimizer["name"].astype(str).value_counts().index[0]  # the most frequent: one optimizer of several
        marks = optimizer[optimizer["name"].astype(str) == name]
        ends = np.sort((marks["ts_ns"] + marks["dur_ns"]).to_numpy(np.int64))
        if len(ends) >= 2:
            return _frame(rank, np.r_[first, ends[:-1]], ends), name
    annotations = host[(host["kind"] == "annotation").to_numpy() & ~names.str.match(NOT_ITERATION.pattern).to_numpy()]
    top = _outermost(annotations)
    counts = top["name"].astype(str).value_counts()
    if len(counts) and counts.iloc[0] >= 2:
        name = counts.index[0]
        marks = top[top["name"].astype(str) == name].sort_values("ts_ns")
        starts = marks["ts_ns"].to_numpy(np.int64)
        last_end = int(marks["ts_ns"].iat[-1] + marks["dur_ns"].iat[-1])
        return _frame(rank, starts, np.r_[starts[1:], last_end]), f"annotation {name}"
    last = int((events["ts_ns"] + events["dur_ns"]).max())
    return _frame(rank, np.array([first]), np.array([last])), WHOLE_TRACE


def _outermost(spans: pd.DataFrame) -> pd.DataFrame:
    """The spans inside no other of ``spans`` (an optimizer step wrapping another, a nested
    annotation)."""
    if spans.empty:
        return spans
    spans = spans.sort_values(["ts_ns", "dur_ns"], ascending=[True, False], kind="stable")
    ends = (spans["ts_ns"] + spans["dur_ns"]).to_numpy()
    inside = np.zeros(len(spans), dtype=bool)
    inside[1:] = ends[1:] <= np.maximum.accumulate(ends)[:-1]
    return spans[~inside]


def _frame(rank: int, starts: np.ndarray, ends: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"rank": rank, "step": np.arange(len(starts), dtype=np.int64),
                         "start_ns": starts.astype(np.int64), "end_ns": ends.astype(np.int64)})
