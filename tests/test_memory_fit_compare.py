"""Will it fit and the memory comparison, on real CPU runs: a small model profiled with
profile_memory=True at batch sizes 8 and 16 (each in its own process: the CPU allocator's totals
count from the process's first profiled allocation) predicts the peak measured at 32 within 10%;
``memcompare`` finds batch 32 needing more than batch 8, and a second run at 8 the same."""

from __future__ import annotations

import json

import pytest

from npumagic.cli import main

from .memory_runs import record_batches

@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    # wide activations over few parameters: the activations make the peak at every batch size measured (with
    # more parameters, batch 8's peak is at the gradients and the line through 8 and 16 misses 32 by a third)
    model = "torch.nn.Sequential(torch.nn.Linear(4, 8192), torch.nn.ReLU(), torch.nn.Linear(8192, 1))"
    return record_batches(tmp_path_factory.mktemp("batches"), model, 4, {"b8": 8, "b16": 16, "b32": 32, "b8_again": 8})


def _json(capsys, *argv) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_two_batch_sizes_predict_the_third_within_ten_percent(runs, capsys):
    measured = _json(capsys, "memory", str(runs["b32"]))
    # the measured step peak: the steps' highest after the first, from the run's own steps table
    peak_32 = max(s["peak_allocated_bytes"] for s in measured["steps"][1:])
    doc = _json(capsys, "memfit", f"8={runs['b8']},16={runs['b16']}", "--at", "32", "--capacity-gib", "0.01")
    assert doc["per_item_bytes"] > 0 and doc["interval_bytes"] is None  # two sizes: the line alone
    assert doc["predicted_allocated_bytes"] == pytest.approx(peak_32, rel=0.10)
    # the batch's part is a real share of the peak here, so 10% is no foregone conclusion
    assert doc["per_item_bytes"] * 32 > 0.3 * peak_32
    assert doc["fits"] is True and doc["largest_size"] > 32 and "the step's peak" in doc["assumption"]
    assert main(["memfit", f"8={runs['b8']},16={runs['b16']}", "--at", "32", "--capacity-gib", "0.01"]) == 0
    assert capsys.readouterr().out.startswith("FITS in 10.24 MiB at size 32")


def test_three_sizes_give_a_prediction_interval_and_a_capacity_too_small_does_not_fit(runs, capsys):
    sizes = f"8={runs['b8']},16={runs['b16']},32={runs['b32']}"
    doc = _json(capsys, "memfit", sizes, "--at", "4096", "--capacity-gib", "0.01")
    low, high = doc["interval_bytes"]
    assert low <= doc["predicted_allocated_bytes"] <= high and doc["fits"] is False


def test_a_fit_needs_two_sizes(runs, capsys):
    assert main(["memfit", f"8={runs['b8']},8={runs['b8_again']}", "--at", "32"]) == 2
    assert "two or more different sizes" in capsys.readouterr().err


def test_a_larger_batch_needs_more_memory_and_the_same_batch_the_same(runs, capsys):
    more = _json(capsys, "memcompare", str(runs["b8"]), str(runs["b32"]))
    assert more["verdict"] == "higher" and more["per_step"] and more["delta_bytes"] > 0
    assert more["operators"][0]["delta_bytes"] > 0  # the activations' operators allocate more a step
    same = _json(capsys, "memcompare", str(runs["b8"]), str(runs["b8_again"]))
    assert same["verdict"] == "same" and abs(same["delta_bytes"]) < same["floor_bytes"]


def test_compare_sets_the_step_peaks_beside_the_step_times_as_memcompare_does(runs, capsys):
    # GIVEN batch 8 and batch 32, each profiled with memory in its own process
    mem = _json(capsys, "memcompare", str(runs["b8"]), str(runs["b32"]))
    doc = _json(capsys, "compare", str(runs["b8"]), str(runs["b32"]))
    # THEN compare's memory is memcompare's verdict on the same step peaks (Welch), in JSON and text
    assert doc["memory"]["verdict"] == mem["verdict"] == "higher" and doc["memory"]["per_step"]
    assert doc["memory"]["delta_bytes"] == pytest.approx(mem["delta_bytes"])
    assert doc["memory"]["interval_bytes"] == pytest.approx(mem["interval_bytes"])
    assert main(["compare", str(runs["b8"]), str(runs["b32"])]) == 0
    assert "b32.json needs MORE memory than b8.json" in capsys.readouterr().out
    same = _json(capsys, "compare", str(runs["b8"]), str(runs["b8_again"]))
    assert same["memory"]["verdict"] == "same"
