"""Collecting: backend choice (torch_npu > CUDA > CPU), the scheduled profiler, step boundaries,
and the run directory (the profiler's own output, readable by TensorBoard / MindStudio Insight).
torch is imported lazily here and nowhere else."""

from .backends import Backend, BackendChoice, choose_backend
from .options import ACTIVITIES, AIC_METRICS, CaptureOptions
from .runner import CaptureResult, NestedCaptureError, capture, ensure_idle
from .steps import step

__all__ = ["ACTIVITIES", "AIC_METRICS", "Backend", "BackendChoice", "CaptureOptions", "CaptureResult",
           "NestedCaptureError", "capture", "choose_backend", "ensure_idle", "step"]
