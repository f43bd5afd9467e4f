"""What-if: the step time each finding's fix can remove, per step, as an interval.

A finding's ``impact`` says how much of the step its cause occupies; the fix may remove less.
Each model here bounds the saving by what the fix can actually take away: overlap hides at most
the compute beside the communication, more DataLoader workers help only until the cores are
busy, CUDA graphs remove launch gaps but not kernels, a straggler fix saves what the other
ranks wait, fewer bytes shrink only the bandwidth part of a collective. Findings are ranked by
the predicted saving, and the checklist's Next change is the top one whose upper bound reaches
the verdict threshold (:data:`~.thresholds.VERDICT_MIN_IMPACT` of the median step).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from . import job_path, path_bound
from .finding import plural
from .gaps import dispatch_ms, short_runs_ms
from . import thresholds as T
from .path_bound import PathBound
from .predicted_text import change_ms

if TYPE_CHECKING:
    from .finding import Finding
    from .summary import Summary

# A gap between device tasks shorter than this is launch latency (the host issuing the next
# kernel), which CUDA graphs / aclgraph remove; longer gaps are host work they leave in place.
LAUNCH_GAP_US = 200.0
# Launch-bound: at least this share of the device's idle time lies in launch gaps, between kernels
# whose median is under LAUNCH_KERNEL_US (a kernel that short finishes before the host can issue
# the next one: ~5-20 us per launch).
LAUNCH_GAP_SHARE = 0.5
LAUNCH_KERNEL_US = 50.0
# bf16 gradient compression halves the bytes on the wire; the latency part of a collective does
# not shrink, so a quarter of the exposed time is the pessimistic end.
BYTES_SAVED_HIGH = job_path.FEWER_BYTES
BYTES_SAVED_LOW = 0.25
# The share of a fix's upper bound taken as its lower end where the trace cannot tell how much of
# the cause the fix removes (half: a fix rarely removes all of its cause, seldom less than half).
DEFAULT_LOW = 0.5
UNMEASURED = "the trace does not measure what this fix saves"  # a lever sized 0 to 0: not sized, not "-0.00 ms"
# Most DataLoader workers worth suggesting however many cores are idle (beyond it, start-up and
# memory cost more than they save).
MAX_WORKERS = 8
# A loader thread busy at least this share of a core is CPU-bound: each more worker needs a core of
# its own. Below it, the loader mostly waits (I/O, sleep), and workers share the spare capacity,
# each counted at no less than MIN_LOADER_CPU of a core.
LOADER_CPU_BOUND = 0.5
MIN_LOADER_CPU = 0.1
# Workers found waiting for their next index at least this share of the readings are ahead of the step:
# loading keeps up, and a wait for data left is the batch's hand-over between processes
WORKERS_AHEAD = 0.5
# Under the profiler, a run of recorded host calls also slows the rest of the step: the operators after
# 300 .item() calls a step ran slower by 0.28-0.48x the calls' own span (torch 2.13 on the CPU, 200 steps
# with the calls against 200 without, either order; a tenth of that unprofiled), which no event of the
# calls records and dropping them gives back; the upper end allows for half the calls' span.
CALLS_AFTER_EFFECT = 0.5
# The achieved saving is a difference of two median steps, each off by chance: a median of n steps
# errs by about MEDIAN_SE * sigma / sqrt(n) (its standard error under normal noise), sigma read from
# the steps' median absolute deviation (MAD_SIGMA * MAD: one slow step does not widen it); Z95 of
# those errors either side is the difference's 95% interval.
# The findings whose fixes work on the host alone: none saves more than the host's whole time on
# the critical path (path_bound's "host")
HOST_SIDE = frozenset({"dataloader", "cuda_dataloader", "host_bound", "gpu_gaps", "op_dispatch", "gc", "conjectured_gc"})
# A critical-path bound within this share of a lever's upper end leaves it as it is (the two
# measure one wait: a last-digit difference is no news)
BOUND_SLACK = 0.01
MEDIAN_SE = 1.2533
MAD_SIGMA = 1.4826
Z95 = 1.96


@dataclass(frozen=True)
class Lever:
    """One way to fix a finding and what it can remove per step (ms)."""

    name: str
    low_ms: float
    high_ms: float
    basis: str

    @property
    def saving_ms(self) -> float:
        return (self.low_ms + self.high_ms) / 2


def step_ms(s: Summary) -> float:
    """The median step (ms): the step the predictions are shares of."""
    median = s.step_stats["median_us"]
    return float(median) / 1000 if median == median else 0.0


def per_step_ms(s: Summary, column: str) -> float:
    return float(s.steps[column].mean()) / 1000 if len(s.steps) and column in s.steps else 0.0


def median_error_ms(s: Summary) -> float | None:
    """The standard error of the median step (ms) from the steps' own spread; None under 3 steps."""
    wall = s.steps["wall_us"].dropna().to_numpy(dtype=float) if len(s.steps) and "wall_us" in s.steps else np.zeros(0)
    if wall.size < 3:
        return None
    mad = float(np.median(np.abs(wall - np.median(wall))))
    return MEDIAN_SE * MAD_SIGMA * mad / np.sqrt(wall.size) / 1000


def noise_ms(before: Summary, after: Summary | None = None) -> float | None:
    """How far either side (95%) chance moves the achieved saving, median step ``before`` less
    ``after`` (ms): both medians' errors, the fixed run's taken as the baseline's until it exists;
    None where the baseline has under 3 steps."""
    a = median_error_ms(before)
    if a is None:
        return None
    b = median_error_ms(after) if after is not None else None
    return Z95 * float(np.hypot(a, a if b is None else b))


def threshold_ms(s: Summary) -> float:
    """The saving a fix must be able to reach to be offered as the Next change (ms per step)."""
    return T.VERDICT_MIN_IMPACT * step_ms(s)


# -- communication --------------------------------------------------------------------------------
def communication_levers(s: Summary, wait_ratio: float = 0.0) -> list[Lever]:
    """The communication finding's levers, largest upper bound first: overlap with backward,
    fewer bytes, and the straggler where the collectives wait. In a job, the rank that waits
    least in its collectives bounds what moving bytes costs; the rest is waiting for a late rank,
    which fewer bytes do not shorten."""
    exposed = per_step_ms(s, "comm_not_overlapped_us")
    computing = per_step_ms(s, "computing_us")
    overlapped = per_step_ms(s, "overlapped_us")
    beside = max(computing - overlapped, 0.0)  # compute not yet hiding any communication
    hideable = min(exposed, beside)
    transfer = min(exposed, _least_exposed_ms(s))
    waited = max(exposed - transfer, wait_ratio * exposed if wait_ratio > 0.5 else 0.0)
    transfer = exposed - waited
    levers = [
        Lever("overlap", DEFAULT_LOW * hideable, hideable,
              f"overlap hides at most the {beside:,.2f} ms of compute not yet beside the communication "
              f"(of {exposed:,.2f} ms exposed)"),
        Lever("bytes", BYTES_SAVED_LOW * transfer, BYTES_SAVED_HIGH * transfer,
              f"bf16 gradients halve the bytes: up to half of the {transfer:,.2f} ms spent moving them, a quarter "
              "where latency, not bandwidth, dominates" + (f" (the other {waited:,.2f} ms exposed wait for a late "
                                                           "rank)" if waited > 0 else "")),
    ]
    if waited > 0:
        levers.append(Lever("straggler", DEFAULT_LOW * waited, waited,
                            f"the collectives wait {waited:,.2f} ms a step for a late rank "
                            + (f"({wait_ratio:.0%} of their time), " if wait_ratio > 0.5 else
                               "(beyond the rank that waits least), ") + "which balancing the ranks removes"))
    # a job replayed together (job_path) bounds fewer bytes and the straggler by what its path loses
    levers = [bounded(lv, path_bound.stored(s, lv.name)) if lv.name in ("bytes", "straggler") else lv
              for lv in levers]
    return sorted(levers, key=lambda lv: (lv.high_ms, lv.low_ms), reverse=True)


def _least_exposed_ms(s: Summary) -> float:
    """The exposed communication per step of the job's rank that waits least (ms); infinite
    without a rank table of two or more ranks."""
    ranks = s.ranks
    if ranks is None or len(ranks) < 2 or "comm_not_overlapped_us" not in ranks:
        return float("inf")
    values = ranks["comm_not_overlapped_us"].dropna()
    return float(values.min()) / 1000 if len(values) >= 2 else float("inf")


# -- DataLoader workers ---------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkerFit:
    """How many DataLoader workers fit the machine: ``now`` running, ``suggest`` (``now`` when no
    core is spare; fewer where the workers and the training thread outnumber the busy cores),
    ``cores`` and ``idle`` cores (None where no host samples were taken)."""

    now: int
    suggest: int
    cores: int | None
    idle: int | None
    demand: float = 1.0  # the share of a core one loader (the training thread, or a worker) uses
    batch_ms: float | None = None  # the workers' CPU and own waiting per step (one batch), where fewer are suggested
    waiting: float | None = None  # the share of the workers' readings that found them waiting for work

    def said(self) -> str:
        """The machine's figures the count rests on."""
        return (f"{self.idle} of the {self.cores} cores idle during the steps, a loader using {self.demand:.0%} of "
                "a core")

    @property
    def known(self) -> bool:
        return self.cores is not None

    @property
    def ahead(self) -> bool:
        """The workers mostly wait for work: more of them cannot shorten the step's wait for data."""
        return _ahead(self.now, self.waiting)

    def waiting_said(self) -> str:
        """``the N workers wait for work X% of the time``."""
        return f"the {self.now} DataLoader workers wait for work {self.waiting:.0%} of the time"


def _ahead(now: int, waiting: float | None) -> bool:
    return now > 0 and waiting is not None and waiting >= WORKERS_AHEAD


def _share(h, column: str) -> float | None:
    """The mean of a percent column of the host table as a share, None where it was not read."""
    if column not in h or not h[column].notna().any():
        return None
    return float(h[column].mean()) / 100


def worker_fit(s: Summary) -> WorkerFit:
    """The workers already running and the count that fits the cores (npumagic's host samples);
    unknown without samples. A loader that keeps its thread busy (at least half a core: decoding,
    augmenting) gets one worker per core left idle; one that mostly waits (I/O, sleep) gets as
    many as the spare capacity holds at its measured CPU per worker. Workers that mostly wait for
    work (:data:`WORKERS_AHEAD`) keep up already: where a batch costs them less CPU than the step
    waits for it, loading it in the training thread costs less than handing it over (none), else the
    count stays."""
    h = s.host
    if h is None or h.empty or h["cores"].max() == 0:
        return WorkerFit(0, 0, None, None)
    now = int(h["workers"].max())
    cores = int(h["cores"].max())
    idle = int(np.floor(float(h["cores_idle"].mean()) + 1e-9))
    column = "worker_cpu_pct_mean" if now else "main_thread_cpu_pct"
    demand = float(h[column].mean()) / 100 if h[column].notna().any() else 1.0  # cores one loader uses
    waiting = _share(h, "workers_waiting_pct") if now else None
    # a batch loaded inline costs the workers' CPU and their own waiting (reads, sleeps) a step
    batch = now * (demand + (_share(h, "workers_blocked_pct") or 0.0)) * per_step_ms(s, "wall_us")
    if _ahead(now, waiting):
        inline = batch < per_step_ms(s, "dataloader_us")
        return WorkerFit(now, 0 if inline else now, cores, idle, demand, batch, waiting)
    if now >= cores and idle == 0:
        # the workers and the training thread outnumber the cores, none idle: they take turns, each batch
        # waiting behind the others' time slices; one worker per core beside the training thread, or
        # none where loading a batch inline costs less CPU than the step waits for it (the wait is
        # handing batches between processes, not making them)
        return WorkerFit(now, 0 if batch < per_step_ms(s, "dataloader_us") else cores - 1, cores, idle, demand, batch,
                         waiting)
    if demand >= LOADER_CPU_BOUND:
        more = idle
    else:
        spare = cores * (1 - float(h["cores_busy_pct"].mean()) / 100)
        more = max(idle, int(np.floor(spare / max(demand, MIN_LOADER_CPU) + 1e-9)))
    return WorkerFit(now, min(now + more, MAX_WORKERS) if more > 0 else now, cores, idle, demand, waiting=waiting)


def dataloader_lever(s: Summary, wait_ms: float) -> Lever:
    """More workers: with ``n`` workers loading in parallel with the rest of the step (``rest``),
    a batch costing ``B`` ms of CPU is ready after ``B / n - rest``; the main thread (``n = 0``)
    loads it inline (``B`` = the wait). More workers help only while idle cores run them."""
    fit = worker_fit(s)
    rest = max(per_step_ms(s, "wall_us") - wait_ms, 0.0)  # the mean step, as the wait is the mean wait
    if not fit.known:
        return Lever("workers", DEFAULT_LOW * wait_ms, wait_ms,
                     f"the whole {wait_ms:,.2f} ms wait, if idle cores run the workers (no host samples tell "
                     "how many cores are spare)")
    if fit.suggest == 0 < fit.now and fit.batch_ms is not None:
        # the workers' CPU a step is the most loading inline can cost (it holds their side of each hand-over
        # too); at best it costs nothing and the rest of the step no longer waits for a core beside them
        waited = core_wait_share(s) * rest
        return Lever("inline", max(wait_ms - fit.batch_ms, 0.0), wait_ms + waited,
                     f"the {wait_ms:,.2f} ms wait, less at most the {fit.batch_ms:,.2f} ms a step the {fit.now} workers "
                     "take on a core or blocked in their reads (loading in the training thread costs no more)" + (
                         f", and up to the {waited:,.2f} ms the rest of the step waited for a core beside them"
                         if waited > 0 else ""))
    if fit.ahead and fit.suggest == fit.now:
        return Lever("handover", 0.0, wait_ms,
                     f"{fit.waiting_said()}: more would not shorten the {wait_ms:,.2f} ms wait, which is handing "
                     "each batch over between processes: fewer tensors per batch shorten it, up to all of it")
    if fit.suggest < fit.now:
        return Lever("fewer_workers", DEFAULT_LOW * wait_ms, wait_ms,
                     f"{plural(fit.now, 'worker', 'workers')} and the training thread take turns on "
                     f"{plural(fit.cores, 'core', 'cores')}, none idle: with "
                     f"{fit.suggest} the batches stop waiting behind the others' time slices, up to the {wait_ms:,.2f} ms "
                     "wait")
    if fit.suggest <= fit.now:
        return Lever("cheaper_samples", 0.0, wait_ms,
                     f"no core is idle ({plural(fit.cores, 'core', 'cores')}, {plural(fit.now, 'worker', 'workers')}): "
                     "more workers would take cores from the "
                     f"step; only cheaper samples remove the {wait_ms:,.2f} ms wait")
    batch = wait_ms if fit.now == 0 else fit.now * (wait_ms + rest)
    after = max(batch / fit.suggest - rest, 0.0)
    high = wait_ms - after
    return Lever("workers", DEFAULT_LOW * high, high,
                 f"{plural(fit.suggest, 'worker', 'workers')} on {plural(fit.cores, 'core', 'cores')} ({fit.idle} idle, "
                 f"{fit.now} running) load a "
                 f"{batch:,.2f} ms batch beside the {rest:,.2f} ms rest of the step: {after:,.2f} ms wait left of "
                 f"{wait_ms:,.2f}")


# -- host-bound: launch gaps ----------------------------------------------------------------------
def idle_gaps(s: Summary) -> dict[str, float] | None:
    """The device's idle time inside the steps split by gap length (ms per step):
    ``short`` (gaps under :data:`LAUNCH_GAP_US`, launch latency) and ``total``; None without
    device events."""
    from .blocking import device_busy

    ev = s.events
    if ev is None or ev.empty or not s.meta.get("device_mode") or not len(s.steps):
        return None
    in_step = ev[ev["step"].to_numpy() >= 0]
    # gaps within each step's own device work: the gap across a step boundary is neither step's
    per_step = [device_busy(group) for _, group in in_step.groupby("step", observed=True, sort=False)]
    gaps = np.concatenate([(b.starts[1:] - b.ends[:-1]).astype(float) for b in per_step if len(b) > 1] or [np.zeros(0)])
    if not gaps.size:
        return None
    gaps = gaps[gaps > 0]
    n = max(len(per_step), 1)
    kernels = in_step.loc[((in_step["kind"] == "kernel") & (in_step["device"] >= 0)).to_numpy(), "dur_ns"]
    return {"short": float(gaps[gaps < LAUNCH_GAP_US * 1000].sum()) / 1e6 / n, "total": float(gaps.sum()) / 1e6 / n,
            "gaps": float(len(gaps)) / n,
            "kernel_median_us": float(np.median(kernels.to_numpy())) / 1000 if len(kernels) else float("nan")}


def launch_bound(s: Summary) -> dict[str, float] | None:
    """The launch-gap figures when the step is launch-bound: most of the device's idle time in
    gaps shorter than :data:`LAUNCH_GAP_US`; else None."""
    gaps = idle_gaps(s)
    if not gaps or gaps["total"] <= 0 or gaps["short"] < LAUNCH_GAP_SHARE * gaps["total"]:
        return None
    return gaps if gaps["kernel_median_us"] < LAUNCH_KERNEL_US else None


# -- host reads on the CPU ------------------------------------------------------------------------
def calls_lever(own_ms: float, per_step: float, between_us: list[float] | tuple[float, float] | None) -> Lever:
    """Dropping per-step ``.item()`` calls on the CPU: nothing waits for a device, but the calls
    take their own recorded time (``own_ms``) and the Python between consecutive calls, which no
    event records (``between_us``: its median and its mean per call, gaps of a loop only, see
    :func:`.syncs.python_between_us`): the calls and the typical Python go at least; at most, the
    mean's, and the slowdown the calls' records cause in the rest of the profiled step
    (:data:`CALLS_AFTER_EFFECT` of their span)."""
    after = 1 + CALLS_AFTER_EFFECT
    effect = (f"; and up to {CALLS_AFTER_EFFECT:.0%} more: under the profiler the rest of the step runs slower "
              "beside the calls' records")
    basis = f"the {own_ms:,.2f} ms per step the calls themselves take on the CPU"
    if not between_us:
        return Lever("calls", DEFAULT_LOW * own_ms, own_ms * after,
                     basis + " (nothing waits for a device here; on one each would also drain its queue)" + effect)
    typical, mean = (per_step * v / 1000 for v in between_us)
    return Lever("calls", own_ms + typical, (own_ms + max(mean, typical)) * after,
                 basis + f" and the Python between them, which no event records: {per_step:.0f} calls x the "
                 f"{between_us[0]:,.2f} µs from a call's end to the next (typical) or {between_us[1]:,.2f} µs (mean): "
                 "nothing waits for a device here; on one each would also drain its queue" + effect)


# -- every finding --------------------------------------------------------------------------------
def _at_stake_ms(s: Summary, f: Finding) -> float:
    return max(f.impact, 0.0) * per_step_ms(s, "wall_us")


def core_wait_share(s: Summary) -> float:
    """The share of the steps the training thread was ready to run but waited for a core (npumagic's
    host samples, the scheduler's own count); 0 where not sampled."""
    h = s.host
    if h is None or h.empty or "main_thread_wait_pct" not in h or not h["main_thread_wait_pct"].notna().any():
        return 0.0
    return float(np.clip(h["main_thread_wait_pct"].mean() / 100, 0.0, 1.0))


def python_lever(s: Summary, stake: float) -> Lever:
    """Moving Python out of the step (the CPU's time outside operators, ``stake`` on the mean step;
    the median step's where the steps say, as every prediction is of the median step: slow steps are
    jitter's): it removes the Python's own time, not the time the thread waited for a core meanwhile
    (other processes or DataLoader workers on the same cores), counted as the same share of it as of
    the whole step."""
    python = s.steps["idle_python_us"].dropna() if "idle_python_us" in s.steps else ()
    if len(python):
        stake = float(np.median(python)) / 1000
    waited = core_wait_share(s)
    own = stake * (1 - waited)
    return Lever("python", DEFAULT_LOW * own, own,
                 f"the {stake:,.2f} ms of Python outside operators in the median step, if moved out of it" + (
                     f", less the {waited:.0%} of it the thread waited for a core (other processes, workers)"
                     if waited > 0 else ""))


def steady_lever(s: Summary, stake: float, data_found: bool) -> Lever:
    """Steadier steps: what the mean step loses to slow steps (``stake``, mean less median). Where a
    DataLoader finding stands beside it, the slow steps' wait for data is not counted: it is that
    finding's cause, and jitter's fix (read the slow steps) would lead to it."""
    if not data_found or not len(s.steps) or "dataloader_us" not in s.steps:
        return Lever("steady", 0.0, stake, f"the {stake:,.2f} ms the mean step loses to slow steps, if they all go")
    rest = (s.steps["wall_us"] - s.steps["dataloader_us"].fillna(0.0)).dropna().to_numpy(dtype=float)
    lost = min(max(float(rest.mean() - np.median(rest)) / 1000, 0.0), stake) if rest.size else 0.0
    return Lever("steady", 0.0, lost,
                 f"the {lost:,.2f} ms the mean step loses to slow steps beside their wait for data (of {stake:,.2f} ms "
                 "in all; the wait is the DataLoader finding's), if they all go")


def lever(s: Summary, f: Finding, beside: frozenset[str] = frozenset()) -> Lever:
    """The lever a finding's fix pulls, with its predicted saving per step; ``beside``: the rules
    of the other findings of the run."""
    ev: dict[str, Any] = f.evidence
    rule = f.rule or f.category
    stake = _at_stake_ms(s, f)
    if rule == "communication":
        return communication_levers(s, float(ev.get("wait_ratio", 0.0)))[0]
    if rule == "dataloader":
        return dataloader_lever(s, stake)
    if rule == "host_bound" and "python_ms" in ev:
        return python_lever(s, stake)
    if rule == "host_bound" and ev.get("cpu_work_ms") is not None:
        work = min(float(ev["cpu_work_ms"]), stake)
        return Lever("cpu_work", DEFAULT_LOW * work, work,
                     f"the {work:,.2f} ms of device idle under the host's CPU work, if it leaves the step")
    if rule == "host_bound" and ev.get("launch_gap_ms") is not None:
        short = min(float(ev["launch_gap_ms"]), stake)
        return Lever("graphs", DEFAULT_LOW * short, short,
                     f"graphs remove the {short:,.2f} ms of launch gaps under {LAUNCH_GAP_US:.0f} µs, not the kernels")
    if rule == "small_ops":
        # fusing removes the tiny operators and the host time between them: on the CPU the Python
        # that dispatches each one (short gaps between operators: a longer one is the step's own
        # Python, host_bound's), on a device the launch gaps
        gaps = idle_gaps(s) if s.meta.get("device_mode") else None
        dispatch = None if s.meta.get("device_mode") else dispatch_ms(s.events, len(s.steps))
        between = (gaps["short"] if gaps else 0.0) if s.meta.get("device_mode") else dispatch if dispatch is not None \
            else max(per_step_ms(s, "idle_us") - per_step_ms(s, "dataloader_us"), 0.0)
        basis = f"the {stake:,.2f} ms of tiny operators and up to the {between:,.2f} ms of dispatch between them"
        runs = None if s.meta.get("device_mode") else short_runs_ms(s.events, len(s.steps))
        if runs is None or runs <= stake + between:
            return Lever("fuse", DEFAULT_LOW * stake, stake + between, basis)
        # compiling the loop that makes them removes the loop: its Python, allocations and collections too
        rest = max(per_step_ms(s, "wall_us") - runs, 0.0)
        after = CALLS_AFTER_EFFECT * min(runs, rest)
        return Lever("fuse", DEFAULT_LOW * stake, runs + after,
                     basis + f"; at most the {runs:,.2f} ms from the first to the last of each run of them (the "
                     f"loop that makes them, its Python and garbage collection included), and up to {after:,.2f} ms "
                     "more: under the profiler the rest of the step runs slower beside their records")
    if f.category == "sync" and f.impact == 0 and ev.get("calls_ms"):
        return calls_lever(float(ev["calls_ms"]), float(ev.get("syncs_per_step") or 0), ev.get("python_between_us"))
    if rule in ("memory_capacity", "fragmentation", "memory_growth") or (f.category == "sync" and f.impact == 0):
        return Lever("none", 0.0, 0.0, "costs no step time now" if f.category != "sync" else
                     "nothing waits on the CPU: it costs time only once the step runs on a device")
    if rule == "jitter":
        return steady_lever(s, stake, "dataloader" in beside)
    if ev.get("rule") == "slow_rank" and f.category == "communication":
        waited = float(ev.get("gap_ms", stake))
        return Lever("straggler", DEFAULT_LOW * waited, waited,
                     f"what the other ranks wait for rank {ev.get('low_rank')}: {waited:,.2f} ms a step")
    if stake <= 0:
        return Lever("unmeasured", 0.0, 0.0, UNMEASURED)
    return Lever("fix", DEFAULT_LOW * stake, stake, f"the {stake:,.2f} ms per step the finding occupies")


def path_bound_of(s: Summary, f: Finding) -> PathBound | None:
    """The critical-path bound of a device finding's fix (:mod:`.path_bound`, a job's ranks together
    in :mod:`.job_path`): the wait for data, the host operators under the gaps, the operator whose
    call blocks, the late rank's wait, and for any other host-side fix the host's whole time; None
    where none models it."""
    ev: dict[str, Any] = f.evidence
    rule = f.rule or f.category
    host = path_bound.stored(s, "host")
    if rule in ("dataloader", "cuda_dataloader"):
        own = path_bound.stored(s, "dataloader")
    elif rule == "host_bound" and ev.get("cpu_work_ms") is not None and ev.get("gap_operators"):
        own = path_bound.stored(s, "cpu_work", [str(g["op"]) for g in ev["gap_operators"][:3]])
    elif f.category == "sync" and f.impact > 0 and ev.get("top"):
        return path_bound.stored(s, "sync", [str(ev["top"])])
    elif ev.get("rule") == "slow_rank" and f.category == "communication":
        late = (getattr(s, "path_bounds", None) or {}).get("straggler") or {}
        return path_bound.stored(s, "straggler") if late.get("rank") == ev.get("low_rank") else None
    elif rule in HOST_SIDE:
        own = None
    else:
        return None
    return min((b for b in (own, host) if b is not None), key=lambda b: b.saving_ms, default=None)


def bounded(lv: Lever, bound: PathBound | None) -> Lever:
    """``lv`` with its upper end no more than what the critical path loses without the cause."""
    if bound is None or bound.saving_ms >= lv.high_ms * (1 - BOUND_SLACK):
        return lv
    share = bound.saving_ms / lv.high_ms  # the lever's low end keeps its share of the high one
    return Lever(lv.name, lv.low_ms * share, bound.saving_ms, lv.basis + bound.said())


def predict(s: Summary, found: list[Finding]) -> list[Finding]:
    """``found`` with each finding's predicted saving (ms per step), its interval and basis,
    ranked by the saving (see :func:`rank`); a finding already predicted keeps its own. On a
    device, a fix's upper end is at most what the step's critical path loses without its cause."""
    out = []
    noise = noise_ms(s)
    rules = frozenset(f.rule or f.category for f in found)
    for f in found:
        if f.predicted_saving_ms is None:
            lv = bounded(lever(s, f, rules - {f.rule or f.category}), path_bound_of(s, f))
            f = replace(f, predicted_saving_ms=round(lv.saving_ms, 3),
                        predicted_interval=(round(lv.low_ms, 3), round(lv.high_ms, 3)), predicted_basis=lv.basis,
                        predicted_noise_ms=round(noise, 3) if noise is not None else None)
        out.append(f)
    return rank(out, s)


def rank(found: list[Finding], s: Summary | None = None) -> list[Finding]:
    """Most to least predicted saving, findings without a prediction by impact after them; given the
    run's Summary ``s``, the fixes that can be the Next change (:func:`reaches`) first, so advice
    leads with the checklist's Next change (a fix whose cause holds under the verdict threshold of
    the step is never it, however much its prediction says)."""
    return sorted(found, key=lambda f: (s is None or reaches(s, f),
                                        f.predicted_saving_ms if f.predicted_saving_ms is not None else -1.0,
                                        f.impact), reverse=True)


def reaches(s: Summary, f: Finding) -> bool:
    """Whether the fix's upper bound reaches the verdict threshold (a finding without a
    prediction: by its impact)."""
    if f.predicted_interval is None:
        return f.impact >= T.VERDICT_MIN_IMPACT
    return f.predicted_interval[1] >= threshold_ms(s) and f.impact >= T.VERDICT_MIN_IMPACT


def said(f: Finding) -> str:
    """``predicted -X ms (-HI to -LO) per step, ±N ms run to run``, or ""."""
    if f.predicted_saving_ms is None or f.predicted_interval is None:
        return ""
    if f.predicted_basis == UNMEASURED:
        return f"not sized: {UNMEASURED}"
    lo, hi = f.predicted_interval
    return f"predicted {change_ms(f.predicted_saving_ms, lo, hi)} per step" + noise_said(f)


def prediction(f: Finding) -> str:
    """The advice's ``predicted:`` line: ``-X ms (-HI to -LO) per step, ±N ms run to run, BASIS``,
    or ``not sized: ...`` where the trace does not measure what the fix saves."""
    if f.predicted_basis == UNMEASURED:
        return f"not sized: {UNMEASURED}"
    lo, hi = f.predicted_interval
    return f"{change_ms(f.predicted_saving_ms, lo, hi)} per step{noise_said(f)}, {f.predicted_basis}"


def noise_said(f: Finding) -> str:
    """``, ±N ms run to run`` where the finding's run measured its steps' spread, else ""."""
    noise = getattr(f, "predicted_noise_ms", None)  # a finding stored before it was kept has none
    if not noise:
        return ""
    return f", ±{noise:,.2f} ms run to run (95%, from the steps' spread)"
