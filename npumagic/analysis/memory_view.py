"""The memory of one run, as one view (:func:`memory_view` of a
:class:`~npumagic.analysis.sources.memory.MemoryRecords`): the peak of PyTorch's pool and which
operators' blocks make it, a per-operator table, churn (large blocks freed within their step),
growth across steps (a leak: its slope per step, whether beyond noise, the operators whose blocks
are never freed), and the memory beyond the pool (each torch_npu component; APP - PTA).

Everything is on one device: the accelerator with the highest peak, else the CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .thresholds import CHURN_MIN_BYTES, GROWTH_MIN_BYTES_PER_STEP, GROWTH_MIN_STEPS

CONFIDENCE = 0.95
OPERATOR_COLUMNS = ["name", "allocations", "bytes", "mean_lifetime_us", "live_at_step_end_bytes"]
HOLDER_COLUMNS = ["operator", "blocks", "bytes"]
STEP_OPERATOR_COLUMNS = ["step", "name", "allocations", "bytes"]
STEP_COLUMNS = ["step", "low_allocated_bytes", "peak_allocated_bytes", "end_allocated_bytes", "churn_count",
                "churn_bytes"]


@dataclass(frozen=True)
class Growth:
    """Allocated memory at each step's end against the step (the first left out with enough
    steps): least-squares slope with its 95% interval; ``growing``: the interval above zero and
    the slope at least :data:`~.thresholds.GROWTH_MIN_BYTES_PER_STEP`. ``operators``: the
    operators whose blocks of those steps were never freed (operator, blocks, bytes)."""

    bytes_per_step: float | None = None
    interval: tuple[float, float] | None = None
    steps_fitted: int = 0
    growing: bool = False
    operators: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=HOLDER_COLUMNS))

    def sentence(self) -> str:
        if self.bytes_per_step is None:
            return (f"growth: not judged ({self.steps_fitted} step ends; {GROWTH_MIN_STEPS} or more are needed "
                    "after the first step)")
        lo, hi = self.interval
        said = (f"{_size(self.bytes_per_step)} per step over {self.steps_fitted} steps "
                f"(95% interval {_size(lo)} to {_size(hi)})")
        if not self.growing:
            return f"growth: none beyond noise ({said})"
        names = ", ".join(self.operators["operator"].head(3).astype(str))
        return f"growth: GROWING {said}" + (f"; never freed: {names}" if names else "")


@dataclass(frozen=True)
class MemoryView:
    source: str
    device: str | None
    pool: str
    peak_allocated_bytes: float | None
    peak_reserved_bytes: float | None
    peak_ts_ns: int | None
    peak_operator: str | None
    holders: pd.DataFrame  # HOLDER_COLUMNS: the blocks live at the peak, by the operator that allocated them
    module_holders: pd.DataFrame  # module, blocks, bytes: the same by nn.Module (where the trace records them)
    operators: pd.DataFrame  # OPERATOR_COLUMNS
    steps: pd.DataFrame  # STEP_COLUMNS
    churn_count: int
    churn_bytes: float
    churn_operators: pd.DataFrame  # HOLDER_COLUMNS: who allocates the churned blocks
    growth: Growth
    components: dict[str, float]  # name -> peak bytes it holds on the device
    beyond_pool_bytes: float | None  # APP's peak reserved - PTA's reserved then (torch_npu)
    capacity_bytes: float | None
    static_bytes: float
    notes: tuple[str, ...] = ()
    reserved_at_peak_bytes: float | None = None  # the pool's reserved memory when allocated peaked
    read: str = ""  # the file or rank folder read (one of a folder's)
    paired: bool = True  # allocations could be paired with their frees (addresses recorded)
    # STEP_OPERATOR_COLUMNS: each operator's allocations within each step (none: not listed)
    step_operators: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=STEP_OPERATOR_COLUMNS))

    @property
    def unused_reserved_at_peak_bytes(self) -> float | None:
        """Reserved minus allocated at the peak: cached, free, yet not enough or not whole for what
        was asked then (fragmentation, or the cache kept from an earlier, larger phase)."""
        if self.reserved_at_peak_bytes is None or self.peak_allocated_bytes is None:
            return None
        return self.reserved_at_peak_bytes - self.peak_allocated_bytes

    @property
    def recorded(self) -> bool:
        return self.peak_allocated_bytes is not None or bool(self.components)


def memory_view(records) -> MemoryView:
    device = _device(records)
    totals = records.totals[records.totals["device"] == device]
    pool = totals[totals["component"] == records.pool].sort_values("ts_ns", kind="stable")
    blocks = records.blocks[records.blocks["device"] == device]
    peak_alloc = pool["allocated_bytes"].max() if pool["allocated_bytes"].notna().any() else None
    peak_ts = int(pool.loc[pool["allocated_bytes"].idxmax(), "ts_ns"]) if peak_alloc is not None else None
    peak_res = pool["reserved_bytes"].max() if pool["reserved_bytes"].notna().any() else None
    reserved_then = _num(pool.loc[pool["allocated_bytes"].idxmax(), "reserved_bytes"]) if peak_alloc is not None \
        and peak_res else None
    steps = records.steps.sort_values("start_ns").reset_index(drop=True)
    step_table, churned = _steps(steps, pool, blocks)
    last_end = int(steps["end_ns"].iloc[-1]) if len(steps) else None
    return MemoryView(
        records.source, device, records.pool, _num(peak_alloc), _num(peak_res), peak_ts,
        _peak_operator(blocks, peak_ts), _holders(_live(blocks, peak_ts)) if peak_ts is not None else _holders(blocks[:0]),
        _module_holders(blocks, peak_ts),
        _operators(blocks, last_end), step_table, int(len(churned)), float(churned["bytes"].sum()), _holders(churned),
        _growth(step_table, steps, blocks), _components(totals), _beyond_pool(totals, records.pool),
        records.capacity_bytes, float(records.static["bytes"].sum()), records.notes, reserved_then, str(records.path),
        bool(len(records.blocks)) or records.totals.empty, _step_operators(steps, blocks))


def _num(value) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _device(records) -> str | None:
    """The accelerator whose pool peaks highest, else the CPU (else any device recorded)."""
    pool = records.totals[records.totals["component"] == records.pool]
    for frame in (pool, records.totals, records.blocks):
        if len(frame):
            peaks = frame.groupby("device")[frame.columns.intersection(["allocated_bytes", "bytes"])[0]].max()
            devices = [d for d in peaks.sort_values(ascending=False).index if not str(d).lower().startswith("cpu")]
            return str(devices[0] if devices else peaks.index[0])
    return None


def _live(blocks: pd.DataFrame, at_ns: int) -> pd.DataFrame:
    return blocks[(blocks["alloc_ns"] <= at_ns) & ((blocks["free_ns"] < 0) | (blocks["free_ns"] > at_ns))]


def _holders(blocks: pd.DataFrame, by: str = "operator") -> pd.DataFrame:
    g = blocks.groupby(by, sort=False)["bytes"].agg(["size", "sum"]).reset_index()
    g.columns = [by, "blocks", "bytes"]
    return g.sort_values("bytes", ascending=False, kind="stable").reset_index(drop=True)


def _module_holders(blocks: pd.DataFrame, peak_ts: int | None) -> pd.DataFrame:
    """The blocks live at the peak by the nn.Module running when they were allocated ("(no module)"
    outside any); empty where the trace records no modules."""
    if peak_ts is None or "module" not in blocks or not (blocks["module"] != "").any():
        return pd.DataFrame(columns=["module", "blocks", "bytes"])
    live = _live(blocks, peak_ts)
    return _holders(live.assign(module=live["module"].replace("", "(no module)")), "module")


def _peak_operator(blocks: pd.DataFrame, peak_ts: int | None) -> str | None:
    before = blocks[blocks["alloc_ns"] <= peak_ts] if peak_ts is not None else blocks[:0]
    return str(before.loc[before["alloc_ns"].idxmax(), "operator"]) if len(before) else None


def _operators(blocks: pd.DataFrame, last_end: int | None) -> pd.DataFrame:
    """Per operator: its allocations, their bytes, the mean lifetime of those freed, and the
    bytes still live at the last step's end (the capture's end without steps)."""
    if blocks.empty:
        return pd.DataFrame(columns=OPERATOR_COLUMNS)
    freed = blocks["free_ns"] >= 0
    lifetime_us = (blocks["free_ns"] - blocks["alloc_ns"]).where(freed) / 1e3
    live = _live(blocks, last_end) if last_end is not None else blocks[~freed]
    table = pd.DataFrame({"name": blocks["operator"], "bytes": blocks["bytes"], "lifetime": lifetime_us})
    g = table.groupby("name", sort=False).agg(allocations=("bytes", "size"), bytes=("bytes", "sum"),
                                             mean_lifetime_us=("lifetime", "mean"))
    g["live_at_step_end_bytes"] = live.groupby("operator")["bytes"].sum().reindex(g.index).fillna(0.0)
    return g.reset_index().sort_values("bytes", ascending=False, kind="stable")[OPERATOR_COLUMNS].reset_index(drop=True)


def _step_operators(steps: pd.DataFrame, blocks: pd.DataFrame) -> pd.DataFrame:
    """Per step and operator, the blocks it allocated within the step (from its start, before its
    end) and their bytes; ``steps`` in order of their starts."""
    if steps.empty or blocks.empty:
        return pd.DataFrame(columns=STEP_OPERATOR_COLUMNS)
    alloc = blocks["alloc_ns"].to_numpy(np.int64)
    i = np.searchsorted(steps["start_ns"].to_numpy(np.int64), alloc, side="right") - 1
    inside = (i >= 0) & (alloc < steps["end_ns"].to_numpy(np.int64)[np.clip(i, 0, None)])
    table = pd.DataFrame({"step": steps["step"].to_numpy()[i[inside]], "name": blocks["operator"].to_numpy()[inside],
                          "bytes": blocks["bytes"].to_numpy(float)[inside]})
    g = table.groupby(["step", "name"], sort=True)["bytes"].agg(["size", "sum"]).reset_index()
    g.columns = STEP_OPERATOR_COLUMNS
    return g


def _steps(steps: pd.DataFrame, pool: pd.DataFrame, blocks: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per step: allocated at its lowest and highest (from its start: the last sample before it)
    and at its end (the last sample by then), and its churn; and the churned blocks of all steps."""
    rows, churned = [], []
    samples = pool.dropna(subset=["allocated_bytes"])
    last = lambda frame: float(frame["allocated_bytes"].iloc[-1]) if len(frame) else np.nan  # noqa: E731
    for step, start, end in steps[["step", "start_ns", "end_ns"]].itertuples(index=False):
        before = samples[samples["ts_ns"] <= end]
        within = samples[(samples["ts_ns"] >= start) & (samples["ts_ns"] <= end)]["allocated_bytes"]
        at_start = last(samples[samples["ts_ns"] <= start])
        big = blocks[(blocks["bytes"] >= CHURN_MIN_BYTES) & (blocks["alloc_ns"] >= start) & (blocks["alloc_ns"] < end)
                     & (blocks["free_ns"] >= 0) & (blocks["free_ns"] <= end)]
        churned.append(big)
        held = pd.concat([within, pd.Series([at_start])]).dropna()
        rows.append((int(step), float(held.min()) if len(held) else np.nan, float(held.max()) if len(held) else np.nan,
                     last(before), len(big), float(big["bytes"].sum())))
    table = pd.DataFrame(rows, columns=STEP_COLUMNS)
    return table, (pd.concat(churned) if churned else blocks[:0])


def _growth(table: pd.DataFrame, steps: pd.DataFrame, blocks: pd.DataFrame) -> Growth:
    ends = table.dropna(subset=["end_allocated_bytes"])
    if len(ends) > GROWTH_MIN_STEPS:  # the first step creates what every later one reuses
        ends = ends.iloc[1:]
    n = len(ends)
    if n < GROWTH_MIN_STEPS:
        return Growth(steps_fitted=n)
    x = np.arange(n, dtype=float)  # steps in order (their numbers may skip)
    y = ends["end_allocated_bytes"].to_numpy(float)
    slope, intercept = np.polyfit(x, y, 1)
    residual = y - (slope * x + intercept)
    se = math.sqrt(float((residual**2).sum()) / (n - 2) / float(((x - x.mean()) ** 2).sum())) if n > 2 else math.inf
    from scipy import special

    half = float(special.stdtrit(n - 2, 1 - (1 - CONFIDENCE) / 2)) * se if n > 2 else math.inf
    low, high = slope - half, slope + half
    growing = bool(low > 0 and slope >= GROWTH_MIN_BYTES_PER_STEP)
    fitted = steps[steps["step"].isin(ends["step"])]
    # the last step's blocks are left out: what a step hands to the next (gradients, the batch)
    # outlives it once, a leak every step
    start, end = int(fitted["start_ns"].min()), int(fitted["end_ns"].max())
    last_start = int(fitted["start_ns"].max())
    kept = blocks[(blocks["alloc_ns"] >= start) & (blocks["alloc_ns"] < last_start)
                  & ((blocks["free_ns"] < 0) | (blocks["free_ns"] > end))]
    return Growth(float(slope), (float(low), float(high)), n, growing, _holders(kept))


def _components(totals: pd.DataFrame) -> dict[str, float]:
    """Each component's peak: the memory it reserves on the device (what it takes from the
    capacity), its allocated memory where it records no reservation (the CPU); zero ones left out."""
    out = {}
    for name, mine in totals.groupby("component", sort=False):
        reserved, allocated = mine["reserved_bytes"].max(), mine["allocated_bytes"].max()
        peak = reserved if reserved > 0 else allocated
        if peak > 0:
            out[str(name)] = float(peak)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _beyond_pool(totals: pd.DataFrame, pool_name: str) -> float | None:
    """The process's device memory beyond PyTorch's pool at the process's peak: APP's reserved
    minus the pool's reserved at (or last before) that time."""
    app = totals[(totals["component"] == "APP") & totals["reserved_bytes"].notna()]
    pool = totals[(totals["component"] == pool_name) & totals["reserved_bytes"].notna()].sort_values("ts_ns")
    if app.empty or pool.empty:
        return None
    top = app.loc[app["reserved_bytes"].idxmax()]
    before = pool[pool["ts_ns"] <= top["ts_ns"]]
    held = before["reserved_bytes"].iloc[-1] if len(before) else pool["reserved_bytes"].iloc[0]
    return float(top["reserved_bytes"] - held)


def _size(n: float | None) -> str:
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "-"
    sign, n = ("-" if n <= -0.5 else ""), abs(n)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{sign}{n / scale:,.2f} {unit}"
    return f"{sign}{n:,.0f} B"
