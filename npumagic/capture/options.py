"""The typed options of one capture, shared by the magics, the CLI and the Python API."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

ACTIVITIES = ("cpu", "cuda", "npu")
LEVELS = (0, 1, 2)
# torch_npu.profiler.AiCMetrics attribute names (torch_npu/profiler/experimental_config.py)
AIC_METRICS = ("PipeUtilization", "ArithmeticUtilization", "Memory", "MemoryL0", "MemoryUB",
               "ResourceConflictRatio", "L2Cache", "MemoryAccess", "AiCoreNone")


@dataclass(frozen=True)
class CaptureOptions:
    """Schedule and recording settings, named as torch.profiler's ``schedule()`` and ``profile()``.

    ``steps`` is the schedule's ``active``; ``repeat`` is the number of cycles (0 is not allowed
    here: the capture must end). ``level`` and ``aic_metrics`` feed torch_npu's
    ``_ExperimentalConfig`` and are ignored (with a note) on other backends.
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
        return d
