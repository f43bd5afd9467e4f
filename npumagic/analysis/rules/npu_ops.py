"""Ascend operator rules over the kernel metrics (kernel_details.csv's compute tasks, normalized as
:data:`~npumagic.analysis.schema.KERNEL_METRIC_COLUMNS`; msprof-analyze's computation advisor): dynamic
shapes, AI_CPU operators, operators bound by no pipe, block dims that leave cores idle, AI Core
performance per op group (cube / vector) with msprof's "optimisation space", and online
operator compilation (aclopCompileAndExecute)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .. import thresholds as T
from ..finding import Finding
from .registry import kernel_metrics, rule, share_of_steps

JIT_OFF = "torch_npu.npu.set_compile_mode(jit_compile=False)"
INTERNAL_FORMAT_OFF = "torch_npu.npu.config.allow_internal_format = False"
PIPE_RATIOS = ("aic_mac_ratio", "aic_scalar_ratio", "aic_mte1_ratio", "aic_mte2_ratio", "aiv_vec_ratio",
               "aiv_scalar_ratio", "aiv_mte2_ratio", "aiv_mte3_ratio")
# AI_CPU data types AI_CPU handles well, by msprof-analyze's aicpu_rules.yaml (CANN 8.0.RC1/7.0.0,
# op_type __ALL__ except cast/tensorequal/equal/nonzero/mul); anything else is flagged.
AICPU_DTYPES = frozenset({"float", "float32", "float16", "dt_bf16", "float64", "bool", "int32", "int64", "int8",
                          "uint8", "int16", "complex64", "complex128"})
AICPU_DTYPE_EXEMPT = frozenset({"cast", "tensorequal", "equal", "nonzero", "mul"})
# aicpu_rules.yaml ExampleGuideChecker: op types with a documented AI Core replacement
AICPU_GUIDES = {"index": "replace tensor indexing (x[idx]) with torch.index_select / torch.gather",
                "indexput": "replace index_put_ / x[idx] = v with torch.Tensor.scatter_ or masked_fill",
                "indexputv2": "replace index_put_ / x[idx] = v with torch.Tensor.scatter_ or masked_fill",
                "nonzero": "avoid nonzero / boolean-mask indexing (data-dependent shapes): use torch.where or masks",
                "argmin": "update the CANN toolkit to 7.0.RC1 or later (argmin runs on AI Core there)"}


def _all_dynamic(d: pd.DataFrame) -> bool:
    return len(d) > 0 and bool((d["op_state"].str.lower() == "dynamic").all())


@rule("dynamic_shape", ("npu",))
def dynamic_shape(s) -> list[Finding]:
    """Every operator ran with a dynamic shape (kernel_details "OP State"): compiled online."""
    d = kernel_metrics(s)
    if not _all_dynamic(d):
        return []
    return [Finding("host_bound", 0.0, f"all {len(d)} operators ran as dynamic-shape operators (OP State "
                    "\"dynamic\"): each new shape is compiled online", {"operators": len(d), "op_state": "dynamic"},
                    f"at the entrance of the script: {JIT_OFF}; {INTERNAL_FORMAT_OFF} (binary kernels instead of "
                    "online compilation, as msprof-analyze advises)", "kernel_details.csv OP State")]


@rule("aicpu", ("npu",))
def aicpu(s) -> list[Finding]:
    """AI_CPU operators, reported when one task exceeds 20 us, with the vendor's dtype advice."""
    d = kernel_metrics(s)
    ops = d[d["core"] == "AI_CPU"]
    if ops.empty or float(ops["dur_ns"].max()) / 1e3 < T.AICPU_MIN_US:
        return []
    advice, per_type = [], []
    for op_type, group in ops.groupby("type", sort=False):
        types = {t.lower().replace("double", "float64") for col in (group["input_dtypes"], group["output_dtypes"])
                 for v in col for t in v.split(";") if t}
        item = {"type": op_type, "count": len(group), "total_us": float(group["dur_ns"].sum()) / 1e3,
                "data_types": sorted(types)}
        odd = sorted(types - AICPU_DTYPES) if op_type.lower() not in AICPU_DTYPE_EXEMPT else []
        if "float64" in types:
            advice.append(f"{op_type}: convert its float64 (double) tensors to float32")
        if odd:
            advice.append(f"{op_type}: data types {', '.join(t.upper() for t in odd)} may keep it on AI_CPU; use one "
                          "of FLOAT16/FLOAT/BF16/INT32/INT64/INT8/UINT8/INT16/BOOL if possible")
        if op_type.lower() in AICPU_GUIDES:
            advice.append(f"{op_type}: {AICPU_GUIDES[op_type.lower()]}")
        per_type.append(item)
    per_type.sort(key=lambda i: i["total_us"], reverse=True)
    total_us = float(ops["dur_ns"].sum()) / 1e3
    listed = ", ".join(f"{i['type']} x{i['count']} ({i['total_us']:.0f} µs)" for i in per_type[:5])
    fix = "; ".join(advice) if advice else "replace these operators with ones that run on AI Core (change the code that calls them)"
    return [Finding("npu_compute", share_of_steps(s, total_us), f"{len(ops)} operators run on AI_CPU, "
                    f"{total_us:,.0f} µs in all: {listed}", {"ai_cpu_ops": len(ops), "ai_cpu_us": total_us,
                                                             "types": per_type}, fix, listed)]


@rule("operator_no_bound", ("npu",))
def operator_no_bound(s) -> list[Finding]:
    """Operators over 20 us with no pipe (mac, vec, scalar, mte1-3) above 0.8: tiling leaves every
    unit underused. Skipped, as msprof-analyze does, when all operators are dynamic-shape (the
    kernels change once compiled statically)."""
    d = kernel_metrics(s)
    if d.empty or _all_dynamic(d):
        return []
    ratios = d[list(PIPE_RATIOS)]
    if not (ratios.fillna(0) > 0).any().any():
        return []
    best = ratios.max(axis=1)
    mask = (d["dur_ns"] / 1e3 > T.NO_BOUND_MIN_US) & (best > 0) & (best <= T.NO_BOUND_PIPE_RATIO)
    ops = d[mask]
    if ops.empty:
        return []
    by = ops.assign(best=best[mask]).groupby(["name", "type"], sort=False).agg(
        count=("dur_ns", "size"), total_ns=("dur_ns", "sum"), best_pipe=("best", "max")).reset_index()
    by = by.sort_values("total_ns", ascending=False)
    listed = ", ".join(f"{r.name} x{r.count} (best pipe {r.best_pipe:.0%})" for r in by.head(5).itertuples())
    total_us = float(ops["dur_ns"].sum()) / 1e3
    return [Finding("npu_compute", share_of_steps(s, total_us), f"{len(ops)} operator tasks over "
                    f"{T.NO_BOUND_MIN_US:g} µs use no pipe above {T.NO_BOUND_PIPE_RATIO:.0%}: {listed}",
                    {"ops": by.head(20).assign(total_us=by["total_ns"] / 1e3).drop(columns="total_ns").to_dict("records"),
                     "total_us": total_us},
                    "these kernels are bound by nothing (latency, synchronisation or poor tiling): change the "
                    "shapes they get (larger, aligned tensors), fuse them with neighbours (torch.compile(model, "
                    "backend=\"npu\")), or report them to the operator's developers with their shapes", listed)]


@rule("block_dim", ("npu",))
def block_dim(s) -> list[Finding]:
    """Operators whose block dim is not a multiple of the AI Core (or vector core) count, so the
    last wave leaves cores idle. Needs the core count (PROF_*/device_*/info.json); skipped on
    all-dynamic-shape runs, as msprof-analyze does."""
    d = kernel_metrics(s)
    info = s.vendor.get("device_info") or {}
    cores = int(info.get("ai_core_num") or 0)
    if d.empty or not cores or _all_dynamic(d):
        return []
    vec = int(info.get("aiv_num") or 0)
    core = d["core"]
    block = d["block_dim"].fillna(0).astype(np.int64)
    per = np.where((core == "AI_CORE") | (vec == 0), cores, vec)
    mask = core.isin(["AI_CORE", "AI_VECTOR_CORE", "MIX_AIC"]) & (block > 0) & (block % per != 0)
    if vec:
        mix = d["mix_block_dim"].fillna(0).astype(np.int64)
        mask &= ~((core == "MIX_AIC") & (mix % vec == 0))
    ops = d[mask]
    if ops.empty:
        return []
    by = ops.assign(block=block[mask], cores=per[mask.to_numpy()]).groupby(["name", "block", "cores"], sort=False).agg(
        count=("dur_ns", "size"), total_ns=("dur_ns", "sum")).reset_index().sort_values("total_ns", ascending=False)
    # the idle share of the last wave: (cores - block % cores) / (cores * waves)
    waves = np.ceil(by["block"] / by["cores"])
    idle = (by["cores"] - by["block"] % by["cores"]) / (by["cores"] * waves)
    at_stake_us = float((by["total_ns"] * idle).sum()) / 1e3
    listed = ", ".join(f"{r.name} (block dim {r.block} on {r.cores} cores)" for r in by.head(5).itertuples())
    return [Finding("npu_compute", share_of_steps(s, at_stake_us), f"{len(by)} operators have a block dim that is not "
                    f"a multiple of the core count ({cores} AI Cores{f', {vec} vector cores' if vec else ''}): {listed}",
                    {"ai_core_num": cores, "aiv_num": vec, "ops": by.head(20).assign(total_us=by["total_ns"] / 1e3)
                     .drop(columns="total_ns").to_dict("records"), "idle_core_us": at_stake_us},
                    "give these operators work that splits evenly over the cores: shapes whose split axis (batch, "
                    f"sequence) is a multiple of the core count, e.g. DataLoader(batch_size=k * {cores})", listed)]


def _cube_aligned(shapes: str) -> bool:
    """msprof-analyze's inner-axis check: both inputs' inner axes multiples of 256 (ND), or the
    product of axes 1 and 2 for 4-D (NZ) inputs."""
    parts = shapes.split(";")
    if len(parts) < 2:
        return False
    try:
        a, b = ([int(x) for x in p.split(",")] for p in parts[:2])
    except ValueError:
        return False
    if len(a) == 4 and len(b) == 4:
        return (a[1] * a[2]) % T.CUBE_INNER_AXIS == 0 and (b[1] * b[2]) % T.CUBE_INNER_AXIS == 0
    if len(a) == 2:
        return a[-1] % T.CUBE_INNER_AXIS == 0 and b[-1] % T.CUBE_INNER_AXIS == 0
    return False


def _mb(shapes_in: str, shapes_out: str) -> float:
    """msprof-analyze's memory size of a cube op: elements of inputs (a 1-D bias counted twice)
    and outputs, at 2 bytes each, in MB."""
    total = 0
    for text, bias_twice in ((shapes_in, True), (shapes_out, False)):
        for shape in text.split(";"):
            if not shape:
                continue
            try:
                dims = [int(x) for x in shape.split(",")]
            except ValueError:
                continue
            total += dims[0] * 2 if (len(dims) == 1 and bias_twice) else int(np.prod(dims))
    return total * 2 / 1024 / 1024


def _fa_dims(shapes_in: str, shapes_out: str, varlen: bool) -> tuple[int | None, int | None]:
    """Head dim and sequence length of a FlashAttention op, read as msprof-analyze reads them:
    varlen ops: the query's 3rd axis as head dim; fixed-length: head dim from the query (BNSD's
    4th axis, or BSH's H / N from the output), sequence length from the output's 3rd axis."""
    def dims(text: str) -> list[int]:
        try:
            return [int(x) for x in text.split(";")[0].split(",")]
        except ValueError:
            return []
    q, o = dims(shapes_in), dims(shapes_out)
    if varlen:
        return (q[2] if len(q) >= 3 else None), None
    seq = o[2] if len(o) >= 3 else None
    if len(q) == 3 and len(o) >= 2 and o[1]:
        return q[2] // o[1], seq
    return (q[3] if len(q) >= 4 else None), seq


@rule("aicore_performance", ("npu",))
def aicore_performance(s) -> list[Finding]:
    """msprof-analyze's AI Core performance analysis: cube (matmul), FlashAttention and vector
    operator groups by name and shape, each either bound by a pipe or with an "optimisation space" (how far its
    pipes are below the bound thresholds); cube shapes whose inner axis is not a multiple of 256."""
    every = kernel_metrics(s)
    d = every[(every["input_shapes"] != "") & (every["output_shapes"] != "")]
    # msprof-analyze's total runs over every kernel_details row, collectives (HCCL) included; their
    # time from the step table, which a run reloaded from the history keeps (not its events)
    comm_ns = float(s.steps["communication_us"].sum()) * 1e3 if "communication_us" in s.steps else 0.0
    total_ns = float(every["dur_ns"].sum()) + comm_ns
    if d.empty or not total_ns:
        return []
    groups = _Groups()
    _cube_groups(d, groups)
    _attention_groups(d, groups)
    _vector_groups(d, total_ns, groups)
    return _aicore_finding(s, groups) if groups else []


@dataclass
class _Groups:
    """The operator groups judged: with optimisation space, bound by a pipe, or of unaligned shape."""

    opt: list[dict] = field(default_factory=list)
    bound: list[dict] = field(default_factory=list)
    unaligned: list[dict] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.opt or self.bound or self.unaligned)


def _cube_groups(d, groups: _Groups) -> None:
    """AI_CORE matmuls whose name+shape moves at least 100 MB: unaligned, bound or with space."""
    cube = d[(d["core"] == "AI_CORE") & d["type"].str.lower().str.contains("matmul")]
    if not len(cube):
        return
    for (name, si, so), g in cube.groupby(["name", "input_shapes", "output_shapes"], sort=False):
        if sum(_mb(si, so) for _ in range(len(g))) < T.CUBE_MIN_MB:
            continue
        ns = float(g["dur_ns"].sum())
        if not _cube_aligned(si):
            groups.unaligned.append({"op": name, "shape": si, "duration_us": ns / 1e3})
            continue
        mac, mte2 = g["aic_mac_ratio"].mean(), g["aic_mte2_ratio"].mean()
        if mac != mac or mte2 != mte2:  # pipe metrics not recorded: no figure to judge it by
            continue
        if mac >= T.CUBE_MAC_BOUND or mte2 >= T.CUBE_MTE2_BOUND:
            bound = "mac_and_mte2" if (mac >= T.CUBE_MAC_BOUND and mte2 >= T.CUBE_MTE2_BOUND) else (
                "mac" if mac >= T.CUBE_MAC_BOUND else "mte2")
            groups.bound.append({"group": "cube", "op": name, "shape": si, "bound": bound, "duration_us": ns / 1e3})
        else:
            space = max(T.CUBE_MAC_BOUND - mac, T.CUBE_MTE2_BOUND - mte2)
            groups.opt.append({"group": "cube", "op": name, "shape": si, "optimization": space, "duration_us": ns / 1e3})


def _attention_groups(d, groups: _Groups) -> None:
    """FlashAttention: shapes aligned to 128, else bound or optimisation space per direction."""
    fa = d[d["type"].isin(["FlashAttentionScore", "FlashAttentionScoreGrad"])]
    for (name, si, so, kind), g in fa.groupby(["name", "input_shapes", "output_shapes", "type"], sort=False):
        ns = float(g["dur_ns"].sum())
        head, seq = _fa_dims(si, so, varlen="varlen" in str(name).lower())
        bad = [label for label, v in (("head dim", head), ("sequence length", seq))
               if v is not None and v % T.FA_INNER_AXIS]
        if bad:
            groups.unaligned.append({"op": name, "shape": si, "duration_us": ns / 1e3,
                                     "why": f"{' and '.join(bad)} not a multiple of {T.FA_INNER_AXIS}"})
            continue
        mte2 = g["aic_mte2_ratio"].mean()
        other, limit, label = ((g["aic_fixpipe_ratio"].mean(), T.FA_FIXPIPE_BOUND, "fixpipe") if kind.endswith("Grad")
                               else (g["aiv_vec_ratio"].mean(), T.FA_VEC_BOUND, "vec"))
        if mte2 != mte2 or other != other:
            continue
        if mte2 >= T.FA_MTE2_BOUND or other >= limit:
            bound = "_and_".join(b for b, hit in (("mte2", mte2 >= T.FA_MTE2_BOUND), (label, other >= limit)) if hit)
            groups.bound.append({"group": "fa", "op": name, "shape": si, "bound": bound, "duration_us": ns / 1e3})
        else:
            groups.opt.append({"group": "fa", "op": name, "shape": si, "duration_us": ns / 1e3,
                               "optimization": max(T.FA_MTE2_BOUND - mte2, limit - other)})


def _vector_bound(v: float, m2: float, m3: float) -> str:
    """The pipe a vector group is bound by ("" if none)."""
    if v + m2 + m3 >= T.VECTOR_TOTAL_BOUND:
        return "vec_mte2_mte3"
    for label, ratio in (("mte2", m2), ("mte3", m3), ("vec", v)):
        if ratio >= T.VECTOR_PIPE_BOUND:
            return label
    return ""


def _vector_groups(d, total_ns: float, groups: _Groups) -> None:
    """Op types on vector cores taking at least 1% of device time, grouped by name and shape."""
    vec = d[d["core"].isin(["AI_VECTOR_CORE", "MIX_AIV"])]
    if not len(vec):
        return
    share = vec.groupby("type")["dur_ns"].sum() / total_ns
    kept = share[share >= T.VECTOR_TYPE_SHARE].index
    table = vec[vec["type"].isin(kept)].groupby(["name", "input_shapes", "output_shapes"], sort=False).agg(
        v=("aiv_vec_ratio", "mean"), m2=("aiv_mte2_ratio", "mean"), m3=("aiv_mte3_ratio", "mean"),
        ns=("dur_ns", "sum"), dtype=("input_dtypes", "first"))
    for (name, si, so), v, m2, m3, ns, dtype in zip(table.index, *(table[c] for c in table.columns)):
        if any(x != x for x in (v, m2, m3)):
            continue
        row = {"group": "vector", "op": name, "shape": si, "dtype": dtype}
        bound = _vector_bound(v, m2, m3)
        if bound:
            groups.bound.append({**row, "bound": bound, "duration_us": float(ns) / 1e3})
        else:
            space = max(T.VECTOR_PIPE_BOUND - v, T.VECTOR_PIPE_BOUND - m2, T.VECTOR_PIPE_BOUND - m3)
            groups.opt.append({**row, "optimization": space, "duration_us": float(ns) / 1e3})


def _aicore_finding(s, groups: _Groups) -> list[Finding]:
    """The one npu_compute finding: its title, evidence and fixes from the groups judged."""
    opt_rows = sorted(groups.opt, key=lambda r: r["optimization"], reverse=True)
    bound_rows = sorted(groups.bound, key=lambda r: r["duration_us"], reverse=True)
    unaligned = groups.unaligned
    at_stake = sum(r["duration_us"] * r["optimization"] for r in opt_rows)
    top = ", ".join(f"{r['op']} [{r['shape']}] {r['optimization']:.1%}" for r in opt_rows[:3])
    title = (f"AI Core operator groups: {len(opt_rows)} with optimisation space (top: {top})" if opt_rows else
             "AI Core operator groups")
    if bound_rows:
        title += f"; {len(bound_rows)} bound ({', '.join(sorted({r['bound'] for r in bound_rows}))})"
    if unaligned:
        title += f"; {len(unaligned)} matmul/attention shapes not aligned ({T.CUBE_INNER_AXIS} / {T.FA_INNER_AXIS})"
    return [Finding("npu_compute", share_of_steps(s, at_stake), title,
                    {"optimization": opt_rows[:10], "bound": bound_rows[:10], "unaligned": unaligned[:10],
                     "optimization_us": at_stake}, "; ".join(_aicore_fixes(opt_rows, bound_rows, unaligned)),
                    ", ".join(r["op"] for r in (opt_rows + bound_rows + unaligned)[:5]))]


def _aicore_fixes(opt_rows: list[dict], bound_rows: list[dict], unaligned: list[dict]) -> list[str]:
    fixes = []
    conversions = sum("TransData" in r["op"] for r in opt_rows + bound_rows)
    if conversions:
        fixes.append(f"{conversions} of these groups are format conversions (TransData): {INTERNAL_FORMAT_OFF}")
    if opt_rows:
        fixes.append("operators with optimisation space leave their pipes idle: try other shapes (batch, hidden "
                     "sizes), fuse them with their neighbours (torch.compile(model, backend=\"npu\")), or report them "
                     "with their shapes to the operator's developers")
    if bound_rows:
        fixes.append("bound operators already saturate a pipe: do less of that work (fused elementwise chains, "
                     "torch.autocast('npu', dtype=torch.bfloat16) for half the bytes)")
    if any(r.get("why") for r in unaligned):
        fixes.append(f"FlashAttention runs best with head dim and sequence length multiples of {T.FA_INNER_AXIS} "
                     "(pad the sequence, choose head sizes accordingly)")
    if any(not r.get("why") for r in unaligned):
        fixes.append(f"pad matmul inner axes to multiples of {T.CUBE_INNER_AXIS} (hidden and head sizes)")
    return fixes


@rule("op_dispatch", ("npu",))
def op_dispatch(s) -> list[Finding]:
    """20 or more aclopCompileAndExecute calls: operators compiled online during training."""
    ev = s.events
    if ev is None or ev.empty:
        return []
    calls = ev[(ev["kind"] == "runtime") & (ev["name"] == "AscendCL@aclopCompileAndExecute")]
    if len(calls) < T.OP_COMPILE_MIN:
        return []
    total_us = float(calls["dur_ns"].sum()) / 1e3
    return [Finding("host_bound", share_of_steps(s, total_us), f"{len(calls)} operators were compiled online "
                    f"(aclopCompileAndExecute), {total_us:,.0f} µs on the host",
                    {"compile_calls": len(calls), "compile_us": total_us},
                    f"at the entrance of the script: {JIT_OFF}; {INTERNAL_FORMAT_OFF}", "AscendCL@aclopCompileAndExecute")]
