"""The magics' input: their shared options, how a line is split and parsed, run names checked,
and :func:`usage_errors`, the one place npumagic's errors become IPython's ``UsageError`` (one
line under the cell, no traceback). :mod:`npumagic.magics` declares the magics with these."""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator

from IPython.core.error import UsageError
from IPython.core.magic_arguments import MagicArgumentParser, argument
from IPython.utils.process import arg_split

from .capture import ACTIVITIES, AIC_METRICS, CaptureOptions
from .capture.options import HOST_SYS
from .errors import NpumagicError
from .names import RULE as NAME_RULE
from .names import check_name


@contextmanager
def usage_errors(*also: type[BaseException]) -> Iterator[None]:
    """npumagic's own errors (and ``also``) raised inside, as ``UsageError``: a bad argument, an
    unknown run or an unreadable output is said in one line, its traceback left out."""
    try:
        yield
    except (NpumagicError, *also) as exc:
        raise UsageError(str(exc)) from None


def command_parser(command) -> MagicArgumentParser:
    """``%npu NAME``'s parser, from the command's declared arguments (bad input: UsageError)."""
    parser = MagicArgumentParser(prog=f"%npu {command.name}", description=command.description.replace("%%", "%"))
    for arg in command.args:
        arg.add_to(parser)
    return parser


def schedule_arguments(func):
    """The options %%npuprofile and %npusteps share (named as torch.profiler's schedule/profile)."""
    decorators = [
        argument("--wait", type=int, default=1, help="steps to wait before warming up (schedule wait, default 1)"),
        argument("--warmup", type=int, default=1, help="warm-up steps, traced and discarded (default 1)"),
        argument("--steps", type=int, default=3, help="active steps recorded per cycle (schedule active, default 3)"),
        argument("--repeat", type=int, default=1, help="cycles of wait+warmup+steps (default 1)"),
        argument("--skip-first", type=int, default=0, help="steps skipped before the first cycle (default 0)"),
        argument("--name", default=None, help="run name (default run1, run2, ...); when taken, the run becomes "
                                              "NAME-2, NAME-3, ..."),
        argument("--replace", action="store_true", help="with --name: replace the run of that name once this "
                                                        "capture succeeded (its old files go then)"),
        argument("--out", default=None, help="directory for this run's profiler output "
                                             "(default OUTPUT_DIR/NAME; %%config NpuMagics.output_dir)"),
        argument("--activities", default=None, help=f"comma list of {', '.join(ACTIVITIES)} (default: what the backend has)"),
        argument("--memory", action="store_true", help="record memory allocations (profile_memory)"),
        argument("--shapes", action="store_true", help="record input shapes (record_shapes)"),
        argument("--stack", action="store_true", help="record Python stacks (with_stack), for source lines of syncs"),
        argument("--level", type=int, default=0, help="torch_npu profiler level 0, 1 or 2 (default 0)"),
        argument("--aic-metrics", default=None, help=f"torch_npu AI Core metrics: {', '.join(AIC_METRICS)}"),
        argument("--modules", action="store_true", help="record the nn.Module hierarchy (with_modules; on torch.profiler with_stack too, which slows the recorded steps: a tiny CPU step 0.6 -> 64 ms), read by npumagic modules"),
        argument("--l2-cache", action="store_true", help="torch_npu: L2 cache hit rates per task (l2_cache)"),
        argument("--gc-threshold", type=float, default=None, metavar="MS",
                 help="torch_npu: record Python GC pauses of at least MS ms (gc_detect_threshold)"),
        argument("--host-sys", default=None, help="torch_npu: host system data, comma list of "
                                                  f"{', '.join(HOST_SYS)} (host_sys)"),
        argument("--export", default=None, help="torch_npu: comma list of text, db (export_type; default text; db "
                                                "feeds MindStudio Insight and msprof-analyze)"),
        argument("--keep-raw", action="store_true", help="torch_npu: keep CANN's raw per-device data, e.g. the HBM/LLC "
                                                         "summaries (data_simplification=False)"),
        argument("--no-host", action="store_true", help="do not sample the host's CPU and memory (every 50 ms "
                                                         "while the profiler records)"),
        argument("--quiet", action="store_true", help="no backend line or notes"),
        argument("--no-plot", action="store_true", help="draw no figures"),
    ]
    for deco in reversed(decorators):
        func = deco(func)
    return func


def capture_options(args, repeat_cell: bool) -> CaptureOptions:
    activities = None
    if args.activities is not None:
        activities = tuple(a.strip().lower() for a in args.activities.split(",") if a.strip())
    with usage_errors(ValueError):
        return CaptureOptions(wait=args.wait, warmup=args.warmup, steps=args.steps, repeat=args.repeat,
                              skip_first=args.skip_first, activities=activities, memory=args.memory,
                              shapes=args.shapes, stack=args.stack, level=args.level, aic_metrics=args.aic_metrics,
                              repeat_cell=repeat_cell, host=not args.no_host, modules=args.modules,
                              l2_cache=args.l2_cache, gc_threshold_ms=args.gc_threshold,
                              host_sys=_list(args.host_sys),
                              export=_list(args.export) if args.export is not None else ("text",),
                              keep_raw=args.keep_raw)


def split_words(line: str) -> list[str]:
    """``line``'s words, split as a shell would where it quotes (``--out "my runs"``,
    ``--out='a b'``); an unquoted line keeps its backslashes (Windows paths)."""
    try:
        return arg_split(line, posix="'" in line or '"' in line)
    except ValueError as exc:  # shlex: "No closing quotation"
        raise UsageError(f"{exc} in: {line.strip()}") from None


def parse(magic, line: str):
    """The magic's arguments from ``line`` (split by :func:`split_words`)."""
    return magic.parser.parse_args(split_words(line))


def cell_usage(func):
    """magic_arguments writes every usage line as ``%name``; a cell magic is called ``%%name``."""
    func.__doc__ = func.__doc__.replace(f"::\n\n  %{func.__name__}", f"::\n\n  %%{func.__name__}", 1)
    return func


def _list(text: str | None) -> tuple[str, ...] | None:
    """A comma list option as a tuple of lower-case items (None when not given)."""
    if text is None:
        return None
    return tuple(x.strip().lower() for x in text.split(",") if x.strip())


_SHELL_WORD = re.compile(r"""(?:[^\s'"]+|"[^"]*"?|'[^']*'?)+""")  # a quoted value is one word, spaces and all


def split_statement(line: str, magic) -> tuple[str, str]:
    """Split ``%npusteps --steps 3 f(x, "a b")`` into its option text and the raw statement."""
    parser = magic.parser
    tokens = list(_SHELL_WORD.finditer(line))
    i = 0
    while i < len(tokens) and tokens[i].group().startswith("-"):
        if tokens[i].group() == "--":  # the end of the options, as on a command line
            return line[: tokens[i].start()], line[tokens[i].end():]
        action = parser._option_string_actions.get(tokens[i].group().split("=")[0])
        if action is None:
            raise UsageError(f"unknown option {tokens[i].group()!r}; see %{getattr(magic, '__name__', 'npusteps')}?")
        takes_value = action.nargs != 0 and "=" not in tokens[i].group()
        i += 2 if takes_value else 1
    if i >= len(tokens):
        return line, ""
    return line[: tokens[i].start()], line[tokens[i].start():]


MAX_NOTE_CHARS = 20_000  # a conclusion, not a log: bounds what is parsed, stored and rendered
_ASSIGNED_CELL = re.compile(r"^([A-Za-z_]\w*)\s*=\s*%%(npuprofile)\b[ \t]*(.*?)\s*$")


def assigned_cell_magic(lines: list[str]) -> list[str]:
    """Input transformer for ``r = %%npuprofile ...``: IPython has no syntax for keeping a cell
    magic's result, so this turns it into the call IPython makes for ``%%npuprofile``, assigned
    to ``r`` (like ``r = %timeit -o``), and still shows the report under the cell."""
    match = _ASSIGNED_CELL.match(lines[0]) if lines else None
    if match is None:
        return lines
    var, magic, args = match.groups()
    return [f"{var} = get_ipython().run_cell_magic({magic!r}, {args!r}, {''.join(lines[1:])!r})\n", f"{var}\n"]


def valid_name(name: str) -> bool:
    try:
        check_name(name)
    except NpumagicError:
        return False
    return True


def check_run_name(name: str) -> None:
    try:
        check_name(name)
    except NpumagicError:
        raise UsageError(f"invalid --name {name!r}: use {NAME_RULE}") from None


def compile_cell(shell, code: str):
    """The cell (or statement) compiled as IPython runs a cell, as a function running it in the
    user's namespace; top-level await is refused (a UsageError), not profiled."""
    transformed = shell.transform_cell(code)
    compiler = shell.compile
    filename = compiler.cache(transformed, shell.execution_count)
    try:
        compiled = compiler(compiler.ast_parse(transformed, filename=filename), filename, "exec")
    except SyntaxError as exc:
        if "await" in str(exc):
            raise UsageError("async cells (top-level await) cannot be profiled; wrap the loop in a function "
                             "and call asyncio.run() on it") from None
        raise
    namespace = shell.user_ns

    def body() -> None:
        __tracebackhide__ = True  # noqa: F841
        exec(compiled, namespace)  # noqa: S102 - running the user's cell is the point

    return body


def step_callable(namespace: dict, name: str):
    """The zero-argument function ``name`` of the user's namespace, checked to be one step (%npuab)."""
    if name not in namespace:
        raise UsageError(f"{name!r} is not defined in the namespace; define a zero-argument function for one step")
    fn = namespace[name]
    if not callable(fn):
        raise UsageError(f"{name!r} is a {type(fn).__name__}, not callable; give a zero-argument function")
    from .capture.alternate import unfit_step

    problem = unfit_step(fn)
    if problem is not None:
        raise UsageError(f"{name!r} cannot be timed as a step: {problem}")
    return fn


def check_ab_arguments(args) -> None:
    """%npuab's sides and budget, refused with a UsageError before anything runs."""
    from .ab_run import MIN_BLOCKS
    from .capture.alternate import STEP_LIMIT, WARMUP_LIMIT

    if args.a == args.b:
        raise UsageError(f"both sides are {args.a!r}; name two callables")
    if not 0 < args.threshold < 100:
        raise UsageError(f"--threshold {args.threshold:g}: a percentage above 0 and below 100")
    if not 4 * MIN_BLOCKS <= args.max_steps <= STEP_LIMIT:
        raise UsageError(f"--max-steps {args.max_steps}: at least {4 * MIN_BLOCKS} (the fewest it decides on), "
                         f"at most {STEP_LIMIT:,}")
    if not 0 <= args.warmup <= WARMUP_LIMIT:
        raise UsageError(f"--warmup {args.warmup}: 0 to {WARMUP_LIMIT:,} untimed calls of each")
    if args.seed is not None and args.seed < 0:
        raise UsageError(f"--seed {args.seed}: 0 or more")


def step_window(steps: list[dict], wanted: tuple[int, int]) -> tuple[float, float]:
    """(start, end) ms of steps FIRST..LAST in the live view's step list."""
    shown = [s for s in steps if wanted[0] <= s["step"] <= wanted[1]]
    return min(s["start"] for s in shown), max(s["end"] for s in shown)
