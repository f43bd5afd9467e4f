"""compare(): statistics by hand, and the per-kernel table on the shared Ascend ranks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import npumagic
from npumagic.analysis.compare import changes, rank_test

from ..conftest import ASCEND, need
from .test_advice import _summary_with_steps


def test_rank_test_exact_p_values_by_hand():
    # 3 vs 3, complete separation: 2 of the C(6,3)=20 arrangements are as extreme
    assert rank_test([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)
    assert rank_test([1, 2, 3, 4], [5, 6, 7, 8]) == pytest.approx(2 / 70)
    assert rank_test([1, 2, 3], [1, 2, 3]) == pytest.approx(1.0)


def test_three_steps_a_side_never_look_certain():
    cmp = npumagic.compare(_summary_with_steps([20, 21, 22]), _summary_with_steps([10, 10.5, 11]), "a", "b")
    assert cmp.speedup == pytest.approx(2.0, rel=0.01)
    assert not cmp.significant
    assert "no difference beyond noise" in cmp.sentence() and "--steps 10" in cmp.sentence()


def test_one_step_a_side_has_no_interval():
    cmp = npumagic.compare(_summary_with_steps([20]), _summary_with_steps([10]))
    assert cmp.ci == (0.0, float("inf")) and not cmp.significant


def test_a_clear_change_with_enough_steps_is_real():
    rng = np.random.default_rng(1)
    a = _summary_with_steps(list(20 + rng.normal(0, 0.3, 8)))
    b = _summary_with_steps(list(17 + rng.normal(0, 0.3, 8)))
    cmp = npumagic.compare(a, b, "a", "b")
    assert cmp.significant and cmp.ci[0] > 1
    assert cmp.sentence().startswith("b is 15% faster than a")


def test_ascend_rank_comparison_reconciles_with_each_summary():
    a = npumagic.analyze(need(ASCEND / "level1" / "rank0_ascend_pt"))
    b = npumagic.analyze(need(ASCEND / "level1" / "rank1_ascend_pt"))
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
    a = npumagic.analyze(need(ASCEND / "level1" / "rank0_ascend_pt"))
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
    assert "-train(0.002)" in diffs["cell source"] and "+train(0.0)" in diffs["cell source"]
