"""This kernel's runs by name: resolving a name, ``-1`` or ``None`` to a run (another live
kernel's runs are taken by name only), the baseline, which two runs ``%npucompare`` means, the
runs' summaries and traces (cached), notes and removal, and the history's between-run noise and
alert bands."""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from . import analysis
from .wording import say
from .errors import NpumagicError
from .history import STEP_FIELDS, HistoryStore
from .names import check_name
from .records import Run
from .run_files import delete_files

if TYPE_CHECKING:  # the analyses are imported where used: listing the runs needs none of them (`npumagic runs`)
    import numpy as np
    import pandas as pd

    from .analysis.alerts import Band
    from .analysis.changed import AppliedFix
    from .analysis.compare import Comparison, Noise
    from .analysis.run_facts import RunFacts
    from .analysis.summary import Summary


def two_sides(a: str, b: str, what: str = "runs") -> None:
    """Refuse a comparison of one run (or one path, resolved) with itself: its answer would be
    "no difference", which reads as a measurement. ``%npucompare``, ``npumagic compare`` and the
    MCP server's compare all refuse it here."""
    if a == b:
        raise NpumagicError(f"both sides are {a!r}; name two different {what}")


class NamedRuns:
    """The history store of ``output_dir`` as this kernel sees it: run names, the baseline, and a
    cache of summaries (traces can be large: only the latest one is kept)."""

    def __init__(self, output_dir: Path, create: bool = True) -> None:
        """``create=False``: read an existing history only (the CLI's reading commands): nothing
        is created or written, not even a summary computed from a run's files."""
        self.output_dir = output_dir
        self.store = HistoryStore(output_dir, create=create)
        self.baseline: str | None = None
        # cached by (name, run id): a run removed elsewhere (the CLI, another kernel) and a new one
        # recorded under its name has another id (AUTOINCREMENT never reuses one), so the old
        # run's summary or trace is never read as the new one's
        self._summaries: dict[str, tuple[int, Summary]] = {}
        self._trace: tuple[str, int, analysis.Trace] | None = None  # the latest one only: traces can be large

    def keep(self, name: str, summary: Summary | None = None, trace: "analysis.Trace | None" = None) -> None:
        """Cache a just recorded run's summary and trace."""
        run_id = self.store.get(name).id
        if summary is not None:
            self._summaries[name] = (run_id, summary)
        if trace is not None:
            self._trace = (name, run_id, trace)

    def resolve(self, name: str | None) -> str:
        """A run name from ``name``: a name, -1/-2 (latest, second latest), or None (latest). The
        latest are counted among the runs of this kernel and of kernels that have ended: another
        running kernel's runs on this host (a second notebook on the same output directory) are
        taken by name."""
        relative = name is None or (name.lstrip("-").isdigit() and name.startswith("-"))
        if not relative:
            self.store.get(name)  # raises UnknownRun with the known names
            return name
        names, every = self.store.names(other_live_kernels=False), self.store.names()
        others = len(every) - len(names)
        elsewhere = (f" ({others} more {'is' if others == 1 else 'are'} another running kernel's, a second notebook on "
                     f"this output directory: name those; {say('list_runs')})") if others else ""
        if not names:
            if every:
                raise NpumagicError(f"no run of this kernel or of an ended one{elsewhere}")
            raise NpumagicError(f"no runs recorded yet; {say('first_run')}")
        if name is None:
            return names[-1]
        k = int(name)
        if k == 0:
            raise NpumagicError("-0 is no run: -1 is the latest, -2 the one before")
        if -k > len(names):
            raise NpumagicError(f"only {len(names)} run{'s' if len(names) != 1 else ''} to count back from; "
                                f"{name} is out of range{elsewhere}")
        return names[k]

    def trace(self, name: str) -> "analysis.Trace":
        """The run's parsed trace (re-read from its output directory; only the timeline and
        per-rank redraws need it)."""
        run = self.store.get(name)
        if self._trace is None or self._trace[:2] != (name, run.id):
            if not run.run_dir or not Path(run.run_dir).exists():
                raise NpumagicError(f"run {name!r} has no output directory left ({run.run_dir}): the timeline needs "
                                    f"the trace files; its summary, steps, kernels, advice and comparisons are in "
                                    f"the history")
            self._trace = (name, run.id, analysis.load(run.run_dir))
        return self._trace[2]

    def summary(self, name: str) -> Summary:
        """The run's Summary: from this session, else the history, else re-parsed from its
        output directory (runs recorded before summaries were stored; then stored)."""
        run = self.store.get(name)
        if self._summaries.get(name, (None,))[0] != run.id:
            stored = self.store.summary(name)
            if stored is None:
                if run.status in ("no-steps", "no-trace"):
                    raise NpumagicError(f"run {name!r} recorded nothing ({run.status}): there is nothing to analyse; "
                                        "profile it again so that at least one step completes in the active window")
                if not run.run_dir or not Path(run.run_dir).exists():
                    raise NpumagicError(f"run {name!r}: no summary of it could be read from the history and its "
                                        f"output directory is gone ({run.run_dir}): nothing is left to analyse")
                stored = analysis.summarize(self.trace(name))
                if not self.store.readonly:
                    self.store.put_summary(name, stored)
            self._summaries[name] = (run.id, stored)
        return self._summaries[name][1]

    def against_baseline(self, name: str, summary: Summary) -> Comparison | None:
        """Verify against the baseline when it is comparable: a run of the same kind (a capture,
        or an imported job) on the same backend; else against nothing."""
        if self.baseline is None or self.baseline == name:
            return None
        base, run = self.store.get(self.baseline), self.store.get(name)
        if base.kind != run.kind or base.backend != run.backend:
            return None
        try:
            return self.compare(self.baseline, name, summary_b=summary)
        except NpumagicError:
            return None

    def noise(self, *names: str) -> Noise:
        """Between-run noise from the history's replicates: finished runs with the same
        configuration (cell source, options, environment, versions, backend, device, DataLoader
        settings), on the backend and device of ``names``."""
        return history_noise(self.store, names)

    def component_noise(self, *names: str) -> dict[str, Noise]:
        """Each step component's own between-run noise (sigma in us) from the replicates
        :meth:`noise` reads: a component can drift between runs under steps too jittery to show it."""
        from .analysis.compare import NOT_COMPONENTS

        columns = tuple(f for f in STEP_FIELDS if f.endswith("_us") and f not in NOT_COMPONENTS)
        return history_noise(self.store, names, columns)

    def context(self, name: str) -> dict:
        """A run's record as the comparison's "what changed" section reads it."""
        return run_context(self.store.get(name))

    def applied(self, a: str, b: str, summary_b: Summary) -> AppliedFix | None:
        """The fix run ``b`` applied to ``a``: ``a``'s finding whose fix the change evidently made
        (:mod:`.analysis.changed`, its evidence said), else ``a``'s Next change (evidence ""), the
        finding its checklist told the user to act on; None where ``a`` has no finding leading."""
        from .analysis.advice import advise
        from .analysis.changed import AppliedFix, applied_fix

        summary_a = self.summary(a)
        told = advise(summary_a, a, self.facts(a))
        read = applied_fix(self.context(a), self.context(b), summary_a, summary_b, told.findings)
        if read is not None:
            return read
        lead = told.lead.finding if told.lead is not None else None
        return AppliedFix(lead, "") if lead is not None else None

    def facts(self, name: str) -> RunFacts:
        """What run ``name``'s record knows beside its trace, for the analyses that read it."""
        return run_facts(self.store.measured(name))

    # -- the checklist's later steps ------------------------------------------------------------
    def compare_pair(self, a: str | None, b: str | None) -> tuple[str, str]:
        """The two runs ``%npucompare A B`` means: both named; with one, that run (default the
        latest) against the baseline, or against the run before it when there is no other; the
        baseline named alone, against the latest run. A run that recorded nothing (no steps, no
        trace) is never the reference taken by default."""
        if b is not None:
            a, b = self.resolve(a), self.resolve(b)
        else:
            named, b = a is not None, self.resolve(a)
            a = self.baseline
            if a is None or a == b:
                names = self.store.names(other_live_kernels=False)
                names = names if b in names else self.store.names()  # b named: another kernel's run
                i = names.index(b)
                recorded = [n for n in names if n != b and self._recorded(n)]
                if named and b == a:  # `%npucompare baseline`: the baseline against the latest run
                    if not recorded:
                        raise NpumagicError(f"a comparison needs two runs; {b} is the only one that recorded steps: "
                                            "profile another one first")
                    return b, recorded[-1]
                earlier = [n for n in recorded if names.index(n) < i]
                if not earlier:
                    raise NpumagicError("a comparison needs two runs that recorded steps; profile another one first")
                a = earlier[-1]
        two_sides(a, b)
        return a, b

    def _recorded(self, name: str) -> bool:
        """Whether run ``name`` recorded at least one step (else it is no reference)."""
        run = self.store.get(name)
        steps = run.headline.steps if run.headline.steps is not None else run.steps_seen
        return run.status not in ("no-steps", "no-trace", "running") and bool(steps)


    def compare(self, a: str, b: str, summary_b: Summary | None = None) -> Comparison:
        """B against A, with what changed and the between-run noise of the history."""
        from .analysis.compare import compare

        return compare(self.summary(a), summary_b if summary_b is not None else self.summary(b), a, b,
                       self.context(a), self.context(b), noise=self.noise(a, b), facts_a=self.facts(a),
                       facts_b=self.facts(b), component_noise=self.component_noise(a, b))


    # -- the history as a whole -------------------------------------------------------------------
    def has(self, name: str) -> bool:
        return self.store.exists(name)

    def records(self) -> list[Run]:
        """Every run of the history, oldest first."""
        return self.store.runs()

    def table(self) -> pd.DataFrame:
        """The runs as one row each (``%npuruns``)."""
        return self.store.table()

    def rows(self) -> list[dict]:
        """The runs as plain rows, one each (``npumagic runs``: no pandas)."""
        return self.store.rows()

    def run_dir(self, name: str) -> str | None:
        """Where run ``name``'s profiler output was written."""
        return self.store.get(name).run_dir

    def step_walls(self, name: str) -> list[float]:
        """Run ``name``'s step times (us), as recorded."""
        self.store.get(name)  # raises UnknownRun with the known names
        return self.store.step_walls(name).get(name, [])

    def band(self, like: str, include: bool) -> Band | None:
        """The alert band of run ``like``'s configuration: see :func:`history_band`."""
        return history_band(self.store, like, include)

    def kernel_history(self, kernel: str) -> tuple[str, pd.DataFrame]:
        """One kernel across the history: (its name, a table run / count / total_us / mean_us).
        ``kernel`` is an exact name, else a part of one (the matching kernel with most time)."""
        rows = self.store.kernels()
        exact = rows[rows["name"] == kernel]
        rows = exact if len(exact) else rows[rows["name"].str.contains(kernel, regex=False)]
        if rows.empty:
            raise NpumagicError(f"no kernel matching {kernel!r} in the history")
        name = kernel if len(exact) else rows.groupby("name")["total_us"].sum().idxmax()
        table = rows[rows["name"] == name].groupby("run", sort=False).agg(
            count=("count", "sum"), total_us=("total_us", "sum")).reset_index()
        table["mean_us"] = table["total_us"] / table["count"]
        return name, table

    def set_baseline(self, name: str) -> None:
        self.summary(name)  # must be analysable
        self.baseline = name

    def note(self, name: str, text: str) -> str | None:
        """Set run ``name``'s note; return the note it replaces, if any."""
        earlier = self.store.get(name).note
        self.store.update(name, note=text)
        return earlier or None

    def remove(self, name: str, files: bool = False) -> Run:
        """Remove a run from the history; with ``files``, first delete its output directory.

        Only a directory npumagic created for the run, inside ``output_dir``, is ever deleted
        (not one given with ``--out`` that existed, not an imported one, not the output
        directory itself or another run's); otherwise NpumagicError says why and the run stays.
        The history row goes only once the files are gone."""
        run = self.store.get(name)
        if files:
            delete_files(run, self.output_dir, self.store)
        run = self.store.remove(name)
        self._summaries.pop(name, None)
        if self._trace is not None and self._trace[0] == name:
            self._trace = None
        if self.baseline == name:
            self.baseline = None
        return run



def history_noise(store: HistoryStore, names, columns: tuple[str, ...] | None = None):
    """:meth:`NamedRuns.noise`; with ``columns`` (step components), :meth:`NamedRuns.component_noise`:
    a Noise of each column's times themselves (not their logarithms), by column."""
    from .analysis.compare import between_run_noise

    runs = [r for r in store.runs() if r.status == "ok" and r.kind == "profile"]
    wanted = {(r.backend, r.device) for r in runs if r.name in names}
    walls = store.step_walls()
    same = [r for r in runs if (r.backend, r.device) in wanted and len(walls.get(r.name, ()))]

    def groups(times: dict[str, list]) -> list[list]:
        by: dict[str, list] = {}
        for r in same:
            if len(times.get(r.name, ())):
                by.setdefault(_configuration(r), []).append(times[r.name])
        return list(by.values())

    if columns is None:
        return between_run_noise(groups(walls))
    if not any(len(g) > 1 for g in groups(walls)):
        return {}  # no replicates: no query per column
    return {c: between_run_noise(groups(times), log=False) for c, times in store.step_columns(columns).items()}


def history_band(store: HistoryStore, like: str, include: bool) -> Band | None:
    """The band learned from the finished runs with run ``like``'s configuration recorded before
    it (and ``like`` itself with ``include``); None with too few."""
    from .analysis.alerts import learn_band

    runs = store.runs()
    i = next((k for k, r in enumerate(runs) if r.name == like), None)
    if i is None:
        store.get(like)  # raises UnknownRun with the known names
    config, walls = _configuration(runs[i]), store.step_walls()
    medians = [median(walls[r.name]) for r in runs[: i + 1 if include else i]
               if r.status == "ok" and r.kind == "profile" and len(walls.get(r.name, ())) and _configuration(r) == config]
    return learn_band(medians)


def median(values) -> float:
    """The median of ``values`` as numpy's, NaN where one is NaN, without numpy (``npumagic check``)."""
    values = [float(v) for v in values]
    return math.nan if any(math.isnan(v) for v in values) else statistics.median(values)


def run_context(run: Run) -> dict:
    """A run's record as the comparison's "what changed" section reads it."""
    return {"source": run.source, "arguments": run.arguments, "environment": run.environment,
            "versions": run.versions, "backend": run.backend, "device": run.device, "dataloaders": run.dataloaders}


def run_facts(run: Run) -> RunFacts:
    """A run's record as the analyses read it beside the run's Summary."""
    from .analysis.run_facts import RunFacts

    return RunFacts(run.step_times, run.device_neighbours, {k: str(v) for k, v in (run.environment or {}).items()})


def _configuration(run: Run) -> str:
    """What makes two runs replicates: everything recorded about how they ran but the name."""
    import json

    arguments = {k: v for k, v in run.arguments.items() if k not in ("name", "out", "line")}
    return json.dumps([(run.source or "").strip(), arguments, run.environment, run.versions, run.backend, run.device,
                       run.dataloaders], sort_keys=True, default=str)


_TRACE_SUFFIX = re.compile(r"(\.pt\.trace)?\.json(\.gz)?$")


def name_for(path: Path) -> str:
    """A run name from a directory or trace file name: ``level1``, ``rank0_ascend_pt``."""
    stem = _TRACE_SUFFIX.sub("", path.name) if path.is_file() else path.name
    # ASCII only (a run name becomes part of paths), and no ".." (日本語 and a..b gave invalid names)
    name = re.sub(r"\.{2,}", ".", re.sub(r"[^A-Za-z0-9_.-]+", "_", stem)).strip("._-")[:60]
    name = name if name and (name[0].isalpha() or name[0] == "_") else f"run_{name}" if name else "loaded"
    try:
        return check_name(name)
    except NpumagicError:
        return "loaded"
