"""The rule registry: :func:`rule` registers a function Summary -> ``list[Finding]`` under an id,
for the backends its advice fits (an NPU fix is never offered for a CUDA or CPU run, nor a CUDA
one for an NPU run; None: every backend), and :func:`run_rules` runs those that fit a run in the
order of :data:`FAMILIES`, stamping the rule id on their findings."""


from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Callable, Iterator

import pandas as pd

from ..finding import Finding
from ..run_facts import NO_FACTS, RunFacts
from ..summary import Summary
from ..schema import KERNEL_METRIC_COLUMNS

RuleFn = Callable[[Summary], "list[Finding]"]


# the rule modules (families), in the order their findings are listed before ranking (findings of
# equal impact keep it): the order the two rule systems this registry replaced ran them in. The one
# registration of a family: :mod:`npumagic.analysis.rules` imports each module named here.
FAMILIES = ("core", "memory", "cluster", "npu_ops", "cuda", "npu_comm", "npu_env", "npu_host")


@dataclass(frozen=True)
class Rule:
    id: str
    backends: frozenset[str] | None  # None: every backend
    fn: RuleFn
    reads_facts: bool = False  # fn(summary, facts): it reads the run record's facts too

    @property
    def family(self) -> str:
        return self.fn.__module__.rpartition(".")[2]


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


def rule(rule_id: str, backends: tuple[str, ...] | None = None, *, facts: bool = False) -> Callable[[RuleFn], RuleFn]:
    """Register ``fn`` as rule ``rule_id`` for runs on ``backends`` ("npu", "cuda", "cpu"; None:
    every backend); with ``facts``, ``fn`` also takes the run's
    :class:`~npumagic.analysis.run_facts.RunFacts`."""

    def register(fn: RuleFn) -> RuleFn:
        family = fn.__module__.rpartition(".")[2]
        if family not in FAMILIES:
            raise ValueError(f"rule {rule_id!r} is in module {fn.__module__}, no family of the registry: add "
                             f"{family!r} to rules.registry.FAMILIES ({', '.join(FAMILIES)})")
        REGISTRY.append(Rule(rule_id, None if backends is None else frozenset(backends), fn, facts))
        return fn

    return register


def run_rules(summary: Summary, facts: RunFacts | None = None) -> list[Finding]:
    """Every registered rule that fits the run's backend, its findings stamped with its id (the
    rule modules must be imported: :func:`npumagic.analysis.rules.run_rules` does it); ``facts``:
    the run record's, for the rules that read them."""
    backend = summary.meta.get("backend", "cpu")
    found: list[Finding] = []
    with kernel_metrics_once():
        for r in sorted(REGISTRY, key=lambda r: FAMILIES.index(r.family)):
            if r.backends is None or backend in r.backends:
                said = r.fn(summary, facts or NO_FACTS) if r.reads_facts else r.fn(summary)
                found += [f if f.rule else replace(f, rule=r.id) for f in said]
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
