"""Advice rules beyond the core ones in :mod:`..advice`, one module per family: each rule takes
a :class:`~npumagic.analysis.metrics.Summary` and returns ``list[Finding]``.

Rules are registered with :func:`rule`, which names the backends a rule's advice fits (an NPU
fix is never offered for a CUDA or CPU run, nor a CUDA one for an NPU run) and stamps the rule
id on its findings. Thresholds live in :mod:`..thresholds`, each with its source.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Callable, Iterator

import pandas as pd

from ..finding import Finding
from ..metrics import Summary
from ..schema import KERNEL_METRIC_COLUMNS

RuleFn = Callable[[Summary], "list[Finding]"]


@dataclass(frozen=True)
class Rule:
    id: str
    backends: frozenset[str]
    fn: RuleFn


REGISTRY: list[Rule] = []
# kernel_metrics(s) of the summaries the running rules have asked for, by id (a rule never
# changes the frame it gets: it filters and assigns into new ones)
_PLAIN_METRICS: ContextVar[dict[int, pd.DataFrame] | None] = ContextVar("plain_kernel_metrics", default=None)


@contextmanager
def kernel_metrics_once() -> Iterator[None]:
    """Within it, :func:`kernel_metrics` converts each Summary's table once for every rule that
    asks (an outer one, e.g. :func:`~npumagic.analysis.advice.advise`'s, is kept)."""
    if _PLAIN_METRICS.get() is not None:
        yield
        return
    token = _PLAIN_METRICS.set({})
    try:
        yield
    finally:
        _PLAIN_METRICS.reset(token)


def rule(rule_id: str, backends: tuple[str, ...]) -> Callable[[RuleFn], RuleFn]:
    """Register ``fn`` as rule ``rule_id`` for runs on ``backends`` ("npu", "cuda", "cpu")."""

    def register(fn: RuleFn) -> RuleFn:
        REGISTRY.append(Rule(rule_id, frozenset(backends), fn))
        return fn

    return register


def run_rules(summary: Summary) -> list[Finding]:
    """Every registered rule that fits the run's backend, its findings stamped with its id."""
    from . import cuda, npu_comm, npu_env, npu_host, npu_ops  # noqa: F401  (registration)

    backend = summary.meta.get("backend", "cpu")
    found: list[Finding] = []
    with kernel_metrics_once():
        for r in REGISTRY:
            if backend in r.backends:
                found += [f if f.rule else replace(f, rule=r.id) for f in r.fn(summary)]
    return found


def step_wall_us(s: Summary) -> float:
    """Total wall time of the profiled steps (us); impacts are shares of it."""
    return s.total_wall_us if len(s.steps) else 0.0


def share_of_steps(s: Summary, us: float) -> float:
    wall = step_wall_us(s)
    return float(us) / wall if wall > 0 else 0.0


def kernel_metrics(s: Summary) -> pd.DataFrame:
    """The rank's kernel metrics (:data:`~npumagic.analysis.schema.KERNEL_METRIC_COLUMNS`) with
    text as plain strings, so rules group by names, types and shapes without categorical pitfalls."""
    cache = _PLAIN_METRICS.get()
    if cache is not None and id(s) in cache:
        return cache[id(s)]
    plain = s.kernel_metrics.astype({c: str for c, dtype in KERNEL_METRIC_COLUMNS.items() if dtype == "category"})
    if cache is not None:
        cache[id(s)] = plain
    return plain
