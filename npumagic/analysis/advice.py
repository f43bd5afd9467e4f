"""Rules: Summary -> ranked Findings, each with the numbers behind it, a concrete fix and where
it happens. Thresholds live in :mod:`.thresholds`; a finding's ``impact`` is the share of step
time at stake (its severity), and its predicted saving (:mod:`.whatif`: what the fix can remove)
orders them."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from .. import presentation
from . import cluster, whatif
from . import thresholds as T
from .finding import Category, Finding
from .summary import Summary
from .rules import run_rules
from .rules.core import backend_of, steps_inferred
from .run_facts import RunFacts
from .schema import Trace
from .trust import caveat
from .where import locate

CATEGORIES = tuple(Category)

CLASS_NAMES = {Category.HOST_BOUND: "host-bound", Category.DATALOADER: "host-bound (DataLoader)",
               Category.COMMUNICATION: "communication-bound", Category.SMALL_OPS: "small-op-bound",
               Category.SYNC: "sync-bound", Category.NPU_COMPUTE: "device compute-bound (NPU kernels)",
               Category.MEMORY: "memory-bound", Category.JITTER: "jittery",
               Category.COMPUTE_BOUND: "device compute-bound", Category.BALANCED: "balanced",
               Category.UNDETERMINED: "no verdict"}


def class_name(category: str, backend: str | None) -> str:
    """The category as the checklist names it; on the CPU backend the CPU is the "device"."""
    if category == "compute_bound" and backend == "cpu":
        return "compute-bound (CPU operators)"
    return CLASS_NAMES[category]


@dataclass(frozen=True)
class Lead:
    """What the run is bound by, the one answer the checklist's Classify and Next change and the
    advice's first line all give: the first finding past the verdict threshold, else
    compute-bound or balanced, or ``undetermined`` when the run holds no evidence to judge by."""

    category: Category
    title: str
    fix: str
    finding: Finding | None = None
    label: str = ""  # the category as the checklist names it for the run's backend

    def __post_init__(self) -> None:
        object.__setattr__(self, "category", Category(self.category))


@dataclass(frozen=True)
class Advice:
    """Findings of one run, most important first (a list-like display object)."""

    findings: list[Finding] = field(default_factory=list)
    run: str = ""
    hidden_low: int = 0  # low-severity findings left out (shown with every rank / --all)
    ranks_left: str = ""  # which ranks' own findings are not in it, and why ("" when none)
    otherwise: str = ""  # what the step is when no finding names its bottleneck (compute-bound), or ""
    steps_inferred: bool = False  # the trace has no ProfilerStep marks: its one "step" is the whole trace
    lead: Lead | None = None  # the run's bottleneck, as the checklist names it (see :func:`lead`)
    untrusted: str = ""  # why the run's step times cannot be trusted (CPU contention), or ""
    # a multi-rank job advised on one rank: the other ranks whose own findings (none alike to one
    # shown) are left out, and how many of each severity
    other_ranks: tuple[int, ...] = ()
    others_hidden: dict[str, int] = field(default_factory=dict)

    def __iter__(self):
        return iter(self.findings)

    def __len__(self) -> int:
        return len(self.findings)

    def __getitem__(self, i):
        return self.findings[i]

    @property
    def table(self) -> pd.DataFrame:
        return pd.DataFrame([f.as_dict() for f in self.findings],
                            columns=["category", "severity", "impact", "title", "fix", "where", "rule", "evidence"])

    def to_dict(self) -> dict[str, Any]:
        """The JSON document ``npumagic advise --json`` prints (``schema`` versioned)."""
        from ..jsonout import advice_doc

        return advice_doc(self)

    def __str__(self) -> str:
        return presentation.text(self)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))

    def _repr_html_(self) -> str | None:
        return presentation.html(self)


def advise(data: Trace | Summary, run: str = "", facts: RunFacts | None = None) -> Advice:
    """Ranked findings for a run (most important first).

    Parameters
    ----------
    data : a Trace (summarised here) or a Summary.
    run : the run's name, for display.
    facts : what the run's record knows beside its trace: its environment snapshot (variable ->
        value, checked with torch_npu's own record, profiler_metadata.json, by the environment
        rule) and the other processes on its device (its step times' caveat).
    """
    from .summary import summarize

    summary = summarize(data) if isinstance(data, Trace) else data
    found = locate(summary, whatif.predict(summary, run_rules(summary, facts)))
    return Advice(found, run, otherwise=_otherwise(summary, found), steps_inferred=steps_inferred(summary),
                  lead=lead(summary, found), untrusted=caveat(summary, facts))


# compute-bound: the cheaper math each backend offers (no NPU-only fix on a CPU/CUDA run, and back)
COMPUTE_BOUND_FIX = {
    "npu": "make the math cheaper: mixed precision (torch.autocast('npu', dtype=torch.bfloat16)), weights in the "
           "NPU-native format (torch_npu.npu_format_cast), or fused kernels (torch.compile(model, backend=torchair))",
    "cuda": "make the math cheaper: mixed precision (torch.autocast('cuda', dtype=torch.bfloat16)), TF32 matmuls "
            "(torch.backends.cuda.matmul.allow_tf32 = True), channels_last for convolutions, or fused kernels "
            "(torch.compile(model))",
    # ROCm builds of torch keep the 'cuda' device name; hipBLASLt takes TF32-like XF32 only on MI300
    "rocm": "make the math cheaper: mixed precision (torch.autocast('cuda', dtype=torch.bfloat16) on ROCm), "
            "channels_last for convolutions, or fused kernels (torch.compile(model)); check that GEMMs run in "
            "hipBLASLt (TORCH_BLAS_PREFER_HIPBLASLT=1)",
    "xpu": "make the math cheaper: mixed precision (torch.autocast('xpu', dtype=torch.bfloat16)), channels_last for "
           "convolutions, or fused kernels (torch.compile(model))",
    "mtia": "make the math cheaper: lower precision for the heavy operators (bf16/fp16), fewer and larger "
            "operators (torch.compile(model)), and batch small matmuls",
    "cpu": "make the math cheaper: bf16 where the CPU supports it (torch.autocast('cpu', dtype=torch.bfloat16)), all "
           "cores busy (torch.set_num_threads), channels_last for convolutions, or fused kernels (torch.compile(model))",
}
DEVICE_COMPUTE_FIX = ("make the math cheaper: mixed precision (torch.autocast(device_type, dtype=torch.bfloat16)), "
                      "fewer and larger operators (torch.compile(model)), and batch small matmuls")


# kernels that do a step's matrix math (cuBLAS/cuBLASLt, CUTLASS, hipBLASLt "Cijk", fused attention)
MATMUL_KERNEL = re.compile(r"gemm|gemv|matmul|xmma|wgmma|nvjet|cutlass|Cijk_|flash_|fmha|attention", re.IGNORECASE)
# ... in reduced precision: the dtype in the kernel's name (bf16, fp16/half, fp8 E4M3/E5M2)
REDUCED_PRECISION = re.compile(r"bf16|bfloat16|fp16|half|e4m3|e5m2|fp8|float8|hgemm|Cijk_\w*?_(?:HH|BB|HB|BH)S_", re.IGNORECASE)
REDUCED_PRECISION_FIX = ("make the math cheaper: the matrix math already runs in reduced precision ({share:.0%} of "
                         "its kernel time in bf16/fp16/fp8 kernels), so cut the rest: fuse the elementwise work "
                         "around it (torch.compile(model)), use fused attention (F.scaled_dot_product_attention), "
                         "channels_last for convolutions, or FP8 matmuls where the device has them (torchao float8, "
                         "Transformer Engine)")


def reduced_precision_share(s: Summary) -> float | None:
    """The share of the device's matrix-math kernel time whose kernels name a reduced precision
    (bf16, fp16, fp8); None where the kernel names say no matrix math (the NPU's operator names
    carry no dtype)."""
    kernels = s.kernels
    if kernels is None or kernels.empty or not s.meta.get("device_mode"):
        return None
    names = kernels["name"].astype(str)
    matmul = names.str.contains(MATMUL_KERNEL)
    total = float(kernels.loc[matmul, "total_us"].sum())
    if total <= 0:
        return None
    return float(kernels.loc[matmul & names.str.contains(REDUCED_PRECISION), "total_us"].sum()) / total


def compute_bound_fix(backend: str | None, s: Summary | None = None) -> str:
    """The compute-bound fix for the run's backend; an accelerator npumagic has no own words for
    gets the device-agnostic fix, never the CPU's. A GPU run whose matrix math already runs in
    reduced precision (``s``'s kernel names) is not told to turn on mixed precision."""
    share = reduced_precision_share(s) if s is not None and backend in ("cuda", "rocm", "xpu") else None
    if share is not None and share >= 0.5:
        return REDUCED_PRECISION_FIX.format(share=share)
    return COMPUTE_BOUND_FIX.get(backend or "cpu", DEVICE_COMPUTE_FIX)


def compute_bound_share(s: Summary, found: list[Finding]) -> float | None:
    """The computing share of the step when the checklist calls it compute-bound: no finding
    (``found``, most important first) names the bottleneck and the device computes most of the
    step; else None."""
    if _named(s, found) is not None:
        return None
    computing = s.share("computing_us")
    return computing if computing >= T.COMPUTE_BOUND_SHARE else None


NO_STEPS_FIX = "profile again so that at least one step completes inside the profiler's active window"
NO_EVIDENCE_FIX = ("profile again with device activity recorded (torch.profiler.profile(activities=[ProfilerActivity.CPU, "
                   "ProfilerActivity.CUDA]), or torch_npu's ProfilerActivity.NPU) over a few steady-state steps marked "
                   "with prof.step()")
BALANCED_FIX = ("nothing stands out: profile more steps (10 or more) or a longer capture, with Python stacks for "
                "source lines, or raise the batch size until one bottleneck appears")


def no_evidence(s: Summary) -> str:
    """Why the run holds nothing to judge a bottleneck by, or "" when it does."""
    if not len(s.steps) or not s.total_wall_us > 0:
        return "nothing was recorded: the run has no profiled steps"
    backend = backend_of(s)
    vendor = str(s.meta.get("sources", {}).get("breakdown", "")).endswith("(vendor)")
    unread = s.meta.get("unread_device_categories") or []
    if unread and not s.meta.get("device_mode"):
        return (f"the trace's device events ({', '.join(map(str, unread))}) are of a kind npumagic does not read, so "
                "where the device's time goes is unknown")
    if backend != "cpu" and not s.meta.get("device_mode") and not vendor:
        return (f"the trace has no device activity records (kernels, copies, collectives) although it ran on {backend}: "
                "the host's operators alone cannot tell what bounds the device")
    return ""


def lead(s: Summary, found: list[Finding]) -> Lead:
    """The run's bottleneck from its findings (most important first): the one ranking the
    checklist and the advice share."""
    judged = _lead(s, found)
    return replace(judged, label=class_name(judged.category, backend_of(s)))


def _lead(s: Summary, found: list[Finding]) -> Lead:
    why = no_evidence(s)
    if why:
        return Lead("undetermined", why, NO_STEPS_FIX if not len(s.steps) or not s.total_wall_us > 0 else NO_EVIDENCE_FIX)
    top = _named(s, found)
    if top is not None:
        said = whatif.said(top)
        return Lead(top.category, top.title, top.fix + (f"; {said}" if said else ""), top)
    computing = compute_bound_share(s, found)
    if computing is not None:
        where = "CPU operators compute" if backend_of(s) == "cpu" else "the device computes"
        return Lead("compute_bound", f"{where} {computing:.0%} of the step", compute_bound_fix(backend_of(s), s))
    largest = (f"; the largest finding's fix can save at most {found[0].predicted_interval[1]:,.2f} ms per step, under the "
               f"{T.VERDICT_MIN_IMPACT:.0%} of the step that names a bottleneck") if found and found[0].predicted_interval \
        else (f"; the largest finding weighs {found[0].impact:.1%} of the step, under the "
              f"{T.VERDICT_MIN_IMPACT:.0%} that names a bottleneck") if found else ""
    return Lead("balanced", f"no bottleneck past its threshold{largest}", BALANCED_FIX)


def _named(s: Summary, found: list[Finding]) -> Finding | None:
    """The finding that names the bottleneck: the first (most predicted saving) whose fix can
    reach the verdict threshold, else None."""
    return next((f for f in found if whatif.reaches(s, f)), None)


def _otherwise(s: Summary, found: list[Finding]) -> str:
    """What the checklist calls the step when no finding names its bottleneck, with the fix (else "")."""
    judged = lead(s, found)
    if judged.finding is not None:
        return ""
    if judged.category == "compute_bound":
        return f"the step is compute-bound ({judged.title}): {judged.fix}"
    return f"{judged.title}: {judged.fix}"


def advise_run(summary: Summary, run: str = "", every_rank: bool = False, low: bool = True,
               facts: RunFacts | None = None) -> Advice:
    """Findings of a run, most important first: of its first rank, or of every rank, where the
    same finding on several ranks is one row (the rank where it weighs most, with ``.ranks``
    listing them all); without ``low``, low-severity findings are left out (the top one is
    kept). ``facts``: the run record's (see :func:`advise`). The magics
    and the CLI both show advice through this."""
    left = ""
    other_ranks, others = (), {}
    if not every_rank or len(summary.per_rank) < 2:
        findings = advise(summary, run, facts).findings
        if every_rank and len(summary.ranks) > len(summary.per_rank):  # a job read as an outline
            left = (f"only rank {summary.meta.get('rank', 0)} of the {len(summary.ranks)} ranks was read in full; the "
                    "others' own findings need every rank read")
        if len(summary.per_rank) > 1:  # the other ranks' findings that none shown stands for
            shown = {_key(f) for f in findings}
            mine = summary.meta.get("rank", 0)
            unseen: dict[tuple[str, str, str], Finding] = {}
            for rank, per_rank in sorted(summary.per_rank.items()):
                if rank != mine:
                    for f in advise(per_rank, run, facts):
                        if _key(f) not in shown and f.impact > getattr(unseen.get(_key(f)), "impact", -1.0):
                            unseen[_key(f)] = f
            other_ranks = tuple(r for r in sorted(summary.per_rank) if r != mine)
            for f in unseen.values():
                others[f.severity] = others.get(f.severity, 0) + 1
    else:
        groups: dict[tuple[str, str], list[tuple[int, Finding]]] = {}
        for rank, per_rank in sorted(summary.per_rank.items()):
            for f in advise(per_rank, run, facts):
                groups.setdefault(_key(f), []).append((rank, f))
        findings = []
        for found in groups.values():
            rank, top = max(found, key=lambda rf: rf[1].impact)  # where it weighs most: its figures
            ranks = tuple(sorted(r for r, _ in found))
            findings.append(dataclasses.replace(top, ranks=ranks, figures_of=rank if len(ranks) > 1 else None))
        # what only the job shows: slow ranks, stage imbalance, slow links
        findings += [f if f.rule else replace(f, rule="cluster") for f in cluster.findings(summary)]
    findings = whatif.predict(summary, findings)
    hidden = 0
    if not low:
        shown = [f for f in findings if f.severity != "low"] or findings[:1]
        hidden, findings = len(findings) - len(shown), shown
    return Advice(findings, run, hidden, left, _otherwise(summary, findings), steps_inferred(summary),
                  lead(summary, findings), caveat(summary, facts), other_ranks if others else (), others)


_NUMBERS = re.compile(r"\d[\d.,]*")  # a finding's title without its numbers says what was found


def _key(f: Finding) -> tuple[str, str, str]:
    """What a finding found, whichever rank's figures it carries: alike findings share it."""
    return f.category, f.rule, _NUMBERS.sub("#", f.title)
