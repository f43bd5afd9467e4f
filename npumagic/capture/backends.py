"""Profiler backends behind one small Protocol, and the one place that chooses between them:
torch_npu when it imports and an NPU is present, else torch.profiler with CUDA, else CPU."""

from __future__ import annotations

import os
import platform
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..errors import NpumagicError
from .options import CaptureOptions

# Environment variables that change performance and belong in a run's record.
RELEVANT_ENV = ("TASK_QUEUE_ENABLE", "ASCEND_LAUNCH_BLOCKING", "PYTORCH_NPU_ALLOC_CONF", "ACLNN_CACHE_LIMIT",
                "HCCL_BUFFSIZE", "HCCL_CONNECT_TIMEOUT", "HCCL_OP_EXPANSION_MODE", "CPU_AFFINITY_CONF",
                # torch_npu writes these to profiler_metadata.json itself
                "HOST_CACHE_CAPACITY", "ASCEND_GLOBAL_LOG_LEVEL", "HCCL_ALGO", "HCCL_RDMA_TC", "HCCL_RDMA_SL",
                "ASCEND_ENHANCE_ENABLE",
                "CUDA_LAUNCH_BLOCKING", "PYTORCH_CUDA_ALLOC_CONF", "NCCL_DEBUG", "NCCL_ALGO", "NCCL_PROTO",
                "CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


class Backend(Protocol):
    """What a profiler backend provides; :func:`choose_backend` picks one."""

    name: str  # "npu", "cuda" or "cpu"
    device_name: str

    def profiler(self, options: CaptureOptions, run_dir: Path) -> Any:
        """A started-on-__enter__ profiler object with ``.step()``, writing into ``run_dir``."""

    def notes(self, options: CaptureOptions) -> list[str]:
        """One-line notes about options this backend ignores."""

    def versions(self) -> dict[str, str]:
        ...


@dataclass(frozen=True)
class BackendChoice:
    """The chosen backend and why (shown to the user in one line)."""

    backend: Backend
    reason: str

    def __str__(self) -> str:
        return f"npumagic: profiling on {self.backend.name} ({self.backend.device_name}): {self.reason}"


def _worker_name() -> str:
    return f"{socket.gethostname()}_{os.getpid()}"  # torch.profiler's own default


def _profile_arguments(profiler_module: Any, options: CaptureOptions, run_dir: Path) -> dict[str, Any]:
    """The arguments torch.profiler.profile and torch_npu.profiler.profile share."""
    return {
        "schedule": profiler_module.schedule(wait=options.wait, warmup=options.warmup, active=options.steps,
                                             repeat=options.repeat, skip_first=options.skip_first),
        "on_trace_ready": profiler_module.tensorboard_trace_handler(str(run_dir), worker_name=_worker_name()),
        "record_shapes": options.shapes,
        "profile_memory": options.memory,
        # torch.profiler (2.13 measured) writes the nn.Module spans only where it records stacks too
        "with_stack": options.stack or options.modules,
        "with_modules": options.modules,
    }


def _npu_settings(options: CaptureOptions) -> list[tuple[str, bool]]:
    """(flag, whether set) for each option that only torch_npu's _ExperimentalConfig takes."""
    return [("--level", options.level != 0), ("--aic-metrics", options.aic_metrics is not None),
            ("--l2-cache", options.l2_cache), ("--gc-threshold", options.gc_threshold_ms is not None),
            ("--host-sys", bool(options.host_sys)), ("--export", options.export != ("text",)),
            ("--keep-raw", options.keep_raw)]


class TorchBackend:
    """torch.profiler on CPU, with CUDA activity when a GPU is present."""

    def __init__(self, cuda: bool) -> None:
        import torch

        self.name = "cuda" if cuda else "cpu"
        self.device_name = torch.cuda.get_device_name(0) if cuda else (platform.processor() or platform.machine() or "cpu")

    def activities(self, options: CaptureOptions) -> list:
        from torch.profiler import ProfilerActivity

        wanted = options.activities or (("cpu", "cuda") if self.name == "cuda" else ("cpu",))
        chosen = [ProfilerActivity.CPU] if "cpu" in wanted else []
        if "cuda" in wanted and self.name == "cuda":
            chosen.append(ProfilerActivity.CUDA)
        return chosen or [ProfilerActivity.CPU]

    def profiler(self, options: CaptureOptions, run_dir: Path) -> Any:
        import torch.profiler as tp

        return tp.profile(activities=self.activities(options), **_profile_arguments(tp, options, run_dir))

    def notes(self, options: CaptureOptions) -> list[str]:
        out = []
        npu_only = [flag for flag, used in _npu_settings(options) if used]
        if npu_only:
            out.append(f"{'/'.join(npu_only)}: torch_npu settings; ignored on " + self.name)
        if options.activities and "npu" in options.activities:
            out.append("--activities npu ignored: no NPU backend")
        if options.activities and "cuda" in options.activities and self.name != "cuda":
            out.append("--activities cuda ignored: no CUDA device")
        return out

    def versions(self) -> dict[str, str]:
        import torch

        v = {"torch": torch.__version__}
        if self.name == "cuda":
            v["cuda"] = str(torch.version.cuda)
        return v


class NpuBackend:
    """torch_npu.profiler with its _ExperimentalConfig (profiler level, AI Core metrics)."""

    def __init__(self, torch_npu: Any) -> None:
        self.torch_npu = torch_npu
        self.name = "npu"
        try:
            self.device_name = str(torch_npu.npu.get_device_name(0))
        except Exception:  # noqa: BLE001 - the name is cosmetic
            self.device_name = "Ascend NPU"

    def profiler(self, options: CaptureOptions, run_dir: Path) -> Any:
        from .npu_args import materialize, npu_profile_spec

        p = self.torch_npu.profiler
        # torch_npu appends "_{pid}" to the worker name itself: pass the host alone
        return p.profile(**materialize(npu_profile_spec(options, run_dir, socket.gethostname()), p))

    def notes(self, options: CaptureOptions) -> list[str]:
        out = []
        if options.activities and "cuda" in options.activities:
            out.append("--activities cuda ignored on the NPU backend")
        device_only = [flag for flag, used in _npu_settings(options) if used and flag != "--host-sys"]
        if options.activities and "npu" not in options.activities and device_only:
            out.append(f"{'/'.join(device_only)} ignored: torch_npu applies them only with the npu activity")
        return out

    def versions(self) -> dict[str, str]:
        import torch

        v = {"torch": torch.__version__, "torch_npu": getattr(self.torch_npu, "__version__", "?")}
        cann = getattr(torch.version, "cann", None)  # set by import torch_npu (utils/collect_env.py)
        if cann:
            v["cann"] = str(cann)
        return v


def _try_npu() -> tuple[Any | None, str]:
    try:
        import torch_npu  # noqa: F401 - registers the NPU device with torch
    except ModuleNotFoundError as exc:
        if exc.name == "torch_npu":
            return None, "torch_npu is not installed"
        return None, f"torch_npu is installed but cannot initialise ({exc})"
    except Exception as exc:  # noqa: BLE001 - missing CANN libraries raise ImportError/OSError/RuntimeError
        return None, f"torch_npu is installed but cannot initialise ({type(exc).__name__}: {exc})"
    try:
        available = bool(torch_npu.npu.is_available()) and torch_npu.npu.device_count() > 0
    except Exception as exc:  # noqa: BLE001
        return None, f"torch_npu imported but the NPU runtime failed ({type(exc).__name__}: {exc})"
    if not available:
        return None, "torch_npu imported but no NPU device is visible"
    return torch_npu, "torch_npu with an NPU device"


def _import_torch():
    try:
        import torch
    except RuntimeError as exc:
        # torch auto-loads installed device backends; a torch_npu without CANN breaks `import torch`.
        if "backend extension" in str(exc):
            raise NpumagicError(f"torch cannot be imported: {exc} torch_npu is installed but its CANN runtime is not "
                                "usable; source CANN's set_env.sh, or set TORCH_DEVICE_BACKEND_AUTOLOAD=0 before "
                                "Python starts to profile on CPU/CUDA") from None
        raise
    return torch


def choose_backend(prefer: str | None = None) -> BackendChoice:
    """Pick the profiler backend, saying why. ``prefer`` ("npu", "cuda", "cpu") narrows the choice."""
    torch = _import_torch()

    npu_reason = "not requested"
    if prefer in (None, "npu"):
        torch_npu, npu_reason = _try_npu()
        if torch_npu is not None:
            return BackendChoice(NpuBackend(torch_npu), npu_reason)
    if prefer in (None, "cuda") and torch.cuda.is_available():
        return BackendChoice(TorchBackend(cuda=True), f"{npu_reason}; CUDA is available")
    cuda_reason = "no CUDA device" if prefer != "cpu" else "CPU requested"
    return BackendChoice(TorchBackend(cuda=False), f"{npu_reason}; {cuda_reason}")


def environment_snapshot() -> dict[str, str]:
    """The performance-relevant environment variables that are set."""
    return {k: os.environ[k] for k in RELEVANT_ENV if k in os.environ}
