"""The same region or module across two runs (``%npucompare A B --by-region`` / ``--by-module``):
each one's per-step times judged as the step time is (:func:`.compare.step_verdict`: Welch's t on
log times, the history's run-to-run noise, the 5% floor without replicates), so "which layer got
slower" has an answer beyond noise.

A part is matched by its tree path (and pass, for modules), its lane's thread id left out: threads
are numbered anew in every run. The time judged is the device time where both runs have device
work, else the host time (inclusive). A part missing from some step of a side has no test."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .compare import MIN_EFFECT, Noise, step_verdict

PART_COLUMNS = ["pass", "path", "measure", "a_ms", "b_ms", "b_over_a", "ci_low", "ci_high", "p_value", "significant",
                "verdict"]


@dataclass(frozen=True)
class PartComparison:
    """``table`` (:data:`PART_COLUMNS`, the significant changes first, then by the larger time)
    of the regions or modules (``what``) of runs ``a`` and ``b``."""

    what: str
    a: str
    b: str
    table: pd.DataFrame
    noise: Noise

    def changed(self) -> pd.DataFrame:
        return self.table[self.table["significant"]]


def _samples(per_step: pd.DataFrame, column: str) -> dict[tuple[str, str], np.ndarray]:
    """Per (pass, path): the per-step values of ``column`` (0 in a step without it), lanes summed."""
    frame = per_step.assign(**{"pass": per_step["pass"] if "pass" in per_step else ""})
    steps = sorted(frame["step"].unique())
    wide = frame.groupby(["pass", "path", "step"], sort=False)[column].sum().unstack("step").reindex(columns=steps)
    return {key: row.fillna(0.0).to_numpy(float) for key, row in wide.iterrows()}


def compare_parts(a, b, name_a: str = "A", name_b: str = "B", noise: Noise | None = None,
                  min_effect: float = MIN_EFFECT) -> PartComparison:
    """Regions (or Modules) ``a`` and ``b`` compared part by part (see :class:`PartComparison`)."""
    noise = noise if noise is not None else Noise()
    column = "device_ms" if a.has_device and b.has_device else "host_ms"
    measure = "device" if column == "device_ms" else "host"
    sa, sb = _samples(a.per_step, column), _samples(b.per_step, column)
    rows = []
    for key in list(sa) + [k for k in sb if k not in sa]:
        xa, xb = sa.get(key), sb.get(key)
        ma = float(np.median(xa)) if xa is not None else math.nan
        mb = float(np.median(xb)) if xb is not None else math.nan
        row = {"pass": key[0], "path": key[1], "measure": measure, "a_ms": ma, "b_ms": mb, "b_over_a": math.nan,
               "ci_low": math.nan, "ci_high": math.nan, "p_value": math.nan, "significant": False}
        if xa is None or xb is None:
            row["verdict"] = f"only in {name_a if xb is None else name_b}"
        else:
            ok, test, speedup, beyond, by_test = step_verdict(xa, xb, noise, min_effect)
            if not ok:
                row["verdict"] = "absent from some steps: no test"
            else:
                low, high = test.ci
                row.update(b_over_a=1 / speedup, ci_low=1 / high if high else math.nan,
                           ci_high=1 / low if low else math.inf, p_value=test.p_value, significant=by_test)
                row["verdict"] = ("slower" if speedup < 1 else "faster") if by_test else "no change beyond noise"
        rows.append(row)
    table = pd.DataFrame(rows, columns=PART_COLUMNS)
    if len(table):
        size = np.fmax(table["a_ms"].to_numpy(float), table["b_ms"].to_numpy(float))
        order = np.lexsort((-np.nan_to_num(size), ~table["significant"].to_numpy(bool)))
        table = table.iloc[order].reset_index(drop=True)
    return PartComparison("modules" if "pass" in a.per_step else "regions", name_a, name_b, table, noise)


def parts_text(cmp: PartComparison, rows: int = 20, width: int | None = 120) -> str:
    """The comparison as a table: significant changes first, ``rows`` rows at most."""
    t = cmp.table
    unit = f"{t['measure'].iloc[0]} ms per step, medians" if len(t) else "ms"
    head = f"by {cmp.what[:-1]}: {cmp.b} against {cmp.a} ({unit}; B/A with its 95% interval)"
    if t.empty:
        return head + "\n  neither run recorded any"
    names = [(f"{p} " if p else "") + str(path) for p, path in zip(t["pass"], t["path"])]
    room = max(16, (width or 120) - 62)
    names = [n if len(n) <= room else "…" + n[-(room - 1):] for n in names]
    size = max(len(n) for n in names[:rows])
    lines = [head]
    for name, (_, r) in list(zip(names, t.iterrows()))[:rows]:
        ratio = (f"{r['b_over_a']:.2f}x ({r['ci_low']:.2f}-{r['ci_high']:.2f})" if r["b_over_a"] == r["b_over_a"]
                 else "")
        lines.append(f"  {name.ljust(size)}  {_ms(r['a_ms']):>9}  {_ms(r['b_ms']):>9}  {ratio:<22} {r['verdict']}")
    if len(t) > rows:
        lines.append(f"  ({len(t) - rows} more; the JSON has them all)")
    return "\n".join(lines)


def _ms(value: float) -> str:
    return "-" if value != value else f"{value:,.3f}"
