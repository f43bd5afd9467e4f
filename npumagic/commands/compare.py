"""``compare``: whether B's step time differs from the reference A's beyond noise, the breakdown
component that explains it and the kernels that changed. Both sides are located before either
is read, and one run or one path on both sides is refused ("no difference" would read as a
measurement); two runs are compared with their history's run-to-run noise, a run against a path
with the run's context (what changed)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import Arg, Command, Result


@dataclass(frozen=True)
class Compared(Result):
    comparison: Any
    label_a: str
    label_b: str
    verification: Any = None  # --fix RULE: A's finding of RULE, predicted against what B achieved
    kept: bool = False  # the verification is kept in the history
    read_from: str = ""  # no --fix: the fix was read from this change (shown, never kept)
    parts: tuple = ()  # --by-region / --by-module: PartComparisons

    def to_dict(self) -> dict[str, Any]:
        from ..jsonout import comparison_doc

        doc = comparison_doc(self.comparison, self.label_a, self.label_b)
        if self.verification is not None:
            doc["verification"] = dict(self.verification.as_dict(), kept=self.kept,
                                       **({"read_from": self.read_from} if self.read_from else {}))
        for part in self.parts:
            doc[f"by_{part.what[:-1]}"] = parts_doc(part)
        return doc

    def text(self, width: int | None = None) -> str:
        from ..render.text import comparison_text
        from ..calibration import fix_line

        return (comparison_text(self.comparison, width=width) + fix_line(self.verification, self.kept, read_from=self.read_from)
                + "".join("\n\n" + _part_text(part, width) for part in self.parts))

    def html(self) -> str:
        import html

        from ..calibration import fix_line

        return (self.comparison._repr_html_() + fix_line(self.verification, self.kept, html=True, read_from=self.read_from)
                + "".join(f"<pre>{html.escape(_part_text(part, None))}</pre>" for part in self.parts))


def _part_text(part, width: int | None) -> str:
    from ..analysis.compare_parts import parts_text

    return parts_text(part, width=width or 120)


def parts_doc(part) -> dict[str, Any]:
    """A region or module comparison's JSON: what it judged, the noise, each part's row."""
    from ..jsonout import clean, records

    return clean({"a": part.a, "b": part.b, "noise": part.noise.describe(), "rows": records(part.table)})


def part_comparisons(places, a: str, b: str, name_a: str, name_b: str, noise, by_region: bool,
                     by_module: bool) -> tuple:
    """``a`` and ``b`` (paths or runs) compared region by region and/or module by module, their
    profiler output read again."""
    if not (by_region or by_module):
        return ()
    from ..analysis.compare_parts import compare_parts
    from ..analysis.modules import modules, sequence_files
    from ..analysis.regions import regions

    (_, ta), (_, tb) = places.trace(a), places.trace(b)
    found = []
    if by_region:
        found.append(compare_parts(regions(ta.events, ta.steps, warn=False), regions(tb.events, tb.steps, warn=False),
                                   name_a, name_b, noise))
    if by_module:
        tables = [modules(t.events, t.steps, sequence_files(t.meta, None), warn=False) for t in (ta, tb)]
        found.append(compare_parts(*tables, name_a, name_b, noise))
    return tuple(found)


def side_names(a, b, rank_a: int | None = None, rank_b: int | None = None) -> tuple[str, str]:
    """What the comparison calls each side: the run's name, else the path's last part, with its
    folder where both are the same (two rank0_ascend_pt directories), and its rank where both are
    one job's (``--rank-a 0 --rank-b 1``)."""
    name_a, name_b = a.run or Path(a.label).name, b.run or Path(b.label).name
    if name_a == name_b:
        name_a, name_b = (f"{Path(t.label).parent.name}/{Path(t.label).name}" for t in (a, b))
    if name_a == name_b and rank_a != rank_b:
        name_a, name_b = f"{name_a} rank {rank_a}", f"{name_b} rank {rank_b}"
    return name_a, name_b


def compare(places, a: str, b: str, rank_a: int | None = None, rank_b: int | None = None,
            fix: str | None = None, by_region: bool = False, by_module: bool = False) -> Compared:
    where_a, where_b = places.locate(a), places.locate(b)  # a missing path is said before pandas is imported
    from ..named_runs import two_sides

    two_ranks = None not in (rank_a, rank_b) and rank_a != rank_b  # two ranks of one job's folder
    for kind, i in (("runs", 1), ("paths", 0)):  # before either side is read
        if where_a[i] is not None and where_b[i] is not None and not (i == 0 and two_ranks):
            two_sides(str(Path(where_a[i]).resolve()) if i == 0 else where_a[i],
                      str(Path(where_b[i]).resolve()) if i == 0 else where_b[i], kind)
    side_a, side_b = places.target(a, rank_a, where_a), places.target(b, rank_b, where_b)
    if side_a.run and side_b.run:  # with the history's run-to-run noise
        cmp = places.runs.compare(side_a.run, side_b.run)
    else:
        from ..analysis.compare import compare as compare_summaries

        cmp = compare_summaries(side_a.summary, side_b.summary, *side_names(side_a, side_b, rank_a, rank_b), side_a.context,
                                side_b.context, facts_a=side_a.facts, facts_b=side_b.facts)
    parts = part_comparisons(places, a, b, cmp.a, cmp.b, cmp.noise, by_region, by_module)
    if fix is None:  # the fix read from what changed, if the change names exactly one: shown, not kept
        from ..calibration import guess_fix

        guessed = guess_fix(side_a.context, side_b.context, side_a.summary, side_b.summary,
                            lambda: findings_of(places, side_a, rank_a is None))
        checked, read_from = guessed if guessed else (None, "")
        return Compared(cmp, side_a.label, side_b.label, checked, False, read_from, parts=parts)
    return Compared(cmp, side_a.label, side_b.label, *verified(places, side_a, side_b, fix, rank_a is None), parts=parts)


def findings_of(places, side, whole_run: bool) -> list:
    """The reference side's findings: a run's with its environment where a session has it."""
    if side.run is not None and places.session is not None and whole_run:  # with the run's environment
        return places.session.advise(side.run).findings
    from ..analysis.advice import advise_run

    return advise_run(side.summary, side.label, facts=side.facts).findings


def verified(places, side_a, side_b, fix: str, whole_run: bool):
    """A's finding of rule ``fix`` against what B achieved, and whether it was kept (both sides
    runs of a history that can be written: the CLI reads its history only)."""
    from ..calibration import keep, verify_fix

    findings = findings_of(places, side_a, whole_run)
    checked = verify_fix(fix, side_a.label, side_b.label, side_a.summary, side_b.summary, findings)
    both_runs = side_a.run is not None and side_b.run is not None
    return checked, keep(places.runs.store if both_runs else None, side_a.run, side_b.run, checked)


COMMAND = Command(
    "compare", "compare two outputs: step time with a 95%% CI, breakdown and kernel deltas",
    (Arg("a", "the reference: an output path, or a run of the history (a name, or -2 for the run before the latest)",
         positional=True, metavar="path_a"),
     Arg("b", "the run to check: an output path, or a run of the history (a name, or -1 for the latest)",
         positional=True, metavar="path_b"),
     Arg("rank_a", "rank of the reference to compare (default the lowest)", int),
     Arg("rank_b", "rank of the run to check (default the lowest)", int),
     Arg("fix", "the rule of A's finding whose fix B applied: its predicted saving against the achieved one "
                "(kept in a writable history, for the rule's calibration); without it, a change that names one of A's "
                "fixes is shown the same way, not kept", metavar="RULE"),
     Arg("by_region", "also compare each record_function region's per-step time with the same statistics", bool),
     Arg("by_module", "also compare each nn.Module's per-step time, forward and backward (recorded with "
                      "--modules)", bool)),
    compare, about="Compare run or path B against the reference A: whether B's step time differs beyond noise "
                   "(speedup, 95% CI, p-value), the component that explains it, and the kernels that changed most.")
