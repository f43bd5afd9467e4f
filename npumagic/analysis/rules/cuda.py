"""CUDA expert rules, after torch-tb-profiler's recommendations (torch_tb_profiler/profiler/data.py
``analyze``: DataLoader, communication, GPU utilisation, Tensor Cores, DataParallel) and Nsight
Systems' expert-system rules (pageable async memcpy, synchronous memcpy/memset, synchronisation
APIs, GPU gaps and low-utilisation regions). Memory near capacity is the core ``memory`` rule."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .. import thresholds as T
from .. import whatif
from ..blocking import idle_during, sync_idle_share
from ..finding import Finding, plural
from ..breakdown import cycle_of
from ..intervals import Spans
from ..schema import same_keys
from ..syncs import SYNC_APIS, SYNC_COPIES
from .registry import rule, share_of_steps

# torch-tb-profiler's tensor_core.py: kernel-name fragments of Tensor Core kernels (from NVIDIA
# PyProf) and the operators autocast runs in fp16 (Tensor-Core-eligible).
TC_KERNEL_PATTERNS = ("h884", "s884", "h1688", "s1688", "hmma", "i8816", "16816", "dgrad_1x1_stride_2x2",
                      "first_layer_wgrad_kernel", "conv1x1", "conv2d_c1_k1", "direct_group", "xmma_implicit_gemm",
                      "xmma_sparse_conv", "xmma_warp_specialized_implicit_gemm", "xmma_gemm", "xmma_sparse_gemm",
                      "c1688",
                      # later NVIDIA kernels that run on Tensor Cores (TF32/BF16 GEMMs, Hopper warpgroup MMA)
                      "xmma", "tf32", "wmma", "wgmma",
                      # Hopper/Blackwell: cuBLAS's JIT GEMMs (nvjet), CUTLASS tensor-op and sm90/sm100 kernels,
                      # fused attention (fmhaSm100, FlashAttention), and FP8/FP4 (E4M3/E2M1, microscaled "Mx")
                      # GEMMs, which exist only on Tensor Cores
                      "nvjet", "tensorop", "sm90", "sm100", "Sm100", "fmhaSm", "flash_fwd", "flash_bwd", "E4m3", "E2m1",
                      "e4m3", "MxE", "gemm_f8")
TC_ELIGIBLE_OPS = frozenset({
    "aten::_convolution", "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::conv_tbc", "aten::conv_transpose1d",
    "aten::conv_transpose2d", "aten::conv_transpose3d", "aten::convolution", "aten::cudnn_convolution",
    "aten::cudnn_convolution_transpose", "aten::prelu", "aten::addmm", "aten::addmv", "aten::addr", "aten::matmul",
    "aten::mm", "aten::mv", "aten::linear", "aten::addbmm", "aten::baddbmm", "aten::bmm", "aten::chain_matmul",
    "aten::linalg_multi_dot", "aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_gru_cell", "aten::lstm_cell",
    "aten::gru_cell", "aten::rnn_tanh_cell", "aten::rnn_relu_cell", "CudnnConvolutionBackward", "BmmBackward0",
    "aten::cudnn_convolution_transpose_backward", "CudnnConvolutionTransposeBackward", "MmBackward",
    "aten::cudnn_convolution_backward_weight", "aten::addmm_", "AddmvBackward", "MvBackward",
    "aten::cudnn_convolution_transpose_backward_weight", "aten::cudnn_convolution_transpose_backward_input",
    "AddmmBackward", "aten::cudnn_convolution_backward_input", "AddbmmBackward", "aten::cudnn_convolution_backward"})


def _cycle_starts_ns(s) -> np.ndarray:
    """Where the rank's later profiling cycles begin (ns): the first host event of each cycle's
    first step (the reader's ``meta["cycle_starts"]``)."""
    ev, rank = s.events, s.meta.get("rank", 0)
    first = [step for r, step in s.meta.get("cycle_starts", []) if r == rank]
    if not first or ev is None:
        return np.empty(0, np.int64)
    host = ev[(ev["device"] < 0) & ev["step"].isin(first)]
    return np.sort(host.groupby("step")["ts_ns"].min().to_numpy(dtype=np.int64))


def _events(s, kinds) -> pd.DataFrame:
    ev = s.events
    if ev is None or ev.empty:
        return pd.DataFrame()
    return ev[ev["kind"].isin(kinds) & (ev["step"] >= 0)]


@rule("cuda_dataloader", ("cuda",))
def dataloader(s) -> list[Finding]:
    """DataLoader over 5% of the step (torch-tb-profiler); above the core rule's 10% that one speaks."""
    share = s.share("dataloader_us") if len(s.steps) else 0.0
    if not (T.CUDA_DATALOADER_SHARE < share <= T.DATALOADER_SHARE):
        return []
    fit = whatif.worker_fit(s)
    workers = (f"num_workers={fit.suggest}" if fit.known and fit.suggest != fit.now else
               f"num_workers={fit.now} (no core is idle to run more)" if fit.known else
               "num_workers up to the cores idle while the step runs")
    fix = f"load data in worker processes: DataLoader({workers}, pin_memory=True, persistent_workers=True)"
    if fit.known and fit.suggest == 0 < fit.now:  # handing a batch over costs more than loading it
        fix = (f"load data in the training process: a batch takes the workers {fit.batch_ms:,.2f} ms (on a core or "
               f"in their own reads), less than the step waits for it: DataLoader(num_workers={fit.now} -> 0, "
               "pin_memory=True)")
    elif fit.ahead:
        fix = (fit.waiting_said() + ": the wait is handing batches over, which more workers would not shorten; "
               "hand over fewer tensors per batch, pin_memory=True")
    return [Finding("dataloader", share, f"{share:.1%} of the step waits in the DataLoader",
                    {"dataloader_share": share}, fix, s.meta.get("dataloader_iter", ""))]


@rule("cuda_communication", ("cuda",))
def communication(s) -> list[Finding]:
    """Communication over 10% of the step (torch-tb-profiler) where the core rule stays silent
    (it is overlapped with compute, or under the core rule's bound)."""
    if not len(s.steps):
        return []
    total, exposed = s.share("communication_us"), s.share("comm_not_overlapped_us")
    comm_us = float(s.steps["communication_us"].sum())
    overlap = float(s.steps["overlapped_us"].sum()) / comm_us if comm_us else 0.0
    core_fires = exposed > T.COMM_BOUND_SHARE or (total > T.COMM_MIN_SHARE and overlap < T.LOW_OVERLAP_RATIO)
    if total <= T.CUDA_COMM_SHARE or core_fires:
        return []
    return [Finding("communication", exposed, f"collectives take {total:.0%} of the step ({exposed:.0%} not overlapped "
                    "with compute)", {"comm_share": total, "comm_not_overlapped_share": exposed, "overlap_ratio": overlap},
                    "send less or less often: gradient compression (model.register_comm_hook(None, torch.distributed."
                    "algorithms.ddp_comm_hooks.default_hooks.fp16_compress_hook)), gradient accumulation with "
                    "model.no_sync(), or a larger batch per rank", s.comm["op"].iat[0] if len(s.comm) else "")]


@rule("gpu_utilization", ("cuda",))
def gpu_utilization(s) -> list[Finding]:
    """The GPU busy under 50% of the step (torch-tb-profiler); impact: the share to reach 50%."""
    if not len(s.steps) or not s.meta.get("device_mode"):
        return []
    util = s.device_util
    if not util == util or util >= T.CUDA_GPU_UTIL:
        return []
    if _core_host_bound(s):
        return []  # the core host_bound rule names this idle time already
    return [Finding("host_bound", T.CUDA_GPU_UTIL - util, f"the GPU is busy {util:.0%} of the step",
                    {"gpu_utilization": util},
                    "give the GPU more work per launch: raise the batch size (check convergence), and look at the "
                    "largest idle gaps (gpu_gaps) for what the host does meanwhile", s.meta.get("device_name", ""))]


def _core_host_bound(s) -> bool:
    """Whether the core host_bound rule (advice._host_bound) fires on this run."""
    idle, dataloader = s.share("idle_us"), s.share("dataloader_us")
    return idle > T.HOST_BOUND_IDLE_SHARE and idle - dataloader >= T.HOST_BOUND_MIN_UNEXPLAINED


def _inside(points: pd.DataFrame, spans: pd.DataFrame) -> np.ndarray:
    """Whether each of ``points``' events starts inside a span of ``spans`` on its own lane."""
    out = np.zeros(len(points), dtype=bool)
    at, lanes = points["ts_ns"].to_numpy(), same_keys(points["lane"], spans["lane"])
    start, end = spans["ts_ns"].to_numpy(), (spans["ts_ns"] + spans["dur_ns"]).to_numpy()
    for ln in np.unique(lanes[1]):
        of_lane, mine = lanes[1] == ln, lanes[0] == ln
        out[mine] = _contains(Spans.union_of(start[of_lane], end[of_lane]), at[mine])
    return out


def _contains(spans: Spans, points: np.ndarray) -> np.ndarray:
    starts, ends = spans.starts, spans.ends
    if starts.size == 0:  # every span of the lane has no length (durations of 0 or -0.0)
        return np.zeros(points.size, dtype=bool)
    k = np.searchsorted(starts, points, side="right") - 1
    return (k >= 0) & (points < ends[np.clip(k, 0, None)])


@rule("tensor_cores", ("cuda",))
def tensor_cores(s) -> list[Finding]:
    """Tensor-Core-eligible operators (conv, matmul, linear ...) whose kernels never use Tensor
    Cores, on a GPU that has them (compute capability 7.0+): torch-tb-profiler's AMP advice."""
    major = s.meta.get("compute_major")
    ev = s.events
    amd = any(w in str(s.meta.get("device_name", "")) for w in ("AMD", "Radeon", "Instinct"))
    if major is None or major < 7 or amd or ev is None or ev.empty:
        return []  # computeMajor is CUDA's compute capability only on NVIDIA GPUs
    kernels = ev[(ev["kind"] == "kernel") & (ev["step"] >= 0)]
    if kernels.empty:
        return []
    uses_tc = kernels["name"].str.contains("|".join(map(re.escape, TC_KERNEL_PATTERNS)))  # per name, not per row
    if uses_tc.any():
        return []
    ops = ev.loc[(ev["kind"] == "host_op") & ev["name"].isin(TC_ELIGIBLE_OPS), ["lane", "ts_ns", "dur_ns"]]
    launches = ev.loc[(ev["kind"] == "runtime") & (ev["correlation"] >= 0), ["lane", "ts_ns", "correlation"]]
    if ops.empty or launches.empty:
        return []
    eligible_launch = launches[_inside(launches, ops)]
    eligible = kernels[kernels["correlation"].isin(set(eligible_launch["correlation"]))]
    total = float(kernels["dur_ns"].sum())
    if total <= 0:
        return []  # kernels of no length (a dur of -0.0 or 0): no share of time to speak of
    ratio = float(eligible["dur_ns"].sum()) / total
    if ratio <= 0:
        return []
    top = eligible.groupby(eligible["name"].astype(str))["dur_ns"].sum().sort_values(ascending=False).head(3)
    listed = ", ".join(n[:60] for n in top.index)
    # at stake: half the eligible kernels' time (fp16/bf16 Tensor Cores run these at least twice as fast)
    return [Finding("compute_bound", ratio * s.share("computing_us") / 2,
                    f"{ratio:.0%} of kernel time comes from Tensor-Core-eligible operators, and no kernel uses "
                    f"Tensor Cores (compute capability {major}.x)", {"eligible_kernel_share": ratio,
                                                                   "tensor_core_kernel_share": 0.0},
                    ("run the step under automatic mixed precision: with torch.autocast('cuda', dtype=torch.bfloat16) "
                     "(or float16 with torch.amp.GradScaler('cuda')), or let fp32 matmuls use TF32: "
                     "torch.backends.cuda.matmul.allow_tf32 = True" if major >= 8 else
                     "run the step under automatic mixed precision in float16 (this GPU has no bf16 Tensor Cores): "
                     "with torch.autocast('cuda', dtype=torch.float16), scaling the loss with "
                     "torch.amp.GradScaler('cuda')"), listed)]


@rule("data_parallel", ("cuda",))
def data_parallel(s) -> list[Finding]:
    """torch.nn.DataParallel over more than one GPU (torch-tb-profiler: use DDP instead)."""
    ev = s.events
    if ev is None or ev.empty:
        return []
    dp = ev[ev["name"] == "DataParallel.forward"]
    devices = ev.loc[ev["kind"] == "kernel", "device"].nunique()
    if dp.empty or devices < 2:
        return []
    return [Finding("communication", 0.0, f"torch.nn.DataParallel runs on {devices} GPUs ({len(dp)} forward calls)",
                    {"dataparallel_calls": len(dp), "devices": int(devices)},
                    "use torch.nn.parallel.DistributedDataParallel (one process per GPU, torchrun) instead of "
                    "DataParallel", "DataParallel.forward")]


@rule("pageable_memcpy", ("cuda",))
def pageable_memcpy(s) -> list[Finding]:
    """Copies from pageable host memory (Nsight Systems "CUDA Async Memcpy with Pageable Memory"):
    the driver stages them and the copy blocks the host."""
    copies = _events(s, ["memcpy"])
    if copies.empty:
        return []
    pageable = copies[copies["name"].astype(str).str.contains("Pageable", regex=False)]
    if pageable.empty:
        return []
    us = float(pageable["dur_ns"].sum()) / 1e3
    kinds = pageable["name"].astype(str).value_counts()
    listed = ", ".join(f"{n} x{c}" for n, c in kinds.items())
    return [Finding("dataloader", share_of_steps(s, us), f"{len(pageable)} copies from pageable host memory "
                    f"({us:,.0f} µs): {listed}", {"pageable_copies": len(pageable), "pageable_us": us},
                    "pin the host buffers so copies are asynchronous: DataLoader(pin_memory=True) or "
                    "tensor.pin_memory(), then tensor.to('cuda', non_blocking=True)", listed)]


def _idle_share(s, calls: pd.DataFrame) -> float:
    """The share of the steps the device idles while ``calls`` block the host: their cost
    (never the host time they block while the device computes)."""
    return share_of_steps(s, idle_during(s.events, s.events.index.isin(calls.index)) / 1e3)


@rule("sync_memcpy", ("cuda",))
def sync_memcpy(s) -> list[Finding]:
    """Synchronous cudaMemcpy/cudaMemset calls (Nsight Systems "CUDA Synchronous Memcpy/Memset"):
    the host waits for each; they cost the device idle time meanwhile."""
    rt = _events(s, ["runtime", "sync"])
    if rt.empty:
        return []
    calls = rt[rt["name"].isin(SYNC_COPIES)]
    if calls.empty:
        return []
    us = float(calls["dur_ns"].sum()) / 1e3
    listed = ", ".join(f"{n} x{c}" for n, c in calls["name"].astype(str).value_counts().items())
    return [Finding("sync", _idle_share(s, calls), f"{plural(len(calls), 'synchronous copy or memset blocks', 'synchronous copies or memsets block')} the host "
                    f"{us:,.0f} µs: {listed}", {"sync_copies": len(calls), "sync_copy_us": us},
                    "keep data on the GPU: create tensors there (torch.zeros(..., device='cuda')), avoid .cpu()/.item()/"
                    ".tolist()/.numpy() in the step, and copy pinned tensors with non_blocking=True", listed)]


@rule("sync_apis", ("cuda",))
def sync_apis(s) -> list[Finding]:
    """Explicit device/stream/event synchronisation calls the user's code makes (Nsight Systems
    "CUDA Synchronization APIs"; a sync inside a torch operator, such as cuDNN's autotuning in a
    convolution, is not one), when the core sync rule stays silent; they cost the device idle
    time while they block."""
    rt = _events(s, ["runtime", "sync"])
    if rt.empty or not len(s.steps):
        return []
    calls = rt[rt["name"].isin(SYNC_APIS) & (rt["device"] < 0)]
    ops = s.events.loc[(s.events["kind"] == "host_op") & (s.events["device"] < 0), ["lane", "ts_ns", "dur_ns"]]
    if len(calls) and len(ops):  # a sync inside a torch operator is the library's (cuDNN autotuning), not a call
        calls = calls[~_inside(calls, ops)]
    idle = sync_idle_share(s)
    if calls.empty or (idle if idle is not None else min(s.share("sync_us"), s.share("idle_us"))) > T.SYNC_SHARE:
        return []
    us = float(calls["dur_ns"].sum()) / 1e3
    listed = ", ".join(f"{n} x{c}" for n, c in calls["name"].astype(str).value_counts().items())
    source = calls["source"].astype(str)
    where = source[source != ""].mode().iat[0] if (source != "").any() else listed
    return [Finding("sync", _idle_share(s, calls), f"{plural(len(calls), 'explicit synchronisation call', 'explicit synchronisation calls')} in the profiled "
                    f"steps ({us:,.0f} µs): {listed}", {"sync_calls": len(calls), "sync_call_us": us},
                    "drop torch.cuda.synchronize() and stream/event synchronize() calls from the step (time with "
                    "torch.cuda.Event(enable_timing=True) read after the loop instead)", where)]


@rule("gpu_gaps", ("cuda",))
def gpu_gaps(s) -> list[Finding]:
    """Idle gaps of 500 us or more between GPU work inside the steps, and the windows (1% of the
    profiled span each) where the GPU is busy under half the time (Nsight Systems' "GPU Gaps" and
    "GPU Low Utilization"), where the core host_bound rule stays silent (e.g. the idle time is
    short gaps, or waits the DataLoader explains)."""
    dev = _events(s, ["kernel", "memcpy", "comm"])
    if len(dev) < 2 or not len(s.steps) or _core_host_bound(s):
        return []  # where the core host_bound rule fires it names this idle time
    busy = Spans.union_of(dev["ts_ns"].to_numpy(), (dev["ts_ns"] + dev["dur_ns"]).to_numpy())
    starts, ends = busy.starts, busy.ends
    gap_lo, gap_hi = ends[:-1], starts[1:]
    # the time between two profiling cycles is no gap: the profiler was off (breakdown.cycle_bounds)
    cycles = _cycle_starts_ns(s)
    long = ((gap_hi - gap_lo) >= T.CUDA_GAP_US * 1e3) & (cycle_of(gap_lo, cycles) == cycle_of(gap_hi, cycles))
    if not long.any():
        return []
    gaps = pd.DataFrame({"start_ns": gap_lo[long], "gap_us": (gap_hi[long] - gap_lo[long]) / 1e3})
    lo = int(starts[0])
    low = windows = 0
    span_cycle = cycle_of(starts, cycles)
    spans = [(int(starts[span_cycle == c][0]), int(ends[span_cycle == c][-1])) for c in np.unique(span_cycle)]
    profiled = sum(b - a for a, b in spans)
    for a, b in spans:  # the windows shared out among the cycles by their length
        n = max(1, round(T.CUDA_UTIL_WINDOWS * (b - a) / max(profiled, 1))) if len(spans) > 1 else T.CUDA_UTIL_WINDOWS
        edges = np.linspace(a, b, n + 1).astype(np.int64)
        covered = busy.covered(edges[:-1], edges[1:]) / np.maximum(np.diff(edges), 1)
        low, windows = low + int((covered < T.CUDA_GPU_UTIL).sum()), windows + n
    host = s.events.loc[(s.events["kind"] == "host_op") & (s.events["device"] < 0), ["name", "ts_ns", "dur_ns"]]
    doing = []
    for g in gaps.nlargest(3, "gap_us").itertuples():
        inside = host[(host["ts_ns"] <= g.start_ns) & (host["ts_ns"] + host["dur_ns"] >= g.start_ns)]
        top = str(inside.sort_values("dur_ns").iloc[0]["name"]) if len(inside) else "no operator"
        doing.append({"start_ms": (g.start_ns - lo) / 1e6, "gap_us": float(g.gap_us), "host_op": top})
    total = float(gaps["gap_us"].sum())
    listed = ", ".join(f"{d['gap_us']:,.0f} µs at {d['start_ms']:,.1f} ms ({d['host_op']})" for d in doing)
    return [Finding("host_bound", share_of_steps(s, total), f"{len(gaps)} GPU idle gaps of {T.CUDA_GAP_US:g} µs or more "
                    f"({total / 1e3:,.2f} ms); {low} of {windows} windows are under {T.CUDA_GPU_UTIL:.0%} busy; largest: {listed}",
                    {"gaps": len(gaps), "gap_ms": total / 1e3, "largest": doing, "low_util_windows": low},
                    "look at what the host runs in the largest gaps (the timeline, zoomed on them): move Python "
                    "work and data preparation out of the step, and capture launch-bound parts in CUDA graphs "
                    "(torch.compile(model, mode='reduce-overhead'))", listed)]
