"""compare(): statistics by hand, and the per-kernel table on the shared Ascend ranks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

import npumagic
from npumagic.analysis.compare import Noise, between_run_noise, changes, components, p_value_text, step_test
from npumagic.analysis.breakdown import STEP_COLUMNS
from npumagic.analysis.counters import HOST_COLUMNS
from npumagic.analysis.operators import KERNEL_COLUMNS

from ..conftest import ASCEND, CUDA, shared_summary


def _steps(wall_ms, **parts_ms) -> npumagic.Summary:
    """A Summary whose step table has these walls and components (ms), everything else 0."""
    n = len(wall_ms)
    table = pd.DataFrame({c: np.zeros(n) for c in STEP_COLUMNS})
    table["step"] = range(1, n + 1)
    table["wall_us"] = np.asarray(wall_ms, float) * 1000
    for column, values in parts_ms.items():
        table[f"{column}_us"] = np.asarray(values, float) * 1000
    empty = pd.DataFrame(columns=KERNEL_COLUMNS)
    return npumagic.Summary(table, empty, empty, empty, empty, empty, empty, empty, {"backend": "cpu"})


def test_welch_on_log_step_times_matches_scipy():
    from scipy import stats

    a, b = [20.0, 21.5, 19.0, 22.0], [15.0, 17.0, 16.2]
    ref = stats.ttest_ind(np.log(a), np.log(b), equal_var=False)
    test = step_test(np.array(a), np.array(b))
    assert test.p_value == pytest.approx(ref.pvalue, rel=1e-9) and test.df == pytest.approx(ref.df, rel=1e-9)
    lo, hi = ref.confidence_interval(0.95)
    assert test.ci == pytest.approx((np.exp(lo), np.exp(hi)), rel=1e-9)


@pytest.mark.parametrize("n", [3, 5, 10, 50])
def test_the_false_positive_rate_holds_at_5_percent_from_3_to_50_steps(n):
    # GIVEN two runs with the same median step, one four times noisier, sometimes with a slow
    # first step (the profiler's own start-up); WHEN tested 2000 times
    rng = np.random.default_rng(n)
    clean = outlier = 0
    sims = 2000
    for _ in range(sims):
        a, b = np.exp(rng.normal(0, 0.02, n)), np.exp(rng.normal(0, 0.08, n))
        clean += step_test(a, b).p_value < 0.05
        a[0] *= 1.3 if rng.random() < 0.5 else 1.0
        b[0] *= 1.3 if rng.random() < 0.5 else 1.0
        outlier += step_test(a, b).p_value < 0.05
    # THEN the rate is the nominal 5% (binomial SE 0.5%), and outliers make it rarer, not likelier
    assert 0.03 <= clean / sims <= 0.07
    assert outlier / sims <= 0.07


def test_three_steps_a_side_can_show_a_clear_change():
    cmp = npumagic.compare(_steps([20, 20.3, 19.8]), _steps([12.1, 12, 12.2]), "a", "b")
    assert cmp.significant and cmp.decided_by == "step time" and cmp.ci[0] > 1
    assert cmp.sentence().startswith("b is 1.7x faster than a")


def test_three_jittery_steps_a_side_stay_undecided():
    cmp = npumagic.compare(_steps([20, 21, 22]), _steps([10, 10.5, 25]), "a", "b")
    assert not cmp.significant
    assert "no difference beyond noise" in cmp.sentence()


def test_one_step_a_side_has_no_interval():
    cmp = npumagic.compare(_steps([20]), _steps([10]))
    assert cmp.ci == (0.0, float("inf")) and not cmp.significant


def test_a_clear_change_with_enough_steps_is_real():
    rng = np.random.default_rng(1)
    a = _steps(list(20 + rng.normal(0, 0.3, 8)))
    b = _steps(list(17 + rng.normal(0, 0.3, 8)))
    cmp = npumagic.compare(a, b, "a", "b")
    assert cmp.significant and cmp.ci[0] > 1
    assert cmp.sentence().startswith("b is 15% faster than a")


def test_a_component_that_fell_in_every_step_decides_when_the_steps_are_jittery():
    # GIVEN the ResNet-50 case: the DataLoader wait falls from ~69 to ~1 ms in every step, but
    # the faster run's steps are jittery (step time alone is not conclusive)
    a = _steps([176, 180, 172], dataloader=[69.3, 70.1, 68.8], computing=[100, 103, 98], free=[76, 77, 74])
    b = _steps([127, 95, 160], dataloader=[1.1, 0.9, 1.3], computing=[120, 90, 150], free=[7, 5, 10])
    cmp = npumagic.compare(a, b, "workers0", "workers4")
    # THEN it is called faster, decided and named by the DataLoader wait
    assert cmp.p_value > 0.05
    assert cmp.significant and cmp.decided_by == "component"
    assert cmp.explained_by.column == "dataloader_us"
    assert "DataLoader wait 69.3 -> 1.1 ms in every step" in cmp.sentence()
    assert "median step workers0 176.00 ms -> workers4 127.00 ms" in cmp.sentence()


def test_a_component_that_moved_while_the_rest_grew_decides_nothing():
    a = _steps([10, 10.2, 9.9], dataloader=[8, 8.1, 7.9], computing=[2, 2.1, 2])
    b = _steps([9.5, 12, 8.8], dataloader=[0.1, 0.1, 0.1], computing=[9.4, 11.9, 8.7])
    cmp = npumagic.compare(a, b)
    assert not cmp.significant


def test_a_component_higher_in_every_one_of_3_steps_by_no_more_than_its_spread_decides_nothing():
    # GIVEN the identical cell twice at 3 steps: a 30 ms DataLoader sleep that overshoots by up to
    # 3 ms, and a neighbour's time slice in one step of each run; by luck (1 time in 10) B's three
    # waits all came out above A's, by about their own spread, and B's median step 10% above A's
    a = _steps([30.5, 33.3, 47.7], dataloader=[29.0, 31.8, 30.2], computing=[1, 1, 1], free=[0.5, 0.5, 16.5])
    b = _steps([49.5, 36.8, 34.7], dataloader=[32.0, 35.3, 33.2], computing=[1, 1, 1], free=[16.5, 0.5, 0.5])
    cmp = npumagic.compare(a, b)
    # THEN it is no difference: the wait is what moved, but its own test cannot tell that from noise
    assert not cmp.significant and cmp.decided_by == ""
    assert cmp.explained_by.column == "dataloader_us" and cmp.explained_by.every_step and cmp.explained_by.rest_held
    assert cmp.explained_by.p_value > 0.05 and cmp.p_value > 0.05 and 1 / cmp.speedup > 1.05


def test_at_3_steps_the_component_rule_keeps_the_false_call_rate_at_5_percent():
    # GIVEN two runs of the identical cell, 3 steps each, whose step is mostly a DataLoader wait
    # that varies 12% from step to step; WHEN compared 1000 times (the component rule may decide
    # where the step test does not; "every step" alone added 5-6% of false calls to its 4%)
    n = 3
    rng = np.random.default_rng(n)
    sims, called = 1000, 0
    for _ in range(sims):
        runs = []
        for _side in "ab":
            wait = 30 * np.exp(rng.normal(0, 0.12, n))
            runs.append(_steps(wait + 1.5, dataloader=wait, computing=np.ones(n), free=np.full(n, 0.5)))
        called += npumagic.compare(*runs).significant
    # THEN identical runs are called different at most at the nominal rate (binomial SE 0.7%)
    assert called / sims <= 0.07


def test_every_step_column_is_a_component_including_new_ones():
    a = _steps([10, 10.1, 10.2], computing=[2, 2, 2])
    a.steps["memcpy_us"] = [6000.0, 6100, 6050]
    b = _steps([5, 5.1, 4.9], computing=[2, 2, 2])
    b.steps["memcpy_us"] = [1000.0, 1100, 900]
    cmp = npumagic.compare(a, b)
    assert "memcpy_us" in components(a.steps) and "wall_us" not in components(a.steps)
    assert cmp.explained_by.column == "memcpy_us"
    assert "memcpy 6.0 -> 1.0 ms in every step" in cmp.sentence()
    assert "memcpy (ms/step)" in set(cmp.breakdown["metric"])


def test_the_sentence_gives_each_figure_with_its_run_name_in_order():
    cmp = npumagic.compare(_steps([380.05, 381, 379]), _steps([229.33, 229, 230]), "run1", "run2")
    assert "run2 is 1.7x faster than run1" in cmp.sentence()
    assert "median step run1 380.05 ms -> run2 229.33 ms" in cmp.sentence()


def test_without_replicates_the_noise_is_unknown_and_the_sentence_says_how_to_measure_it():
    cmp = npumagic.compare(_steps([20, 20.3, 19.8]), _steps([12.1, 12, 12.2]))
    assert not cmp.noise.known
    assert "run-to-run noise unknown" in cmp.sentence() and "profile the baseline twice" in cmp.sentence()


def test_between_run_noise_is_the_spread_of_replicate_runs_beyond_their_steps():
    rng = np.random.default_rng(3)
    # GIVEN 3 configurations x 4 runs whose means drift by 10% between runs, steps 1% within
    groups = [[np.exp(rng.normal(m + rng.normal(0, 0.1), 0.01, 50)) for _ in range(4)] for m in (1, 2, 3)]
    noise = between_run_noise(groups + [[np.ones(3)]])  # a lone run carries no information
    assert noise.runs == 12 and noise.groups == 3 and noise.df == 9
    assert 0.05 < noise.sigma < 0.2
    assert "measured from 12 replicate runs of 3 configurations" in noise.describe()


def test_measured_noise_widens_the_interval_and_can_undo_a_verdict():
    a, b = _steps([20, 20.1, 19.9, 20.05]), _steps([18.6, 18.7, 18.5, 18.65])  # 7% faster, tight steps
    quiet = npumagic.compare(a, b)
    assert quiet.significant
    noisy = Noise(sigma=0.08, runs=6, groups=2)
    cmp = npumagic.compare(a, b, noise=noisy)
    assert not cmp.significant and cmp.p_value > 0.05
    assert cmp.ci[0] < 1 < cmp.ci[1] and quiet.ci[0] > 1
    assert "run-to-run noise 8.3% measured from 6 replicate runs" in cmp.sentence()


def test_measured_noise_can_undo_a_component_verdict_as_it_does_the_steps():
    # GIVEN a DataLoader wait 12% longer in every step of B, the steps jittery (a time slice in one
    # of each run's three); a neighbour that slows a whole run moves each of its parts too
    a = _steps([31.5, 31.7, 47.6], dataloader=[30.0, 30.2, 30.1], computing=[1, 1, 1], free=[0.5, 0.5, 16.5])
    b = _steps([51.2, 35.3, 35.2], dataloader=[33.7, 33.8, 33.7], computing=[1, 1, 1], free=[16.5, 0.5, 0.5])
    assert npumagic.compare(a, b).decided_by == "component"
    # WHEN replicates measured 3.6% of run-to-run noise (a floor of 10% the step change exceeds)
    cmp = npumagic.compare(a, b, noise=Noise(sigma=0.035, runs=6, groups=2))
    # THEN the wait's change is within that noise: no verdict
    assert 1 / cmp.speedup > 1.1 and cmp.explained_by.column == "dataloader_us" and cmp.explained_by.every_step
    assert not cmp.significant and cmp.explained_by.p_value > 0.05


def test_a_component_that_drifts_between_replicates_decides_nothing_however_tight_its_steps():
    # GIVEN the identical cell twice (replicates), its computing 0.45 ms a step in one run and 0.7
    # in the other, every step, under steps jittery enough (4-5 ms) to hide that from the step's
    # noise: bench/noise.py's pairs showed this at --steps 3 (6 of 60 identical pairs called slower)
    a = _steps([4.75, 4.02, 4.15], computing=[0.57, 0.43, 0.43], dataloader=[3.17, 3.13, 3.13], free=[4.17, 3.59, 3.72])
    b = _steps([4.72, 4.23, 4.59], computing=[0.70, 0.63, 0.75], dataloader=[3.15, 3.14, 3.14], free=[4.02, 3.60, 3.84])
    walls = [[x.steps["wall_us"].to_numpy() for x in (a, b)]]
    noise = between_run_noise(walls)
    assert noise.known and noise.sigma == 0  # the step's spread explains its run-to-run noise
    assert npumagic.compare(a, b, noise=noise).decided_by == "component"
    # WHEN the component's own run-to-run noise is measured from the same replicates
    own = {"computing_us": between_run_noise([[x.steps["computing_us"].to_numpy() for x in (a, b)]], log=False)}
    cmp = npumagic.compare(a, b, noise=noise, component_noise=own)
    # THEN its drift is that noise: no verdict
    assert own["computing_us"].sigma > 100 and cmp.explained_by.column == "computing_us"
    assert not cmp.significant and cmp.explained_by.p_value > 0.05


def _waited(s: npumagic.Summary, wait_pct: float) -> npumagic.Summary:
    """``s`` with host samples saying its cell's thread waited for a core ``wait_pct`` of every step."""
    n = len(s.steps)
    host = pd.DataFrame({c: np.full(n, np.nan) for c in HOST_COLUMNS})
    host["step"], host["cores"], host["cores_busy_pct"] = s.steps["step"].to_numpy(), 2, 90.0
    host["process_cpu_pct"], host["main_thread_wait_pct"] = 100.0, wait_pct
    return dataclasses.replace(s, host=host)


def test_a_component_that_grew_by_the_time_its_thread_waited_for_a_core_decides_nothing():
    # GIVEN the identical 30 ms DataLoader sleep twice, B's thread kept from a core 9% of each
    # step by a neighbour (under the 10% that calls a run contended): each of B's wakes 3 ms late,
    # its steps jittery (a time slice in one of each run's three)
    a = _steps([31.5, 31.7, 47.6], dataloader=[30.0, 30.2, 30.1], computing=[1, 1, 1], free=[0.5, 0.5, 16.5])
    b = _steps([51.2, 35.3, 35.2], dataloader=[33.1, 33.3, 33.2], computing=[1, 1, 1], free=[16.5, 0.5, 0.5])
    assert npumagic.compare(a, b).decided_by == "component"  # without the host's samples
    cmp = npumagic.compare(_waited(a, 0.5), _waited(b, 9.0))
    # THEN the wait's growth is no more than the neighbour's time: no verdict, and not called contended
    assert not cmp.untrusted and cmp.explained_by.column == "dataloader_us" and cmp.explained_by.every_step
    assert not cmp.significant and cmp.explained_by.p_value > 0.05
    # AND a wait that fell by far more than the time A's thread waited still decides
    a = _steps([176, 180, 172], dataloader=[69.3, 70.1, 68.8], computing=[100, 103, 98], free=[76, 77, 74])
    b = _steps([127, 95, 160], dataloader=[1.1, 0.9, 1.3], computing=[120, 90, 150], free=[7, 5, 10])
    fixed = npumagic.compare(_waited(a, 9.0), _waited(b, 9.0))
    assert fixed.significant and fixed.decided_by == "component" and fixed.explained_by.column == "dataloader_us"


def test_ascend_rank_comparison_reconciles_with_each_summary():
    a = shared_summary(ASCEND / "level1" / "rank0_ascend_pt")
    b = shared_summary(ASCEND / "level1" / "rank1_ascend_pt")
    cmp = npumagic.compare(a, b, "rank0", "rank1")
    assert cmp.kernels["total_a_us"].sum() == pytest.approx(a.kernels["total_us"].sum())
    assert cmp.kernels["total_b_us"].sum() == pytest.approx(b.kernels["total_us"].sum())
    assert cmp.kernels["count_a"].sum() == a.kernels["count"].sum()
    deltas = cmp.kernels["delta_us"].abs().to_numpy()
    assert (deltas[:-1] >= deltas[1:]).all()  # sorted by |delta|
    assert cmp.n_a == cmp.n_b == 1 and not cmp.significant


def test_kernels_whose_generated_numbers_differ_match_by_operator_type():
    # GIVEN a genuine NPU run and the same run whose graph compiler numbered its kernels
    # differently (Conv2D1 -> Conv2D91, as a rebuilt graph does), nothing else changed
    a = shared_summary(ASCEND / "level1" / "rank0_ascend_pt")
    renamed = a.kernels["name"].astype(str).str.replace(r"^(Conv2D\w*?)(\d+)$", r"\g<1>9\2", regex=True)
    assert (renamed != a.kernels["name"].astype(str)).sum() >= 3
    b = dataclasses.replace(a, kernels=a.kernels.assign(name=renamed))
    # WHEN compared
    cmp = npumagic.compare(a, b, "a", "b")
    # THEN the renamed kernels are matched through their type: nothing is added or removed
    assert set(cmp.kernels["status"]) == {"changed"}
    assert cmp.kernels["delta_us"].abs().max() == 0
    assert "Conv2D" in set(cmp.kernels["kernel"].astype(str))


def test_what_changed_lists_every_difference():
    a = {"source": "train(0.002)", "arguments": {"steps": 3, "name": "a"}, "environment": {},
         "versions": {"torch": "2.13.0"}, "backend": "cpu", "device": "x"}
    b = {"source": "train(0.0)", "arguments": {"steps": 5, "name": "b"}, "environment": {"TASK_QUEUE_ENABLE": "2"},
         "versions": {"torch": "2.13.0"}, "backend": "cpu", "device": "x"}
    lines, diffs = changes(a, b)
    assert lines == ["cell source", "option steps: 3 -> 5", "env TASK_QUEUE_ENABLE: None -> '2'"]
    # torch_npu's metadata records an unset variable as '': no change from a run that has none
    assert changes(dict(a, environment={"ACLNN_CACHE_LIMIT": ""}), dict(a, environment={}))[0] == []
    assert "-train(0.002)" in diffs["cell source"] and "+train(0.0)" in diffs["cell source"]


def test_device_and_rank_changes_are_named_without_records():
    a100 = shared_summary(CUDA / "nccl")
    v100 = shared_summary(CUDA / "ns_resolution")
    lines, _ = changes(None, None, a100, v100)
    assert "device: NVIDIA A100-PG509-200 -> Tesla V100-SXM2-32GB" in lines
    assert "world size: 2 -> 1" in lines
    rank0 = shared_summary(ASCEND / "level1" / "rank0_ascend_pt")
    rank1 = shared_summary(ASCEND / "level1" / "rank1_ascend_pt")
    assert "rank: 0 -> 1" in changes(None, None, rank0, rank1)[0]


def test_two_runs_of_one_command_differ_in_nothing_but_their_process_ids():
    a = {"source": "train.py v1", "arguments": {"command": ["python", "train.py"], "pids": [18425]}}
    b = {"source": "train.py v1", "arguments": {"command": ["python", "train.py"], "pids": [18690]}}
    assert changes(a, b) == ([], {})
    c = dict(b, source="train.py v2")  # the script itself changed: said once, as the script's source
    assert changes(a, c)[0] == ["script source"]


def test_a_p_value_too_small_for_three_decimals_is_said_as_a_bound():
    assert [p_value_text(p) for p in (1e-12, 0.00049, 0.0291, 0.5)] == ["p<0.001", "p<0.001", "p=0.029", "p=0.500"]


def test_a_variable_recorded_unset_as_empty_is_no_fix_applied():
    # torch_npu's metadata says PYTORCH_NPU_ALLOC_CONF '' (unset); a trace without metadata says nothing
    from npumagic.analysis.changed import applied_fix

    s, asked = shared_summary(ASCEND / "level1"), []
    assert applied_fix({"environment": {"PYTORCH_NPU_ALLOC_CONF": ""}}, {"environment": {"OTHER": "1"}}, s, s,
                       lambda: asked.append(1) or []) is None
    assert not asked  # nothing that could name a fix moved: the findings are not even asked for
