"""Summary (+ baseline) -> Verdict: the five-step performance checklist.

1 Baseline (step time, utilisation, communication share), 2 Classification (the bottleneck
category and the numbers that decide it), 3 Next change, 4 Verification against a baseline,
5 Record. Thresholds are the named constants below, each with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .metrics import Summary

# Communication that is not hidden behind compute above this share of the step is the first
# thing to fix on multi-device jobs (HCCL/NCCL overlap guidance uses ~30% as "comm-bound").
COMM_BOUND_SHARE = 0.30
# Time the host waits on the DataLoader above this share of the step starves the device.
DATALOADER_SHARE = 0.10
# Device idle (free) above this share means the host cannot keep the device fed.
HOST_BOUND_FREE_SHARE = 0.30
# Device idle caused by host-device synchronisations above this share of the step: the host
# waits for the device, then the device waits for the host (the pipeline drains at every sync).
SYNC_SHARE = 0.10
# A kernel is "tiny" below this mean duration: launch overhead (~5-10 us) rivals its work.
TINY_KERNEL_US = 10.0
# Tiny kernels taking above this share of device compute time mark a small-op-bound model.
SMALL_OP_SHARE = 0.40
# Step-time coefficient of variation above this is jitter worth explaining.
JITTER_CV = 0.10
# A device this busy with compute is compute-bound: make the math cheaper, not the pipeline.
COMPUTE_BOUND_SHARE = 0.60

FIXES = {
    "communication": "overlap gradient communication with backward compute: DDP bucket_cap_mb / gradient_as_bucket_view=True, "
                     "fewer larger collectives, or BF16 gradient compression (ddp_comm_hooks.bf16_compress_hook)",
    "dataloader": "give the DataLoader more workers: DataLoader(num_workers=N, pin_memory=True, persistent_workers=True, "
                  "prefetch_factor=4), and move decoding/augmentation into the workers",
    "host_bound": "cut host dispatch overhead: torch.compile the model (or on Ascend set TASK_QUEUE_ENABLE=2), "
                  "raise the batch size, and remove per-step Python work from the loop",
    "sync": "remove host-device syncs from the loop: drop per-step loss.item()/print, accumulate metrics on the device "
            "and read them every N steps",
    "small_ops": "fuse the many tiny kernels: torch.compile(model), fused optimizers (torch.optim.AdamW(fused=True) / "
                 "foreach=True), and merge view/permute/elementwise chains",
    "compute_bound": "make the math cheaper: mixed precision (torch.autocast with bfloat16), channels_last/NPU-friendly "
                     "formats, or larger fused kernels",
    "jitter": "find what makes some steps slow: look at the outlier steps in the timeline (GC, DataLoader stalls, "
              "memory allocation spikes); set gc.freeze() after warmup",
    "balanced": "no dominant bottleneck: profile more steps (--steps 10) or grow the batch size until one appears",
}


@dataclass(frozen=True)
class Verdict:
    """The checklist's conclusion for one run: ``bottleneck`` is one of the categories in DESIGN.md."""

    bottleneck: str
    evidence: dict[str, float]
    steps: list[tuple[str, str]]
    next_change: str
    scores: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"bottleneck": self.bottleneck, "evidence": self.evidence, "next_change": self.next_change,
                "steps": [list(s) for s in self.steps]}

    def __str__(self) -> str:
        width = max(len(title) for title, _ in self.steps)
        return "\n".join(f"{i}. {title:<{width}}  {text}" for i, (title, text) in enumerate(self.steps, 1))

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td>{i}</td><th style='text-align:left'>{t}</th><td style='text-align:left'>{x}</td></tr>"
                       for i, (t, x) in enumerate(self.steps, 1))
        return f"<table>{rows}</table>"


def _tiny_kernel_share(summary: Summary) -> tuple[float, int]:
    k = summary.kernels
    if k.empty:
        return 0.0, 0
    tiny = k[k["mean_us"] < TINY_KERNEL_US]
    total = float(k["total_us"].sum())
    return (float(tiny["total_us"].sum()) / total if total else 0.0), int(tiny["count"].sum())


def classify(summary: Summary) -> tuple[str, dict[str, float], dict[str, float]]:
    """The bottleneck category, the numbers that decided it, and every category's score.

    A category's score is how far its deciding share is past its threshold (ratio); the
    largest score above 1 wins, else ``balanced``.
    """
    h = summary.headline
    tiny_share, tiny_count = _tiny_kernel_share(summary)
    device_mode = summary.meta.get("device_mode", False)
    # A sync costs what it leaves the device idle: time blocked while the device is busy anyway
    # (e.g. .item() waiting for a long all-reduce) is the device's bottleneck, not the sync's.
    sync_share = min(h["sync_share"], h["free_share"]) if device_mode else h["sync_share"]
    compute = h["computing_share"]
    scores = {
        "communication": h["communication_share"] / COMM_BOUND_SHARE,
        "dataloader": h["dataloader_share"] / DATALOADER_SHARE,
        "sync": sync_share / SYNC_SHARE,
        "host_bound": (h["free_share"] / HOST_BOUND_FREE_SHARE) if device_mode else 0.0,
        "small_ops": (tiny_share / SMALL_OP_SHARE) if tiny_count >= 100 else 0.0,
        "compute_bound": compute / COMPUTE_BOUND_SHARE,
        "jitter": (h["step_cv"] / JITTER_CV) if h["steps"] >= 3 and h["step_cv"] == h["step_cv"] else 0.0,
    }
    scores = {k: float(np.nan_to_num(v)) for k, v in scores.items()}
    # Jitter and compute-bound are conclusions of last resort: a pipeline problem explains both.
    order = ["communication", "dataloader", "sync", "small_ops", "host_bound"]
    best = max(order, key=lambda k: scores[k])
    if scores[best] < 1.0:
        best = "compute_bound" if scores["compute_bound"] >= 1.0 else "jitter" if scores["jitter"] >= 1.0 else "balanced"
    evidence = {"step_median_ms": h["step_median_us"] / 1000, "device_util": h["device_util"], "computing_share": compute,
                "communication_share": h["communication_share"], "dataloader_share": h["dataloader_share"],
                "free_share": h["free_share"], "sync_share": sync_share, "tiny_kernel_share": tiny_share,
                "step_cv": h["step_cv"]}
    return best, evidence, scores


_DECIDING = {
    "communication": lambda e: f"communication not overlapped {e['communication_share']:.0%} of the step vs computing {e['computing_share']:.0%}",
    "dataloader": lambda e: f"waiting on the DataLoader {e['dataloader_share']:.0%} of the step",
    "sync": lambda e: f"host-device syncs take {e['sync_share']:.0%} of the step",
    "host_bound": lambda e: f"device idle {e['free_share']:.0%} of the step while the host dispatches",
    "small_ops": lambda e: f"kernels under {TINY_KERNEL_US:g} us take {e['tiny_kernel_share']:.0%} of device time",
    "compute_bound": lambda e: f"computing {e['computing_share']:.0%} of the step",
    "jitter": lambda e: f"step time varies by {e['step_cv']:.0%} (coefficient of variation)",
    "balanced": lambda e: f"no share past its threshold (busy {e['device_util']:.0%})",
}


def checklist(summary: Summary, baseline: Summary | None = None, run_name: str | None = None,
              stored_at: str | None = None) -> Verdict:
    """Run the five-step checklist on ``summary``, verifying against ``baseline`` when given."""
    bottleneck, evidence, scores = classify(summary)
    s = summary.step_stats
    h = summary.headline
    step1 = (f"step {_ms(s['median_us'])} median, p90 {_ms(s['p90_us'])}, jitter {_pct(s['cv'])}; "
             f"device busy {_pct(h['device_util'])}, communication {_pct(h['communication_share'])} ({s['n']} steps)")
    step2 = f"{bottleneck.replace('_', '-')}: {_DECIDING[bottleneck](evidence)}"
    step3 = FIXES[bottleneck]
    if baseline is None:
        step4 = "no baseline yet: this run is the reference; change one thing and profile again"
    else:
        b = baseline.step_stats["median_us"]
        change = (s["median_us"] - b) / b if b else float("nan")
        step4 = (f"median step {_ms(s['median_us'])} vs baseline {_ms(b)} ({change:+.1%}); "
                 f"busy {_pct(h['device_util'])} vs {_pct(baseline.device_util)}")
    step5 = f"recorded as {run_name}" + (f" in {stored_at}" if stored_at else "") if run_name else "not recorded"
    steps = [("Baseline", step1), ("Classify", step2), ("Next change", step3), ("Verify", step4), ("Record", step5)]
    return Verdict(bottleneck, evidence, steps, step3, scores)


def _ms(us: float) -> str:
    return "-" if us != us else f"{us / 1000:,.2f} ms"


def _pct(v: float) -> str:
    return "-" if v != v else f"{v:.0%}"
