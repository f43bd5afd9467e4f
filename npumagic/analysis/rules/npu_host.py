"""Host-side and scheduling rules over the event table (msprof-analyze's schedule advisor):
affinity APIs for recognised operator sequences and optimizers, fusible device-operator
sequences, SyncBatchNorm, stream synchronisation after every launch, Python GC pauses (recorded
and conjectured) and slow allocator calls."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .. import thresholds as T
from ..finding import Finding, plural
from ..run_facts import RunFacts
from ..schema import DEVICE_WORK
from .registry import kernel_metrics, rule, share_of_steps
from .npu_env import environment

# torch_npu affinity APIs for aten operator sequences (msprof-analyze's timeline_fusion_ops.yaml,
# CANN 7.0+ entries); every name exists in torch_npu 2.14.0 (tested against its wheel).
ATEN_AFFINITY = {
    "torch_npu.npu_fusion_attention": ["matmul-(add){0,1}-(mul){0,1}-(masked_fill_){0,1}-softmax-(dropout){0,1}-matmul",
                                       "matmul-(add){0,1}-(mul){0,1}-(add){0,1}-softmax-(dropout){0,1}-matmul"],
    "torch_npu.npu_rotary_mul": ["(chunk)-neg-cat-(mul){0,2}-add", "(slice)-neg-cat-(mul){0,2}-add"],
    "torch_npu.npu_rms_norm": ["(pow){0,1}-(mean){0,1}-(add){0,1}-rsqrt-mul-(type_as){0,1}"],
    "torch_npu.npu_swiglu": ["(slice)-silu-mul", "(chunk)-silu-mul", "(slice)-mul-silu", "(chunk)-mul-silu",
                             "(slice)-sigmoid-mul-mul", "(chunk)-sigmoid-mul-mul", "(slice)-mul-sigmoid-mul",
                             "(chunk)-mul-sigmoid-mul", "(slice)-mul-mul-sigmoid", "(chunk)-mul-mul-sigmoid"],
}
# torch.optim step -> torch_npu's fused optimizer (timeline_fusion_ops.yaml "Optimizer" rules)
OPTIMIZER_AFFINITY = {
    "SGD.step": "torch_npu.optim.NpuFusedSGD", "Adam.step": "torch_npu.optim.NpuFusedAdam",
    "AdamW.step": "torch_npu.optim.NpuFusedAdamW", "Adadelta.step": "torch_npu.optim.NpuFusedAdadelta",
    "RMSprop.step": "torch_npu.optim.NpuFusedRMSprop", "Lamb.step": "torch_npu.optim.NpuFusedLamb",
    "AdamP.step": "torch_npu.optim.NpuFusedAdamP", "BertAdam.step": "torch_npu.optim.NpuFusedBertAdam",
    "RMSpropTF.step": "torch_npu.optim.NpuFusedRMSpropTF",
}
OPTIMIZER_PREFIX = "Optimizer.step#"


def _pattern(rule_text: str) -> re.Pattern:
    """msprof-analyze's rule syntax ("(a){0,1}-b") as a regex over "-op-" tokens."""
    parts = []
    for token in rule_text.split("-"):
        m = re.match(r"^\((\w+)\)(.*)$", token)
        name, suffix = (m.group(1), m.group(2)) if m else (token, "")
        parts.append(f"(-{re.escape(name)}-){suffix}")
    return re.compile("".join(parts))


_ATEN_PATTERNS = [(api, _pattern(p)) for api, rules in ATEN_AFFINITY.items() for p in rules]


def _top_level_aten(ev: pd.DataFrame) -> pd.DataFrame:
    aten = ev[(ev["kind"] == "host_op") & ev["name"].str.startswith("aten::")].sort_values("ts_ns")
    if aten.empty:
        return aten
    end = (aten["ts_ns"] + aten["dur_ns"]).to_numpy()
    prior_end = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(end)[:-1]])
    return aten[aten["ts_ns"].to_numpy() >= prior_end]  # not inside an earlier aten op


@rule("affinity_api", ("npu",))
def affinity_api(s) -> list[Finding]:
    """torch_npu APIs that replace a recognised sequence of aten operators or a torch.optim step,
    with the source line that calls them."""
    ev = s.events
    if ev is None or ev.empty:
        return []
    hits: dict[str, dict] = {}

    def add(api: str, pattern: str, source: str) -> None:
        hit = hits.setdefault(api, {"api": api, "pattern": pattern, "count": 0, "sources": {}})
        hit["count"] += 1
        if source:
            hit["sources"][source] = hit["sources"].get(source, 0) + 1

    names = ev["name"].astype(str)
    for row in ev[names.str.startswith(OPTIMIZER_PREFIX)].itertuples():
        api = OPTIMIZER_AFFINITY.get(str(row.name)[len(OPTIMIZER_PREFIX):])
        if api:
            add(api, str(row.name)[len(OPTIMIZER_PREFIX):], str(row.source))
    aten = _top_level_aten(ev)
    if len(aten):
        ops = aten["name"].astype(str).str.slice(len("aten::")).tolist()
        text = "".join(f"-{o}-" for o in ops)
        # character offset -> operator index, to find the first operator of each match
        offsets = np.cumsum([0] + [len(o) + 2 for o in ops])
        sources = aten["source"].astype(str).tolist()
        for api, pattern in _ATEN_PATTERNS:
            for m in pattern.finditer(text):
                first = int(np.searchsorted(offsets, m.start(), side="right") - 1)
                add(api, pattern.pattern, sources[first])
    if not hits:
        return []
    found = sorted(hits.values(), key=lambda h: h["count"], reverse=True)
    for h in found:
        h["where"] = max(h["sources"], key=h["sources"].get) if h["sources"] else ""
        h["sources"] = [{"source": k, "count": v} for k, v in h["sources"].items()]
    listed = "; ".join(f"{h['api']} for {h['pattern']} x{h['count']}" + (f" at {_short(h['where'])}" if h["where"] else "")
                       for h in found)
    fixes = []
    for h in found:
        if h["api"].startswith("torch_npu.optim."):
            fixes.append(f"replace torch.optim.{h['pattern'].split('.')[0]} with {h['api']}(params, ...), the "
                         "vendor's fused optimizer (torch.optim's foreach=True is enabled by torch_npu only on "
                         "Atlas A2/A3 chips, torch_npu/utils/_optim.py)")
        else:
            fixes.append(f"call {h['api']} instead of the {h['pattern']!s} sequence")
    return [Finding("small_ops", 0.0, f"{plural(len(found), 'torch_npu affinity API', 'torch_npu affinity APIs')} could replace what the step runs: "
                    f"{listed}", {"apis": found}, "; ".join(fixes), "; ".join(h["where"] for h in found if h["where"]))]


def _short(source: str) -> str:
    """``/home/u/proj/main.py(366): train`` -> ``main.py(366): train``."""
    return re.sub(r"^.*/", "", source)


@rule("fusible_operators", ("npu",))
def fusible_operators(s) -> list[Finding]:
    """Device operator sequences (3..10 tasks, by name and shapes) repeated more than 5 times that
    are host-bound (the device works under 40% of their span) or MTE-bound (memory moves over 80%
    of their AI Core time) and take over 1% of the profiled span: candidates for one fused op.
    As msprof-analyze's FusibleOperatorChecker (its loop starts at length 3)."""
    d = kernel_metrics(s)
    cols = ["aic_mte2_time_us", "aiv_mte2_time_us", "aic_fixpipe_time_us", "aiv_mte3_time_us"]
    if len(d) < 3 or not d[cols].notna().to_numpy().any():  # no PMU times recorded
        return []
    d = d.sort_values("ts_ns").reset_index(drop=True)
    num = {c: d[c].fillna(0).to_numpy() for c in cols}
    mte = np.maximum(num[cols[0]], num[cols[1]]) + np.maximum(num[cols[2]], num[cols[3]])
    # msprof-analyze divides by aicore_time alone (0 on vector cores: no MTE flag there)
    aicore = d["aicore_time_us"].fillna(0).to_numpy()
    start = d["ts_ns"].to_numpy() / 1e3
    dur = d["dur_ns"].to_numpy() / 1e3
    barrier = (d["core"].isin(["AI_CPU", "HCCL", "COMMUNICATION"])
               | d["name"].str.lower().str.match(r"^(hcom|lccl|lcoc)")).to_numpy()
    key = pd.factorize(d["name"] + "|" + d["input_shapes"] + "|" + d["output_shapes"])[0]
    n_keys = int(key.max()) + 1
    span = start[-1] + dur[-1] - start[0]
    n = len(d)
    cum = lambda a: np.concatenate([[0.0], np.cumsum(a)])  # noqa: E731
    c_dur, c_mte, c_aic, c_bar = cum(dur), cum(mte), cum(aicore), cum(barrier.astype(float))
    rows = []
    for length in range(T.FUSIBLE_MIN_LEN + 1, T.FUSIBLE_MAX_LEN + 1):
        j = np.arange(0, n - length + 1)
        if not j.size:
            break
        last = j + length - 1
        ok = (c_bar[last + 1] - c_bar[j]) == 0
        busy = c_dur[last + 1] - c_dur[j]
        total = start[last] + dur[last] - start[j]
        mte_sum, aic_sum = c_mte[last + 1] - c_mte[j], c_aic[last + 1] - c_aic[j]
        host = np.where(total > 0, busy / np.where(total > 0, total, 1) < T.FUSIBLE_HOST_RATIO, False)
        mte_b = np.where(aic_sum > 0, mte_sum / np.where(aic_sum > 0, aic_sum, 1) > T.FUSIBLE_MTE_RATIO, False)
        keep = ok & (host | mte_b)
        if not keep.any():
            continue
        first = j[keep]
        # one integer per distinct sequence, numbered 0.. in order of first appearance (numpy on
        # integers, not a pandas groupby on tuples, keeps this rule fast)
        seq = key[first]
        for k in range(1, length):
            seq = pd.factorize(seq * n_keys + key[first + k])[0]
        count = np.bincount(seq)
        seq_total, seq_busy = np.bincount(seq, total[keep]), np.bincount(seq, busy[keep])
        seq_first = first[np.unique(seq, return_index=True)[1]]
        seq_last = len(seq) - 1 - np.unique(seq[::-1], return_index=True)[1]
        seq_host, seq_mte = host[keep][seq_last], mte_b[keep][seq_last]
        chosen = (count > T.FUSIBLE_MIN_COUNT) & ((seq_total / span > T.FUSIBLE_MIN_SHARE) | seq_mte)
        rows += [{"seq": tuple(key[f:f + length].tolist()), "first": int(f), "total": float(t), "busy": float(b),
                  "count": int(c), "host": bool(h), "mte": bool(m), "length": length}
                 for f, t, b, c, h, m in zip(seq_first[chosen], seq_total[chosen], seq_busy[chosen], count[chosen],
                                             seq_host[chosen], seq_mte[chosen])]
    if not rows:
        return []
    # a sequence extended by a longer one that takes more time is reported as the longer one
    rows.sort(key=lambda r: r["total"], reverse=True)
    kept = []
    for r in rows:
        if any(k["seq"][:len(r["seq"])] == r["seq"] or r["seq"][:len(k["seq"])] == k["seq"] for k in kept):
            continue
        kept.append(r)
    names = d["name"].to_numpy()
    out_rows = [{"ops": [str(names[r["first"] + k]) for k in range(r["length"])], "start_index": int(r["first"]),
                 "count": int(r["count"]), "total_us": float(r["total"]), "device_us": float(r["busy"]),
                 "host_bound": bool(r["host"]), "mte_bound": bool(r["mte"])} for r in kept[:10]]
    total = sum(r["total_us"] for r in out_rows)
    listed = "; ".join(f"{'-'.join(r['ops'])} x{r['count']}" for r in out_rows[:3])
    return [Finding("small_ops", share_of_steps(s, total - sum(r["device_us"] for r in out_rows)),
                    f"{len(kept)} repeated operator sequences are worth fusing ({total / 1e3:,.2f} ms end to end): "
                    f"{listed}", {"sequences": out_rows, "total_us": total},
                    "fuse each sequence into one operator (torch.compile(model, backend=\"npu\") with torchair, or a "
                    "fused torch_npu op where one exists); host-bound sequences first: record with_stack=True to find "
                    "the code that issues them", listed)]


@rule("syncbn", ("npu",))
def syncbn(s) -> list[Finding]:
    """20 or more SyncBatchNorm calls: slow Python dispatch and a collective per layer."""
    ev = s.events
    if ev is None or ev.empty:
        return []
    calls = ev[(ev["device"] < 0) & ev["name"].str.fullmatch("syncbatchnorm", case=False)]
    if len(calls) < T.SYNCBN_MAX:
        return []
    total_us = float(calls["dur_ns"].sum()) / 1e3
    return [Finding("communication", share_of_steps(s, total_us), f"{len(calls)} SyncBatchNorm calls "
                    f"({total_us:,.0f} µs on the host)", {"syncbn_calls": len(calls), "syncbn_us": total_us},
                    "use plain BatchNorm where cross-rank statistics are not needed (drop "
                    "torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)), or keep SyncBatchNorm only in the layers "
                    "whose per-rank batch is too small", "SyncBatchNorm")]


SYNC_STREAM = "AscendCL@aclrtSynchronizeStream"
NODE_LAUNCH = "Node@launch"


@rule("synchronize_stream", ("npu",), facts=True)
def synchronize_stream(s, facts: RunFacts) -> list[Finding]:
    """A stream synchronisation right after most operator launches (or ASCEND_LAUNCH_BLOCKING=1):
    every launch waits for the device."""
    env = environment(s, facts)
    blocking = env.get("ASCEND_LAUNCH_BLOCKING", "").strip() == "1"
    ev = s.events
    syncs = launches = co = 0
    if ev is not None and len(ev):
        names = ev["name"]
        seq = ev[names.str.startswith(SYNC_STREAM) | names.str.startswith(NODE_LAUNCH)].sort_values("ts_ns")
        is_sync = seq["name"].astype(str).str.startswith(SYNC_STREAM).to_numpy()
        launches = int((~is_sync).sum())
        syncs = int(is_sync.sum())
        co = int((is_sync[1:] & ~is_sync[:-1]).sum()) if len(seq) > 1 else 0
    ratio = co / launches if launches else 0.0
    if not blocking and ratio <= T.SYNC_CO_OCCURRENCE:
        return []
    title = (f"{syncs} stream synchronisations and {launches} node launches; {ratio:.0%} of launches are followed "
             "at once by a synchronisation" if launches else "")
    if blocking:
        title = "ASCEND_LAUNCH_BLOCKING=1: every operator launch waits for the device" + (f" ({title})" if title else "")
    return [Finding("sync", 0.0 if not launches else min(ratio, 1.0) * s.share("free_us") if len(s.steps) else 0.0,
                    title, {"synchronize_calls": syncs, "node_launches": launches, "co_occurrence_ratio": ratio,
                            "ascend_launch_blocking": blocking},
                    "unset ASCEND_LAUNCH_BLOCKING (it serialises every launch; a debugging setting) and start the job "
                    "again", "ASCEND_LAUNCH_BLOCKING" if blocking else SYNC_STREAM)]


@rule("gc", ("npu", "cuda", "cpu"))
def gc_pauses(s) -> list[Finding]:
    """Python garbage collections of 1 ms or more (torch_npu's gc_detect_threshold records them)."""
    ev = s.events
    if ev is None or ev.empty:
        return []
    gc = ev[(ev["kind"] == "annotation") & (ev["name"] == "GC") & (ev["dur_ns"] >= T.GC_MIN_US * 1e3)]
    if gc.empty:
        return []
    total_us = float(gc["dur_ns"].sum()) / 1e3
    steps = sorted({int(x) for x in gc["step"] if x >= 0})
    return [Finding("jitter", share_of_steps(s, float(gc.loc[gc["step"] >= 0, "dur_ns"].sum()) / 1e3),
                    f"{len(gc)} Python garbage collections of {T.GC_MIN_US / 1e3:g} ms or more, {total_us / 1e3:,.2f} ms in "
                    f"all; they stop the process", {"gc_count": len(gc), "gc_ms": total_us / 1e3,
                                                   "longest_ms": float(gc["dur_ns"].max()) / 1e6, "steps": steps},
                    "call gc.freeze() once the model and optimizer are built (the long-lived objects leave the "
                    "collected generations), raise the thresholds with gc.set_threshold(...), or gc.disable() and "
                    "gc.collect() every N steps; avoid reference cycles in per-step objects",
                    f"steps {', '.join(map(str, steps))}" if steps else "")]


@rule("conjectured_gc", ("npu",))
def conjectured_gc(s) -> list[Finding]:
    """Device-free gaps over 200 ms in which the host issues almost no runtime calls (under 1 per
    10 ms and under 1% of the gap): most likely a Python GC pause that was not recorded."""
    ev = s.events
    if ev is None or ev.empty:
        return []
    if (ev["name"] == "GC").any():
        return []  # GC was recorded: the gc rule speaks
    dev = ev[ev["kind"].isin(DEVICE_WORK)].sort_values("ts_ns")
    if len(dev) < 2:
        return []
    start = dev["ts_ns"].to_numpy()
    end = np.maximum.accumulate((dev["ts_ns"] + dev["dur_ns"]).to_numpy())
    g0, g1 = end[:-1], start[1:]
    big = (g1 - g0) > T.CONJECTURED_GC_FREE_US * 1e3
    if not big.any():
        return []
    acl = ev[ev["kind"].isin(["runtime", "sync"]) & ev["name"].str.startswith("AscendCL@")]
    a0 = np.sort(acl["ts_ns"].to_numpy())
    a_dur = acl.sort_values("ts_ns")["dur_ns"].to_numpy()
    c_dur = np.concatenate([[0], np.cumsum(a_dur)])
    gaps = []
    for lo, hi in zip(g0[big], g1[big]):
        i, k = np.searchsorted(a0, lo), np.searchsorted(a0, hi)
        free_us = (hi - lo) / 1e3
        count, busy_us = k - i, (c_dur[k] - c_dur[i]) / 1e3
        if count / free_us < T.CONJECTURED_GC_EVENTS_PER_US and busy_us / free_us < T.CONJECTURED_GC_EVENT_TIME_RATIO:
            gaps.append({"start_ns": int(lo), "free_ms": free_us / 1e3, "acl_calls": int(count)})
    if not gaps:
        return []
    total_ms = sum(g["free_ms"] for g in gaps)
    return [Finding("jitter", share_of_steps(s, total_ms * 1e3), f"{len(gaps)} device-idle gaps over "
                    f"{T.CONJECTURED_GC_FREE_US / 1e3:g} ms with almost no host activity ({total_ms:,.1f} ms): likely "
                    "Python garbage collection", {"gaps": gaps, "free_ms": total_ms},
                    "confirm with torch_npu.profiler._ExperimentalConfig(gc_detect_threshold=1.0), then call "
                    "gc.freeze() after building the model, or gc.disable() with gc.collect() every N steps",
                    f"{len(gaps)} gaps")]


MEMORY_OPS = {"AscendCL@aclMallocMemInner": "export PYTORCH_NPU_ALLOC_CONF=expandable_segments:True and restart the job",
              "AscendCL@aclrtFreePhysical": "the allocator returns memory to the driver: lower the batch size if "
                                            "HBM is full (npu-smi info), and remove torch.npu.empty_cache() from the loop "
                                            "(record with_stack=True to find it)",
              "AscendCL@aclrtFree": "the allocator returns memory to the driver: lower the batch size if HBM is full "
                                    "(npu-smi info), and remove torch.npu.empty_cache() from the loop (record "
                                    "with_stack=True to find it)"}


@rule("memory_operators", ("npu",))
def memory_operators(s) -> list[Finding]:
    """Allocator calls to the driver (aclMallocMemInner, aclrtFree, aclrtFreePhysical) taking
    10 ms or more in all: the device idles while memory is mapped and unmapped."""
    ev = s.events
    if ev is None or ev.empty:
        return []
    calls = ev[ev["name"].isin(MEMORY_OPS)]
    if calls.empty:
        return []
    per = calls.groupby(calls["name"].astype(str)).agg(count=("dur_ns", "size"), total_ns=("dur_ns", "sum"))
    per = per[per["total_ns"] / 1e3 >= T.MEMORY_OP_MAX_US]
    if per.empty:
        return []
    total_us = float(per["total_ns"].sum()) / 1e3
    listed = ", ".join(f"{n} x{int(r['count'])} ({r['total_ns'] / 1e6:,.1f} ms)" for n, r in per.iterrows())
    return [Finding("memory", share_of_steps(s, total_us), f"slow allocator calls: {listed}",
                    {"ops": [{"name": n, "count": int(r["count"]), "total_ms": r["total_ns"] / 1e6} for n, r in per.iterrows()]},
                    "; ".join(f"{n.split('@')[1]}: {MEMORY_OPS[n]}" for n in per.index), listed)]
