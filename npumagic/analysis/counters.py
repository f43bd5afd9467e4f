"""Counters -> per-step figures: HBM bandwidth, LLC hit rate, AI Core frequency (and the
operators that ran at a reduced frequency, as msprof-analyze's advisor checks), L2 cache rates
per operator type, and the host's CPU (npumagic's psutil samples).

A counter is a series of samples. Rates and ratios (bandwidth, hit rate, CPU %) are measured
over the interval since the previous sample, so a sample at ``t[i]`` holds on ``(t[i-1], t[i]]``
and the first sample of a series only opens it (msprof's first HBM sample is always 0).
Levels (frequency, memory) hold from their sample until the next one. A step's figure is the
time-weighted mean of the series over the part of the step the samples cover.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

LEVEL_UNITS = frozenset({"MHz", "B"})  # hold forward; every other unit is an interval mean
GIB = 2.0**30  # GB/s as msprof writes them: its MB are 2**20 bytes
# msprof-analyze's advisor (AICoreFreqChecker): an operator whose AI Core frequency is on
# average this far below the chip's maximum ran throttled (temperature or power cap).
FREQ_DROP_RATIO = 0.05
FREQ_DROP_PROBLEM = "AI Core Frequency Issues"
FREQ_DROP_DESCRIPTION = ("{} operators are found during frequency reduction, and the reduction ratio is larger "
                         "than {}.")
FREQ_DROP_SUGGESTION = "Please check the temperature or max power of your machine."

HARDWARE_COLUMNS = ["step", "hbm_read_gbps", "hbm_write_gbps", "hbm_gbps", "hbm_peak_gbps", "hbm_util",
                    "llc_hit_rate", "llc_read_gbps", "aicore_freq_mhz", "aicore_freq_min_mhz", "aicore_freq_drop"]
L2_COLUMNS = ["type", "count", "hit_rate", "victim_rate"]
FREQ_OP_COLUMNS = ["name", "count", "total_us", "drop_ratio", "mean_mhz", "max_mhz", "min_mhz"]


def _segments(ts: np.ndarray, values: np.ndarray, level: bool, horizon: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, value) of the constant pieces of one series (sorted by time)."""
    if level:
        ends = np.append(ts[1:], max(horizon, int(ts[-1])))
        return ts, ends, values
    return ts[:-1], ts[1:], values[1:]


def _cumulative(start: np.ndarray, end: np.ndarray, weight: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Integral of the piecewise-constant ``weight`` from the first piece up to each ``x``."""
    if start.size == 0:
        return np.zeros(x.shape, dtype=float)
    full = np.concatenate([[0.0], np.cumsum(weight * (end - start))])
    k = np.searchsorted(end, x, side="right")  # pieces entirely before x
    partial = np.where(k < start.size, weight[np.minimum(k, start.size - 1)]
                       * np.clip(x - start[np.minimum(k, start.size - 1)], 0, None), 0.0)
    return full[k] + partial


def interval_integrals(ts: np.ndarray, values: np.ndarray, starts: np.ndarray, ends: np.ndarray, level: bool,
                       horizon: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(integral of the series in ns x value, covered ns) over each window ``[starts, ends]``."""
    order = np.argsort(ts, kind="stable")
    ts, values = np.asarray(ts, dtype=np.int64)[order], np.asarray(values, dtype=float)[order]
    if ts.size == 0:
        zero = np.zeros(len(starts), dtype=float)
        return zero, zero
    s, e, v = _segments(ts, values, level, int(horizon if horizon is not None else ts[-1]))
    s, e = s.astype(float), e.astype(float)
    ok = ~np.isnan(v)
    s, e, v = s[ok], e[ok], v[ok]
    lo, hi = np.asarray(starts, dtype=float), np.asarray(ends, dtype=float)
    area = _cumulative(s, e, v, hi) - _cumulative(s, e, v, lo)
    covered = _cumulative(s, e, np.ones_like(v), hi) - _cumulative(s, e, np.ones_like(v), lo)
    return area, covered


def window_means(series: pd.DataFrame, starts: np.ndarray, ends: np.ndarray, horizon: int | None = None) -> np.ndarray:
    """Time-weighted mean of one series (columns ts_ns, value, unit) over each window."""
    level = str(series["unit"].iat[0]) in LEVEL_UNITS if len(series) else False
    area, covered = interval_integrals(series["ts_ns"].to_numpy(), series["value"].to_numpy(), starts, ends, level,
                                       horizon)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(covered > 0, area / np.where(covered > 0, covered, 1), np.nan)


def window_peaks(series: pd.DataFrame, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Highest sample whose interval overlaps each window (NaN where none)."""
    ts = series["ts_ns"].to_numpy()
    v = series["value"].to_numpy(dtype=float)
    out = np.full(len(starts), np.nan)
    if ts.size < 2:
        return out
    # interval samples cover (t[i-1], t[i]]: sample i overlaps [a, b] when t[i-1] < b and t[i] > a
    first = np.searchsorted(ts, starts, side="right")
    last = np.searchsorted(ts[:-1], ends, side="left")  # samples i with t[i-1] < b
    for j, (a, b) in enumerate(zip(np.maximum(first, 1), last)):
        if b >= a:
            out[j] = np.nanmax(v[a:b + 1])
    return out


def _totals(series: pd.DataFrame, parts: dict[str, str], starts, ends) -> dict[str, np.ndarray]:
    """For each part (a name suffix; "" for every series), the sum over its series of their
    window means: each series' means are worked out once for every part it is in."""
    total = {part: np.zeros(len(starts)) for part in parts}
    covered = {part: np.zeros(len(starts), dtype=bool) for part in parts}
    for name, one in series.groupby(series["name"].astype(str), sort=False):
        mean = window_means(one, starts, ends)
        for part, suffix in parts.items():
            if name.endswith(suffix):
                covered[part] |= ~np.isnan(mean)
                total[part] += np.nan_to_num(mean)
    return {part: np.where(covered[part], total[part], np.nan) for part in parts}


def _peak_of_sum(series: pd.DataFrame, starts, ends) -> np.ndarray:
    """The peak over each window of the sum of ``series`` (samples summed per timestamp)."""
    if series.empty:
        return np.full(len(starts), np.nan)
    summed = series.groupby("ts_ns", sort=True)["value"].sum().reset_index().assign(unit=series["unit"].iat[0])
    return window_peaks(summed, starts, ends)


def hardware_table(counters: pd.DataFrame, steps: pd.DataFrame, hbm_peak_bytes_per_s: float | None = None,
                   nominal_mhz: float | None = None) -> pd.DataFrame:
    """Per-step device counter figures of one rank, :data:`HARDWARE_COLUMNS`.

    Parameters
    ----------
    counters : the rank's counters (:data:`~npumagic.analysis.schema.COUNTER_COLUMNS`).
    steps : the rank's steps (``step``, ``start_ns``, ``end_ns``).
    hbm_peak_bytes_per_s : the device's peak HBM bandwidth; ``hbm_util`` is NaN without it.
    nominal_mhz : the AI Core's maximum frequency (default: the highest one sampled).

    Returns
    -------
    DataFrame: HBM read/write/total mean bandwidth and the peak of the total (GB/s of 2**30
    bytes, summed over HBM channels), ``hbm_util`` (mean / device peak), the throughput-weighted
    LLC read hit rate (0..1) and read throughput, the AI Core frequency (mean, minimum) and its
    drop below ``nominal_mhz`` (0..1). NaN where the counter was not recorded.
    """
    if steps.empty or counters.empty:
        return pd.DataFrame(columns=HARDWARE_COLUMNS)
    starts, ends = steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy()
    group = counters["group"]  # categorical: compared by category, not row by row as text
    hbm = counters[(group == "HBM") & (counters["unit"] == "B/s")]
    means = _totals(hbm, {"read": "/Read", "write": "/Write", "both": ""}, starts, ends)
    read, write, both = means["read"], means["write"], means["both"]
    peak = _peak_of_sum(hbm, starts, ends)
    llc_rate, llc_read = _llc(counters[group == "LLC"], starts, ends)
    freq = counters[group == "AI Core Freq"]
    freq_mean = freq_min = np.full(len(steps), np.nan)
    drop = np.full(len(steps), np.nan)
    if len(freq):
        horizon = int(ends.max())
        freq_mean = window_means(freq, starts, ends, horizon)
        freq_min = _window_min_level(freq, starts, ends)
        top = nominal_mhz or float(freq["value"].max())
        drop = np.where(top > 0, 1.0 - freq_mean / top, np.nan)
    out = pd.DataFrame({
        "step": steps["step"].to_numpy(),
        "hbm_read_gbps": read / GIB, "hbm_write_gbps": write / GIB, "hbm_gbps": both / GIB,
        "hbm_peak_gbps": peak / GIB,
        "hbm_util": both / hbm_peak_bytes_per_s if hbm_peak_bytes_per_s else np.nan,
        "llc_hit_rate": llc_rate, "llc_read_gbps": llc_read / GIB,
        "aicore_freq_mhz": freq_mean, "aicore_freq_min_mhz": freq_min, "aicore_freq_drop": drop,
    })
    return out[HARDWARE_COLUMNS]


def _llc(llc: pd.DataFrame, starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """Throughput-weighted LLC read hit rate and total read throughput per window."""
    nan = np.full(len(starts), np.nan)
    if llc.empty:
        return nan, nan
    names = llc["name"].astype(str)
    thr = llc[names.str.endswith("Read/Throughput")]
    hits = llc[names.str.endswith("Read/Hit Rate")]
    if thr.empty:
        return nan, nan
    weighted, weights, total = np.zeros(len(starts)), np.zeros(len(starts)), np.zeros(len(starts))
    for name, t in thr.groupby(thr["name"].astype(str), sort=False):
        area_t, covered = interval_integrals(t["ts_ns"].to_numpy(), t["value"].to_numpy(), starts, ends, False)
        total += np.where(covered > 0, area_t / np.where(covered > 0, covered, 1), 0.0)
        h = hits[hits["name"].astype(str) == name.replace("/Throughput", "/Hit Rate")]
        if h.empty:
            continue
        both = t[["ts_ns", "value"]].merge(h[["ts_ns", "value"]], on="ts_ns", suffixes=("_t", "_h"))
        area_p, _ = interval_integrals(both["ts_ns"].to_numpy(), (both["value_t"] * both["value_h"]).to_numpy(),
                                       starts, ends, False)
        area_w, _ = interval_integrals(both["ts_ns"].to_numpy(), both["value_t"].to_numpy(), starts, ends, False)
        weighted += area_p
        weights += area_w
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(weights > 0, weighted / weights, np.nan), total


def _window_min_level(series: pd.DataFrame, starts, ends) -> np.ndarray:
    """Lowest value of a level series in effect at any time within each window."""
    ts = series["ts_ns"].to_numpy()
    order = np.argsort(ts, kind="stable")
    ts, v = ts[order], series["value"].to_numpy(dtype=float)[order]
    first = np.maximum(np.searchsorted(ts, starts, side="right") - 1, 0)  # the value in effect at the start
    last = np.searchsorted(ts, ends, side="right") - 1
    if not len(first):
        return np.full(0, np.nan)
    # min over v[first:last + 1] of every window at once: fmin (NaN-skipping) reduced between the
    # pairs of bounds (a trailing NaN makes last + 1 a valid bound); windows with last < first: NaN
    bounds = np.column_stack([first, np.maximum(last + 1, first + 1)]).ravel()
    lowest = np.fmin.reduceat(np.append(v, np.nan), bounds)[::2]
    return np.where(last >= first, lowest, np.nan)


def frequency_drops(counters: pd.DataFrame, kernels: pd.DataFrame, nominal_mhz: float | None = None,
                    threshold: float = FREQ_DROP_RATIO) -> pd.DataFrame:
    """Operators that ran at a reduced AI Core frequency, as msprof-analyze's AICoreFreqChecker:
    per operator name, the lowest frequency during each run; ``drop_ratio`` = sum(max - f) /
    (max x runs); kept when at least ``threshold``. Columns :data:`FREQ_OP_COLUMNS`, longest first.

    Parameters
    ----------
    counters : one rank's counters (the "AI Core Freq" series is used).
    kernels : that rank's kernel events (name, ts_ns, dur_ns).
    nominal_mhz : the chip's maximum frequency (msprof reads it from info.json; default the
        highest frequency sampled).
    """
    freq = counters[counters["group"] == "AI Core Freq"]
    if freq.empty or kernels.empty:
        return pd.DataFrame(columns=FREQ_OP_COLUMNS)
    top = nominal_mhz or float(freq["value"].max())
    start = kernels["ts_ns"].to_numpy()
    lowest = _window_min_level(freq, start, start + kernels["dur_ns"].to_numpy())
    runs = pd.DataFrame({"name": kernels["name"].astype(str).to_numpy(), "dur_us": kernels["dur_ns"].to_numpy() / 1e3,
                         "freq": lowest}).dropna(subset=["freq"])
    g = runs.groupby("name", sort=False)
    table = g.agg(count=("freq", "size"), total_us=("dur_us", "sum"), mean_mhz=("freq", "mean"),
                  max_mhz=("freq", "max"), min_mhz=("freq", "min")).reset_index()
    table["drop_ratio"] = (top - table["mean_mhz"]) / top
    table = table[table["drop_ratio"] >= threshold]
    return table.sort_values(["total_us", "drop_ratio"], ascending=False).reset_index(drop=True)[FREQ_OP_COLUMNS]


def l2_table(counters: pd.DataFrame, kernels: pd.DataFrame) -> pd.DataFrame:
    """L2 cache hit and victim rates (0..1, mean over runs) per operator type, from
    ``l2_cache.csv`` (profile with ``--l2-cache``). Columns :data:`L2_COLUMNS`."""
    l2 = counters[counters["group"] == "L2 Cache"]
    if l2.empty or kernels.empty:
        return pd.DataFrame(columns=L2_COLUMNS)
    types = kernels.drop_duplicates("ts_ns").set_index("ts_ns")["type"].astype(str)
    frame = l2.assign(type=types.reindex(l2["ts_ns"]).to_numpy(), metric=l2["name"].astype(str).str.split("/").str[-1])
    frame = frame.dropna(subset=["type"])
    wide = frame.pivot_table(index="type", columns="metric", values="value", aggfunc="mean")
    count = frame.groupby("type")["ts_ns"].nunique()
    out = pd.DataFrame({"type": wide.index, "count": count.reindex(wide.index).to_numpy(),
                        "hit_rate": wide.get("Hit Rate", pd.Series(np.nan, index=wide.index)).to_numpy(),
                        "victim_rate": wide.get("Victim Rate", pd.Series(np.nan, index=wide.index)).to_numpy()})
    return out.sort_values("count", ascending=False, kind="stable").reset_index(drop=True)[L2_COLUMNS]


HOST_COLUMNS = ["step", "process_cpu_pct", "main_thread_cpu_pct", "rss_bytes", "workers", "worker_cpu_pct_mean",
                "worker_cpu_pct_max", "cores", "cores_busy_pct", "cores_idle", "main_thread_wait_pct",
                "workers_waiting_pct", "workers_blocked_pct"]
CORE_IDLE_PCT = 10.0  # a core busy less than this over a step counts as idle


def host_table(counters: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per-step host figures from npumagic's psutil samples (group "Host"), :data:`HOST_COLUMNS`.

    CPU figures are percent of one core, time-weighted over the step: the process (all its
    threads), the thread that ran the cell, the DataLoader workers (mean and max over workers;
    ``workers`` is how many were sampled in the step), and the machine's cores (mean busy %, and
    ``cores_idle``, how many were busy under :data:`CORE_IDLE_PCT`); ``main_thread_wait_pct``: the
    share of the step the cell's thread was ready to run but waited for a core; ``workers_waiting_pct``
    and ``workers_blocked_pct``: the share of the workers' readings that found them waiting for work (their
    index queue empty) or blocked in another system call (I/O, a sleep, a lock). ``rss_bytes``: the
    process's mean resident memory. Empty when the run has no host samples.
    """
    host = counters[counters["group"] == "Host"]
    if host.empty or steps.empty:
        return pd.DataFrame(columns=HOST_COLUMNS)
    starts, ends = steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy()
    names = host["name"].astype(str)
    means = {name: window_means(series, starts, ends) for name, series in host.groupby(names, sort=False)}
    nan = np.full(len(steps), np.nan)

    def stack(prefix: str) -> np.ndarray:
        cols = [v for k, v in means.items() if k.startswith(prefix)]
        return np.vstack(cols) if cols else np.full((1, len(steps)), np.nan)

    workers, cores = stack("Worker "), stack("Core ")
    with np.errstate(all="ignore"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN steps stay NaN
            out = pd.DataFrame({
                "step": steps["step"].to_numpy(),
                "process_cpu_pct": means.get("Process/CPU", nan),
                "main_thread_cpu_pct": means.get("Main thread/CPU", nan),
                "rss_bytes": means.get("Process/RSS", nan),
                "workers": (~np.isnan(workers)).sum(axis=0),
                "worker_cpu_pct_mean": np.nanmean(workers, axis=0),
                "worker_cpu_pct_max": np.nanmax(workers, axis=0),
                # the machine's cores where any was read in the step: a core with no reading in a short
                # step (its clock ticks every 10 ms) is still there
                "cores": np.where(np.isnan(cores).all(axis=0), 0, len(cores)),
                "cores_busy_pct": np.nanmean(cores, axis=0),
                "cores_idle": (cores < CORE_IDLE_PCT).sum(axis=0),
                "main_thread_wait_pct": means.get("Main thread/wait", nan),
                "workers_waiting_pct": means.get("Workers/waiting", nan),
                "workers_blocked_pct": means.get("Workers/blocked", nan),
            })
    return out[HOST_COLUMNS]
