"""The Finding record every advice rule returns, its categories and its severity bands."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .. import presentation
from . import thresholds as T


def plural(n: int, one: str, many: str) -> str:
    """``n`` and the noun phrase that agrees with it: ``1 call``, ``2 calls``."""
    return f"{n} {one if n == 1 else many}"


class Category(StrEnum):
    """What a finding (or a run's verdict) says the run is bound by; a str, so it compares, prints
    and serialises as its value."""

    HOST_BOUND = "host_bound"
    DATALOADER = "dataloader"
    COMMUNICATION = "communication"
    SMALL_OPS = "small_ops"
    SYNC = "sync"
    NPU_COMPUTE = "npu_compute"
    MEMORY = "memory"
    JITTER = "jitter"
    COMPUTE_BOUND = "compute_bound"
    BALANCED = "balanced"
    UNDETERMINED = "undetermined"

    def __repr__(self) -> str:
        # a notebook echoes r.verdict.bottleneck: it shows 'dataloader' as before, not the enum's name
        return repr(self.value)


@dataclass(frozen=True)
class Finding:
    """One bottleneck: ``category`` (a :class:`Category`: any other name is a ValueError), ``impact`` (share of step time
    at stake, 0..1), ``title`` with the deciding numbers, ``evidence`` (the operators, sizes,
    counts and source lines it rests on), ``fix`` (names the API, parameter or variable),
    ``where`` (op, step or source line) and ``rule`` (the id of the rule that found it)."""

    category: Category
    impact: float
    title: str
    evidence: dict[str, Any]
    fix: str
    where: str = ""
    rule: str = ""
    ranks: tuple[int, ...] = ()  # the ranks it was found on, when advice covers several
    figures_of: int | None = None  # of those, the rank whose figures the title and evidence give
    # what the fix can remove, ms per step (see :mod:`.whatif`): the estimate, its (low, high)
    # interval and what bounds it
    predicted_saving_ms: float | None = None
    predicted_interval: tuple[float, float] | None = None
    predicted_basis: str = ""
    # the run-to-run noise of the achieved saving (ms): a difference of two medians of noisy steps
    # lands this far either side of the interval by chance (:func:`.whatif.noise_ms`)
    predicted_noise_ms: float | None = None
    # where in the model: "module PATH, forward|backward" or "region PATH", holding the largest share
    # (place_share, 0..1) of the time the finding rests on (:func:`.where.locate`); "" where the run
    # recorded neither modules nor regions, or the rule names no events
    place: str = ""
    place_share: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "category", Category(self.category))

    @property
    def severity(self) -> str:
        """msprof-analyze's bands: high from 5% of the step, medium from 3%, else low."""
        return "high" if self.impact >= T.SEVERITY_HIGH else "medium" if self.impact >= T.SEVERITY_MEDIUM else "low"

    def as_dict(self) -> dict[str, Any]:
        out = {"rule": self.rule, "category": self.category, "severity": self.severity, "impact": self.impact,
               "title": self.title, "evidence": self.evidence, "fix": self.fix, "where": self.where}
        if self.ranks:
            out["ranks"] = list(self.ranks)
        if self.figures_of is not None:
            out["figures_of_rank"] = self.figures_of
        if self.predicted_saving_ms is not None:
            out.update(predicted_saving_ms=self.predicted_saving_ms,
                       predicted_interval_ms=list(self.predicted_interval or ()), predicted_basis=self.predicted_basis,
                       predicted_noise_ms=self.predicted_noise_ms)
        if self.place:
            out.update(place=self.place, place_share=self.place_share)
        return out

    def __str__(self) -> str:
        return presentation.text(self)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))
