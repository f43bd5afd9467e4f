"""The Kineto reader on genuine GPU traces (V100, A100 + NCCL, A100 + cuda_sync)."""

from __future__ import annotations

import collections
import gzip
import json
import warnings
from pathlib import Path

import pytest

import npumagic
from npumagic.analysis.sources.kineto import NOT_WORK

from ..conftest import CUDA, need, sampled, shared_summary, shared_trace
from ..fuzz_corpus import kineto_events, kineto_trace


@pytest.fixture(scope="module")
def v100():
    return shared_trace(CUDA / "ns_resolution")


def test_profiler_steps_become_the_step_table(v100):
    assert v100.steps["step"].tolist() == [101, 102, 103, 104, 105]
    assert v100.meta.backend == "cuda"
    assert v100.meta.device_name == "Tesla V100-SXM2-32GB"


def test_every_kernel_and_copy_is_read(v100):
    raw = json.load(gzip.open(next((CUDA / "ns_resolution").glob("*.gz"))))["traceEvents"]
    kernels = sum(1 for e in raw if e.get("cat") == "kernel" and e.get("ph") == "X")
    copies = sum(1 for e in raw if e.get("cat") in ("gpu_memcpy", "gpu_memset"))
    kinds = v100.events["kind"].value_counts()
    assert kinds["kernel"] + kinds["comm"] == kernels
    assert kinds["memcpy"] == copies


def test_device_events_keep_their_stream_and_launch_correlation(v100):
    kernels = v100.events[v100.events["kind"] == "kernel"]
    assert (kernels["stream"] >= 0).all()
    assert (kernels["correlation"] > 0).all()
    assert kernels["lane"].astype(str).str.match(r"GPU \d+/Stream \d+").all()


def test_float_timestamps_keep_sub_microsecond_precision(v100):
    raw = json.load(gzip.open(next((CUDA / "ns_resolution").glob("*.gz"))))["traceEvents"]
    first = next(e for e in raw if e.get("name", "").startswith("ProfilerStep#101") and e.get("cat") == "user_annotation")
    step = v100.steps.iloc[0]
    assert abs(step["start_ns"] - first["ts"] * 1000) < 1  # no 256 ns float64 rounding of ts*1000


def test_nccl_kernels_are_communication():
    summary = shared_summary(CUDA / "nccl")
    assert "AllReduce" in set(summary.comm["op"])
    assert summary.steps["communication_us"].gt(0).all()
    assert (summary.steps["overlapped_us"] <= summary.steps["communication_us"]).all()


def test_cuda_syncs_are_counted():
    trace = shared_trace(CUDA / "alexnet_sync")
    syncs = trace.events[trace.events["kind"] == "sync"]
    device_syncs = syncs[syncs["device"] >= 0]
    assert len(device_syncs) == 41  # the trace's cuda_sync events
    summary = npumagic.summarize(trace)
    assert summary.syncs["count"].sum() > 0
    assert summary.steps["sync_us"].iloc[0] > 0


def test_a_trace_without_profiler_steps_is_one_step():
    trace = shared_trace(CUDA / "alexnet_sync")
    assert len(trace.steps) == 1
    assert trace.meta.steps_inferred == [0]


# -- every schema torch has written --------------------------------------------------------
LEGACY = CUDA / "legacy_kineto"


def _complete_events_by_category(path) -> collections.Counter:
    """The trace's complete ("X") events counted by category, read with the standard library."""
    events = json.load(gzip.open(path))["traceEvents"]
    return collections.Counter(e.get("cat") for e in events if e.get("ph") == "X")


@pytest.mark.parametrize("name", sampled(["resnet50_nw4", "resnet50_nw0"]))
def test_legacy_capitalised_schema_is_read_with_its_profiler_steps(name):
    path = need(LEGACY / f"{name}.pt.trace.json.gz")
    trace = npumagic.load(path)
    kinds = trace.events["kind"].value_counts()
    count = _complete_events_by_category(path).__getitem__
    assert trace.steps["step"].tolist() == [5, 6, 7, 8, 9, 10]
    assert kinds["kernel"] + kinds["comm"] == count("Kernel")
    assert kinds["memcpy"] == count("Memcpy") + count("Memset")
    assert kinds["runtime"] + kinds["sync"] == count("Runtime")
    assert kinds["host_op"] + kinds["annotation"] + kinds["dataloader"] == count("Operator")
    assert trace.meta.backend == "cuda"


def test_legacy_device_work_keeps_stream_and_correlation():
    trace = shared_trace(LEGACY / "resnet50_nw0.pt.trace.json.gz")
    kernels = trace.events[trace.events["kind"] == "kernel"]
    runtime = trace.events[trace.events["kind"] == "runtime"]
    assert set(kernels["stream"]) == {7}
    launched = kernels["correlation"].isin(runtime["correlation"])
    assert launched.mean() > 0.9
    # the rest were launched before the profiler started: they run before every traced launch's kernel
    assert kernels.loc[~launched, "ts_ns"].max() < kernels.loc[launched, "ts_ns"].min()


def test_a_trace_without_device_properties_is_not_called_cpu():
    trace = shared_trace(LEGACY / "resnet50_nw0.pt.trace.json.gz")
    assert trace.meta.device_name == "NVIDIA GPU (model not recorded)"


def test_legacy_autograd_api_trace_without_profiler_steps_is_cut_by_its_optimizer_steps():
    trace = npumagic.load(need(LEGACY / "resnet50_autograd_api_nw0.pt.trace.json.gz"))
    ends = trace.events.loc[trace.events["name"] == "Optimizer.step#SGD.step"]
    assert len(trace.steps) == len(ends) == 6  # one step per iteration, not one for the whole trace
    assert trace.meta.steps_from == {0: "Optimizer.step#SGD.step"} and "steps_inferred" not in trace.meta.as_dict()
    assert "one inferred step" not in str(npumagic.summarize(trace))


def test_rocm_trace_is_labelled_rocm_with_hip_syncs():
    trace = shared_trace(CUDA / "rocm_mi250")
    assert trace.meta.backend == "rocm"
    assert trace.meta.device_name == "AMD Radeon Graphics"
    syncs = trace.events[(trace.events["kind"] == "sync") & (trace.events["device"] < 0)]
    assert "hipDeviceSynchronize" in set(syncs["name"].astype(str))


def test_non_blocking_stream_wait_is_not_a_sync(v100):
    waits = v100.events[v100.events["name"] == "cudaStreamWaitEvent"]
    assert len(waits) > 0
    assert (waits["kind"] == "runtime").all()


def test_an_unknown_schema_lists_the_categories_it_found(tmp_path):
    path = tmp_path / "other.pt.trace.json"
    events = [{"ph": "X", "cat": "gpu_op", "name": "k", "ts": i, "dur": 1, "pid": 0, "tid": 0} for i in range(3)]
    events.append({"ph": "X", "cat": "host_call", "name": "f", "ts": 0, "dur": 5, "pid": 1, "tid": 1})
    path.write_text(json.dumps({"traceEvents": events}))
    with pytest.raises(npumagic.TraceError, match=r"other\.pt\.trace\.json: no profiler events found "
                                                  r"\(categories in the file: gpu_op x3, host_call x1\)"):
        npumagic.load(path)


def test_ids_past_32_bits_are_kept_whole(tmp_path):
    # the reader keeps a chunk's ids as int32 where they fit: ids that do not must survive as read
    big = 2**40 + 7
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 5, "pid": 1, "tid": big},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 12, "dur": 1, "pid": 1,
               "tid": big, "args": {"correlation": big + 1}},
              {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 20, "dur": 3, "pid": 0, "tid": 7,
               "args": {"device": 0, "stream": 2**33, "correlation": big + 1}}]
    path = tmp_path / "big_ids.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    ev = npumagic.load(path).events.set_index("name")
    assert ev.loc["cudaLaunchKernel", "correlation"] == ev.loc["gemm", "correlation"] == big + 1
    assert ev.loc["gemm", "stream"] == 2**33 and ev["stream"].dtype == "int64"
    assert str(ev.loc["aten::mm", "lane"]).endswith(f"/Thread {big}")


def _as_rank(src, rank, dst, rename=None):
    trace = json.load(gzip.open(src))
    trace["distributedInfo"] = {"rank": rank, "world_size": 2, "backend": "nccl"}
    for e in trace["traceEvents"]:
        if rename and e.get("name") in rename:
            e["name"] = rename[e["name"]]
    dst.write_text(json.dumps(trace))


def test_a_folder_of_two_ranks_with_different_operators_is_one_job(tmp_path):
    # GIVEN two ranks' traces whose operator names differ (rank 1 ran GELU where rank 0 ran ReLU)
    src = next(need(CUDA / "alexnet_sync").glob("*.json.gz"))
    _as_rank(src, 0, tmp_path / "rank0.pt.trace.json")
    _as_rank(src, 1, tmp_path / "rank1.pt.trace.json", rename={"aten::relu": "aten::gelu", "aten::relu_": "aten::gelu_"})
    # WHEN the folder is read THEN each rank holds exactly its own file's events, names kept
    job = npumagic.load(tmp_path)
    assert job.ranks == [0, 1] and job.events["name"].dtype == "category"
    for rank, name in ((0, "rank0"), (1, "rank1")):
        alone = npumagic.load(tmp_path / f"{name}.pt.trace.json").events
        mine = job.events[job.events["rank"] == rank]
        assert sorted(mine["name"].astype(str)) == sorted(alone["name"].astype(str))
    assert "aten::gelu_" in set(job.events["name"].astype(str)) - set(npumagic.load(src).events["name"].astype(str))
    assert npumagic.summarize(job).ranks["rank"].tolist() == [0, 1]


@pytest.mark.parametrize("files, why", [
    (["legacy_kineto/resnet50_nw0.pt.trace.json.gz", "legacy_kineto/resnet50_nw4.pt.trace.json.gz"], "rank 0 step 5"),
    (["legacy_kineto/resnet50_nw0.pt.trace.json.gz", "legacy_kineto/resnet50_autograd_api_nw0.pt.trace.json.gz"],
     "rank 0, one of them without ProfilerStep# marks"),
    (["ns_resolution/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "rocm_mi250/mi250_minitoy_train_ROCm6_2_kineto.json.gz"],
     r"rank 0, on different devices \(.*V100.*\)"),
], ids=["same-steps", "one-without-steps", "different-devices"])
def test_traces_of_separate_runs_in_one_folder_are_refused_not_mixed(tmp_path, files, why):
    for name in files:
        (tmp_path / need(CUDA / name).name).write_bytes((CUDA / name).read_bytes())
    with pytest.raises(npumagic.TraceError, match=f"{tmp_path}: holds traces of separate runs: .* both record {why}"):
        npumagic.load(tmp_path)


def test_traces_of_separate_runs_in_two_subfolders_are_blamed_on_the_folder_holding_both(tmp_path):
    # GIVEN a folder holding the magics' output: one run's trace in each run's folder
    src = need(CUDA / "legacy_kineto")
    for run, name in (("run1", "resnet50_nw0.pt.trace.json.gz"), ("run2", "resnet50_nw4.pt.trace.json.gz")):
        (tmp_path / "npumagic_runs" / run).mkdir(parents=True)
        (tmp_path / "npumagic_runs" / run / name).write_bytes((src / name).read_bytes())
    # WHEN it is read THEN the error names the folder that holds both files, and each by its subfolder
    with pytest.raises(npumagic.TraceError) as raised:
        npumagic.load(tmp_path)
    assert str(raised.value).startswith(f"{tmp_path / 'npumagic_runs'}: holds traces of separate runs: "
                                        "run1/resnet50_nw0.pt.trace.json.gz and run2/resnet50_nw4.pt.trace.json.gz")
    assert str(raised.value).endswith("A folder is read as one job (a trace per rank, or per profiling cycle): "
                                      "analyse each run's folder on its own")  # the Ascend reader's words


def test_one_step_number_on_two_separate_spans_is_refused(tmp_path):
    # GIVEN ProfilerStep#2 renamed #1: one number, two steps apart in time
    trace = json.load(gzip.open(next(need(CUDA / "rocm_mi250").glob("*.gz"))))
    for e in trace["traceEvents"]:
        if e.get("name") == "ProfilerStep#2":
            e["name"] = "ProfilerStep#1"
    path = tmp_path / "dup.pt.trace.json"
    path.write_text(json.dumps(trace))
    # THEN it is one error naming the file and the step, not step 102 stretched over both
    with pytest.raises(npumagic.TraceError, match=r"dup\.pt\.trace\.json: ProfilerStep#1 marks 2 separate spans"):
        npumagic.load(path)


# -- the accelerators Kineto writes: its ActivityType categories ---------------------------------
MTIA = CUDA / "hta_more" / "mtia_trace_single_rank"


def test_an_mtia_trace_is_read_as_mtia_device_work():
    # GIVEN Meta MTIA's trace (device work in mtia_ccp_events, launches in mtia_runtime)
    summary = shared_summary(need(MTIA))
    # THEN its device work is read (it was dropped: a CPU run labelled "cuda on ARTEMIS"), the
    # run is an MTIA run, its dma_* events are copies, and the temporal breakdown is HTA 0.5.0's
    # (idle 42.39%, compute 54.81%, non-compute 2.80%)
    assert summary.meta["backend"] == "mtia" and "MTIA" in summary.meta["device_name"]
    assert set(summary.kernels["core"]) == {"mtia"}
    step = summary.steps.iloc[0]
    assert step["computing_us"] > 7e6 and step["memcpy_us"] > 3e5
    t = summary.temporal.iloc[0]
    assert [t["idle_pct"], t["compute_pct"], t["non_compute_pct"]] == pytest.approx([42.39, 54.81, 2.80], abs=0.1)


def _one_step(tmp_path, category: str, name: str = "call") -> Path:
    events = [*kineto_events(), {"ph": "X", "cat": category, "name": name, "pid": 1, "tid": 1, "ts": 1020.0,
                                 "dur": 5.0, "args": {"correlation": 3}}]
    path = tmp_path / f"{category}.pt.trace.json"
    path.write_text(json.dumps(kineto_trace(traceEvents=events)))
    return path


@pytest.mark.parametrize("category", ["cuda_runtime", "cuda_driver", "xpu_runtime", "xpu_driver", "mtia_runtime",
                                      "privateuse1_runtime", "privateuse1_driver", "glow_runtime", "hpu_op"])
def test_every_host_runtime_category_kineto_writes_is_a_runtime_call(tmp_path, category):
    trace = npumagic.load(_one_step(tmp_path, category))
    assert trace.events.loc[trace.events["name"] == "call", "kind"].tolist() == ["runtime"]


@pytest.mark.parametrize("category", sorted(NOT_WORK))
def test_kinetos_categories_that_are_no_work_are_left_out_without_a_word(tmp_path, category):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = npumagic.load(_one_step(tmp_path, category))
    assert "call" not in set(trace.events["name"].astype(str))


def test_a_device_category_npumagic_does_not_know_is_said_not_dropped_silently(tmp_path):
    # GIVEN an accelerator's device events in a category no Kineto release npumagic knows writes
    path = _one_step(tmp_path, "npu_kernel", "MatMul")
    # THEN the reader says it left them out, naming the category
    with pytest.warns(UserWarning, match=r"1 events of categories npumagic does not know were left out \(npu_kernel x1\)"):
        npumagic.load(path)
