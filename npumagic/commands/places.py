"""Where a command finds what it is asked about, resolved once for every command and shell: a
profiler output path, or a run of one history by name (or -1, -2: the latest runs).

A word that may be a run name is looked up in the history first; what cannot be a run name
(``/``, ``~``, a leading dot) is a path. Each shell's :class:`Places` says how a path is checked
(the MCP server: below its roots), read (the CLI: with a progress bar, Dask) and named, and what
a word that is neither is told."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import NpumagicError, TraceError
from ..names import RUN_NAME

COUNTED_BACK = re.compile(r"-\d+")  # -1 the latest run, -2 the one before


@dataclass(frozen=True)
class Target:
    """A path or a run, read: ``label`` names it in answers (the path as given, or the run's
    name), ``run`` is the run's name (None for a path), ``context`` the run's configuration
    (what a comparison says changed; None for a path), ``facts`` what its record knows beside
    its trace (:class:`~npumagic.analysis.run_facts.RunFacts`; None for a path)."""

    label: str
    summary: Any
    run: str | None = None
    path: Path | None = None
    context: dict | None = None
    facts: Any = None


class Places:
    """Paths, and the runs of ``runs`` (a :class:`~npumagic.named_runs.NamedRuns`, or None: no
    history, every target a path), or of a ``session``'s history (its runs are advised with their
    environment). Subclasses change how a path is checked, read and labelled."""

    def __init__(self, runs: Any = None, out: str | Path | None = None, session: Any = None) -> None:
        self._session = session
        self._runs = runs if runs is not None or session is None else session.runs
        self.out = out if out is not None or session is None else session.output_dir

    @property
    def session(self):
        """The :class:`~npumagic.session.Session` of the history, where there is one."""
        return self._session

    @property
    def runs(self):
        """The history's runs (None where there is none)."""
        return self._runs

    def has_history(self) -> bool:
        return self.runs is not None

    def check(self, ref: str) -> Path:
        """``ref`` as a path to read; a missing one is refused before pandas is imported."""
        if not Path(ref).exists():
            raise TraceError(ref, "no such file or directory")
        return Path(ref)

    def read(self, path: Path, rank: int | None):
        from ..analysis import job

        return job.analyze(path, rank=rank, progress=False)

    def label(self, ref: str) -> str:
        return ref

    def destination(self, ref: str) -> Path:
        """Where a command writes the file ``ref`` names (its folder must exist already)."""
        path = Path(ref).expanduser()
        if not str(ref).strip() or path.is_dir():
            raise NpumagicError(f"{ref!r} is no file name to write")
        if not path.parent.is_dir():
            raise NpumagicError(f"{ref}: no folder {path.parent} to write it in")
        return path

    def unknown(self, ref: str) -> Exception | None:
        """The error for a word that is neither a run nor an existing path (None: read it as a path)."""
        return None

    def locate(self, ref: str) -> tuple[Path | None, str | None]:
        """(path, None) of a path, or (None, run name) of a run; nothing is read yet."""
        named = bool(RUN_NAME.match(ref) or COUNTED_BACK.fullmatch(ref))
        if named and self.has_history() and (COUNTED_BACK.fullmatch(ref) or self.runs.has(ref)):
            return None, self.runs.resolve(ref)
        if named and not Path(ref).exists():
            wrong = self.unknown(ref)
            if wrong is not None:
                raise wrong
        return self.check(ref), None

    def target(self, ref: str, rank: int | None = None,
               located: tuple[Path | None, str | None] | None = None) -> Target:
        """``ref`` read (``located``: as :meth:`locate` found it); ``rank``: that rank of a job."""
        path, name = located or self.locate(ref)
        if path is not None:
            return Target(self.label(ref), self.read(path, rank), path=path)
        summary = self.runs.summary(name)
        if rank is not None:
            if rank not in summary.per_rank:
                raise NpumagicError(f"rank {rank} not in run {name!r}; ranks: {sorted(summary.per_rank) or [0]}")
            summary = summary.per_rank[rank]
        return Target(name, summary, run=name, context=self.runs.context(name), facts=self.runs.facts(name))

    def trace(self, ref: str) -> tuple[str, Any]:
        """(label, the normalized Trace) of ``ref``, its profiler files read again: what a
        run's summary does not keep (annotations, module spans) needs them."""
        path, name = self.locate(ref)
        if name is not None:
            path = self.runs.run_dir(name)
            if not path or not Path(path).exists():
                raise NpumagicError(f"run {name!r}: its profiler output is gone ({path or 'never written'})")
        from ..analysis import load

        return (self.label(ref) if name is None else name), load(path)

    def advise(self, target: Target, every_rank: bool):
        """The ranked findings of ``target`` (all ranks and low ones with ``every_rank``)."""
        if target.run is not None and self.session is not None:  # with the run's environment
            return self.session.advise(target.run, every_rank=every_rank, low=every_rank)
        from ..analysis.advice import advise_run

        return advise_run(target.summary, target.label, every_rank=every_rank, low=every_rank, facts=target.facts)
