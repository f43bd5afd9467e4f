"""The Ascend advice rules (msprof-analyze parity) on the genuine shared torch_npu outputs.

Where no shared sample shows a problem, the rule is tested on a copy of level1/rank0 changed
minimally (each test says what it changed), and shown silent on the unchanged sample."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

import npumagic
from npumagic.analysis.run_facts import RunFacts
from npumagic.analysis import thresholds as T

from ..conftest import ASCEND, ASCEND_RANKS, need, shared_summary

LEVEL1 = ASCEND / "level1" / "rank0_ascend_pt"
OUT = "ASCEND_PROFILER_OUTPUT"


def _advise(path: Path, **kwargs) -> npumagic.Advice:
    """The advice on ``path``: a changed copy is read anew, a shared sample once per process."""
    return npumagic.advise(shared_summary(path) if path.is_relative_to(ASCEND) else npumagic.analyze(path), **kwargs)


def _rule(advice, rule_id: str):
    found = [f for f in advice if f.rule == rule_id]
    return found[0] if found else None


def _copy(tmp_path: Path, src: Path = LEVEL1) -> Path:
    """A writable copy of a shared rank directory (the shared files are read-only)."""
    dst = tmp_path / need(src).name
    shutil.copytree(src, dst, copy_function=shutil.copyfile, ignore=shutil.ignore_patterns("*.png"))
    for p in [dst, *dst.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def _edit_kernels(rank_dir: Path, edit) -> None:
    """Rewrite kernel_details.csv row by row through ``edit(header, rows)`` (the csv module keeps
    the vendor's quoting and stray tabs)."""
    path = rank_dir / OUT / "kernel_details.csv"
    with path.open(newline="") as fh:
        header, *rows = list(csv.reader(fh))
    edit(header, rows)
    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows([header, *rows])


def _edit_trace(rank_dir: Path, edit) -> None:
    path = rank_dir / OUT / "trace_view.json"
    events = json.loads(path.read_text())
    edit(events)
    path.write_text(json.dumps(events))


def _edit_env(rank_dir: Path, **values: str) -> None:
    path = rank_dir / "profiler_metadata.json"
    meta = json.loads(path.read_text())
    meta["ENV_VARIABLES"].update(values)
    path.write_text(json.dumps(meta))


# ---- the four findings msprof-analyze's advisor reports on level1/rank0 --------------------------------
# msprof-analyze 26.2.0 `advisor all` byte-alignment table per sample: op, total size (B), duration (us),
# abnormal duration (us), bandwidth (GB/s).
MSPROF_BYTE_ALIGNMENT = {
    ("level1", 0): [("hcom_allReduce__586_0_1", 28647232, 1816.8363, 237.9447, 15.7676),
                    ("hcom_allReduce__586_3_1", 17267200, 1204.6041, 159.0632, 14.3343)],
    ("level1", 1): [("hcom_allReduce__586_0_1", 28647232, 1825.8965, 263.9253, 15.6894),
                    ("hcom_allReduce__586_3_1", 17267200, 1189.4439, 171.8235, 14.5170)],
    ("level2", 0): [("hcom_allReduce__271_0_1", 28647232, 1816.8563, 241.0048, 15.7675),
                    ("hcom_allReduce__271_3_1", 17267200, 2037.1608, 279.8856, 8.4761)],
    ("level2", 1): [("hcom_allReduce__271_0_1", 28647232, 1849.2968, 265.8053, 15.4909),
                    ("hcom_allReduce__271_3_1", 17267200, 2051.9810, 294.8859, 8.4149)],
}


@pytest.mark.parametrize("level,rank", list(MSPROF_BYTE_ALIGNMENT), ids=lambda v: str(v))
def test_byte_alignment_matches_msprof_analyze(level, rank):
    finding = _rule(_advise(need(ASCEND / level / f"rank{rank}_ascend_pt")), "byte_alignment")
    assert finding is not None and finding.category == "communication"
    got = [(o["op"], o["size_bytes"], o["duration_us"], o["misaligned_us"], o["bandwidth_gbps"])
           for o in finding.evidence["ops"]]
    want = MSPROF_BYTE_ALIGNMENT[(level, rank)]
    assert [g[:2] for g in got] == [w[:2] for w in want]
    for g, w in zip(got, want):
        assert g[2:] == pytest.approx(w[2:], rel=1e-5)  # msprof sums float us, npumagic integer ns
    assert "28,647,232 B" in finding.title or level != "level1"


def test_level1_rank0_has_the_four_msprof_findings_with_their_figures():
    advice = _advise(need(LEVEL1))
    dynamic = _rule(advice, "dynamic_shape")
    assert dynamic.evidence["operators"] == 187  # kernel_details.csv: 187 compute rows, all "dynamic"
    assert "torch_npu.npu.set_compile_mode(jit_compile=False)" in dynamic.fix
    affinity = _rule(advice, "affinity_api")
    [api] = affinity.evidence["apis"]
    assert api["api"] == "torch_npu.optim.NpuFusedSGD" and api["count"] == 1
    assert api["where"].endswith("imagenet_script/main.py(366): train")
    assert "main.py(366)" in affinity.where
    env = _rule(advice, "environment")
    assert [v["variable"] for v in env.evidence["variables"]] == [
        "ACLNN_CACHE_LIMIT", "HOST_CACHE_CAPACITY", "PYTORCH_NPU_ALLOC_CONF"]
    assert "ACLNN_CACHE_LIMIT=100000" in env.fix and "expandable_segments:True" in env.fix
    assert _rule(advice, "byte_alignment") is not None


def test_aicore_performance_lists_msprofs_vector_operators():
    finding = _rule(_advise(need(LEVEL1)), "aicore_performance")
    top = [(r["op"], r["shape"], round(100 * r["optimization"], 1)) for r in finding.evidence["optimization"][:5]]
    # msprof-analyze "Vector算子性能分析": optimisation space 68.2%, 67.4%, 66.9%, 66.9%, 66.6%
    assert top[:2] == [("trans_TransData_23", "200,12,16,8", 68.2), ("trans_TransData_17", "216,24,16,8", 67.4)]
    assert sorted(t[2] for t in top[2:4]) == [66.9, 66.9] and top[4] == ("trans_TransData_17", "432,16,16,8", 66.6)
    bound = [(r["op"], r["shape"], r["bound"]) for r in finding.evidence["bound"][:3]]
    assert bound[0][0] == "aclnnForeachAddListV2_ForeachAddListV2_ForeachAddList" and bound[0][2] == "vec_mte2_mte3"
    assert bound[1:] == [("trans_TransData_24", "32,3,224,224", "vec_mte2_mte3"),
                         ("trans_TransData_0", "32,3,224,224", "vec_mte2_mte3")]


def test_aicore_performance_is_silent_without_pipe_metrics():
    assert _rule(_advise(need(ASCEND / "level0" / "rank0_ascend_pt")), "aicore_performance") is None


@pytest.mark.parametrize("rank_dir", ASCEND_RANKS, ids=lambda p: f"{p.parent.name}-{p.name}")
def test_no_rule_fires_that_msprof_leaves_silent(rank_dir):
    # msprof-analyze reports neither small packets, contention, dispatch, SyncBN, GC nor memory ops here
    rules = {f.rule for f in _advise(need(rank_dir))}
    assert not rules & {"small_packets", "bandwidth_contention", "op_dispatch", "syncbn", "gc", "conjectured_gc",
                        "memory_operators", "synchronize_stream", "aicpu", "block_dim", "operator_no_bound"}


def test_level0_has_no_dynamic_shape_finding_without_op_state():
    # level 0 writes no "OP State" column: msprof-analyze still says "all dynamic"; npumagic has no evidence
    assert _rule(_advise(need(ASCEND / "level0" / "rank0_ascend_pt")), "dynamic_shape") is None


# ---- rules tested on a minimally changed copy ----------------------------------------------------------
def test_dynamic_shape_is_silent_when_one_operator_is_static(tmp_path):
    rank = _copy(tmp_path)  # change: the first operator's OP State "dynamic" -> "static"
    _edit_kernels(rank, lambda h, rows: rows[0].__setitem__(h.index("OP State"), "static"))
    assert _rule(_advise(rank), "dynamic_shape") is None


def test_small_sdma_packets(tmp_path):
    rank = _copy(tmp_path)  # change: one allReduce's SDMA transit size 28.6 MB -> 2 MB (1 of 4 calls = 25%)
    path = rank / OUT / "communication.json"
    data = json.loads(path.read_text())
    op = next(k for k in data["step50"]["collective"] if k.startswith("hcom_allReduce__586_0_1"))
    data["step50"]["collective"][op]["Communication Bandwidth Info"]["SDMA"]["Transit Size(MB)"] = 2.0
    path.write_text(json.dumps(data))
    finding = _rule(_advise(rank), "small_packets")
    assert finding.evidence["link"] == "SDMA" and finding.evidence["small_calls"] == 1
    assert finding.evidence["small_ratio"] == 0.25 > T.SMALL_PACKET_RATIO
    assert "bucket_cap_mb" in finding.fix


def test_bandwidth_contention_with_a_matmul_beside_a_slow_allreduce(tmp_path):
    rank = _copy(tmp_path)
    # change: one MatMulV2 task moved to start 1 ms into hcom_allReduce__586_3_1 (SDMA 14.33 GB/s < 0.8 x 18)

    def move(h, rows):
        row = next(r for r in rows if r[h.index("Type")] == "MatMulV2")
        row[h.index("Start Time(us)")] = "1736408883817026.238\t"
    _edit_kernels(rank, move)
    finding = _rule(_advise(rank), "bandwidth_contention")
    assert [o["op"] for o in finding.evidence["ops"]] == ["hcom_allReduce__586_3_1"]
    assert finding.evidence["ops"][0]["bandwidth_gbps"] == pytest.approx(14.3343, abs=1e-4)  # communication.json


def test_environment_is_silent_when_set_as_msprof_advises(tmp_path):
    rank = _copy(tmp_path)  # change: the three variables set to msprof-analyze's suggestions
    _edit_env(rank, ACLNN_CACHE_LIMIT="100000", HOST_CACHE_CAPACITY="20",
              PYTORCH_NPU_ALLOC_CONF="expandable_segments:True")
    assert _rule(_advise(rank), "environment") is None


def test_a_notebook_run_names_the_task_queue_torch_npu_turned_off():
    # the run record's snapshot: torch_npu sets TASK_QUEUE_ENABLE=0 itself in IPython/Jupyter
    finding = _rule(_advise(need(LEVEL1), facts=RunFacts(environment={"TASK_QUEUE_ENABLE": "0"})), "environment")
    item = next(v for v in finding.evidence["variables"] if v["variable"] == "TASK_QUEUE_ENABLE")
    assert "TASK_QUEUE_ENABLE=2" in item["fix"] and "IPython/Jupyter" in item["fix"]
    assert _rule(_advise(need(LEVEL1), facts=RunFacts(environment={"TASK_QUEUE_ENABLE": "2"})), "environment").evidence[
        "variables"][-1]["variable"] != "TASK_QUEUE_ENABLE"


def test_launch_blocking_is_found_by_the_synchronize_and_environment_rules(tmp_path):
    rank = _copy(tmp_path)  # change: ASCEND_LAUNCH_BLOCKING "" -> "1" in profiler_metadata.json
    _edit_env(rank, ASCEND_LAUNCH_BLOCKING="1")
    advice = _advise(rank)
    sync = _rule(advice, "synchronize_stream")
    assert sync.evidence["ascend_launch_blocking"] and "unset ASCEND_LAUNCH_BLOCKING" in sync.fix
    assert sync.evidence["node_launches"] == 191 and sync.evidence["synchronize_calls"] == 7
    assert "ASCEND_LAUNCH_BLOCKING" in [v["variable"] for v in _rule(advice, "environment").evidence["variables"]]


def test_an_ai_cpu_operator_gets_the_vendors_dtype_advice_only(tmp_path):
    rank = _copy(tmp_path)
    # change: one 53.7 us TransData task reported as an AI_CPU task with a DOUBLE input

    def to_aicpu(h, rows):
        row = next(r for r in rows if r[h.index("Name")] == "trans_TransData_0")
        row[h.index("Accelerator Core")] = "AI_CPU"
        row[h.index("Input Data Types")] = "DOUBLE"
    _edit_kernels(rank, to_aicpu)
    finding = _rule(_advise(rank), "aicpu")
    assert finding.evidence["ai_cpu_ops"] == 1 and finding.evidence["ai_cpu_us"] == pytest.approx(53.741)
    assert "float64 (double) tensors to float32" in finding.fix
    assert "int64" not in finding.fix.lower()  # int64 runs on AI Core for most ops: no blanket advice


def test_ai_cpu_tasks_under_20_us_are_not_reported(tmp_path):
    rank = _copy(tmp_path)  # change: one 6.5 us TransData task reported as AI_CPU

    def to_aicpu(h, rows):
        next(r for r in rows if r[h.index("Name")] == "trans_TransData_1")[h.index("Accelerator Core")] = "AI_CPU"
    _edit_kernels(rank, to_aicpu)
    assert _rule(_advise(rank), "aicpu") is None


def _static(h, rows):
    for r in rows:
        r[h.index("OP State")] = "static"


def test_operator_no_bound_once_shapes_are_static(tmp_path):
    rank = _copy(tmp_path)  # change: every OP State "dynamic" -> "static" (msprof skips dynamic-shape runs)
    _edit_kernels(rank, _static)
    finding = _rule(_advise(rank), "operator_no_bound")
    assert finding.evidence["total_us"] > 0
    assert all(op["best_pipe"] <= T.NO_BOUND_PIPE_RATIO for op in finding.evidence["ops"])


def test_block_dim_needs_the_core_count(tmp_path):
    rank = _copy(tmp_path)  # change: static OP State, then a CANN info.json with 24 AI Cores / 48 vector cores
    _edit_kernels(rank, _static)
    assert _rule(_advise(rank), "block_dim") is None  # no core count in the export: say nothing
    device = rank / "PROF_000001_20250109_ascend" / "device_0"
    device.mkdir(parents=True)
    (device / "info.json.0").write_text(json.dumps({"DeviceInfo": [{"id": 0, "ai_core_num": 24, "aiv_num": 48}]}))
    finding = _rule(_advise(rank), "block_dim")
    assert finding.evidence["ai_core_num"] == 24
    assert all(op["block"] % op["cores"] for op in finding.evidence["ops"])


def test_operator_dispatch_from_twenty_online_compilations(tmp_path):
    rank = _copy(tmp_path)  # change: one more aclopCompileAndExecute call (19 -> 20)

    def add(events):
        call = next(e for e in events if e.get("name") == "AscendCL@aclopCompileAndExecute")
        events.append(dict(call, ts=f"{float(call['ts']) + float(call['dur']) + 1:.3f}"))
    _edit_trace(rank, add)
    finding = _rule(_advise(rank), "op_dispatch")
    assert finding.evidence["compile_calls"] == 20
    assert "torch_npu.npu.set_compile_mode(jit_compile=False)" in finding.fix


def _top_level_aten(events):
    aten = sorted((e for e in events if e.get("cat") == "cpu_op" and e["name"].startswith("aten::")),
                  key=lambda e: float(e["ts"]))
    top, end = [], 0.0
    for e in aten:
        if float(e["ts"]) >= end:
            top.append(e)
        end = max(end, float(e["ts"]) + float(e["dur"]))
    return top


def test_an_aten_sequence_gets_its_affinity_api_and_source_line(tmp_path):
    rank = _copy(tmp_path)  # change: three consecutive top-level aten ops renamed chunk, silu, mul

    def rename(events):
        top = _top_level_aten(events)
        for e, name in zip(top[40:43], ("aten::chunk", "aten::silu", "aten::mul")):
            e["name"] = name
    _edit_trace(rank, rename)
    finding = _rule(_advise(rank), "affinity_api")
    swiglu = next(a for a in finding.evidence["apis"] if a["api"] == "torch_npu.npu_swiglu")
    assert swiglu["count"] == 1 and "main.py(" in swiglu["where"]
    assert "torch_npu.npu_swiglu" in finding.fix


def test_fusible_operator_sequences(tmp_path):
    rank = _copy(tmp_path)
    # change: the first 18 consecutive compute tasks whose 3-task windows each keep the device busy under
    # 40% of their span get the names and shapes of their first three (6 repeats of one sequence)

    def repeat(h, rows):
        cols = [h.index(c) for c in ("Name", "Input Shapes", "Output Shapes")]
        start = [float(r[h.index("Start Time(us)")]) for r in rows]
        dur = [float(r[h.index("Duration(us)")]) for r in rows]
        core = [r[h.index("Accelerator Core")] for r in rows]
        first = next(i for i in range(len(rows) - 18) if "HCCL" not in core[i:i + 18] and all(
            sum(dur[j:j + 3]) / (start[j + 2] + dur[j + 2] - start[j]) < T.FUSIBLE_HOST_RATIO
            for j in range(i, i + 18, 3)))
        names = [[rows[first + k][c] for c in cols] for k in range(3)]
        for k in range(18):
            for c, v in zip(cols, names[k % 3]):
                rows[first + k][c] = v
    _edit_kernels(rank, repeat)
    finding = _rule(_advise(rank), "fusible_operators")
    seq = finding.evidence["sequences"][0]
    assert seq["count"] > T.FUSIBLE_MIN_COUNT and seq["host_bound"] and len(seq["ops"]) >= 3


def test_syncbn_from_twenty_calls(tmp_path):
    rank = _copy(tmp_path)  # change: 20 top-level aten ops renamed SyncBatchNorm

    def rename(events):
        for e in _top_level_aten(events)[:20]:
            e["name"] = "SyncBatchNorm"
    _edit_trace(rank, rename)
    assert _rule(_advise(rank), "syncbn").evidence["syncbn_calls"] == 20


def _add_gc(events, ms: float):
    """torch_npu's GC record (gc_detect_threshold): a "Python GC" process with "GC" spans."""
    pid = 999
    events += [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "Python GC"}},
               {"ph": "M", "name": "thread_name", "pid": pid, "tid": pid, "args": {"name": "Python GC"}}]
    step = next(e for e in events if e.get("name", "").startswith("ProfilerStep#"))
    events.append({"ph": "X", "name": "GC", "pid": pid, "tid": pid, "cat": "GC",
                   "ts": f"{float(step['ts']) + 1000:.3f}", "dur": ms * 1000, "args": {}})


def test_gc_pauses_recorded_by_torch_npu(tmp_path):
    rank = _copy(tmp_path)  # change: one 12 ms GC span inside the step, as gc_detect_threshold records it
    _edit_trace(rank, lambda ev: _add_gc(ev, 12.0))
    finding = _rule(_advise(rank), "gc")
    assert finding.evidence["gc_count"] == 1 and finding.evidence["gc_ms"] == pytest.approx(12.0)
    assert "gc.freeze()" in finding.fix


def test_gc_pauses_under_a_millisecond_are_not_reported(tmp_path):
    rank = _copy(tmp_path)  # change: one 0.5 ms GC span
    _edit_trace(rank, lambda ev: _add_gc(ev, 0.5))
    assert _rule(_advise(rank), "gc") is None


def test_conjectured_gc_in_a_long_silent_gap(tmp_path):
    rank = _copy(tmp_path)
    # change: every event from the step's last allReduce on, and the step's end, shifted 300 ms later
    moved = 300_000.0

    def shift(events):
        cut = next(float(e["ts"]) for e in events if e.get("name") == "hcom_allReduce__586_3_1")
        for e in events:
            if e.get("ph") == "X" and e.get("ts") is not None and float(e["ts"]) >= cut:
                e["ts"] = f"{float(e['ts']) + moved:.3f}"
            elif e.get("name", "").startswith("ProfilerStep#"):
                e["dur"] = float(e["dur"]) + moved
    _edit_trace(rank, shift)

    def shift_kernels(h, rows):
        for r in rows:
            ts = float(r[h.index("Start Time(us)")])
            if ts >= 1736408883816026.238:
                r[h.index("Start Time(us)")] = f"{ts + moved:.3f}"
    _edit_kernels(rank, shift_kernels)
    finding = _rule(_advise(rank), "conjectured_gc")
    assert finding.evidence["gaps"][0]["free_ms"] > T.CONJECTURED_GC_FREE_US / 1e3


def test_slow_allocator_calls(tmp_path):
    rank = _copy(tmp_path)  # change: four aclCreateTensorDesc runtime calls renamed aclMallocMemInner, 3 ms each

    def rename(events):
        calls = [e for e in events if e.get("name") == "AscendCL@aclCreateTensorDesc"][:4]
        assert len(calls) == 4
        for e in calls:
            e["name"], e["dur"] = "AscendCL@aclMallocMemInner", 3000.0
    _edit_trace(rank, rename)
    finding = _rule(_advise(rank), "memory_operators")
    assert finding.evidence["ops"] == [{"name": "AscendCL@aclMallocMemInner", "count": 4, "total_ms": 12.0}]
    assert "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True" in finding.fix


# ---- severity and fit --------------------------------------------------------------------------------
def test_severity_bands_are_msprof_analyzes():
    from npumagic.analysis.finding import Finding

    band = lambda impact: Finding("memory", impact, "", {}, "").severity  # noqa: E731
    assert (band(0.05), band(0.049), band(0.03), band(0.029)) == ("high", "medium", "medium", "low")


def test_npu_advice_names_no_cuda_api():
    for finding in _advise(need(LEVEL1)):
        if finding.rule == "sync":
            continue  # the core sync rule (issue 10's) names both backends' synchronize()
        assert "cuda" not in finding.fix.lower(), (finding.rule, finding.fix)


def test_flash_attention_shapes_not_aligned_to_128(tmp_path):
    rank = _copy(tmp_path)
    # change: one MatMulV2 task relabelled FlashAttentionScore with BNSD shapes, head dim 64, sequence 1000

    def to_fa(h, rows):
        row = next(r for r in rows if r[h.index("Type")] == "MatMulV2")
        row[h.index("Type")] = "FlashAttentionScore"
        row[h.index("Input Shapes")] = '"8,16,1000,64;8,16,1000,64;8,16,1000,64"'
        row[h.index("Output Shapes")] = '"8,16,1000,64"'
    _edit_kernels(rank, to_fa)
    finding = _rule(_advise(rank), "aicore_performance")
    [fa] = [r for r in finding.evidence["unaligned"] if r.get("why")]
    assert fa["why"] == "head dim and sequence length not a multiple of 128"
    assert "multiples of 128" in finding.fix
    original = _rule(_advise(need(LEVEL1)), "aicore_performance")
    assert not [r for r in original.evidence["unaligned"] if r.get("why")]


def test_a_matmul_group_without_pipe_metrics_has_no_optimisation_space(tmp_path):
    # GIVEN a matmul group that moves over 100 MB but whose pipe metrics were not recorded (N/A)
    rank = _copy(tmp_path)

    def unmeasured(h, rows):
        row = next(r for r in rows if r[h.index("Type")] == "MatMulV2")
        row[h.index("Input Shapes")] = '"4096,8192;8192,4096"'
        row[h.index("Output Shapes")] = '"4096,4096"'
        for column in ("aic_mac_ratio", "aic_mte2_ratio"):
            row[h.index(column)] = "N/A"
    _edit_kernels(rank, unmeasured)
    # THEN it is neither an "optimisation space" of nan% nor bound: no figure stands for it
    finding = _rule(_advise(rank), "aicore_performance")
    assert "nan" not in finding.title
    assert not [r for r in finding.evidence["optimization"] + finding.evidence["bound"] if r["shape"] == "4096,8192;8192,4096"]
