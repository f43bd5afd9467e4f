"""``regions``: every user annotation (``record_function``, torch_npu's mstx ranges) of a path or
run as a tree: calls, host time inclusive and exclusive, device time launched inside, and the
step's time outside every region; the median over the steps, and each step in the JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import TARGET, Command, Result, rank

RECORD_REGIONS = ("no user annotations recorded: wrap the parts of the step in "
                  "torch.profiler.record_function(\"name\"); on torch_npu, also mstx ranges "
                  "(torch_npu.npu.mstx.range_start/range_end, recorded with the profiler's mstx switch, "
                  "experimental_config mstx=True or msprof_tx=True on older torch_npu, at profiler_level Level1 "
                  "or above)")


TORCH_MARK = " (torch's)"  # an annotation torch writes itself (analysis.regions.TORCH_OWN)


@dataclass(frozen=True)
class Tree(Result):
    """A region or module table of one rank (``table``: a Regions or a Modules), or what to
    record where the run has none (``missing``)."""

    kind: str
    label: str
    rank: int | None
    table: Any
    missing: str

    def to_dict(self) -> dict[str, Any]:
        from ..jsonout import document, records

        t = self.table
        return document(self.kind, path=self.label, rank=self.rank, lane=t.lane, device=t.has_device,
                        recorded=not t.empty, what_to_record=self.missing if t.empty else None,
                        note=getattr(t, "note", None), skipped=t.skipped, median=records(_ordered(t.median)),
                        steps=records(t.per_step), **({"operators": records(t.operators)}
                                                       if getattr(t, "operators", None) is not None else {}))

    def text(self, width: int | None = None) -> str:
        t = self.table
        if t.empty:
            return f"{self.label}: {self.missing}"
        steps = t.per_step["step"].nunique()
        head = (f"{self.label}: {self.kind}, median of {steps} step{'s' if steps != 1 else ''} (ms"
                + ("" if t.has_device else "; no device work recorded") + ")")
        lines = [head, *_table(_ordered(t.median), width or 120, t.has_device)]
        operators = getattr(t, "operators", None)
        if operators is not None and len(operators):
            lines += _top_operators(operators, t.has_device, width or 120)
        note = getattr(t, "note", None)
        if note:
            lines.append(note)
        if t.skipped:
            lines.append("skipped: " + ", ".join(f"{n} {why}" for why, n in t.skipped.items()))
        return "\n".join(lines)


def _ordered(median):
    """Tree order (a parent, then its children), by pass where there is one."""
    keys = [c for c in ("pass",) if c in median]
    order = sorted(range(len(median)), key=lambda i: (
        *(median[k].iloc[i] != "forward" for k in keys), median["lane"].iloc[i] == "",
        median["lane"].iloc[i], tuple(str(median["path"].iloc[i]).split("/"))))
    return median.iloc[order].reset_index(drop=True)


def _table(median, width: int, device: bool) -> list[str]:
    from ..analysis.regions import torch_own

    columns = [("calls", "calls", "{:.0f}"), ("host_ms", "host", "{:.2f}"), ("self_host_ms", "self host", "{:.2f}")]
    if device:
        columns += [("device_ms", "device", "{:.2f}"), ("self_device_ms", "self device", "{:.2f}")]
    numbers = [[fmt.format(v) if v == v else "" for v in median[col]] for col, _, fmt in columns]
    sizes = [max([len(title)] + [len(x) for x in values]) for (_, title, _), values in zip(columns, numbers)]
    passes = list(median["pass"]) if "pass" in median else [""] * len(median)
    names = [("  " * int(d)) + str(n) + (f" [{p}]" if p and p != "forward" else "") + TORCH_MARK * torch_own(n)
             for d, n, p in zip(median["depth"], median["name"], passes)]
    room = max(12, width - sum(s + 2 for s in sizes))
    names = [n if len(n) <= room else n[: room - 1] + "…" for n in names]
    name_size = min(room, max([4] + [len(n) for n in names]))
    lines = ["name".ljust(name_size) + "".join("  " + t.rjust(s) for (_, t, _), s in zip(columns, sizes))]
    for i, name in enumerate(names):
        lines.append(name.ljust(name_size) + "".join("  " + v[i].rjust(s) for v, s in zip(numbers, sizes)))
    return lines


def _top_operators(operators, device: bool, width: int, modules: int = 5) -> list[str]:
    """The operators (and their input shapes) of the ``modules`` modules whose operators took the
    most time: the seed's step two."""
    key = "device_ms" if device else "host_ms"
    top = operators.groupby("path", sort=False)[key].sum().sort_values(ascending=False).head(modules).index
    lines = [f"top operators of the {len(top)} busiest modules ({'device' if device else 'host'} ms per step):"]
    for path in top:
        lines.append(f"  {path}")
        for _, op in operators[operators["path"] == path].iterrows():
            line = f"    {op[key]:8.3f}  {op['operator']}" + (f"  {op['shapes']}" if op["shapes"] else "")
            lines.append(line if len(line) <= width else line[: width - 1] + "…")
    return lines


def regions(places, target: str, rank: int | None = None) -> Tree:
    from ..analysis.regions import regions as region_table

    label, trace = places.trace(target)
    chosen = _rank(trace, rank, label)
    return Tree("regions", label, chosen, region_table(trace.events, trace.steps, chosen, warn=False), RECORD_REGIONS)


def _rank(trace, rank: int | None, label: str) -> int | None:
    from ..errors import NpumagicError

    ranks = sorted(set(trace.events["rank"].tolist()))
    if rank is not None and rank not in ranks:
        raise NpumagicError(f"rank {rank} not in {label}; ranks: {ranks}")
    return rank if rank is not None else (ranks[0] if ranks else None)


COMMAND = Command(
    "regions", "the time of each record_function / mstx region: host, device launched inside, outside every region",
    (TARGET, rank("rank to read (default the lowest)")), regions,
    about="Every user annotation (torch.profiler.record_function, torch_npu mstx ranges) of a path or run as a tree: "
          "calls, host time inclusive and exclusive, the device time of the work launched inside (through each "
          "launch's correlation id) and the step's time outside every region; the median over the steps (each step "
          "in the JSON). Says what to record where the run has none.")
