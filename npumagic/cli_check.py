"""`npumagic check RUN_OR_PATH --history DIR`: a run against the band learned from the earlier runs
of its configuration (exit 1 outside, 0 inside or no band yet, 3 when it cannot be judged). A run of
the history is checked from its record, step times and stored host samples, without pandas or numpy."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from .cli_run import print_json
from .errors import NpumagicError


CANNOT_TELL = 3  # the CI gate's exit status where the comparison cannot judge (not a pass, not a failure)


def check_command(args, history: Callable, analysed: Callable) -> int:
    """``check``; ``history(dir)``: the history's runs (None without one), ``analysed(args, path)``:
    a path's Summary (the CLI's readers)."""
    # a run of the history is checked from its record, step times and stored host samples, without
    # pandas or numpy (issue 45); a path is analysed, which needs them
    from .named_runs import median

    runs = history(args.history) if Path(args.history).is_dir() else None
    if runs is None:
        raise NpumagicError(f"--history {args.history}: no history there (the output directory of the magics)")
    if runs.has(args.run):
        name, like = args.run, args.run
        walls = runs.step_walls(name)
        band = runs.band(like, include=False)
        host = facts = None
        if band is not None:  # only a band's verdict needs to know whether the steps can be trusted
            host, facts = _stored_host(runs, name), runs.facts(name)
    elif Path(args.run).exists():
        done = [r.name for r in runs.records() if r.status == "ok" and r.kind == "profile"]
        like = args.like or (done[-1] if done else None)
        summary, facts = analysed(args, args.run), None
        name, walls = str(args.run), summary.steps["wall_us"].astype(float).tolist()
        band = runs.band(like, include=True) if like is not None else None
        from .analysis.trust import host_columns

        host = host_columns(summary)
    else:
        known = ", ".join(r.name for r in runs.records()) or "none yet"
        raise NpumagicError(f"{args.run}: neither a run of {args.history} (known: {known}) nor a path")
    if not walls:
        raise NpumagicError(f"{name}: no steps to check")
    unsure = _check_undecided(band, like, args.history, walls, host, facts)
    if unsure:
        # no band yet is no failure (the nightly recipe works from its first night): 0; a band the
        # run cannot be judged against (contended, one step): the gate's "cannot tell"
        status = 0 if band is None else CANNOT_TELL
        if args.json:
            from .jsonout import document

            print_json(document("check", run=name, like=like, decided=False, undecided=unsure, outside=None,
                                 median_us=median(walls)))
        else:
            print(f"{'no band yet' if band is None else 'cannot tell'}: {name}: {unsure}")
        return status
    alert = band.check(median(walls))
    if args.json:
        from .jsonout import document

        print_json(document("check", run=name, like=like, decided=True, undecided=None, **alert.to_dict()))
    else:
        print(f"{'ALERT' if alert.outside else 'ok'}: {name}: median step {alert.median_us / 1000:,.2f} ms, "
              f"{alert.sentence()} (runs of {like}'s configuration)")
    return 1 if alert.outside else 0


def _stored_host(runs, name: str) -> dict[str, list] | None:
    """Run ``name``'s host samples as plain columns: from its stored Summary without pandas, else
    from its Summary analysed again (a run recorded before summaries were stored); None where
    neither can be read (its step times still can)."""
    host = runs.store.stored_table(name, "host")
    if host is not None:
        return host
    try:
        summary = runs.summary(name)
    except NpumagicError:
        return None
    from .analysis.trust import host_columns

    return host_columns(summary)


def _check_undecided(band, like, history: str, walls: list[float], host, facts) -> str:
    """Why ``check`` cannot judge the run ("" when it can): no band yet, a contended run (as a
    comparison with it is never significant, :mod:`npumagic.analysis.trust`; ``host``: its host
    samples' columns, None where its Summary could not be read), a single step."""
    if band is None:
        of = f"{like}'s configuration" if like else "a finished run"
        return f"fewer than 2 earlier finished runs of {of} in {history}: no band to check against yet"
    if host is not None:
        from .analysis.trust import host_reasons

        said = host_reasons(host, facts)
        if said:
            return f"its step times are unreliable: {'; '.join(said)}"
    if len(walls) < 2:
        return "1 step: no spread to tell its median from noise; profile more steps"
    return ""
