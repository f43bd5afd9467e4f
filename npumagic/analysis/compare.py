"""Two Summaries -> Comparison: is B faster than A beyond noise, which breakdown component
explains it, which kernels changed, and what was changed between the runs.

The step-time test is Welch's t-test on the logarithm of step times. Why this one:

- it can decide at 3 steps a side. Every rank or permutation test cannot: with 3 vs 3 there are
  only C(6,3) = 20 arrangements, so its two-sided p-value never goes below 0.1, and the README's
  own ``--steps 3`` could never show even a 2x change;
- step-time noise is multiplicative (a slower neighbour stretches every op), so its logarithm is
  close to symmetric and the difference of log means is a ratio with a t-based interval; Welch's
  version does not assume both runs are equally noisy (a DataLoader-bound run is jitterier);
- the t distribution pays for the unknown spread at small n (t(0.975, 4 df) = 2.78 against
  1.96), which keeps the false-positive rate at its nominal 5% from 3 to 50 steps;
  ``tests/analysis/test_compare.py`` checks that by simulation, including runs with an outlier
  step (there the test is conservative, never liberal).

Steps of one run are not independent of the run: clocks, caches and neighbours shift a whole run.
That between-run noise is measured from replicates (runs of the same configuration in the
history, :func:`between_run_noise`) and added to the test's variance as a random effect; without
replicates a change must also exceed MIN_EFFECT, the drift measured here between runs of the
identical cell.

A run is also called faster (or slower) when one breakdown component (every ``*_us`` column of
the step table that is a part of the step, see :func:`components`) moved the same way in every
step, carries most of the step-time change, the rest of the step held, and the component's own
per-step times differ by Welch's t (:func:`component_test`, the run-to-run noise included: the
step's, scaled to the component, and the component's own from the same replicates, for a
component drifts between runs under steps too jittery to show it; and the time the cell's thread
waited for a core in each step taken off the side that grew: a neighbour's time, below the
contention check's threshold, that may all have landed in this component), provided the step
median moved beyond the noise floor: a DataLoader wait that falls from 69 to 1 ms in each step
is a real change even when three steps of the faster run are jittery. "In every step" alone is
no evidence at 3 steps: it is a rank test's most extreme outcome, which two runs of the
identical cell reach 1 time in 10 (2 of the C(6,3) = 20 arrangements), and it let the component
rule call 5-6% of identical pairs different on top of the step test's own 5%.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .. import presentation
from .run_facts import RunFacts
from .step_test import ALPHA, Noise, StepTest, between_run_noise, component_test, step_test  # noqa: F401 (re-exported)
from .summary import Summary
from .thresholds import MIN_EFFECT
from .trust import decide_anyway, reasons

# A component "explains" a change when it carries at least this share of the step-time change,
# and the rest of the step "held" when it moved by at most this share of the component's change.
EXPLAINS = 0.5
# Step-table columns that are not parts of the step (totals, positions, unions of parts).
NOT_COMPONENTS = frozenset({"start_us", "wall_us", "busy_us", "idle_us", "stage_us", "communication_us",
                            "overlapped_us"})
LABELS = {"dataloader_us": "DataLoader wait", "computing_us": "computing",
          "comm_not_overlapped_us": "communication (not overlapped)", "free_us": "free (neither computing nor communicating)",
          "sync_us": "sync", "memcpy_us": "memcpy", "preparing_us": "preparing"}
# When several components carry the change, name the most specific: free time is what is left of
# the step, so it moves with the DataLoader wait or a sync; it is named only when nothing else is.
RESIDUAL = ("free_us",)
BREAKDOWN_COLUMNS = ["metric", "column", "a", "b", "delta", "change", "direction", "every_step"]
KERNEL_COLUMNS = ["kernel", "type", "status", "count_a", "count_b", "total_a_us", "total_b_us", "delta_us",
                  "mean_a_us", "mean_b_us", "delta_mean_us"]
_SUFFIX = re.compile(r"(_?\d+)+$")


def profiling_inflation(facts: RunFacts | None) -> StepTest | None:
    """How much profiling slowed the run's steps: its profiled steps against the ones the same
    run took without the profiler (before the schedule's window and after it; npumagic's captures
    record both in the run's ``step_times``, us). None with fewer than two of either."""
    times = facts.step_times if facts is not None else {}
    on, off = (np.asarray(times.get(k, []), dtype=float) for k in ("profiled", "unprofiled"))
    on, off = on[on > 0], off[off > 0]
    if on.size < 2 or off.size < 2:
        return None
    return step_test(on, off)  # ratio = profiled / unprofiled


def p_value_text(p: float) -> str:
    """``p=0.029``; ``p<0.001`` where three decimals would print 0.000."""
    return "p<0.001" if p < 0.0005 else f"p={p:.3f}"


def components(steps: pd.DataFrame) -> list[str]:
    """The step-table columns that are parts of the step: every ``*_us`` column but the totals
    and unions in NOT_COMPONENTS (so a column added to the step table is compared too)."""
    return [c for c in steps.columns if str(c).endswith("_us") and c not in NOT_COMPONENTS]


def label(column: str) -> str:
    return LABELS.get(column, column.removesuffix("_us").replace("_", " "))


@dataclass(frozen=True)
class Explanation:
    """The component that explains a step-time change: medians per step (us) in A and B."""

    column: str
    a_us: float
    b_us: float
    every_step: bool
    rest_held: bool
    p_value: float = 1.0  # Welch's t on the component's per-step times (:func:`component_test`)

    @property
    def label(self) -> str:
        return label(self.column)

    def text(self) -> str:
        return (f"{self.label} {self.a_us / 1000:,.1f} -> {self.b_us / 1000:,.1f} ms"
                + (" in every step" if self.every_step else " (median per step)"))


def _separated(a: np.ndarray, b: np.ndarray) -> int:
    """+1 when every B value is below every A value, -1 when above, else 0."""
    if a.size == 0 or b.size == 0:
        return 0
    return 1 if b.max() < a.min() else (-1 if b.min() > a.max() else 0)


def explain(a: pd.DataFrame, b: pd.DataFrame, noise: Noise | None = None,
            waited: tuple[np.ndarray, np.ndarray] | None = None,
            component_noise: dict[str, Noise] | None = None) -> Explanation | None:
    """The component that carries the step-time change between two step tables, if one does:
    it moved in the step's direction by at least EXPLAINS of the step median's change. The most
    specific such component wins (free time, the residual, last); ties go to the larger change.
    Its ``p_value`` is :func:`component_test`'s, with ``noise`` and the component's own
    (``component_noise``, by column, sigma in us), the side it grew on less the time
    that side's thread waited for a core in each step (``waited``, us per step of A and B,
    :func:`waited_us`): a neighbour's time, which may all have landed in this component."""
    if not len(a) or not len(b):
        return None
    dw = float(b["wall_us"].median() - a["wall_us"].median())
    if dw == 0:
        return None
    found = []
    for col in components(a):
        if col not in b:
            continue
        ca, cb = a[col].to_numpy(float), b[col].to_numpy(float)
        dc = float(np.median(cb) - np.median(ca))
        if np.sign(dc) != np.sign(dw) or abs(dc) < EXPLAINS * abs(dw):
            continue
        rest = float(np.median(b["wall_us"].to_numpy(float) - cb) - np.median(a["wall_us"].to_numpy(float) - ca))
        every = _separated(ca, cb) == -np.sign(dc) and min(len(ca), len(cb)) >= 2
        found.append((col in RESIDUAL, -abs(dc), Explanation(col, float(np.median(ca)), float(np.median(cb)), bool(every),
                                                              abs(rest) <= EXPLAINS * abs(dc))))
    if not found:
        return None
    found.sort(key=lambda f: f[:2])
    chosen = found[0][2]
    ca, cb = a[chosen.column].to_numpy(float), b[chosen.column].to_numpy(float)
    if waited is not None:
        ca, cb = (ca, cb - waited[1]) if chosen.b_us > chosen.a_us else (ca - waited[0], cb)
    own = (component_noise or {}).get(chosen.column)
    return dataclasses.replace(chosen, p_value=component_test(ca, cb, noise, own))


def waited_us(s: Summary) -> np.ndarray:
    """Per step of ``s.steps``, the time (us) its cell's thread was ready to run but waited for a
    core (the host samples' ``main_thread_wait_pct`` of the step); 0 where not measured."""
    steps = s.steps
    host = s.host
    if host is None or not len(host) or "main_thread_wait_pct" not in host or "step" not in steps:
        return np.zeros(len(steps))
    share = steps["step"].map(host.groupby("step")["main_thread_wait_pct"].mean()).to_numpy(float) / 100
    return np.nan_to_num(share, nan=0.0).clip(0, 1) * steps["wall_us"].to_numpy(float)


@dataclass(frozen=True)
class Comparison:
    """A against B. ``speedup`` = median step A / median step B; ``ci`` the 95% interval of
    the step-time ratio A / B (Welch's t on log step times, between-run noise included when
    known); ``explained_by`` the component that carries the change."""

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
    explained_by: Explanation | None = None
    noise: Noise = field(default_factory=Noise)
    decided_by: str = ""  # "step time", "component" or "" (not significant)
    untrusted: str = ""  # why a side's step times cannot be trusted (CPU contention), or ""
    # the step peaks of A and B (:func:`~.memory_compare.compare_memory`); None unless both recorded memory
    memory: Any = None

    def _figures(self) -> str:
        return f"median step {self.a} {self.median_a_us / 1000:,.2f} ms -> {self.b} {self.median_b_us / 1000:,.2f} ms"

    def sentence(self) -> str:
        """One line: the verdict, the component that explains it, the figures (A's first) and
        the evidence (interval, p-value, run-to-run noise and how many replicates it rests on)."""
        if not self.n_a or not self.n_b:
            return "cannot compare: one of the runs has no steps"
        if self.untrusted:
            return (f"{self.b} looks {self._change()} than {self.a} ({self._figures()}) but is not called "
                    f"significant: {self.untrusted}; {decide_anyway()}")
        why = f"{self.explained_by.text()}; " if self.explained_by is not None and self.significant else ""
        if self.significant:
            return f"{self.b} is {self._change()} than {self.a}: {why}{self._figures()} ({self._evidence()})"
        need = max(10, 2 * max(self.n_a, self.n_b))
        if min(self.n_a, self.n_b) < 2:
            return (f"no difference beyond noise can be shown between {self.a} and {self.b}: with "
                    f"{min(self.n_a, self.n_b)} step on a side there is no spread to judge noise by ({self._figures()}) "
                    f"— profile more steps, {need} on each side")
        if self.p_value < ALPHA:
            return (f"no difference beyond noise between {self.a} and {self.b}: {abs(self.speedup - 1):.1%} is within "
                    f"the run-to-run noise ({self._figures()}; {self.noise.describe()})")
        return (f"no difference beyond noise between {self.a} and {self.b} ({self._figures()}, "
                f"{self._evidence()}) — more steps ({need} on each side) would narrow the interval")

    def undecided(self, allowance: float | None = None) -> str:
        """Why this comparison cannot tell whether B is slower than A ("" when it can), from its
        own verdict: a side without steps, a side whose step times cannot be trusted
        (:mod:`~npumagic.analysis.trust`), a single step on a side (no spread to judge noise by),
        or a change the test could not tell from noise (not significant, p >= ALPHA: too few or
        too noisy steps; a change the test calls within run-to-run noise is decided). With
        ``allowance`` (a fraction, the CI gate's), only such a change that would take B's median
        step beyond A's by more than it is undecided: one within it passes either way."""
        if not self.n_a or not self.n_b or self.speedup != self.speedup:
            return "a run has no steps to compare"
        if self.untrusted:
            return self.untrusted
        if min(self.n_a, self.n_b) < 2:
            return f"{min(self.n_a, self.n_b)} step on a side: no spread to judge noise by"
        if self.significant or self.p_value < ALPHA:
            return ""
        if allowance is None or 1 / self.speedup - 1 > allowance:
            return (f"{self._change()} ({self._figures()}), but the steps are too few or too noisy to tell that "
                    f"from noise ({self._evidence()})")
        return ""

    def _change(self) -> str:
        """"2.3x faster", "12% slower": "x% faster" = the step takes x% less time, "x% slower" =
        it takes x% more."""
        faster = self.speedup > 1
        ratio = max(self.speedup, 1 / self.speedup)
        amount = f"{ratio:.1f}x" if ratio >= 1.5 else f"{(1 - 1 / self.speedup) if faster else (1 / self.speedup - 1):.0%}"
        return f"{amount} {'faster' if faster else 'slower'}"

    def _evidence(self) -> str:
        lo, hi = self.ci
        test = f"95% CI {lo:.2f}–{hi:.2f}x, Welch {p_value_text(self.p_value)}"
        if self.decided_by == "component":
            way = "lower" if self.speedup > 1 else "higher"
            return (f"decided by the {self.explained_by.label}, {way} in every step of {self.b} than in any of "
                    f"{self.a} (Welch {p_value_text(self.explained_by.p_value)}) while the rest of the step held; the step time "
                    f"alone is too noisy to decide "
                    f"({test}); {self.noise.describe()}")
        return f"step-time ratio {self.a}/{self.b} {self.speedup:.2f}x, {test}; {self.noise.describe()}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON document ``npumagic compare --json`` prints (``schema`` versioned)."""
        from ..jsonout import comparison_doc

        return comparison_doc(self)

    def __str__(self) -> str:
        return presentation.text(self)

    def _repr_html_(self) -> str | None:
        return presentation.html(self)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


def _shown(value: Any) -> str:
    """An option's value as a user typed it: a command line joined, anything else as its repr."""
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return shlex.join(value)
    return repr(value)


def _arguments_changed(a: Any, b: Any) -> str | None:
    """Two command lines that differ in their options only, said by option: "--batch 8 -> 16,
    --amp added"; None when more differs (another program or script: then both lines are shown)."""
    if not (isinstance(a, list) and isinstance(b, list) and a and b and a[0] == b[0]):
        return None
    oa, ob = _options(a[1:]), _options(b[1:])
    if oa is None or ob is None or oa[0] != ob[0]:  # the words that are no option (the script) differ
        return None
    said = []
    for name in list(oa[1]) + [n for n in ob[1] if n not in oa[1]]:
        va, vb = oa[1].get(name), ob[1].get(name)
        if va == vb:
            continue
        if va is None:
            said.append(f"{name}{' ' + vb if vb else ''} added")
        elif vb is None:
            said.append(f"{name}{' ' + va if va else ''} removed")
        else:
            said.append(f"{name} {va or '(set)'} -> {vb or '(set)'}")
    return ", ".join(said) or None


def _options(words: list[str]) -> tuple[list[str], dict[str, str]] | None:
    """A command's arguments as (the words before its first option, {option: value}); ``--x=1``
    and ``--x 1`` alike, a flag's value ""; None where an option repeats (then order matters)."""
    head, options, i = [], {}, 0
    while i < len(words) and not words[i].startswith("-"):
        head.append(words[i])
        i += 1
    while i < len(words):
        word = words[i]
        if not word.startswith("-") or word == "-":
            return None  # a positional argument after the options: compared as a whole
        name, eq, value = word.partition("=")
        if not eq and i + 1 < len(words) and not words[i + 1].startswith("-"):
            value, i = words[i + 1], i + 1
        if name in options:
            return None
        options[name] = value
        i += 1
    return head, options


def _breakdown(a: Summary, b: Summary) -> pd.DataFrame:
    """Every component's median per step in A and B (ms), and the busy share of each run's median
    step (:attr:`Summary.median_step_util`, the checklist's Baseline figure)."""
    rows = []
    util = (a if a.meta.get("device_mode") else b).busy_label
    cols = components(a.steps) + [c for c in components(b.steps) if c not in a.steps]
    for column in cols + ["device_util"]:
        ca = a.steps[column].to_numpy(float) if column in a.steps else np.zeros(0)
        cb = b.steps[column].to_numpy(float) if column in b.steps else np.zeros(0)
        va = float(np.median(ca)) if ca.size else float("nan")
        vb = float(np.median(cb)) if cb.size else float("nan")
        if column == "device_util":
            va, vb = (s.median_step_util if x.size else float("nan") for s, x in ((a, ca), (b, cb)))
        delta = vb - va
        better = 1 if column == "device_util" else -1
        scale = 1.0 if column == "device_util" else 1000.0
        measured = va == va and vb == vb  # NaN: a side did not measure it (no host lanes)
        moved = "not measured" if not measured else "unchanged" if not abs(delta) >= 0.02 * max(abs(va), 1e-12) else (
            "better" if np.sign(delta) == better else "worse")
        every = measured and _separated(ca, cb) != 0 and min(ca.size, cb.size) >= 2
        rows.append({"metric": util if column == "device_util" else f"{label(column)} (ms/step)",
                     "column": column, "a": va / scale, "b": vb / scale, "delta": delta / scale,
                     "change": (delta / va) if va else float("nan"), "direction": moved, "every_step": bool(every)})
    return pd.DataFrame(rows, columns=BREAKDOWN_COLUMNS)


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
    """What differs between two runs: cell source, magic arguments, environment variables,
    versions, backend, device, rank and world size (from the records, else the Summaries' meta)
    and the DataLoader settings or iterator seen. The one "what changed" of %npucompare, the
    checklist's Verify step and ``npumagic compare``. Returns lines and diffs."""
    ca, cb = context_a or {}, context_b or {}
    out, diffs = [], {}
    src_a, src_b = (ca.get("source") or "").strip(), (cb.get("source") or "").strip()
    args_a, args_b = ca.get("arguments") or {}, cb.get("arguments") or {}
    if ca and cb and src_a != src_b:
        diff = "\n".join(difflib.unified_diff(src_a.splitlines(), src_b.splitlines(), "A", "B", lineterm="", n=1))
        what = "script source" if "command" in args_a or "command" in args_b else "cell source"
        out.append(what)
        diffs[what] = diff
    # the run's name and folder, and the process ids a command's ranks had: never a change made
    ignore = {"name", "out", "line", "pids"}
    for key in sorted((set(args_a) | set(args_b)) - ignore):
        if args_a.get(key) != args_b.get(key):
            changed = _arguments_changed(args_a.get(key), args_b.get(key)) if key == "command" else None
            out.append(f"option {key}: {changed or f'{_shown(args_a.get(key))} -> {_shown(args_b.get(key))}'}")
    for group in ("environment", "versions"):
        da, db = ca.get(group) or {}, cb.get(group) or {}
        for key in sorted(set(da) | set(db)):
            if (da.get(key) or None) != (db.get(key) or None):  # torch_npu records an unset variable as ''
                out.append(f"{'env' if group == 'environment' else 'version'} {key}: {da.get(key)!r} -> {db.get(key)!r}")
    ma, mb = (a.meta if a is not None else {}), (b.meta if b is not None else {})
    for key, meta_key in (("backend", "backend"), ("device", "device_name"), ("rank", "rank"), ("world size", "world_size")):
        va, vb = ca.get(key) or ma.get(meta_key), cb.get(key) or mb.get(meta_key)
        if va is not None and vb is not None and va != vb:
            out.append(f"{key}: {va} -> {vb}")
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


def step_verdict(wa: np.ndarray, wb: np.ndarray, noise: Noise, min_effect: float = MIN_EFFECT):
    """The step-time verdict on samples ``wa`` and ``wb`` (any positive times, one per step):
    (usable, :class:`StepTest`, median A / median B, beyond the noise floor, significant by the
    test). Also what a region's or a module's per-step times are judged by."""
    ok = bool(wa.size and wb.size and (wa > 0).all() and (wb > 0).all())
    test = step_test(wa, wb, noise) if ok else StepTest(float("nan"), (float("nan"), float("nan")), 1.0, float("nan"))
    speedup = float(np.median(wa) / np.median(wb)) if ok else float("nan")
    # the smallest change in log step time that is beyond run-to-run noise: two runs' difference
    # spans about 2 x sqrt(2) sigma at 95%; never below min_effect (a sigma from a few replicates
    # can come out as 0)
    floor = max(2 * math.sqrt(2) * noise.sigma if noise.known else 0.0, math.log1p(min_effect))
    beyond = bool(ok and abs(math.log(speedup)) >= floor)
    by_test = bool(beyond and test.p_value < ALPHA and np.sign(math.log(test.ratio)) == np.sign(math.log(speedup)))
    return ok, test, speedup, beyond, by_test


def compare(a: Summary, b: Summary, name_a: str = "A", name_b: str = "B",
            context_a: dict[str, Any] | None = None, context_b: dict[str, Any] | None = None,
            min_effect: float = MIN_EFFECT, noise: Noise | None = None, *,
            facts_a: RunFacts | None = None, facts_b: RunFacts | None = None,
            component_noise: dict[str, Noise] | None = None) -> Comparison:
    """Compare run A (the reference) with run B.

    Parameters
    ----------
    a, b : Summaries; their ``steps["wall_us"]`` are the samples, their other step columns the
        components compared step by step.
    context_a, context_b : the runs' records (source, arguments, environment, versions, backend,
        device) for the "what changed" section; optional.
    min_effect : smallest step-time change (fraction) that counts as real when ``noise`` is
        unknown.
    noise : between-run noise from replicates (:func:`between_run_noise`); it widens the
        interval and replaces ``min_effect``.
    facts_a, facts_b : what the runs' records know beside their traces (other processes on the
        device: a run that shared it is never called significantly different).
    component_noise : each step component's own between-run noise (by column, sigma in us), from
        the same replicates as ``noise``; the component rule's test adds it (:func:`component_test`).
    """
    noise = noise if noise is not None else Noise()
    wa = a.steps["wall_us"].to_numpy(dtype=float)
    wb = b.steps["wall_us"].to_numpy(dtype=float)
    ok, test, speedup, beyond, by_test = step_verdict(wa, wb, noise, min_effect)
    why = explain(a.steps, b.steps, noise, (waited_us(a), waited_us(b)), component_noise) if ok else None
    by_component = bool(beyond and why is not None and why.every_step and why.rest_held and why.p_value < ALPHA
                        and min(wa.size, wb.size) >= 3)
    untrusted = "; ".join(f"{name}'s step times are unreliable: {'; '.join(why)}"
                          for name, why in ((name_a, reasons(a, facts_a)), (name_b, reasons(b, facts_b))) if why)
    significant = (by_test or by_component) and not untrusted
    changed, diffs = changes(context_a, context_b, a, b)
    return Comparison(name_a, name_b, speedup, test.ci, test.p_value, significant,
                      float(np.median(wa)) if wa.size else float("nan"), float(np.median(wb)) if wb.size else float("nan"),
                      int(wa.size), int(wb.size), _breakdown(a, b), _kernels(a, b), changed, diffs, wa, wb,
                      why, noise, ("step time" if by_test else ("component" if by_component else "")) if significant else "",
                      untrusted, _memory(a, b))


def _memory(a: Summary, b: Summary):
    """B's memory against A's, where both runs recorded it (else None)."""
    from .memory_compare import compare_memory
    from .memory_summary import memory_view_of

    va, vb = memory_view_of(a), memory_view_of(b)
    if va is None or vb is None or va.peak_allocated_bytes is None or vb.peak_allocated_bytes is None:
        return None
    return compare_memory(va, vb)
