"""The JSON documents of npumagic's results: what ``--json`` prints, what the result objects'
``.to_dict()`` return and what the MCP server attaches to its answers, built in one place.

Every document is one JSON object whose ``schema`` field names its version (:data:`SCHEMA`) and
whose ``kind`` says which document it is; a later version adds fields and bumps the number only
when one is renamed or removed. Figures keep their units in their names (``_us``, ``_ms``,
``_pct``; ``_share`` and ``device_util`` are fractions of the step, 0..1), and the JSON is strict:
NaN and infinity become null."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

SCHEMA = "npumagic/1"


def document(kind: str, **fields: Any) -> dict[str, Any]:
    """A versioned, JSON-ready document: ``{"schema": SCHEMA, "kind": kind, **fields}``."""
    return clean({"schema": SCHEMA, "kind": kind, **fields})


def clean(value: Any) -> Any:
    """Plain JSON values, recursively: NaN/inf -> None, numpy scalars and arrays -> numbers and
    lists, tuples -> lists, paths -> strings (anything else stays as it is; :func:`dumps`
    writes it with ``str``)."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy scalar or array
        value = value.tolist()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k if k is None or isinstance(k, (str, int, float, bool)) else str(k): clean(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [clean(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, default=str, indent=2, allow_nan=False)


def records(frame, limit: int | None = None) -> list[dict[str, Any]]:
    """A DataFrame's rows as JSON objects (its first ``limit`` rows when given)."""
    if frame is None:
        return []
    frame = frame.head(limit) if limit else frame
    return json.loads(frame.to_json(orient="records", date_format="iso"))


def row_records(rows: list[dict[str, Any]], columns: list[str], integers: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Plain rows (dicts of ``columns``) as JSON objects, each value as :func:`records` writes a
    DataFrame's cell, without pandas: a float to 10 decimals (pandas' ``to_json``), a datetime
    as ISO text to the millisecond; a column of numbers with a float or a gap in it holds floats
    (as a DataFrame's float column does), but one of ``integers`` (an ``Int64`` column) whole
    numbers."""
    floats = {c for c in columns if c not in integers and _float_column([r.get(c) for r in rows])}
    return [{c: _whole(r.get(c)) if c in integers else _cell(r.get(c), c in floats) for c in columns} for r in rows]


def _whole(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _float_column(values: list[Any]) -> bool:
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return bool(numbers) and len(numbers) + values.count(None) == len(values) and \
        any(isinstance(v, float) or v is None for v in values)


def _cell(value: Any, as_float: bool) -> Any:
    if hasattr(value, "strftime"):  # a datetime
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}"
    if as_float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    return fixed_float(value) if isinstance(value, float) else value


def fixed_float(value: float, decimals: int = 10) -> float | None:
    """``value`` as pandas' ``to_json`` writes it (its ujson encoder at ``double_precision=10``):
    ``decimals`` places, the last rounded half to even, read back; NaN and infinities as None."""
    if not math.isfinite(value):
        return None
    if abs(value) > 1e16 - 1 or (value != 0.0 and abs(value) < 1e-15):
        return float(f"{value:.{decimals}e}")
    negative, value = value < 0, abs(value)
    scale = 10 ** decimals
    whole = int(value)
    tmp = (value - whole) * scale
    frac = int(tmp)
    diff = tmp - frac
    if diff > 0.5:
        frac += 1
        if frac >= scale:
            frac, whole = 0, whole + 1
    elif diff == 0.5 and (frac == 0 or frac & 1):
        frac += 1
    out = float(f"{whole}.{frac:0{decimals}d}")
    return -out if negative else out


def _left(frame, limit: int | None) -> int:
    return max(0, len(frame) - limit) if limit else 0


# -- the analysis objects -------------------------------------------------------------------
def summary_fields(summary, top: int | None = None) -> dict[str, Any]:
    """A Summary's figures: its meta, headline and tables (``top`` kernels, the count of the
    rest in ``kernels_left_out``)."""
    return {"meta": summary.meta, "headline": summary.headline, "steps": records(summary.steps),
            "kernels": records(summary.kernels, top), "kernels_left_out": _left(summary.kernels, top),
            "ranks": records(summary.ranks), "comm": records(summary.comm), "memory": records(summary.memory)}


def summary_doc(summary, top: int | None = None) -> dict[str, Any]:
    return document("summary", **summary_fields(summary, top))


def verdict_doc(verdict) -> dict[str, Any]:
    return document("verdict", **verdict.as_dict())


def analyze_doc(summary, verdict, path: str, top: int | None = None, measured: dict[str, Any] | None = None) -> dict[str, Any]:
    """``npumagic analyze --json``: the summary's figures and the checklist verdict; ``measured``:
    what a capture measured beside the trace (its run's record), shown in ``meta`` as before it moved
    out of the Summary."""
    fields = summary_fields(summary, top)
    fields["meta"] = {**fields["meta"], **(measured or {})}
    return document("analyze", path=str(path), **fields, verdict=verdict.as_dict())


def advice_fields(advice) -> dict[str, Any]:
    return {"findings": [f.as_dict() for f in advice], "low_findings_not_shown": advice.hidden_low,
            "steps_inferred": advice.steps_inferred, "bottleneck": advice.lead.category if advice.lead else "",
            **({"untrusted": advice.untrusted} if advice.untrusted else {}),
            **({"otherwise": advice.otherwise} if advice.otherwise else {}),
            **({"ranks_left": advice.ranks_left} if advice.ranks_left else {}),
            **({"other_ranks_not_shown": {"ranks": list(advice.other_ranks), "findings": advice.others_hidden}}
               if advice.others_hidden else {})}


def advice_doc(advice, path: str | None = None) -> dict[str, Any]:
    """``npumagic advise --json``: the findings, most important first."""
    return document("advice", path=str(path if path is not None else advice.run), **advice_fields(advice))


COMPARE_KERNELS = 50  # the kernel deltas a comparison document lists (the rest are counted)


def comparison_doc(cmp, a: str | None = None, b: str | None = None) -> dict[str, Any]:
    """``npumagic compare --json``: the significance verdict, its evidence and the deltas.
    ``a``/``b`` the paths compared (default the comparison's own names)."""
    return document(
        "comparison", a=str(a if a is not None else cmp.a), b=str(b if b is not None else cmp.b),
        name_a=cmp.a, name_b=cmp.b, speedup=cmp.speedup, ci=list(cmp.ci), p_value=cmp.p_value,
        significant=cmp.significant, decided=not cmp.undecided(), undecided=cmp.undecided() or None,
        verdict=cmp.sentence(), decided_by=cmp.decided_by or None,
        explained_by=cmp.explained_by.column if cmp.explained_by else None, changed=cmp.changed,
        median_a_us=cmp.median_a_us, median_b_us=cmp.median_b_us, steps_a=cmp.n_a, steps_b=cmp.n_b,
        **({"untrusted": cmp.untrusted} if cmp.untrusted else {}),
        breakdown=records(cmp.breakdown), kernels=records(cmp.kernels, COMPARE_KERNELS),
        kernels_left_out=_left(cmp.kernels, COMPARE_KERNELS),
        **({"memory": memory_comparison(cmp.memory, cmp.a, cmp.b)} if cmp.memory is not None else {}))


def memory_comparison(m, a: str, b: str) -> dict[str, Any]:
    """The step peaks of a comparison's two runs (mean step peaks where both have 2+ steps)."""
    return {"verdict": m.verdict, "sentence": m.sentence(a, b), "peak_a_bytes": m.peak_a, "peak_b_bytes": m.peak_b,
            "delta_bytes": m.delta_bytes, "interval_bytes": list(m.interval) if m.interval else None,
            "floor_bytes": m.floor_bytes, "per_step": m.per_step, "operators": records(m.operator_changes)}


# -- the history ------------------------------------------------------------------------------
def runs_doc(rows: list[dict[str, Any]] | None, out: str) -> dict[str, Any]:
    """``npumagic runs --json``: the runs of an output directory, one object per run (``rows``:
    :func:`~npumagic.records.run_row`'s)."""
    from .records import RUN_LIST_COLUMNS

    return document("runs", out=str(out), runs=row_records(rows, RUN_LIST_COLUMNS, integers=("steps",)) if rows is not None else [])


def run_record(run) -> dict[str, Any]:
    """One run of the troubleshooting log: its facts, headline figures, verdict (with its
    findings) and the user's note."""
    from .records import when

    created = when(run.created)
    return {"name": run.name, "created": created.isoformat() if created is not None else None, "status": run.status,
            "kind": run.kind, "backend": run.backend, "device": run.device, "source": run.source,
            "run_dir": run.run_dir, "note": run.note, "message": run.message, "headline": run.headline.as_dict(),
            "verdict": run.verdict.to_dict()}


def run_outcome(outcome) -> dict[str, Any]:
    """One recorded capture: the run, its step and rank tables and the checklist verdict."""
    summary = outcome.summary
    return {**run_record(outcome.run), "notes": list(outcome.notes),
            "steps": records(summary.steps) if summary is not None else [],
            "ranks": records(summary.ranks) if summary is not None else [],
            "checklist": outcome.verdict.as_dict() if outcome.verdict is not None else None}


def command_doc(command: list[str], outcomes, ended) -> dict[str, Any]:
    """``npumagic run --json``: the command, how it ended, and each run it recorded (one, or one
    per trigger of an on-demand job)."""
    return document("run", command=list(command), status=ended.status, exit_status=ended.exit_status,
                    seconds=ended.seconds, runs=[run_outcome(o) for o in outcomes])


def trigger_doc(job_dir: str, ident: int, steps: int, into: str) -> dict[str, Any]:
    """``npumagic trigger --json``: the trigger sent and where its window will be written."""
    return document("trigger", job_dir=str(job_dir), id=ident, steps=steps, into=str(into))


def ab_scripts_doc(result) -> dict[str, Any]:
    """``npumagic ab --json``: the decision on two scripts' alternated captures, and its figures."""
    return document("ab", **result.to_dict())


def export_doc(runs, out: str, written: list[str] = ()) -> dict[str, Any]:
    """``npumagic export --json``: the troubleshooting log, and the files written (--md/--csv)."""
    return document("export", out=str(out), written=[str(w) for w in written], runs=[run_record(r) for r in runs])


# what each view draws, from the Summary
VIEW_TABLES = {"timeline": "steps", "steps": "steps", "kernels": "kernels", "memory": "memory", "comm": "comm",
               "matrix": "matrix"}


def show_doc(path: str, view: str, written: str, summary, options: dict[str, Any], placed=None,
             note: str = "") -> dict[str, Any]:
    """``npumagic show --json``: the image written and the table the view draws (``placed``: the
    regions or modules view's Table, None where the run recorded none; ``note``: what it says)."""
    places = view in ("regions", "modules")
    table = view if places else VIEW_TABLES[view]
    data = (records(placed.data.drop(columns="shown")) if placed is not None else []) if places \
        else records(getattr(summary, table))
    return document("show", path=str(path), view=view, written=str(written), rank=summary.meta.get("rank"),
                    options={"step_range" if k == "steps" else "zoom_ms" if k == "window" else k: list(v)
                             for k, v in options.items()},
                    table=table, data=data, **({"note": note} if places else {}))
