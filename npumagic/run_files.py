"""A run's folders on disk: creating its output directory, where its figures go, and deleting
its files only where npumagic created them (never the history, the figures folder, another
run's files or a folder the user gave)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .errors import NpumagicError
from .history import DB_NAME, HistoryStore
from .names import file_stem
from .records import Run
from .safeio import linked


def holds_output(folder: Path) -> bool:
    """Whether ``folder`` holds Kineto traces or torch_npu ranks (a capture there would mix with them)."""
    if not folder.is_dir():
        return False
    from .analysis.sources import KINETO_FILES
    from .analysis.sources.ascend.discover import rank_dirs

    return (any(p.name.endswith(KINETO_FILES) for p in folder.iterdir())
            or bool(rank_dirs(folder)))


def default_run_dir(output_dir: Path, name: str) -> Path:
    """Where a new run ``name`` writes its profiler output: ``output_dir/NAME``, or, where that
    folder is there already (a removed run's, kept on disk by ``%npurm`` without ``--files``),
    the first free ``NAME.2``, ``NAME.3``, ...: a folder is read as one job, so the new run's
    traces beside the old ones would be read with them. A link planted at the name is left for
    the caller to refuse."""
    stem = file_stem(name)
    path, k = output_dir / stem, 1
    while path.is_dir() and not path.is_symlink():
        k += 1
        path = output_dir / f"{stem}.{k}"
    return path


def make_run_dir(run_dir: Path) -> bool:
    """Create a run's output directory; return whether npumagic created it (and so owns it)."""
    if run_dir.is_dir():
        return False
    try:
        run_dir.mkdir(parents=True)
    except OSError as exc:
        raise NpumagicError(f"{run_dir}: cannot write the run's profiler output here ({exc.strerror or exc}); "
                            "choose another --out or NpuMagics.output_dir") from None
    return True


def figure_dir(run: Run, output_dir: Path) -> Path:
    """Where a run's figures go: beside a capture's output; for an imported run under
    ``output_dir/figures/NAME``, never into the user's input folder."""
    if run.kind == "profile" and run.run_dir:
        path = Path(run.run_dir)
        return path if path.is_dir() else path.parent
    return output_dir / "figures" / file_stem(run.name)


def writable_figure_dir(run: Run, output_dir: Path) -> Path | None:
    """:func:`figure_dir`, created; None where it cannot be written (figures are then shown,
    not saved)."""
    path = figure_dir(run, output_dir)
    if linked(path, output_dir):  # a link planted in the output directory: figures are shown only
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return path


def delete_files(run: Run, output_dir: Path, store: HistoryStore) -> None:
    """Delete ``run``'s output directory, or raise NpumagicError saying why not (the other runs
    of ``store`` keep theirs)."""
    refuse = lambda why: NpumagicError(  # noqa: E731
        f"not deleting {run.run_dir} for run {run.name!r}: {why}; the run is kept (remove it without --files)")
    if not run.run_dir:
        raise refuse("it has no output directory")
    path = Path(run.run_dir)
    if not path.exists():
        return  # already gone: nothing to delete
    if run.kind != "profile" or not run.run_dir_owned:
        raise refuse("npumagic did not create it (an imported run, or --out named an existing directory)")
    if path.is_symlink() or not path.is_dir():
        raise refuse("it is not a plain directory")
    real, root = Path(os.path.realpath(path)), Path(os.path.realpath(output_dir))
    if root not in real.parents:
        raise refuse(f"it is not inside the output directory {root}")
    if (real / DB_NAME).exists() or any(p == real or real in p.parents for p in _kept_folders(run, output_dir, store)):
        raise refuse("it holds the history, npumagic's figures folder or another run's files")
    try:
        shutil.rmtree(real)
    except OSError as exc:
        raise NpumagicError(f"could not delete {real} ({exc.strerror or exc}); the run is kept") from None


def _kept_folders(removed: Run, output_dir: Path, store: HistoryStore) -> list[Path]:
    """What deleting a run's folder must leave: the figures folder of imported runs, and every
    other run's output and figures (real paths)."""
    kept = [output_dir / "figures"]
    for r in store.runs():
        if r.name != removed.name:
            kept += [Path(r.run_dir)] if r.run_dir else []
            kept.append(figure_dir(r, output_dir))
    return [Path(os.path.realpath(p)) for p in kept]
