"""The what-if model's arithmetic (analysis/whatif.py) on the shared genuine traces: each finding's
predicted saving is bounded by what its fix can remove, findings are ranked by it, and the
checklist's Next change is the top one that can reach the verdict threshold."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

import npumagic
from npumagic.analysis import thresholds as T
from npumagic.analysis import whatif
from npumagic.analysis.advice import advise_run

from ..conftest import ASCEND, CUDA, shared_summary


def _per_step_ms(s, column):
    return float(s.steps[column].mean()) / 1000


def test_the_level1_jobs_first_fix_is_fewer_bytes_bounded_by_what_each_lever_removes():
    # GIVEN the shared level1 job: 101.96 ms of exposed collectives against 8.87 ms of computing
    s = shared_summary(ASCEND / "level1" / "rank0_ascend_pt")
    exposed, computing = _per_step_ms(s, "comm_not_overlapped_us"), _per_step_ms(s, "computing_us")
    beside = computing - _per_step_ms(s, "overlapped_us")
    # WHEN it is advised
    top = npumagic.advise(s)[0]
    # THEN overlap can hide at most the compute beside the communication, fewer bytes half of it,
    # so sending fewer bytes is the first lever and the finding's prediction is its interval
    assert top.rule == "communication"
    levers = top.evidence["levers_ms"]
    assert levers["overlap"][1] == pytest.approx(min(exposed, beside), abs=1e-3) and levers["overlap"][1] < computing
    assert levers["bytes"] == pytest.approx([0.25 * exposed, 0.5 * exposed], abs=1e-3)
    assert top.fix.startswith("send fewer bytes") and top.fix.index("bf16_compress_hook") < top.fix.index("overlap")
    assert top.predicted_interval == pytest.approx((0.25 * exposed, 0.5 * exposed), abs=1e-3)
    assert top.predicted_saving_ms == pytest.approx(0.375 * exposed, abs=1e-3)


@pytest.mark.parametrize("path", [ASCEND / "level1" / "rank0_ascend_pt", ASCEND / "level1"], ids=["rank0", "job"])
def test_the_checklists_next_change_carries_the_prediction(path):
    s = shared_summary(path)
    verdict = npumagic.checklist(s)
    top = verdict.advice[0]
    lo, hi = top.predicted_interval
    assert verdict.next_change.startswith("send fewer bytes")
    assert verdict.next_change.endswith(f"predicted -{top.predicted_saving_ms:,.2f} ms (-{hi:,.2f} to -{lo:,.2f}) per step")


@pytest.mark.parametrize("path", [ASCEND / "level1", CUDA / "nccl", CUDA / "ns_resolution"], ids=lambda p: p.name)
def test_every_finding_is_predicted_and_ranked_by_it(path):
    s = shared_summary(path)
    advice = advise_run(s, every_rank=True)
    assert len(advice)
    for f in advice:
        lo, hi = f.predicted_interval
        assert 0 <= lo <= f.predicted_saving_ms <= hi and f.predicted_basis
    savings = [f.predicted_saving_ms for f in advice]
    ranked = [(whatif.reaches(s, f), f.predicted_saving_ms) for f in advice]
    assert ranked == sorted(ranked, reverse=True)
    # the JSON of the advice and of the checklist carry them
    doc = json.loads(json.dumps(advice.to_dict()))
    assert [d["predicted_saving_ms"] for d in doc["findings"]] == savings
    assert all(len(d["predicted_interval_ms"]) == 2 for d in doc["findings"])
    checklist = npumagic.checklist(shared_summary(path)).as_dict()
    assert all("predicted_saving_ms" in d for d in checklist["findings"])


def test_advice_leads_with_the_next_change_though_a_smaller_cause_predicts_more():
    # GIVEN the level1 job's findings, one of a cause under the verdict threshold (impact under 5% of the
    # step) given the largest prediction of all
    s = shared_summary(ASCEND / "level1" / "rank0_ascend_pt")
    found = npumagic.advise(s).findings
    small = next(f for f in found if f.impact < T.VERDICT_MIN_IMPACT)
    big = 10 * max(f.predicted_saving_ms for f in found)
    found = [replace(f, predicted_saving_ms=big, predicted_interval=(big, big)) if f is small else f for f in found]
    # WHEN they are ranked THEN the fixes that can be the Next change come first, the first of them leading
    ranked = whatif.rank(found, s)
    assert ranked[0].rule == "communication" == npumagic.checklist(s).advice[0].rule
    assert [whatif.reaches(s, f) for f in ranked] == sorted((whatif.reaches(s, f) for f in ranked), reverse=True)
    # AND without the run, by the prediction alone
    assert whatif.rank(found)[0].predicted_saving_ms == big


def test_a_fix_below_the_threshold_is_never_the_next_change():
    # GIVEN the level1 job with the communication finding's prediction cut under 5% of the step
    s = shared_summary(ASCEND / "level1" / "rank0_ascend_pt")
    found = npumagic.advise(s).findings
    small = [replace(f, predicted_interval=(0.0, 0.9 * whatif.threshold_ms(s))) if f.rule == "communication" else f
             for f in found]
    # WHEN the lead is judged THEN no other finding reaches 5% of the step either: no bottleneck is
    # named, and the title says how far the largest fix falls short
    from npumagic.analysis.advice import lead

    judged = lead(s, small)
    assert judged.finding is None and judged.category == "balanced"
    assert f"can save at most {0.9 * whatif.threshold_ms(s):,.2f} ms per step" in judged.title
    # and with its real bound the communication finding is the lead again
    assert lead(s, found).finding.rule == "communication"


def test_the_cpu_work_under_the_gaps_bounds_the_saving_not_the_whole_idle():
    # the nccl trace: CPU work (DDP bucketing) under the largest host gaps, not launch-bound
    s = shared_summary(CUDA / "nccl")
    gaps = whatif.idle_gaps(s)
    assert 0 < gaps["short"] < gaps["total"]
    f = npumagic.advise(s)[0]
    assert f.rule == "host_bound" and f.evidence["short_gap_ms"] == pytest.approx(gaps["short"])
    assert not f.evidence.get("launch_bound")
    # the finding's fix removes the CPU work under the gaps: its bound is that work, not the whole idle
    assert f.predicted_interval[1] == pytest.approx(f.evidence["cpu_work_ms"], abs=1e-3)
    assert f.predicted_interval[1] < f.evidence["idle_ms"]


def test_in_a_job_fewer_bytes_are_credited_only_with_the_transfer_not_the_wait_for_a_late_rank():
    # GIVEN the level0 job: rank 0 has 81.52 ms of exposed collectives a step, rank 1 (late) 64.62
    s = shared_summary(ASCEND / "level0")
    exposed = _per_step_ms(s, "comm_not_overlapped_us")
    least = float(s.ranks["comm_not_overlapped_us"].min()) / 1000
    f = next(f for f in npumagic.advise(s) if f.rule == "communication")
    # THEN fewer bytes shorten at most half of the least-waiting rank's 64.62 ms, and the 16.90 ms
    # rank 0 waits beyond it is the straggler's to remove
    levers = f.evidence["levers_ms"]
    assert levers["bytes"] == pytest.approx([0.25 * least, 0.5 * least], abs=1e-3)
    assert levers["straggler"] == pytest.approx([0.5 * (exposed - least), exposed - least], abs=1e-3)
    # and the fix names the late rank: the one that waits least (rank 0's step is the slowest)
    assert ("the collectives wait for other ranks: rank 1 arrives late, waiting 64.62 ms a step in them against "
            "81.52 ms for rank 0") in f.fix and "balance the work per rank" in f.fix


@pytest.mark.parametrize("where, said", [
    ("level1", "every rank waits about as long in them (within 5% of the step), so no one rank is late"),
    ("level1/rank0_ascend_pt", "Compare the ranks (analysing the folder that holds every rank shows the slowest)")])
def test_the_late_rank_is_said_as_far_as_the_ranks_read_tell(where, said):
    s = shared_summary(ASCEND / where)
    # the top collective waits for other ranks most of its time: a straggler lever even for one rank
    s = replace(s, comm=s.comm.assign(wait_ratio=[0.9] + [0.0] * (len(s.comm) - 1)))
    f = next(f for f in npumagic.advise(s) if f.rule == "communication")
    assert said in f.fix


def test_item_calls_far_apart_are_predicted_by_their_own_time_not_the_python_between():
    # GIVEN the shared CPU-only trace: 37 aten::item calls a step with a median 162 µs between two
    # (other Python: dropping the calls would not remove it)
    s = shared_summary(CUDA / "hta_more" / "cpu_only_2024")
    sync = next(f for f in npumagic.advise(s).findings if f.category == "sync")
    # THEN no loop's gap is read, and the lever is the calls' own time (half of it at least; at most
    # half as much again, which the rest of the profiled step loses beside the calls' records)
    own = sync.evidence["calls_ms"]
    ev = s.events
    items = ev[(ev["name"] == "aten::item") & (ev["step"] >= 0)]
    per_step = [items.loc[items["step"] == step, "dur_ns"].sum() / 1e6 for step in s.steps["step"]]
    assert own == pytest.approx(float(np.median(per_step)), abs=1e-6)  # the median step's, not the mean
    assert sync.evidence["python_between_us"] is None
    assert sync.predicted_interval == pytest.approx((0.5 * own, 1.5 * own), abs=1e-3)


def test_fusing_small_operators_saves_the_dispatch_between_them_not_the_steps_own_python():
    # GIVEN a CPU step: operators 10 us and 30 us apart (the Python that dispatches the next), a nested
    # call inside one, then a 200 us Python loop before the last operator, and an operator of another thread
    from npumagic.analysis.gaps import dispatch_ms

    rows = [("aten::add", "main", 0, 100), ("aten::mul", "main", 110, 50), ("aten::copy_", "main", 120, 20),
            ("aten::sub", "main", 190, 10), ("aten::div", "main", 400, 10), ("aten::add", "worker", 405, 10)]
    ev = pd.DataFrame(rows, columns=["name", "lane", "ts", "dur"])
    ev = ev.assign(kind="host_op", device=-1, step=0, ts_ns=ev.pop("ts") * 1000, dur_ns=ev.pop("dur") * 1000)
    # WHEN the dispatch between operators is measured THEN it is the short gaps, per step
    assert dispatch_ms(ev, steps=1) == pytest.approx(0.040)
    assert dispatch_ms(ev, steps=2) == pytest.approx(0.020)
    assert dispatch_ms(ev.iloc[:0], steps=1) is None


def test_a_loop_of_small_operators_is_measured_from_its_first_to_its_last():
    # GIVEN a CPU step: a loop of 20 operators 5 us long and 5 us apart, one of them stretched to 300 us
    # by a garbage collection; then 10 such operators (too few to be a loop); then a 2 ms sleep and a
    # loop of 16 operators each 100 us long (no small operators)
    from npumagic.analysis.gaps import short_runs_ms

    loop = [(10 * i, 300 if i == 7 else 5) for i in range(20)]
    loop = [(ts + (295 if i > 7 else 0), dur) for i, (ts, dur) in enumerate(loop)]  # the ones after it move on
    few = [(1000 + 10 * i, 5) for i in range(10)]
    big = [(3100 + 110 * i, 100) for i in range(16)]
    ev = pd.DataFrame(loop + few + big, columns=["ts", "dur"])
    ev = ev.assign(name="aten::mul", lane="main", kind="host_op", device=-1, step=0, ts_ns=ev.pop("ts") * 1000,
                   dur_ns=ev.pop("dur") * 1000)
    # THEN the loop counts from its first start to its last end, its collection included, and the few
    # joined to it (under 1 ms after it) with it; the loop of long operators is not one of small ones
    first, last = loop[0][0], few[-1][0] + few[-1][1]
    assert short_runs_ms(ev, steps=1) == pytest.approx((last - first) / 1000)
    assert short_runs_ms(ev, steps=2) == pytest.approx((last - first) / 2000)
    assert short_runs_ms(ev.iloc[20:30], steps=1) == 0.0


def test_a_fix_the_trace_cannot_size_is_said_not_sized_not_minus_zero(capsys):
    # GIVEN level1's advice over every rank: the online-compile, cache and fused-optimizer fixes
    # have nothing in the trace that sizes them
    from npumagic.cli import main

    assert main(["advise", str(ASCEND / "level1"), "--all"]) == 0
    out = capsys.readouterr().out
    # THEN each is said not sized, never a prediction of -0.00 ms
    assert out.count(f"predicted: not sized: {whatif.UNMEASURED}") >= 1 and "-0.00 ms (-0.00 to -0.00)" not in out
    unsized = [f for f in npumagic.advise(shared_summary(ASCEND / "level1")) if f.predicted_basis == whatif.UNMEASURED]
    assert all(whatif.said(f) == f"not sized: {whatif.UNMEASURED}" for f in unsized)
