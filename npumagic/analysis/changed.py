"""Which of baseline A's fixes run B evidently applied, read from what changed between their
records: a DataLoader's workers or pinning -> A's dataloader finding; an environment variable a
finding's fix names -> that finding; A's blocking syncs per step gone or halved -> its sync
finding. Nothing else is guessed, and where two findings fit, none is (never a guess between two)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .finding import Finding
    from .summary import Summary

# the DataLoader settings the dataloader findings' fixes change
LOADER_SETTINGS = ("num_workers", "pin_memory", "persistent_workers")
# the environment variables the rules' fixes tell the user to set (rules/npu_env.py, core.py's
# NPU host-bound fix, memory.py's allocator fix): a finding whose fix text names one is its rule
FIX_VARIABLES = ("TASK_QUEUE_ENABLE", "CPU_AFFINITY_CONF", "PYTORCH_NPU_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF",
                 "ACLNN_CACHE_LIMIT", "HOST_CACHE_CAPACITY", "ASCEND_LAUNCH_BLOCKING", "ASCEND_GLOBAL_LOG_LEVEL",
                 "HCCL_ALGO", "HCCL_RDMA_TC", "HCCL_RDMA_SL")


@dataclass(frozen=True)
class AppliedFix:
    """A's ``finding`` whose fix B evidently applied, and the ``evidence`` that says so
    ("the DataLoader's num_workers went 0 -> 2")."""

    finding: Finding
    evidence: str

    @property
    def rule(self) -> str:
        return self.finding.rule or self.finding.category


def applied_fix(context_a: dict[str, Any] | None, context_b: dict[str, Any] | None, summary_a: Summary,
                summary_b: Summary, findings_a: list[Finding] | Callable[[], list[Finding]]) -> AppliedFix | None:
    """The one finding of A whose fix the change A -> B evidently applied, else None (no such
    change, or one that fits several of A's findings). ``findings_a`` may be a callable, called
    only where something that could name a fix changed (advising a run costs)."""
    ca, cb = context_a or {}, context_b or {}
    if not (_loader_moved(ca, cb) or _variables_moved(ca, cb) or _syncs_fell(summary_a, summary_b)):
        return None
    findings = findings_a() if callable(findings_a) else findings_a
    fits = _loader(ca, cb, findings) + _environment(ca, cb, findings) + _syncs(summary_b, findings)
    found = {id(f): f for f, _ in fits}
    if len(found) != 1:
        return None
    finding = next(iter(found.values()))
    return AppliedFix(finding, "; ".join(dict.fromkeys(why for f, why in fits)))


def _loader_moved(ca: dict, cb: dict) -> list[str]:
    """The fix-relevant DataLoader settings that changed (the first DataLoader of each run)."""
    la, lb = ca.get("dataloaders") or [], cb.get("dataloaders") or []
    if not (la and lb):
        return []
    return [f"{k} went {la[0].get(k)!r} -> {lb[0].get(k)!r}" for k in LOADER_SETTINGS if la[0].get(k) != lb[0].get(k)]


def _variables_moved(ca: dict, cb: dict) -> list[str]:
    ea, eb = ca.get("environment") or {}, cb.get("environment") or {}
    # torch_npu's profiler_metadata.json records an unset variable as '': the same as not set
    return [name for name in FIX_VARIABLES if (ea.get(name) or None) != (eb.get(name) or None)]


def _per_step(s: Summary) -> float:
    """The most frequent blocking sync's calls per step, as the sync rule counts them."""
    from .syncs import step_syncs

    syncs = step_syncs(s)
    return float(syncs["per_step"].max()) if len(syncs) else 0.0


def _syncs_fell(a: Summary, b: Summary) -> bool:
    before = _per_step(a)
    return before >= 1 and _per_step(b) <= before / 2


def _loader(ca: dict, cb: dict, findings: list[Finding]) -> list[tuple[Finding, str]]:
    moved = _loader_moved(ca, cb)
    if not moved:
        return []
    why = "the DataLoader's " + ", ".join(moved)
    return [(f, why) for f in findings if f.category == "dataloader"]


def _environment(ca: dict, cb: dict, findings: list[Finding]) -> list[tuple[Finding, str]]:
    import re

    ea, eb = ca.get("environment") or {}, cb.get("environment") or {}
    out = []
    for name in _variables_moved(ca, cb):
        why = (f"{name} was set to {eb[name]!r}" if name not in ea else
               f"{name} was unset (was {ea[name]!r})" if name not in eb else
               f"{name} went {ea[name]!r} -> {eb[name]!r}")
        out += [(f, why) for f in findings if re.search(rf"\b{name}\b", f.fix)]
    return out


def _syncs(summary_b: Summary, findings: list[Finding]) -> list[tuple[Finding, str]]:
    out = []
    for f in findings:
        before = f.evidence.get("syncs_per_step") if f.category == "sync" else None
        if not before:
            continue
        after = _per_step(summary_b)
        if after <= before / 2:
            out.append((f, f"the blocking syncs per step went {before:.0f} -> {after:.0f}"))
    return out
