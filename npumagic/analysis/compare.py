"""Two Summaries -> Comparison: is B faster than A beyond noise, what moved in the breakdown,
which kernels changed, and what was changed between the runs.

Step time: the ratio of medians (A / B, >1 means B is faster) with a 95% bootstrap confidence
interval, and a two-sided Mann-Whitney rank test (exact for small samples). A difference is
called real only when both agree and it exceeds MIN_EFFECT, so three steps a side can never
look certain.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

from .metrics import Summary

BOOTSTRAP = 4000
ALPHA = 0.05
# Step-time changes smaller than this are called noise even when a test flags them: steps of one
# run are not independent of each other, and run-to-run drift on a shared machine (clocks,
# caches, neighbours) was measured here at 2-4% between runs of the identical cell.
MIN_EFFECT = 0.05
EXACT_LIMIT = 20000  # exact rank-test distribution up to this many arrangements
BREAKDOWN = [("computing_us", "computing", -1), ("comm_not_overlapped_us", "communication (not overlapped)", -1),
             ("free_us", "free/idle", -1), ("dataloader_us", "dataloader", -1), ("device_util", "device utilisation", +1)]
KERNEL_COLUMNS = ["kernel", "type", "status", "count_a", "count_b", "total_a_us", "total_b_us", "delta_us",
                  "mean_a_us", "mean_b_us", "delta_mean_us"]
_SUFFIX = re.compile(r"(_?\d+)+$")


@dataclass(frozen=True)
class Comparison:
    """A against B. ``speedup`` = median step A / median step B; ``ci`` its 95% interval."""

    a: str
    b: str
    speedup: float
    ci: tuple[float, float]
    p_value: float
    significant: bool
    median_a_us: float
    median_b_us: float
    n_a: int
    n_b: int
    breakdown: pd.DataFrame
    kernels: pd.DataFrame
    changed: list[str] = field(default_factory=list)
    diffs: dict[str, str] = field(default_factory=dict)
    steps_a: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    steps_b: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)

    def sentence(self) -> str:
        if not self.n_a or not self.n_b:
            return "cannot compare: one of the runs has no steps"
        if self.significant:
            # "x% faster" = the step takes x% less time; "x% slower" = it takes x% more.
            faster = self.speedup > 1
            if faster:
                size, lo, hi = 1 - 1 / self.speedup, 1 - 1 / self.ci[0], 1 - 1 / self.ci[1]
            else:
                size, lo, hi = 1 / self.speedup - 1, 1 / self.ci[1] - 1, 1 / self.ci[0] - 1
            ratio = max(self.speedup, 1 / self.speedup)
            big = ratio >= 1.5  # past 1.5x, "x times" reads better than a percentage
            amount = f"{ratio:.1f}x" if big else f"{size:.0%}"
            lo_x, hi_x = sorted((self.ci[0], self.ci[1]) if faster else (1 / self.ci[1], 1 / self.ci[0]))
            band = f"95% CI {lo_x:.1f}–{hi_x:.1f}x" if big else f"95% CI {lo:.0%}–{hi:.0%}"
            return (f"{self.b} is {amount} {'faster' if faster else 'slower'} than {self.a} "
                    f"(median step {self.median_b_us / 1000:.2f} vs {self.median_a_us / 1000:.2f} ms, {band}, "
                    f"rank test p={self.p_value:.3f})")
        need = max(10, 2 * max(self.n_a, self.n_b))
        if min(self.n_a, self.n_b) < 2:
            return (f"no difference beyond noise can be shown between {self.a} and {self.b}: with "
                    f"{min(self.n_a, self.n_b)} step on a side there is no spread to judge noise by (median step "
                    f"{self.median_b_us / 1000:.2f} vs {self.median_a_us / 1000:.2f} ms) — collect more steps (--steps {need})")
        if self.p_value < ALPHA and abs(self.speedup - 1) < MIN_EFFECT:
            return (f"no difference beyond noise between {self.a} and {self.b}: {abs(self.speedup - 1):.1%} is within "
                    f"the {MIN_EFFECT:.0%} run-to-run drift (median step {self.median_b_us / 1000:.2f} vs "
                    f"{self.median_a_us / 1000:.2f} ms)")
        return (f"no difference beyond noise between {self.a} and {self.b} (median step "
                f"{self.median_b_us / 1000:.2f} vs {self.median_a_us / 1000:.2f} ms, speedup 95% CI "
                f"{self.ci[0]:.2f}–{self.ci[1]:.2f}x, p={self.p_value:.2f}) — collect more steps (--steps {need})")

    def __str__(self) -> str:
        lines = [self.sentence(), "", self.breakdown.to_string(index=False, float_format=lambda v: f"{v:,.2f}")]
        if len(self.changed) > 1:
            lines += ["", f"{len(self.changed)} things changed between the runs — the checklist's rule is one change at a time:"]
        elif self.changed:
            lines += ["", "what changed:"]
        lines += [f"  - {c}" for c in self.changed]
        for key, diff in self.diffs.items():
            lines += ["", f"{key} diff:", diff]
        if len(self.kernels):
            lines += ["", "kernels by |total time change|:",
                      self.kernels.head(10).to_string(index=False, float_format=lambda v: f"{v:,.1f}")]
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


def rank_test(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Mann-Whitney U p-value: exact (all arrangements) for small samples, else the
    normal approximation with tie correction."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    na, nb = a.size, b.size
    if na == 0 or nb == 0:
        return 1.0
    pooled = np.concatenate([a, b])
    ranks = pd.Series(pooled).rank().to_numpy()
    u = ranks[:na].sum() - na * (na + 1) / 2
    mean = na * nb / 2
    if math.comb(na + nb, na) <= EXACT_LIMIT:
        us = np.array([ranks[list(idx)].sum() for idx in combinations(range(na + nb), na)]) - na * (na + 1) / 2
        return float(min(1.0, np.mean(np.abs(us - mean) >= abs(u - mean) - 1e-9)))
    _, counts = np.unique(pooled, return_counts=True)
    n = na + nb
    var = na * nb / 12 * ((n + 1) - (counts ** 3 - counts).sum() / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u - mean) - 0.5) / math.sqrt(var)
    return float(math.erfc(z / math.sqrt(2)))


def bootstrap_ratio(a: np.ndarray, b: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of median(a) / median(b), resampling each side's steps."""
    rng = np.random.default_rng(seed)
    ma = np.median(rng.choice(a, (BOOTSTRAP, a.size)), axis=1)
    mb = np.median(rng.choice(b, (BOOTSTRAP, b.size)), axis=1)
    ratio = ma / mb
    return float(np.percentile(ratio, 2.5)), float(np.percentile(ratio, 97.5))


def _breakdown(a: Summary, b: Summary) -> pd.DataFrame:
    rows = []
    for column, label, better in BREAKDOWN:
        va = float(a.steps[column].mean()) if len(a.steps) else float("nan")
        vb = float(b.steps[column].mean()) if len(b.steps) else float("nan")
        delta = vb - va
        scale = 1.0 if column == "device_util" else 1000.0
        moved = "unchanged" if abs(delta) < 0.02 * max(abs(va), 1e-12) else (
            "better" if np.sign(delta) == better else "worse")
        rows.append({"metric": label + ("" if column == "device_util" else " (ms/step)"), "a": va / scale,
                     "b": vb / scale, "delta": delta / scale,
                     "change": (delta / va) if va else float("nan"), "direction": moved})
    return pd.DataFrame(rows)


def _kernel_key(kernels: pd.DataFrame, other: pd.DataFrame) -> pd.Series:
    """Match by name; names with generated suffixes (Conv2D1, trans_TransData_3) or that differ
    across backends fall back to their operator type."""
    names = kernels["name"].astype(str)
    shared = names.isin(set(other["name"].astype(str)))
    base = kernels["type"].astype(str).where(kernels["type"].astype(str) != "", names.str.replace(_SUFFIX, "", regex=True))
    return names.where(shared, base)


def _kernels(a: Summary, b: Summary) -> pd.DataFrame:
    ka, kb = a.kernels, b.kernels
    if ka.empty and kb.empty:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    side = []
    for k, other in ((ka, kb), (kb, ka)):
        g = k.assign(kernel=_kernel_key(k, other)).groupby("kernel", sort=False)
        side.append(g.agg(type=("type", "first"), count=("count", "sum"), total=("total_us", "sum")))
    table = pd.merge(side[0], side[1], how="outer", left_index=True, right_index=True, suffixes=("_a", "_b"))
    table["type"] = table["type_a"].fillna(table["type_b"])
    for c in ("count_a", "count_b", "total_a", "total_b"):
        table[c] = table[c].fillna(0)
    table = table.rename(columns={"total_a": "total_a_us", "total_b": "total_b_us"})
    table["status"] = np.where(table["count_a"] == 0, "added", np.where(table["count_b"] == 0, "removed", "changed"))
    table["delta_us"] = table["total_b_us"] - table["total_a_us"]
    table["mean_a_us"] = table["total_a_us"] / table["count_a"].replace(0, np.nan)
    table["mean_b_us"] = table["total_b_us"] / table["count_b"].replace(0, np.nan)
    table["delta_mean_us"] = table["mean_b_us"] - table["mean_a_us"]
    table = table.reset_index().reindex(table.reset_index()["delta_us"].abs().sort_values(ascending=False).index)
    return table.reset_index(drop=True)[KERNEL_COLUMNS]


def changes(context_a: dict[str, Any] | None, context_b: dict[str, Any] | None,
            a: Summary | None = None, b: Summary | None = None) -> tuple[list[str], dict[str, str]]:
    """What differs between two runs' records: cell source, magic arguments, environment
    variables, versions, backend/device and the DataLoader seen. Returns lines and diffs."""
    ca, cb = context_a or {}, context_b or {}
    out, diffs = [], {}
    src_a, src_b = (ca.get("source") or "").strip(), (cb.get("source") or "").strip()
    if ca and cb and src_a != src_b:
        diff = "\n".join(difflib.unified_diff(src_a.splitlines(), src_b.splitlines(), "A", "B", lineterm="", n=1))
        out.append("cell source")
        diffs["cell source"] = diff
    ignore = {"name", "out", "line"}
    args_a, args_b = ca.get("arguments") or {}, cb.get("arguments") or {}
    for key in sorted((set(args_a) | set(args_b)) - ignore):
        if args_a.get(key) != args_b.get(key):
            out.append(f"option {key}: {args_a.get(key)!r} -> {args_b.get(key)!r}")
    for group in ("environment", "versions"):
        da, db = ca.get(group) or {}, cb.get(group) or {}
        for key in sorted(set(da) | set(db)):
            if da.get(key) != db.get(key):
                out.append(f"{'env' if group == 'environment' else 'version'} {key}: {da.get(key)!r} -> {db.get(key)!r}")
    for key in ("backend", "device"):
        if ca.get(key) and cb.get(key) and ca[key] != cb[key]:
            out.append(f"{key}: {ca[key]} -> {cb[key]}")
    loaders_a, loaders_b = ca.get("dataloaders") or [], cb.get("dataloaders") or []
    if loaders_a and loaders_b and loaders_a != loaders_b:
        for key in sorted(set(loaders_a[0]) | set(loaders_b[0])):
            if loaders_a[0].get(key) != loaders_b[0].get(key):
                out.append(f"DataLoader {key}: {loaders_a[0].get(key)!r} -> {loaders_b[0].get(key)!r}")
    if a is not None and b is not None and not (loaders_a and loaders_b):  # offline runs: the iterator seen
        la, lb = a.meta.get("dataloader_iter", ""), b.meta.get("dataloader_iter", "")
        if la != lb and (la or lb):
            out.append(f"DataLoader: {la or 'none seen'} -> {lb or 'none seen'}")
    return out, diffs


def compare(a: Summary, b: Summary, name_a: str = "A", name_b: str = "B",
            context_a: dict[str, Any] | None = None, context_b: dict[str, Any] | None = None,
            min_effect: float = MIN_EFFECT) -> Comparison:
    """Compare run A (the reference) with run B.

    Parameters
    ----------
    a, b : Summaries; their ``steps["wall_us"]`` are the samples.
    context_a, context_b : the runs' records (source, arguments, environment, versions, backend,
        device) for the "what changed" section; optional.
    min_effect : smallest step-time change (fraction) that counts as real.
    """
    wa = a.steps["wall_us"].to_numpy(dtype=float)
    wb = b.steps["wall_us"].to_numpy(dtype=float)
    if wa.size and wb.size:
        speedup = float(np.median(wa) / np.median(wb))
        # one step a side has no spread to resample: no interval rather than a falsely narrow one
        ci = bootstrap_ratio(wa, wb) if min(wa.size, wb.size) >= 2 else (0.0, float("inf"))
        p = rank_test(wa, wb)
    else:
        speedup, ci, p = float("nan"), (float("nan"), float("nan")), 1.0
    significant = bool(wa.size and wb.size and p < ALPHA and (ci[0] > 1 or ci[1] < 1)
                       and abs(speedup - 1) >= min_effect)
    changed, diffs = changes(context_a, context_b, a, b)
    return Comparison(name_a, name_b, speedup, ci, p, significant,
                      float(np.median(wa)) if wa.size else float("nan"), float(np.median(wb)) if wb.size else float("nan"),
                      int(wa.size), int(wb.size), _breakdown(a, b), _kernels(a, b), changed, diffs, wa, wb)
