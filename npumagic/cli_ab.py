"""``npumagic ab SCRIPT_A SCRIPT_B``: decide which of two training scripts steps faster on a
shared machine, by short captures of each alternated (:mod:`npumagic.ab_scripts`). The CLI's
shell (:mod:`npumagic.cli`) declares it; progress goes to stderr, the verdict (or ``--json``'s
one document) to stdout."""

from __future__ import annotations

import argparse
import os
import sys

from .errors import NpumagicError

OWN_OPTIONS = ("--steps-per-capture", "--max-captures")  # no script's: refused after the scripts, not passed on
# analysis.ab_scripts.MAX_CAPTURES, written out: `npumagic --help` imports no numpy (a test keeps them equal)
MAX_CAPTURES_SAID = 24


def ab_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("script_a", metavar="SCRIPT_A", help="the reference script (run as python SCRIPT_A ARGS)")
    p.add_argument("script_b", metavar="SCRIPT_B", help="the variant")
    p.add_argument("--steps-per-capture", type=int, default=20, metavar="N",
                   help="steps timed in each capture, after --skip (default 20); the script is ended after them")
    p.add_argument("--skip", type=int, default=3, help="steps of each capture not timed: start-up, compilation (default 3)")
    p.add_argument("--max-captures", type=int, default=None, metavar="M",
                   help=f"captures of both scripts together before giving up undecided (default {MAX_CAPTURES_SAID}; "
                        "at least 12: the test decides on pairs, from 6)")
    p.add_argument("--threshold", type=float, default=5.0,
                   help="the smallest change of step time, in percent, called a difference (default 5)")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="-- ARGS", help="arguments passed to both scripts, after --")


def ab_command(args) -> int:
    from .ab_scripts import alternate_scripts, python_command
    from .cli_run import print_json

    for script in (args.script_a, args.script_b):
        if not os.path.isfile(script):
            raise NpumagicError(f"{script}: no such script")
    rest = args.args[1:] if args.args[:1] == ["--"] else args.args  # argparse hands both forms alike
    own = [word for word in rest if word.split("=")[0] in OWN_OPTIONS]
    if own:
        raise NpumagicError(f"{own[0]} after the scripts would be passed to them: npumagic ab [options] SCRIPT_A "
                            "SCRIPT_B -- ARGS (npumagic ab's options before the scripts, theirs after)")
    commands = {"a": python_command(args.script_a, rest), "b": python_command(args.script_b, rest)}
    names = (args.script_a, args.script_b) if args.script_a != args.script_b else ("A", "B")
    from .analysis.ab_scripts import MAX_CAPTURES

    if args.max_captures is None:
        args.max_captures = MAX_CAPTURES
    result = alternate_scripts(commands, names, args.steps_per_capture, args.skip, args.max_captures,
                               args.threshold / 100, _progress(args.max_captures - args.max_captures % 2))
    if args.json:
        from .jsonout import ab_scripts_doc

        print_json(ab_scripts_doc(result))
    else:
        print(result.sentence())
    return 0


def _progress(total: int):
    def said(k: int, side: str, median: float, result) -> None:
        so_far = f"; {result.interval_text()}" if result is not None else ""
        print(f"npumagic ab: capture {k} of at most {total} ({side.upper()}): median step {median * 1000:,.2f} ms"
              f"{so_far}", file=sys.stderr, flush=True)
    return said
