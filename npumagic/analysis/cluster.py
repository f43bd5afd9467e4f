"""Cluster views and findings over the ranks of a job, computed from per-rank Summaries only
(so ranks can be read and summarised apart): link bandwidth per rank and link type, the
communication matrix, and the slow-rank, stage-imbalance and slow-link findings.

The thresholds follow msprof-analyze's cluster advisor (``slow_rank_analyzer.py``,
``slow_link_analyzer.py``): a 5% spread, the rank spread measured against the mean step
(computing + communication not overlapped + free), the link spread against the mean bandwidth.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from . import thresholds as T
from .collectives import link_bandwidth
from .finding import Finding

if TYPE_CHECKING:
    from .summary import Summary

# The step time split the slow-rank rule compares, with the words a finding uses for each.
DIMENSIONS = {"computing_us": "computing", "comm_not_overlapped_us": "communication", "free_us": "free (idle) time"}


def _spread(values: pd.Series, scale: float) -> float:
    return float(values.max() - values.min()) / scale if scale > 0 and len(values) > 1 else 0.0


def _per_step_ms(us: float) -> float:
    return us / 1000.0


# how to check a rank's host and device, by backend: the Ascend settings only on torch_npu runs
HOST_CHECK = {"npu": "CPU binding (CPU_AFFINITY_CONF=1), TASK_QUEUE_ENABLE=2",
              "cuda": "CPU binding (numactl --cpunodebind near the GPU)"}
DEVICE_CHECK = {"npu": "that rank's device for a lower AI Core frequency or thermal throttling",
                "cuda": "that rank's GPU for lower clocks or thermal throttling (nvidia-smi -q -d CLOCK,PERFORMANCE)"}


def aligned(summary: Summary) -> tuple[pd.DataFrame, int | None]:
    """The rank table over the steps every rank profiled (a slow rank is judged on the same steps
    of each rank, never one rank's warm-up against another's steady state), with how many there
    are; the job's own rank table and None where the ranks' step tables are not at hand."""
    per_rank = summary.per_rank
    if len(per_rank) < 2 or len(per_rank) < len(summary.ranks) or any("step" not in p.steps for p in per_rank.values()):
        return summary.ranks, None
    common = set.intersection(*(set(p.steps["step"].tolist()) for p in per_rank.values()))
    columns = [*DIMENSIONS, "dataloader_us"]
    rows = []
    for rank, p in sorted(per_rank.items()):
        steps = p.steps[p.steps["step"].isin(common)]
        rows.append({"rank": rank, **{c: float(steps[c].mean()) if len(steps) and c in steps else float("nan")
                                      for c in columns}})
    table = pd.DataFrame(rows)
    if "stage" in summary.ranks:
        table["stage"] = table["rank"].map(summary.ranks.set_index("rank")["stage"]).fillna(-1).astype(int)
    return table, len(common)


# what a late rank's own time says about why it is late, in a finding's words
OWN_CAUSES = {"computing_us": "it computes longer", "free_us": "its device idles longer waiting for its host",
              "dataloader_us": "it waits longer for its data"}


def _late_cause(late: pd.Series, waiting: pd.Series) -> tuple[str, float]:
    """The part of the late rank's step that exceeds the waiting rank's most, and by how much (us)."""
    excess = {c: float(late[c] - waiting[c]) for c in OWN_CAUSES if c in late and late[c] == late[c]}
    if not excess or max(excess.values()) <= 0:
        return "", 0.0
    column = max(excess, key=excess.get)
    return column, excess[column]


def late_rank(ranks: pd.DataFrame) -> tuple[pd.Series, pd.Series] | None:
    """(the rank the others wait for in collectives, the rank that waits longest): those with the
    least and the most communication not overlapped, where the two differ by more than
    :data:`~.thresholds.SLOW_RANK_RATIO` of the mean step (computing, communication not overlapped
    and free, as msprof-analyze's); None where they do not, or fewer than two ranks were read."""
    ranks = ranks.dropna(subset=list(DIMENSIONS))
    if len(ranks) < 2:
        return None
    waits = ranks["comm_not_overlapped_us"]
    if _spread(waits, _mean_step(ranks)) <= T.SLOW_RANK_RATIO:
        return None
    return ranks.loc[waits.idxmin()], ranks.loc[waits.idxmax()]


def late_cause(late: pd.Series, waiting: pd.Series) -> str:
    """Why ``late`` is late, in a finding's words ("" where its own time does not say)."""
    return _cause_said(*_late_cause(late, waiting), waiting)


def _cause_said(own: str, by: float, waiting: pd.Series) -> str:
    return f"{OWN_CAUSES[own]} ({_per_step_ms(by):,.2f} ms more than rank {int(waiting['rank'])})" if own else ""


def late_rank_said(ranks: pd.DataFrame, op: str) -> str:
    """Which rank the collectives wait for, in the communication finding's words, where the job's
    rank table tells (:func:`late_rank`: the one that waits least in them, whose step may well be
    the shortest); ``op``: the top collective."""
    if len(ranks.dropna(subset=list(DIMENSIONS))) < 2:
        return (": a straggler arrives late. Compare the ranks (analysing the folder that holds every rank shows "
                "the slowest) and balance the work per rank")
    found = late_rank(ranks)
    if found is None:
        return (f": every rank waits about as long in them (within {T.SLOW_RANK_RATIO:.0%} of the step), so no one rank "
                f"is late: they take turns reaching {op} last. Even out the work between collectives (compare the "
                "ranks' timelines before it)")
    late, waiting = found
    why = late_cause(late, waiting)
    return (f": rank {int(late['rank'])} arrives late, waiting {float(late['comm_not_overlapped_us']) / 1e3:,.2f} ms a "
            f"step in them against {float(waiting['comm_not_overlapped_us']) / 1e3:,.2f} ms for rank "
            f"{int(waiting['rank'])}{'; ' + why if why else ''}: balance the work per rank")


def _mean_step(ranks: pd.DataFrame) -> float:
    return float((ranks["computing_us"] + ranks["comm_not_overlapped_us"] + ranks["free_us"]).mean())


def slow_ranks(ranks: pd.DataFrame, label: str = "", backend: str = "npu", common_steps: int | None = None) -> list[Finding]:
    """A finding for each of computing, communication (not overlapped) and free whose spread
    across ``ranks`` (max - min) exceeds :data:`~.thresholds.SLOW_RANK_RATIO` of the mean step
    (computing + communication not overlapped + free), naming both ranks and the difference;
    its fix checks what the run's ``backend`` has (Ascend settings only on torch_npu runs).
    ``common_steps``: how many steps every rank profiled, over which ``ranks`` is averaged (no
    finding without one; a title that says so when it rests on one)."""
    if common_steps == 0:
        return []
    host_check = HOST_CHECK.get(backend, "other processes on that host and its CPU binding (taskset/numactl)")
    device_check = DEVICE_CHECK.get(backend, "that rank's host for other load")
    ranks = ranks.dropna(subset=list(DIMENSIONS))
    if len(ranks) < 2:
        return []
    step = _mean_step(ranks)
    out = []
    for column, words in DIMENSIONS.items():
        ratio = _spread(ranks[column], step)
        if ratio <= T.SLOW_RANK_RATIO:
            continue
        high, low = ranks.loc[ranks[column].idxmax()], ranks.loc[ranks[column].idxmin()]
        gap = float(high[column] - low[column])
        where = f"{label}ranks {int(high['rank'])} and {int(low['rank'])}"
        title = (f"slow rank: rank {int(high['rank'])} spends {_per_step_ms(gap):,.2f} ms more per step in {words} than "
                 f"rank {int(low['rank'])} ({_per_step_ms(high[column]):,.2f} vs {_per_step_ms(low[column]):,.2f} ms, "
                 f"{ratio:.1%} of the {_per_step_ms(step):,.2f} ms mean step of computing, communication not "
                 "overlapped and free time)")  # msprof-analyze's step: not the wall time the step table shows
        rests = "; it rests on one common step" if common_steps == 1 else ""
        cause = ""
        if column == "comm_not_overlapped_us":
            category = "communication"
            own, by = _late_cause(low, high)
            if own:
                cause = OWN_CAUSES[own]
                title += f"; rank {int(low['rank'])} arrives late: {_cause_said(own, by, high)}"
            fix = (f"in a collective the rank that waits longest is not the slow one: rank {int(low['rank'])} arrives "
                   f"late. Compare its computing, free and DataLoader time with rank {int(high['rank'])}'s "
                   "(the rank table of this job), balance the work per rank (same batch and sequence lengths, "
                   f"no rank-0-only logging or checkpointing in the step) and check its host ({host_check})")
        elif column == "computing_us":
            category = "compute_bound"
            fix = (f"rank {int(high['rank'])} computes longer: give every rank the same work (uneven batches, "
                   f"sequence lengths or MoE experts), and check {device_check}")
        else:
            category = "host_bound"
            fix = (f"rank {int(high['rank'])}'s device idles longer: its host dispatches or loads data more slowly; "
                   f"check {host_check} and the DataLoader workers on that host")
        evidence = {"rule": "slow_rank", "dimension": words, "high_rank": int(high["rank"]), "low_rank": int(low["rank"]),
                    "high_ms": _per_step_ms(float(high[column])), "low_ms": _per_step_ms(float(low[column])),
                    "gap_ms": _per_step_ms(gap), "mean_step_ms": _per_step_ms(step), "ratio": ratio}
        if common_steps is not None:
            evidence["common_steps"] = common_steps
        if cause:
            evidence["late_cause"] = cause
        out.append(Finding(category, ratio, title + rests, evidence, fix, where))
    return out


def stage_imbalance(ranks: pd.DataFrame) -> list[Finding]:
    """Pipeline stages (ranks with a known ``stage``) compared on their mean computing,
    communication and free time: a finding when the spread across stages exceeds
    :data:`~.thresholds.SLOW_RANK_RATIO` of the mean step, naming the stages."""
    staged = ranks[ranks["stage"] >= 0] if "stage" in ranks else ranks.iloc[:0]
    if staged["stage"].nunique() < 2:
        return []
    stages = staged.groupby("stage")[list(DIMENSIONS)].mean()
    step = float(stages.sum(axis=1).mean())
    out = []
    for column, words in DIMENSIONS.items():
        ratio = _spread(stages[column], step)
        if ratio <= T.SLOW_RANK_RATIO:
            continue
        high, low = int(stages[column].idxmax()), int(stages[column].idxmin())
        gap = float(stages[column].max() - stages[column].min())
        title = (f"stage imbalance: pipeline stage {high} spends {_per_step_ms(gap):,.2f} ms more per step in {words} "
                 f"than stage {low} ({_per_step_ms(stages.loc[high, column]):,.2f} vs "
                 f"{_per_step_ms(stages.loc[low, column]):,.2f} ms, {ratio:.1%} of the mean step)")
        fix = ("rebalance the pipeline: move layers from the heaviest stage to the lightest (e.g. Megatron/MindSpeed "
               "--num-layers-per-virtual-pipeline-stage, or an uneven layer split with the embedding/output layers "
               "counted), and use interleaved (virtual) pipeline stages to shrink bubbles")
        evidence = {"rule": "stage_imbalance", "dimension": words, "high_stage": high, "low_stage": low,
                    "gap_ms": _per_step_ms(gap), "mean_step_ms": _per_step_ms(step), "ratio": ratio}
        out.append(Finding("compute_bound" if column == "computing_us" else
                           "communication" if column == "comm_not_overlapped_us" else "host_bound",
                           ratio, title, evidence, fix, f"stages {high} and {low}"))
    return out


def slow_links(summary: Summary) -> list[Finding]:
    """Per link type: a finding when the ranks' bandwidths spread by more than
    :data:`~.thresholds.SLOW_LINK_RATIO` of their mean, or a rank's bandwidth is below the type's
    expected rate (:data:`~.thresholds.EXPECTED_LINK_GBPS`); names the slowest rank and its rate."""
    table = link_bandwidth(summary.links)
    table = table[table["bandwidth_gbps"].notna()]
    if table.empty:
        return []
    wall_ms = float(summary.ranks["step_median_us"].mean()) / 1000 if len(summary.ranks) else summary.total_wall_us / 1000
    steps = max(len(summary.steps), 1)
    out = []
    for link_type, group in table.groupby("link_type"):
        mean = float(group["bandwidth_gbps"].mean())
        spread = _spread(group["bandwidth_gbps"], mean)
        expected = T.EXPECTED_LINK_GBPS.get(str(link_type))
        slow = group.loc[group["bandwidth_gbps"].idxmin()]
        below = expected is not None and float(slow["bandwidth_gbps"]) < expected
        if spread <= T.SLOW_LINK_RATIO and not below:
            continue
        reference = max(mean, expected or 0.0) if below else mean
        lost_ms = max(float(slow["transit_ms"]) - float(slow["transit_mb"]) / reference, 0.0) / steps
        reasons = []
        if spread > T.SLOW_LINK_RATIO:
            fast = group.loc[group["bandwidth_gbps"].idxmax()]
            reasons.append(f"the ranks' {link_type} bandwidths spread by {spread:.1%} of their {mean:.2f} GB/s mean "
                           f"(rank {int(fast['rank'])}: {float(fast['bandwidth_gbps']):.2f} GB/s)")
        if below:
            reasons.append(f"under the {expected:.1f} GB/s expected of {link_type}")
        title = (f"slow link: rank {int(slow['rank'])}'s {link_type} runs at {float(slow['bandwidth_gbps']):.2f} GB/s, "
                 + "; ".join(reasons))
        fix = ("check the slow rank's links: `hccn_tool -i DEVICE -link -g` / `npu-smi info` for degraded or "
               "down HCCS/RoCE links, its PCIe slot and NUMA binding; make transfers larger (DDP bucket_cap_mb) "
               "so small packets do not dominate, and compare HCCL_BUFFSIZE across ranks")
        evidence = {"rule": "slow_link", "link_type": str(link_type), "rank": int(slow["rank"]),
                    "bandwidth_gbps": float(slow["bandwidth_gbps"]), "mean_gbps": mean, "spread": spread,
                    "expected_gbps": expected, "ranks": group.set_index("rank")["bandwidth_gbps"].round(3).to_dict()}
        impact = lost_ms / wall_ms if wall_ms > 0 else 0.0
        out.append(Finding("communication", impact, title, evidence, fix, f"rank {int(slow['rank'])} {link_type}"))
    return out


def findings(summary: Summary) -> list[Finding]:
    """Every cluster finding of a job summary (nothing for a single rank): slow ranks (within
    each pipeline stage when stages are known), stage imbalance and slow links."""
    if summary.ranks is None or len(summary.ranks) < 2:
        return []
    ranks, common = aligned(summary)
    out: list[Finding] = []
    backend = str(summary.meta.get("backend") or "cpu")
    staged = "stage" in ranks and (ranks["stage"] >= 0).all() and ranks["stage"].nunique() > 1
    if staged:
        for stage, members in ranks.groupby("stage"):
            out += slow_ranks(members, f"stage {int(stage)}: ", backend, common)
        out += stage_imbalance(ranks)
    else:
        out += slow_ranks(ranks, backend=backend, common_steps=common)
    return out + slow_links(summary)
