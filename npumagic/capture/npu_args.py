"""The arguments of ``torch_npu.profiler.profile`` for a capture, built by a pure function.

:func:`npu_profile_spec` turns :class:`~npumagic.capture.options.CaptureOptions` into plain data:
keyword arguments, with torch_npu's enum members named (``"ProfilerLevel.Level1"``), so every
option combination is testable without torch_npu and every name can be checked against its
source. :func:`materialize` resolves the names on the real ``torch_npu.profiler`` module.
Written against torch_npu 2.14.0 (profiler.py, experimental_config.py, scheduler.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .options import CaptureOptions

# npumagic's option values -> torch_npu.profiler enum members
ACTIVITY = {"cpu": "ProfilerActivity.CPU", "npu": "ProfilerActivity.NPU"}
EXPORT = {"text": "ExportType.Text", "db": "ExportType.Db"}
HOST_SYS = {"cpu": "HostSystem.CPU", "mem": "HostSystem.MEM", "disk": "HostSystem.DISK",
            "network": "HostSystem.NETWORK", "osrt": "HostSystem.OSRT"}


class Enum(str):
    """A torch_npu enum member by name (``"AiCMetrics.PipeUtilization"``), resolved by :func:`materialize`."""

    __slots__ = ()


def npu_profile_spec(options: CaptureOptions, run_dir: Path | str, worker_name: str) -> dict[str, Any]:
    """The keyword arguments of ``torch_npu.profiler.profile`` for ``options``, as plain data.

    ``schedule``, ``on_trace_ready`` and ``experimental_config`` are nested dicts of the keyword
    arguments of ``schedule()``, ``tensorboard_trace_handler()`` and ``_ExperimentalConfig()``.
    ``worker_name`` is the host name only: torch_npu appends ``_{pid}`` itself
    (``_profiler_path_creator.py``). Options torch_npu would silently reset are refused when the
    options are built (see ``CaptureOptions``), so every spec here is one torch_npu keeps as given.
    """
    wanted = options.activities or ("cpu", "npu")
    activities = [Enum(ACTIVITY[a]) for a in ("cpu", "npu") if a in wanted] or [Enum(ACTIVITY["cpu"]), Enum(ACTIVITY["npu"])]
    metrics = options.aic_metrics or ("AiCoreNone" if options.level == 0 else "PipeUtilization")
    experimental: dict[str, Any] = {
        "profiler_level": Enum(f"ProfilerLevel.Level{options.level}"),
        "aic_metrics": Enum(f"AiCMetrics.{metrics}"),
        "l2_cache": options.l2_cache,
        "data_simplification": not options.keep_raw,
        "export_type": [Enum(EXPORT[e]) for e in options.export],
    }
    if options.gc_threshold_ms is not None:
        experimental["gc_detect_threshold"] = float(options.gc_threshold_ms)
    if options.host_sys:
        experimental["host_sys"] = [Enum(HOST_SYS[h]) for h in options.host_sys]
    return {
        "activities": activities,
        "schedule": {"wait": options.wait, "warmup": options.warmup, "active": options.steps,
                     "repeat": options.repeat, "skip_first": options.skip_first},
        "on_trace_ready": {"dir_name": str(run_dir), "worker_name": worker_name},
        "record_shapes": options.shapes,
        "profile_memory": options.memory,
        "with_stack": options.stack,
        "with_modules": options.modules,
        "experimental_config": experimental,
    }


def materialize(spec: dict[str, Any], profiler_module: Any) -> dict[str, Any]:
    """Resolve a spec on ``torch_npu.profiler``: enum names to members, the nested dicts to
    ``schedule(...)``, ``tensorboard_trace_handler(...)`` and ``_ExperimentalConfig(...)``."""

    def resolve(value: Any) -> Any:
        if isinstance(value, Enum):
            owner, member = value.split(".")
            return getattr(getattr(profiler_module, owner), member)
        if isinstance(value, list):
            return [resolve(v) for v in value]
        return value

    out = {k: resolve(v) for k, v in spec.items() if k not in ("schedule", "on_trace_ready", "experimental_config")}
    out["schedule"] = profiler_module.schedule(**spec["schedule"])
    out["on_trace_ready"] = profiler_module.tensorboard_trace_handler(**spec["on_trace_ready"])
    out["experimental_config"] = profiler_module._ExperimentalConfig(
        **{k: resolve(v) for k, v in spec["experimental_config"].items()})
    return out
