"""The core rules, for every backend: communication, DataLoader, host-bound, blocking calls,
small operators, NPU compute, memory, jitter and frequency. Each takes a Summary and returns
``list[Finding]``; fixes fit the backend the run used (no NPU-only fix on a CPU/CUDA run, and
no CUDA-only one on an NPU)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from .. import counters as hw
from .. import thresholds as T
from .. import cluster, roles, whatif
from ..blocking import sync_idle_share
from ..syncs import SYNC_HOST_OPS, calls_median_ms, python_between_us, step_syncs
from ..finding import Finding, plural
from ..gaps import cpu_work, gap_operators
from ..summary import Summary
from ..task_masks import memory_bound
from .npu_ops import INTERNAL_FORMAT_OFF
from .registry import kernel_metrics, rule


# -- fixes that fit the backend the run used (no NPU-only fix on a CPU/CUDA run, and no CUDA-only one on an NPU)
def backend_of(s: Summary) -> str:
    return str(s.meta.get("backend") or "cpu")


def _device_module(s: Summary) -> str:
    """``npu`` or ``cuda``: the torch device module of the run's backend."""
    return "npu" if backend_of(s) == "npu" else "cuda"


def _per_step_ms(s: Summary, column: str) -> float:
    return float(s.steps[column].mean()) / 1000 if len(s.steps) else 0.0


@rule("communication")
def _communication(s: Summary) -> list[Finding]:
    exposed = s.share("comm_not_overlapped_us")
    total = s.share("communication_us")
    comm_us = float(s.steps["communication_us"].sum())
    overlap = float(s.steps["overlapped_us"].sum()) / comm_us if comm_us else 0.0
    if not (exposed > T.COMM_BOUND_SHARE or (total > T.COMM_MIN_SHARE and overlap < T.LOW_OVERLAP_RATIO)):
        return []
    evidence = {"communication_ms": _per_step_ms(s, "communication_us"),
                "comm_not_overlapped_ms": _per_step_ms(s, "comm_not_overlapped_us"),
                "computing_ms": _per_step_ms(s, "computing_us"), "overlap_ratio": overlap, "comm_share": exposed}
    title = (f"collectives take {evidence['communication_ms']:,.2f} ms per step ({evidence['comm_not_overlapped_ms']:,.2f} ms "
             f"not overlapped, {exposed:.0%} of the step) against {evidence['computing_ms']:,.2f} ms of computing; "
             f"{overlap:.0%} of communication overlaps compute")
    where = ""
    wait = 0.0
    if len(s.comm):
        top = s.comm.iloc[0]
        where = f"{top['op']} x{int(top['count'])}"
        if top["link"]:
            where += f" over {top['link']}"
        wait = float(top["wait_ratio"]) if pd.notna(top["wait_ratio"]) else 0.0
        evidence.update(wait_ratio=wait, top_op=top["op"])
        bandwidth = s.comm["bandwidth_gbps"].dropna()
        if len(bandwidth):
            evidence["lowest_bandwidth_gbps"] = float(bandwidth.min())
    # the levers in the order of what each can remove (whatif): overlap cannot hide more than the
    # compute beside the communication, fewer bytes shrink its bandwidth part
    levers = {"overlap": "overlap gradient all-reduce with backward (DistributedDataParallel(bucket_cap_mb=25..100, "
                         "gradient_as_bucket_view=True), fewer and larger collectives)",
              "bytes": "send fewer bytes: compress gradients (model.register_comm_hook(None, torch.distributed.algorithms."
                       "ddp_comm_hooks.default_hooks.bf16_compress_hook)) or reduce them less often (gradient "
                       "accumulation under model.no_sync())",
              "straggler": ((f"{evidence.get('top_op', 'the collective')} spends {wait:.0%} of its time waiting for "
                             "other ranks" if wait > 0.5 else "the collectives wait for other ranks") +
                            cluster.late_rank_said(s.ranks, evidence.get("top_op", "the top collective")))}
    ranked = whatif.communication_levers(s, wait)
    evidence["levers_ms"] = {lv.name: [round(lv.low_ms, 3), round(lv.high_ms, 3)] for lv in ranked}
    fix = "; else ".join(levers[lv.name] for lv in ranked)
    return [Finding("communication", exposed, title, evidence, fix, where.strip("; "))]


@rule("dataloader")
def _dataloader(s: Summary) -> list[Finding]:
    share = s.share("dataloader_us")
    if not share > T.DATALOADER_SHARE:  # NaN (not measured) names no finding either
        return []
    iterator = s.meta.get("dataloader_iter", "")
    on_device = backend_of(s) != "cpu"  # pinned memory only speeds up copies to a device
    fit = whatif.worker_fit(s)
    pinned = "pin_memory=True, " if on_device else ""
    ahead = (fit.waiting_said() + " (each batch is ready before the step asks for it), so the step's wait is "
             "handing batches over between processes" if fit.ahead else "")
    if fit.known and fit.suggest < fit.now:  # oversubscribed, or ahead: the hand-over costs more than loading
        fix = ((ahead + ": ") if ahead else
               f"{plural(fit.now, 'DataLoader worker', 'DataLoader workers')} and the training thread share "
               f"{plural(fit.cores, 'core', 'cores')}, none idle: ") + (
               f"a batch takes them {fit.batch_ms:,.2f} ms (on a core or in their own reads), less than the step "
               f"waits, so load it in the training process: DataLoader(num_workers={fit.now} -> 0)" if fit.suggest == 0 else
               f"use fewer, one per core beside the training thread: DataLoader(num_workers={fit.now} -> "
               f"{fit.suggest}, persistent_workers=True)")
    elif ahead:  # loading keeps up and costs more than the wait: the hand-over itself is the cost
        fix = (ahead + ": more workers would not shorten it. Hand over fewer tensors per batch (stack the samples "
               "into one tensor in collate_fn, return tensors rather than Python objects)" +
               (", set pin_memory=True" if on_device else "") + ", or make each step do more work per batch")
    elif fit.known and fit.suggest <= fit.now:  # more workers would take cores from the step itself
        fix = (f"no core is idle during the steps ({plural(fit.cores, 'core', 'cores')}, "
               f"{plural(fit.now, 'DataLoader worker', 'DataLoader workers')}): more workers "
               "would compete with the training thread for them, so make each sample cheaper instead (decode "
               "pre-resized inputs, cache decoded samples" + (", move augmentation onto the device" if on_device else "")
               + "), or run on a machine with spare cores")
    elif "SingleProcess" in iterator:
        workers = (f"num_workers={fit.suggest}, " if fit.known else "num_workers=N, ")
        fix = ("the DataLoader runs in the training process (num_workers=0): use DataLoader(" + workers + pinned +
               "persistent_workers=True, prefetch_factor=2) and keep decoding/augmentation in the Dataset so the "
               "workers do it" + (f" ({fit.said()})" if fit.known else
                                  " (N up to the cores left idle while the step runs: more would slow the step)"))
    else:
        more = f"num_workers={fit.now} -> {fit.suggest}" if fit.known else "num_workers=... up to the idle cores"
        fix = (f"the workers cannot keep up: raise DataLoader({more}) and prefetch_factor=4, set "
               "persistent_workers=True" + (" and pin_memory=True" if on_device else "") + ", and move "
               "decoding/augmentation out of collate_fn into the workers" + (" (or onto the device)" if on_device else ""))
    ms = _per_step_ms(s, "dataloader_us")
    title = f"the step waits {ms:,.2f} ms for the next batch ({share:.0%} of the step)"
    evidence = {"dataloader_ms": ms, "dataloader_share": share}
    # at stake: the device's idle time while the host waits (it may still drain the last step's
    # queue meanwhile); on the CPU, and where not measured, the wait itself
    impact = share
    if s.meta.get("device_mode") and s.steps.get("idle_dataloader_us") is not None and \
            s.steps["idle_dataloader_us"].notna().any():
        impact = s.share("idle_dataloader_us")
        evidence["device_idle_share"] = impact
        if impact < share - 0.01:
            title += f"; the device idles {_per_step_ms(s, 'idle_dataloader_us'):,.2f} ms of it"
    host = _host_cpu(s)
    if host:
        evidence.update(host)
        n, busy, idle = host["workers"], host["worker_cpu_pct"], host["cores_idle"]
        if n and busy >= T.WORKER_BUSY_PCT:
            title += (f"; its {plural(n, 'DataLoader worker is', 'DataLoader workers are each')} {busy:.0f}% busy: "
                      "loading is CPU-bound")
            more = (f"num_workers={n} -> {fit.suggest}, {plural(idle, 'core is', 'cores are')} idle" if fit.suggest > n
                    else "no core is idle")
            fix = fix if fit.suggest < n else (f"the workers are CPU-bound: add workers ({more}) and make each sample cheaper: decode "
                   "pre-resized inputs, move augmentation onto the device, cache decoded samples")
        elif fit.ahead:
            title += (f"; its {plural(n, 'worker waits', 'workers wait')} for work {fit.waiting:.0%} of the time: "
                      "loading keeps up")
        elif n and busy < T.WORKER_IDLE_PCT and idle:
            title += (f"; its {plural(n, 'worker is', 'workers are')} only {busy:.0f}% busy with {plural(idle, 'core', 'cores')} "
                      "idle: the batches wait on I/O")
            fix = ("the workers wait on I/O, not on the CPU: read from faster storage (copy the dataset to local disk "
                   "or RAM, pack small files into shards), and overlap more reads (prefetch_factor=4, more workers)")
        elif not n and host.get("main_thread_cpu_pct", 0) >= T.HOST_PINNED_PCT:
            title += f"; the training thread loads every batch itself ({host['main_thread_cpu_pct']:.0f}% of a core)"
    return [Finding("dataloader", impact, title, evidence, fix, iterator)]


def _tiny_per_step(s: Summary) -> float:
    k = s.kernels
    if k.empty or not len(s.steps):
        return 0.0
    return float(k.loc[k["mean_us"] < T.TINY_KERNEL_US, "count"].sum()) / len(s.steps)


# torch_npu registers the dynamo backends "npu" and "npugraph_ex" (torch_npu/dynamo/__init__.py);
# aclgraph is torchair's CompilerConfig mode "reduce-overhead". In IPython/Jupyter `import torch_npu`
# sets TASK_QUEUE_ENABLE=0 itself (torch_npu/_init/core/optional_features.py).
NPU_COMPILE = ('torch.compile(model, backend="npu") (torchair), or for launch-bound steps aclgraph: '
               'config = torchair.CompilerConfig(); config.mode = "reduce-overhead"; '
               'torch.compile(model, backend=torchair.get_npu_backend(compiler_config=config))')
NPU_HOST_BOUND_FIX = ("cut host dispatch time: export TASK_QUEUE_ENABLE=2 before starting Python (in IPython/Jupyter "
                      "`import torch_npu` resets it to 0, so a notebook run is more host-bound than the same script), "
                      "bind cores with CPU_AFFINITY_CONF=1, compile the step with " + NPU_COMPILE +
                      ", and raise the batch size")


def steps_inferred(s: Summary) -> bool:
    """The rank's trace has no ProfilerStep marks: its one step is the whole trace, start-up included."""
    return s.meta.get("rank", 0) in s.meta.get("steps_inferred", [])


def idle_explained(s: Summary) -> float:
    """The share of the step the device idles for reasons other rules name: waiting for the
    DataLoader, or blocked on a sync (the step's idle attribution where measured)."""
    if "idle_dataloader_us" in s.steps and len(s.steps) and s.steps["idle_dataloader_us"].notna().any():
        return s.share("idle_dataloader_us") + (sync_idle_share(s) or 0.0)
    return s.share("dataloader_us")


@rule("host_bound")
def _host_bound(s: Summary) -> list[Finding]:
    """Device idle (on the CPU: time outside torch operators) that DataLoader waits and blocking
    syncs do not explain."""
    idle = s.share("idle_us")
    unexplained = idle - idle_explained(s)
    if idle <= T.HOST_BOUND_IDLE_SHARE or unexplained < T.HOST_BOUND_MIN_UNEXPLAINED:
        return []
    idle_ms = _per_step_ms(s, "idle_us")
    evidence = {"idle_ms": idle_ms, "idle_share": idle, "unexplained_share": unexplained,
                "dataloader_ms": _per_step_ms(s, "dataloader_us"), "device_util": s.device_util}
    frames = s.meta.get("python_frames") or []
    if frames:
        evidence["python_frames"] = frames
    if not s.meta.get("device_mode"):
        return [_python_bound(s, unexplained, evidence, frames)]
    evidence.update(preparing_ms=_per_step_ms(s, "preparing_us"), free_share=s.share("free_us"))
    title = (f"the device is idle {idle_ms:,.2f} ms per step ({idle:.0%}) waiting for the host; "
             f"{evidence['preparing_ms']:,.2f} ms pass before the first device task")
    inferred = steps_inferred(s)  # the idle time may be start-up (context creation, first calls), not the loop
    if inferred:
        title = (f"the device is idle {idle_ms:,.2f} ms ({idle:.0%}) of the whole trace, which has no step marks, so "
                 f"start-up counts too; {evidence['preparing_ms']:,.2f} ms pass before the first device task")
    title, fix = _host_thread_said(s, title, _dispatch_fix(s), evidence)
    title, fix, launch = _gaps_said(s, title, fix, evidence, inferred)
    if backend_of(s) in ("cuda", "rocm") and not launch:
        title, fix = _gap_operators_said(s, title, fix, evidence)
    if inferred:
        fix = ("profile steady-state steps before acting on this: mark each iteration (prof.step() under a schedule "
               "that skips the first ones, torch.profiler.schedule(wait=1, warmup=1, active=3); in a cell npumagic "
               "profiles, npumagic.step()); if the steps stay host-bound, " + fix)
    return [Finding("host_bound", unexplained, title, evidence, fix)]


def _python_bound(s: Summary, unexplained: float, evidence: dict, frames: list) -> Finding:
    """A CPU run's host_bound: Python outside torch operators, with the frames taking it where recorded."""
    ms = unexplained * s.step_stats["mean_us"] / 1000
    title = (f"Python outside torch operators takes {ms:,.2f} ms per step on average ({unexplained:.0%} of the "
             "steps' time): the CPU runs no operator then")
    if frames:
        title += f"; most of it in {_frames_listed(frames)}"
    return Finding("host_bound", unexplained, title, dict(evidence, python_ms=ms),
                   "move the Python work out of the step or vectorise it into tensor operations (loops over "
                   "elements, per-sample logging and metric math, time.sleep, printing); " + (
                       f"start with {frames[0]['frame']}" if frames else
                       "this run recorded Python stacks, but none of them in the user's code: the Python frames "
                       "between operators on the timeline's host lane show which take the time"
                       if _has_python_frames(s) else
                       "profile again with Python stacks (--stack) to see which Python frames take the time"),
                   "between operators")


def _dispatch_fix(s: Summary) -> str:
    """The backend's first fix for a device waiting on its host."""
    if s.meta.get("backend") == "npu":
        return NPU_HOST_BOUND_FIX
    if backend_of(s) in ("cuda", "rocm"):  # ROCm's torch captures HIP graphs through the same API
        return ("cut launch overhead: capture the step in CUDA graphs (torch.compile(model, mode='reduce-overhead')), "
                "raise the batch size, and move Python work (logging, metric math) out of the step")
    # an accelerator without CUDA graphs (MTIA, XPU, ...): fewer, larger launches
    return ("cut launch overhead: compile the step so fewer, fused operators are launched (torch.compile(model)), "
            "raise the batch size, and move Python work (logging, metric math) out of the step")


def _host_thread_said(s: Summary, title: str, fix: str, evidence: dict) -> tuple[str, str]:
    """Title and fix told by the host sampler: a saturated step thread dispatches, an idle one waits."""
    host = _host_cpu(s)
    main = host.get("main_thread_cpu_pct", float("nan")) if host else float("nan")
    if host:
        evidence.update(host)
    if main >= T.HOST_PINNED_PCT:
        title += f"; the thread running the step is {main:.0f}% busy: dispatch-bound"
        queue = "export TASK_QUEUE_ENABLE=2 (two-level dispatch pipeline), " if s.meta.get("backend") == "npu" else ""
        fix = (f"the host thread is saturated dispatching operators: {queue}raise the batch size (fewer dispatches "
               "per sample), and compile the step (torch.compile) so fewer, fused kernels are launched; then " + fix)
    elif main < T.WORKER_IDLE_PCT and host and host["cores_idle"]:
        title += (f"; that thread is only {main:.0f}% busy with {plural(host['cores_idle'], 'core', 'cores')} idle: "
                  "the host waits (I/O, sleep, locks), it is not dispatching")
        fix = ("find what the host waits on between steps (profile with Python stacks, --stack, and read the host lanes of the "
               "timeline: file or network reads, logging, checkpoint writes, time.sleep, lock waits) and move it off "
               "the step; " + fix)
    return title, fix


def _gaps_said(s: Summary, title: str, fix: str, evidence: dict, inferred) -> tuple[str, str, dict | None]:
    """Title and fix told by the idle gaps between kernels: launch gaps (graphs remove them) or longer host work."""
    graphs = backend_of(s) in ("cuda", "rocm")  # the fix above is graphs: they remove launch gaps only
    launch = whatif.launch_bound(s)
    gaps = launch or (whatif.idle_gaps(s) if graphs else None)
    if gaps:
        evidence.update(short_gap_ms=gaps["short"], idle_gap_ms=gaps["total"], kernel_median_us=gaps["kernel_median_us"])
    if launch:  # what graphs can remove: the launch gaps, not the kernels nor longer host work
        evidence.update(launch_bound=True, launch_gap_ms=launch["short"])
        title += (f"; launch-bound: {launch['short']:,.2f} of the {launch['total']:,.2f} ms idle per step lies in gaps "
                  f"under {whatif.LAUNCH_GAP_US:.0f} µs between kernels of median {launch['kernel_median_us']:,.1f} µs")
        fix = _launch_fix(s)
    elif gaps and gaps["total"] > 0 and not inferred:
        fix = (f"the device waits on host work between kernels, not on launches ({gaps['total'] - gaps['short']:,.2f} "
               f"of the {gaps['total']:,.2f} ms idle per step lies in gaps over {whatif.LAUNCH_GAP_US:.0f} µs; CUDA "
               f"graphs would remove only the {gaps['short']:,.2f} ms of launch gaps): find that work (profile with "
               "Python stacks, --stack, and read the host lane of the timeline under the gaps) and move it off the "
               "step, then raise the batch size")
    return title, fix, launch


def _gap_operators_said(s: Summary, title: str, fix: str, evidence: dict) -> tuple[str, str]:
    """Title and fix told by the host operators under the largest gaps (their launches linked)."""
    under = gap_operators(s.events)
    if not len(under):
        return title, fix
    listed = ", ".join(f"{r.op} ({r.idle_us / 1000:,.2f} ms, {r.launches} launches)" for r in under.head(3).itertuples())
    evidence["gap_operators"] = under.head(5).to_dict("records")
    title += f"; under the largest gaps the host runs {listed}"
    heavy = cpu_work(under.head(3), T.CPU_WORK_PER_LAUNCH_US)
    if len(heavy) and float(heavy["idle_us"].sum()) >= 0.5 * float(under.head(3)["idle_us"].sum()):
        evidence["cpu_work_ms"] = float(heavy["idle_us"].sum()) / max(len(s.steps), 1) / 1000
        # the fix follows what the heaviest work does (DDP's bucket packing, the optimizer, ...)
        by_role = heavy.assign(role=roles.roles(heavy["op"]).to_numpy()).groupby("role")["idle_us"].sum()
        role = str(by_role.idxmax())
        evidence["cpu_work_role"] = role
        fix = roles.fix_for(role, ", ".join(heavy["op"].head(3)), True)
    return title, fix


def _launch_fix(s: Summary) -> str:
    """The fix for a launch-bound step: launch the step's many small kernels as one graph."""
    if backend_of(s) == "npu":
        return ("the host cannot launch the small kernels as fast as the device runs them: capture the step as a "
                "graph, " + NPU_COMPILE + ", and raise the batch size so each kernel does more work")
    if backend_of(s) in ("cuda", "rocm"):
        return ("the host cannot launch the small kernels as fast as the GPU runs them: capture the step in CUDA "
                "graphs (torch.compile(model, mode='reduce-overhead'), or torch.cuda.graphs for a static step), fuse "
                "kernels (torch.compile), and raise the batch size so each kernel does more work")
    return ("the host cannot launch the small kernels as fast as the device runs them: compile the step so fewer, "
            "fused kernels are launched (torch.compile(model)), and raise the batch size")


def _frames_listed(frames: list[dict]) -> str:
    """The top three of the run's user frames outside operators, those within 10x of the first."""
    return ", ".join(f"{f['frame']} ({f['us_per_step'] / 1000:,.2f} ms per step on average)" for f in frames[:3]
                     if f["us_per_step"] >= 0.1 * frames[0]["us_per_step"])


def _has_python_frames(s: Summary) -> bool:
    """Whether the run recorded Python stacks (torch.profiler's with_stack python_function events)."""
    return bool(s.meta.get("python_stacks"))


def _host_cpu(s: Summary) -> dict[str, Any]:
    """The host's CPU over the run (npumagic's psutil samples), {} when none were taken:
    percents of one core averaged over the steps, worker count and idle cores per step."""
    h = s.host
    if h is None or h.empty or h["cores"].max() == 0:
        return {}
    out: dict[str, Any] = {"workers": int(h["workers"].max()), "cores_idle": int(round(float(h["cores_idle"].mean()))),
                           "cores_busy_pct": float(h["cores_busy_pct"].mean())}
    for key, column in (("main_thread_cpu_pct", "main_thread_cpu_pct"), ("process_cpu_pct", "process_cpu_pct"),
                        ("worker_cpu_pct", "worker_cpu_pct_mean")):
        if h[column].notna().any():
            out[key] = float(h[column].mean())
    out.setdefault("worker_cpu_pct", float("nan"))
    return out


def _sync_fix(s: Summary, call: str = "", library: bool = False) -> str:
    if library:
        return ("this sync happens inside a library operator, not in the step's code (cuDNN/MIOpen autotuning runs "
                "on the first calls with each new input shape): profile later steps (--skip-first / --wait) and keep "
                "input shapes fixed; set torch.backends.cudnn.benchmark = False only if shapes change every step")
    if backend_of(s) == "cpu":  # the habit to drop before the job moves to a device
        return ("read tensor values less often: replace loss.item()/float(t)/print(t) in the step with accumulation in "
                "a tensor read every N steps, and avoid .cpu()/.tolist()/.numpy() in the loop")
    dev = _device_module(s)
    call = re.sub(r"torch\.(cuda|npu)\.", f"torch.{dev}.", call)  # the run's device module, whoever named it
    if call.startswith("torch.") or "synchronize" in call or "elapsed_time" in call:
        return (f"drop {call} from the step: it waits for all queued work; time the loop with "
                f"torch.{dev}.Event(enable_timing=True) pairs read once after it, or synchronise only where the host "
                "really needs a result")
    if ".cpu()" in call or "copy into a host tensor" in call:
        return ("keep the values on the device, or copy them without blocking: preallocate a pinned host buffer "
                "(torch.empty(..., pin_memory=True)), copy with buf.copy_(t, non_blocking=True) and read it a step "
                "later; log metrics every N steps instead of every step")
    if "size" in call:
        return (f"avoid data-dependent shapes in the step ({call}): use torch.where or a multiplication by the mask "
                "instead of boolean indexing, or pass an explicit size where the op takes one")
    return ("remove host-device syncs from the step: replace loss.item()/float(t)/print(t) with on-device accumulation "
            f"read every N steps (or a pinned, non_blocking copy read a step later), and avoid .cpu() and "
            f"torch.{dev}.synchronize() in the loop")


@rule("sync")
def _sync(s: Summary) -> list[Finding]:
    """Host calls that block until the device catches up, costed by the device idle time they
    cause (the queue they drain), never by the host time they block while the device computes,
    and named by the user's call behind them (:mod:`.blocking`).

    On the CPU nothing blocks, but ``.item()`` every step becomes a host-device sync on NPU or
    CUDA: a low finding, so the habit is caught before the job moves to the accelerator.
    """
    syncs = step_syncs(s)
    if syncs.empty and s.blocking.empty:
        return []
    ranked = syncs.sort_values("total_us", ascending=False, kind="stable")
    per_step = float(syncs["per_step"].max()) if len(syncs) else 0.0
    located = ranked[ranked["source"].astype(str) != ""]
    blocking = s.blocking
    top = blocking.iloc[0] if len(blocking) else None
    where = (str(top["source"]) if top is not None and str(top["source"]) else
             str(located["source"].iloc[0]) if len(located) else str(top["call"] if top is not None else ranked.iloc[0]["name"]))
    if not s.meta.get("device_mode"):
        if per_step < 1:
            return []
        name = str(ranked.iloc[0]["name"])
        # the calls' own time (the top name's total holds the _local_scalar_dense it calls: never both)
        calls_ms = calls_median_ms(s, name)
        if calls_ms is None:
            calls_ms = float(ranked.iloc[0]["total_us"]) / max(len(s.steps), 1) / 1e3
        # on the CPU nothing waits (impact 0: low, never the verdict); it is a habit to drop early
        return [Finding("sync", 0.0,
                       f"{per_step:.0f} {name} call{'' if round(per_step) == 1 else 's'} per step read tensor values "
                       "on the host; on NPU/CUDA each becomes a host-device sync that drains the device queue",
                       {"syncs_per_step": per_step, "top": name, "sync_share": s.share("sync_us"), "calls_ms": calls_ms,
                        "python_between_us": python_between_us(s.events, name)},
                       _sync_fix(s), where)]
    measured = sync_idle_share(s)
    cost = measured if measured is not None else min(s.share("sync_us"), s.share("idle_us"))
    if cost <= T.SYNC_SHARE or top is None:
        return []
    steps = max(len(s.steps), 1)
    blocked = _per_step_ms(s, "sync_us")
    idle = cost * s.step_stats["mean_us"] / 1000
    evidence = {"syncs_per_step": per_step, "blocked_ms": blocked, "cost_share": cost, "idle_ms": idle,
                "top": str(top["op"]), "top_call": str(top["call"]), "top_blocked_ms": float(top["blocked_us"]) / steps / 1000,
                "top_idle_ms": float(top["idle_us"]) / steps / 1000 if top["idle_us"] == top["idle_us"] else float("nan")}
    count = float(top["per_step"])
    title = (f"{top['call']} blocks the host {evidence['top_blocked_ms']:,.2f} ms per step ({count:.0f} call"
             f"{'' if round(count) == 1 else 's'}, in {top['op']}); the device idles {idle:,.2f} ms per step "
             f"({cost:.0%} of the step) while the host waits for it")
    return [Finding("sync", cost, title, evidence, _sync_fix(s, str(top["call"]), bool(top["library"])), where)]


FREE_VIEW_OPS = frozenset(f"aten::{op}" for op in (
    "as_strided", "view", "_unsafe_view", "t", "transpose", "permute", "expand", "reshape", "resolve_conj",
    "resolve_neg", "detach", "alias", "unsqueeze", "squeeze", "select", "slice", "unbind", "split", "chunk",
    "narrow", "view_as", "expand_as", "numpy_T", "lift_fresh", "empty", "empty_like", "empty_strided"))


@rule("small_ops")
def _small_ops(s: Summary) -> list[Finding]:
    k = s.kernels
    if k.empty or not len(s.steps):
        return []
    # tiny by the typical call (median; mean in summaries stored before it was kept): on a busy
    # host a few calls caught by a time slice raise a 3 us operator's mean past 10 us, its median not
    typical = k["median_us"].fillna(k["mean_us"]) if "median_us" in k else k["mean_us"]
    # host reads (.item()) are the sync rule's: fusing does not remove them
    tiny = k[(typical < T.TINY_KERNEL_US).to_numpy() & ~k["type"].astype(str).isin(SYNC_HOST_OPS).to_numpy()]
    total = float(k["total_us"].sum())
    if not total > 0:  # every kernel of zero length (a trace with dur 0 or -0.0): no share to judge
        return []
    per_step = float(tiny["count"].sum()) / len(s.steps)
    share = float(tiny["total_us"].sum()) / total
    if share < T.SMALL_OP_SHARE or per_step < T.SMALL_OP_MIN_PER_STEP:
        return []
    # Name the user's operators: view and metadata ops (aten::t, as_strided, ...) cost nothing to
    # fuse away and would crowd the list on the CPU, where operators stand in for kernels.
    named = tiny[~tiny["type"].astype(str).isin(FREE_VIEW_OPS)]
    types = (named if len(named) else tiny).groupby("type", observed=True)["count"].sum()
    types = types[types > 0].sort_values(ascending=False).head(3)
    listed = ", ".join(f"{t} x{int(c / len(s.steps))}" for t, c in types.items())
    fix = _fuse_fix(s.meta.get("backend"))
    what = "kernels" if s.meta.get("device_mode") else "operators"  # on the CPU, operators stand in for kernels
    return [Finding("small_ops", share * s.share("computing_us") + (per_step * T.LAUNCH_TIEBREAK_US) / max(s.step_stats["median_us"], 1),
                   f"{per_step:.0f} {what} per step typically run under {T.TINY_KERNEL_US:g} µs and take {share:.0%} of "
                   f"{what[:-1]} time ({listed})", {"tiny_per_step": per_step, "tiny_share": share}, fix, listed)]


def _fuse_fix(backend: str | None) -> str:
    if backend == "npu":
        return ("fuse the tiny kernels: " + NPU_COMPILE + "; use the vendor's fused optimizers "
                "(torch_npu.optim.NpuFusedAdamW / NpuFusedAdam / NpuFusedSGD; torch.optim's foreach=True is enabled by "
                "torch_npu only on Atlas A2/A3), and replace chains of view/permute/elementwise ops with one fused op")
    if backend == "cuda":
        return ("fuse the tiny kernels: torch.compile(model), fused optimizers (torch.optim.AdamW(params, fused=True)), "
                "and replace chains of view/permute/elementwise ops with one fused op")
    return ("fuse the tiny operators: torch.compile(model), torch.optim.AdamW(params, foreach=True), and replace "
            "chains of view/permute/elementwise ops with one op")


def _weighted(kernels: pd.DataFrame, column: str, mask) -> float:
    d = kernels[mask]
    values = d[column]
    weights = d["dur_ns"].astype(float)
    ok = values.notna() & (weights > 0)
    return float(np.average(values[ok], weights=weights[ok])) if ok.any() else float("nan")


@rule("npu_compute")
def _npu_compute(s: Summary) -> list[Finding]:
    d = kernel_metrics(s)
    if d.empty:
        return []
    out = []
    wall = s.total_wall_us * 1000  # ns
    compute = float(d["dur_ns"].sum())
    core = d["core"]
    if (core == "AI_CORE").any():
        util = _weighted(d, "aic_mac_ratio", core == "AI_CORE")
        cube_ns = float(d.loc[core == "AI_CORE", "dur_ns"].sum())
        if util == util and util < T.AICORE_UTIL:
            out.append(Finding("npu_compute", cube_ns / wall * (1 - util), f"AI Core cube utilisation is {util:.0%} "
                               f"(time-weighted aic_mac_ratio of AI_CORE kernels, {cube_ns / 1e6:,.2f} ms)",
                               {"aicore_mac_ratio": util, "aicore_ms": cube_ns / 1e6},
                               f"feed the cube unit bigger, aligned tiles: pad matmul inner axes to multiples of "
                               f"{T.CUBE_INNER_AXIS} (msprof-analyze's cube affinity check), use bf16/fp16 "
                               "(torch.autocast('npu', dtype=torch.bfloat16)), and batch small matmuls",
                               "AI_CORE kernels", "aicore_utilization"))
    trans = d[d["type"] == "TransData"]
    if len(trans) and float(trans["dur_ns"].sum()) / compute > T.TRANSDATA_SHARE:
        t_ns = float(trans["dur_ns"].sum())
        out.append(Finding("npu_compute", t_ns / wall, f"{plural(len(trans), 'TransData format conversion takes', 'TransData format conversions take')} "
                           f"{t_ns / 1e6:,.2f} ms, {t_ns / compute:.0%} of device compute",
                           {"transdata_count": len(trans), "transdata_ms": t_ns / 1e6, "transdata_share": t_ns / compute},
                           f"turn private formats off at the start of the script: {INTERNAL_FORMAT_OFF} (operators "
                           "then keep ND tensors and stop converting; msprof-analyze's advice), and avoid "
                           "permute/.contiguous() on NPU tensors in the loop", "TransData", "transdata"))
    by_kernel = d.groupby("name").agg(ns=("dur_ns", "sum"), block=("block_dim", "max"))
    low = by_kernel[(by_kernel["ns"] / compute >= T.KERNEL_SHARE) & (by_kernel["block"] < T.LOW_BLOCK_DIM)
                    & (by_kernel["block"] > 0)]
    if len(low):
        listed = ", ".join(f"{n} (block dim {int(b)})" for n, b in low["block"].items())
        out.append(Finding("npu_compute", float(low["ns"].sum()) / wall * T.LOW_BLOCK_DIM_RECOVERABLE, f"{plural(len(low), 'long kernel runs', 'long kernels run')} on fewer "
                           f"than {T.LOW_BLOCK_DIM} AI Cores: {listed}", {"low_block_kernels": len(low)},
                           "give these ops more parallel work: a larger batch or sequence per call, so the tiling "
                           "can split it over all AI Cores", listed, "low_block_dim"))
    out += _memory_bound_kernels(d, wall)
    return out


def _memory_bound_kernels(d: pd.DataFrame, wall_ns: float) -> list[Finding]:
    bound = d[memory_bound(d)]
    if bound.empty:
        return []
    ns = float(bound["dur_ns"].sum())
    types = bound.groupby("type")["dur_ns"].sum().sort_values(ascending=False).head(4)
    listed = ", ".join(f"{t} ({v / 1e3:.0f} µs)" for t, v in types.items())
    return [Finding("memory", ns / wall_ns, f"{plural(len(bound), 'kernel is', 'kernels are')} memory-bound (MTE2 load pipe above "
                    f"{T.MEMORY_BOUND_MTE2_RATIO:.0%}, compute pipe below {T.MEMORY_BOUND_COMPUTE_RATIO:.0%}): {listed}",
                    {"memory_bound_kernels": len(bound), "memory_bound_ms": ns / 1e6},
                    "move less data per FLOP: fuse these elementwise/optimizer ops (" + NPU_COMPILE + "; the "
                    "vendor's fused optimizers torch_npu.optim.NpuFusedAdamW / NpuFusedSGD), use bf16 for activations, "
                    "and avoid re-reading the same tensor in separate ops", listed, "memory_bound_kernels")]


def inference_only(s: Summary) -> bool:
    """The run computes no gradients: its events hold no backward pass (an inference server, an
    evaluation loop). False when the events are not at hand."""
    ev = s.events
    if ev is None or ev.empty:
        return False
    names = ev.loc[(ev["kind"] == "host_op").to_numpy(), "name"]
    names = pd.Series(names.cat.categories if isinstance(names.dtype, pd.CategoricalDtype) else names.unique())
    return bool(len(names)) and not names.astype(str).str.contains("Backward|autograd::engine", regex=True).any()


@rule("jitter")
def _jitter(s: Summary) -> list[Finding]:
    st = s.step_stats
    if st["n"] < T.JITTER_MIN_STEPS or not st["cv"] == st["cv"] or st["cv"] <= T.JITTER_CV:
        return []
    slow = s.steps[s.steps["wall_us"] > T.JITTER_OUTLIER * st["median_us"]]
    outliers = ", ".join(str(x) for x in slow["step"]) or "none above 1.2x the median"
    impact = max(st["mean_us"] - st["median_us"], 0) / st["mean_us"]
    return [Finding("jitter", impact, f"step time varies by {st['cv']:.0%} (coefficient of variation); slow steps: {outliers}",
                   {"cv": st["cv"], "median_ms": st["median_us"] / 1000, "outlier_steps": slow["step"].tolist()},
                   "look at the slow steps in the timeline (its step range narrowed to one of them): Python GC "
                   "(gc.freeze() after warm-up), DataLoader stalls (prefetch_factor)"
                   + (f", or allocator spikes (torch.{_device_module(s)}.empty_cache() in the loop)"
                      if backend_of(s) != "cpu" else ""), f"steps {outliers}")]


@rule("frequency")
def _frequency(s: Summary) -> list[Finding]:
    """AI Core throttling, as msprof-analyze's advisor reports it (threshold and wording are its own:
    :data:`~npumagic.analysis.counters.FREQ_DROP_RATIO`)."""
    ops = s.frequency_drops
    if ops.empty or not s.total_wall_us:
        return []
    at_stake = float((ops["total_us"] * ops["drop_ratio"]).sum())
    title = f"{hw.FREQ_DROP_PROBLEM}: " + hw.FREQ_DROP_DESCRIPTION.format(len(ops), hw.FREQ_DROP_RATIO)
    listed = ", ".join(f"{r.name} ({r.drop_ratio:.0%} below, {r.min_mhz:.0f} MHz min)" for r in ops.head(5).itertuples())
    evidence = {"throttled_ops": len(ops), "throttled_us": float(ops["total_us"].sum()),
                "lowest_mhz": float(ops["min_mhz"].min()), "max_drop_ratio": float(ops["drop_ratio"].max())}
    if len(s.hardware):
        evidence["aicore_freq_mhz"] = float(s.hardware["aicore_freq_mhz"].mean())
    fix = (hw.FREQ_DROP_SUGGESTION + " (npu-smi info shows the chip's temperature and power; a throttled chip "
           "runs every kernel slower, so fix cooling or the power cap before tuning kernels)")
    return [Finding("npu_compute", at_stake / s.total_wall_us, title, evidence, fix, listed)]
