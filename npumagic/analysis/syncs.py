"""Host calls that block on the device (item, .cpu(), synchronize, ...), counted per step and
traced back to the user's source line where the trace has Python frames."""

from __future__ import annotations

import re
import sys

import numpy as np
import pandas as pd

from .roles import in_data_preparation


SYNC_COLUMNS = ["name", "count", "total_us", "per_step", "source"]


SYNC_HOST_OPS = frozenset({"aten::_local_scalar_dense", "aten::item"})


# the explicit synchronisation calls and synchronous copies the CUDA rules find (rules.cuda), and
# where.locate places
SYNC_APIS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "hipDeviceSynchronize",
             "hipStreamSynchronize", "hipEventSynchronize")
SYNC_COPIES = ("cudaMemcpy", "cudaMemset", "cudaMemcpy2D", "cudaMemcpy3D", "hipMemcpy", "hipMemset")


def is_host_sync(ev: pd.DataFrame) -> pd.Series:
    """Host calls that block until the device catches up (runtime syncs, ``.item()``)."""
    on_host = ev["device"] < 0
    return on_host & ((ev["kind"] == "sync") | ((ev["kind"] == "host_op") & ev["name"].isin(SYNC_HOST_OPS)))


LIBRARY_FRAME = re.compile(r"^<built-in|site-packages|/lib/python|^(?:torch\w*|IPython|ipykernel|traitlets|tornado|asyncio|"
                            r"typing|contextlib|threading|multiprocessing|importlib|npumagic|nn\.Module|runpy)\b|"
                            r"/npumagic/|<frozen")


_STDLIB = frozenset(sys.stdlib_module_names)


def library_frames(names: pd.Series) -> np.ndarray:
    """Which Python frame names (``file(line): function``) are not the user's code: the
    interpreter's, torch's and other installed packages', the standard library's (torch names
    those by their file alone: ``pathlib.py(1036): open``)."""
    codes, distinct = pd.factorize(names)  # judged once per distinct frame
    distinct = pd.Series(np.asarray(distinct), dtype=object).astype(str)
    stems = distinct.str.extract(r"^([A-Za-z_][A-Za-z0-9_]*)\.py\(", expand=False)
    library = np.r_[distinct.str.contains(LIBRARY_FRAME).to_numpy(bool) | stems.isin(_STDLIB).to_numpy(), False]
    return library[codes]  # a missing name (code -1) is the appended False


MAX_SYNCS_LOCATED = 5000


def _user_source(ev: pd.DataFrame, syncs: pd.DataFrame) -> np.ndarray:
    """For each sync, the innermost enclosing user-code Python frame recorded on its thread
    (torch.profiler's with_stack python_function events); "" where none was recorded."""
    source = syncs["source"].astype(str).to_numpy().copy()
    frames = ev[ev["kind"] == "python"]
    if frames.empty:
        return source
    frames = frames[~library_frames(frames["name"])]
    for lane, group in frames.groupby("lane", observed=True):
        mine = np.flatnonzero((syncs["lane"] == lane).to_numpy() & (source == ""))[:MAX_SYNCS_LOCATED]
        start = group["ts_ns"].to_numpy()
        end = start + group["dur_ns"].to_numpy()
        label = group["name"].astype(str).to_numpy()
        for i in mine:
            t0 = syncs["ts_ns"].iat[i]
            inside = np.flatnonzero((start <= t0) & (end >= t0 + syncs["dur_ns"].iat[i]))
            if inside.size:
                source[i] = label[inside[np.argmax(start[inside])]]
    return source


def sync_table(ev: pd.DataFrame, n_steps: int) -> pd.DataFrame:
    syncs = ev[is_host_sync(ev)]
    if syncs.empty:
        return pd.DataFrame(columns=SYNC_COLUMNS)
    frame = pd.DataFrame({"name": syncs["name"].astype(str), "dur_us": syncs["dur_ns"] / 1000.0,
                          "source": _user_source(ev, syncs)})
    g = frame.groupby("name", sort=False)
    table = g["dur_us"].agg(count="count", total_us="sum").reset_index()
    table["per_step"] = table["count"] / n_steps
    table["source"] = g["source"].agg(lambda s: s[s != ""].mode().iat[0] if (s != "").any() else "").to_numpy()
    # by the host time they block: many cheap calls matter less than a few that wait long
    return table.sort_values("total_us", ascending=False, kind="stable").reset_index(drop=True)[SYNC_COLUMNS]


# A loop iteration and the binding that enters the next call take ~1 µs of Python; a longer gap
# between two calls holds other Python (metric math, logging), which dropping the calls leaves.
LOOP_GAP_US = 10.0


def python_between_us(ev: pd.DataFrame | None, name: str) -> tuple[float, float] | None:
    """The host time (µs) between consecutive calls of operator ``name`` on a thread within a step
    (a call's end to the next operator's start, where that operator is the next call): the Python
    of the loop that makes them and the binding that enters each, which no trace event records and
    which removing the calls removes too: gaps under :data:`LOOP_GAP_US`. Their median (the typical
    call) and mean; None where no call is followed that closely by another."""
    if ev is None or ev.empty:
        return None
    host = ev[((ev["kind"] == "host_op") & (ev["device"] < 0) & (ev["step"] >= 0)).to_numpy()]
    gaps = []
    for _, ops in host.groupby("lane", observed=True, sort=False):
        order = np.argsort(ops["ts_ns"].to_numpy(), kind="stable")
        starts, steps = ops["ts_ns"].to_numpy()[order], ops["step"].to_numpy()[order]
        named = (ops["name"].astype(str) == name).to_numpy()[order]
        ends = starts[named] + ops["dur_ns"].to_numpy()[order][named]
        after = np.searchsorted(starts, ends, "left")  # the first operator starting once the call ended
        ok = after < starts.size
        ok[ok] = named[after[ok]] & (steps[after[ok]] == steps[named][ok])
        gaps.append(starts[after[ok]] - ends[ok])
    found = np.concatenate(gaps) if gaps else np.zeros(0)
    found = found[found < LOOP_GAP_US * 1000]
    return (float(np.median(found)) / 1000, float(found.mean()) / 1000) if found.size else None


def step_syncs(s) -> pd.DataFrame:
    """Summary ``s``'s syncs less those the DataLoader makes (``.item()`` in ``Dataset.__getitem__``
    reads a CPU tensor: no sync in the step, on any device)."""
    ev = s.events
    if ev is None or ev.empty or s.syncs.empty:
        return s.syncs
    mask = is_host_sync(ev).to_numpy()
    inside = in_data_preparation(ev, mask)
    if not inside.any():
        return s.syncs
    picked = ev[mask][inside]
    removed = pd.DataFrame({"name": picked["name"].astype(str).to_numpy(), "us": picked["dur_ns"].to_numpy() / 1000.0})
    removed = removed.groupby("name")["us"].agg(["count", "sum"])
    table = s.syncs.copy()
    steps = (table["count"] / table["per_step"]).where(table["per_step"] > 0)
    gone = table["name"].map(removed["count"]).fillna(0)
    table["total_us"] = table["total_us"] - table["name"].map(removed["sum"]).fillna(0.0)
    table["count"] = table["count"] - gone
    table["per_step"] = table["count"] / steps
    return table[table["count"] > 0].reset_index(drop=True)


def calls_median_ms(s, name: str) -> float | None:
    """The median step's time in the host calls ``name`` (ms; a step without any counts 0), the
    DataLoader's own left out: a call descheduled on a busy machine holds milliseconds of one step,
    which the mean would spread over all of them and the median step (what a fix is verified on)
    never had. None without events or steps."""
    ev = s.events
    if ev is None or ev.empty or not len(s.steps):
        return None
    mask = is_host_sync(ev).to_numpy() & (ev["name"].astype(str) == name).to_numpy() & (ev["step"] >= 0).to_numpy()
    if mask.any():
        mask[mask] = ~in_data_preparation(ev, mask)
    per_step = ev.loc[mask, "dur_ns"].groupby(ev.loc[mask, "step"].to_numpy()).sum()
    return float(np.median(per_step.reindex(s.steps["step"].to_numpy(), fill_value=0).to_numpy())) / 1e6
