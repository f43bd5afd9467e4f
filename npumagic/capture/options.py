"""The typed options of one capture, shared by the magics, the CLI and the Python API."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

ACTIVITIES = ("cpu", "cuda", "npu")
LEVELS = (0, 1, 2)
# torch_npu.profiler.AiCMetrics attribute names (torch_npu/profiler/experimental_config.py)
AIC_METRICS = ("PipeUtilization", "ArithmeticUtilization", "Memory", "MemoryL0", "MemoryUB",
               "ResourceConflictRatio", "L2Cache", "MemoryAccess", "AiCoreNone")
METRIC_LEVELS = (1, 2)  # torch_npu resets AI Core metrics to AiCoreNone at level 0 (_check_params)
EXPORTS = ("text", "db")  # torch_npu.profiler.ExportType
HOST_SYS = ("cpu", "mem", "disk", "network", "osrt")  # torch_npu.profiler.HostSystem (host_sys)


@dataclass(frozen=True)
class CaptureOptions:
    """Schedule and recording settings, named as torch.profiler's ``schedule()`` and ``profile()``.

    ``steps`` is the schedule's ``active``; ``repeat`` is the number of cycles (0 is not allowed
    here: the capture must end). ``modules`` is ``with_modules`` (both profilers; torch.profiler gets ``with_stack``
    too, without which it writes no module span). ``level``,
    ``aic_metrics``, ``l2_cache``, ``gc_threshold_ms`` (``gc_detect_threshold``), ``host_sys``,
    ``export`` (``export_type``) and ``keep_raw`` (``data_simplification=False``: keep CANN's
    raw per-device data) feed torch_npu's ``_ExperimentalConfig`` and are ignored (with a note)
    on other backends. Combinations torch_npu would silently change are refused here.
    """

    wait: int = 1
    warmup: int = 1
    steps: int = 3
    repeat: int = 1
    skip_first: int = 0
    activities: tuple[str, ...] | None = None
    memory: bool = False
    shapes: bool = False
    stack: bool = False
    level: int = 0
    aic_metrics: str | None = None
    repeat_cell: bool = False
    modules: bool = False
    l2_cache: bool = False
    gc_threshold_ms: float | None = None
    host_sys: tuple[str, ...] | None = None
    export: tuple[str, ...] = ("text",)
    keep_raw: bool = False
    host: bool = True  # sample the host's CPU (psutil) while the profiler records
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("wait", "warmup", "skip_first"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}")
        if self.steps < 1:
            raise ValueError(f"--steps must be >= 1, got {self.steps}")
        if self.repeat < 1:
            raise ValueError(f"--repeat must be >= 1, got {self.repeat}")
        if self.level not in LEVELS:
            raise ValueError(f"--level must be one of {', '.join(map(str, LEVELS))}, got {self.level}")
        if self.aic_metrics is not None and self.aic_metrics not in AIC_METRICS:
            raise ValueError(f"--aic-metrics must be one of {', '.join(AIC_METRICS)}, got {self.aic_metrics!r}")
        if self.aic_metrics not in (None, "AiCoreNone") and self.level not in METRIC_LEVELS:
            raise ValueError(f"--aic-metrics {self.aic_metrics} needs --level {' or '.join(map(str, METRIC_LEVELS))}: "
                             f"torch_npu collects AI Core metrics only at those levels and resets them to none at "
                             f"level {self.level}")
        if self.gc_threshold_ms is not None:
            if not self.gc_threshold_ms >= 0:
                raise ValueError(f"--gc-threshold must be >= 0 ms, got {self.gc_threshold_ms}")
            if self.activities is not None and "cpu" not in self.activities:
                raise ValueError("--gc-threshold needs the cpu activity: torch_npu detects GC only while it records "
                                 "the CPU")
        if self.host_sys is not None:
            bad = [h for h in self.host_sys if h not in HOST_SYS]
            if bad or not self.host_sys:
                raise ValueError(f"--host-sys must be a comma list of {', '.join(HOST_SYS)}, got "
                                 f"{','.join(self.host_sys)!r}")
        bad = [e for e in self.export if e not in EXPORTS]
        if bad or not self.export:
            raise ValueError(f"--export must be a comma list of {', '.join(EXPORTS)}, got {','.join(self.export)!r}")
        if self.activities is not None:
            bad = [a for a in self.activities if a not in ACTIVITIES]
            if bad or not self.activities:
                raise ValueError(f"--activities must be a comma list of {', '.join(ACTIVITIES)}, got {','.join(self.activities)!r}")

    @property
    def cycle(self) -> int:
        return self.wait + self.warmup + self.steps

    @property
    def total_steps(self) -> int:
        """Steps the schedule needs to finish: skip_first + repeat * (wait + warmup + active)."""
        return self.skip_first + self.repeat * self.cycle

    @property
    def recorded_steps(self) -> int:
        return self.repeat * self.steps

    def as_dict(self) -> dict:
        d = asdict(self)
        d["activities"] = list(self.activities) if self.activities else None
        d["host_sys"] = list(self.host_sys) if self.host_sys else None
        d["export"] = list(self.export)
        return d
