"""Tables as people read them: a :class:`Table` keeps the full DataFrame in ``.data`` and shows a
few chosen columns with units in their headers, percentages as %, counts as integers, names
left-aligned and shortened (the full name on hover), and a caption. HTML goes through a pandas
Styler; text fits a terminal width. Pure pandas (no matplotlib), so analysis objects can use it.

The builders are ``format_*`` (``format_steps``, ``format_kernels``, ...): the analysis layer's
``step_table`` and ``kernel_table`` compute the DataFrames these show."""

from __future__ import annotations

import html
import os
import shutil
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..terminal import terminal_safe, wrap

if TYPE_CHECKING:  # imported where used: a table of plain rows (`npumagic runs`) prints without pandas
    import pandas as pd

NAME_CHARS = 44  # a shortened name in HTML: about 300 px of a 1200 px notebook cell
MAX_COLUMNS = 9  # at most this many columns are shown: they fit a 1200 px cell beside one name
MIN_NAME_CHARS = 24  # in text, a name column narrower than this loses what tells two kernels apart
TABLE_CSS = [
    {"selector": "", "props": "border-collapse: collapse; font-size: 12px; max-width: 100%; margin: 4px 0;"},
    {"selector": "caption", "props": "caption-side: top; text-align: left; font-weight: bold; padding: 2px 0;"},
    {"selector": "th", "props": "padding: 2px 8px; white-space: nowrap; border-bottom: 1px solid #999;"},
    {"selector": "td", "props": "padding: 1px 8px; white-space: nowrap; vertical-align: top;"},
]


@dataclass(frozen=True)
class Column:
    """One shown column: ``key`` in the frame, its ``label`` (with the unit) and ``kind``:
    ``name`` (left, shortened), ``text`` (left), ``int``, ``ms`` (from microseconds), ``us``,
    ``pct`` (a 0..1 fraction), ``x`` (a ratio), ``float``, ``delta_ms``/``delta_pct`` (signed)."""

    key: str
    label: str
    kind: str = "float"
    fmt: Callable[[object, dict], str] | None = None  # (value, row) -> text, when the row decides
    optional: bool = False  # left out of text too narrow for it (a kernel's type, a second count)

    def text(self, value, row: dict) -> str:
        return self.fmt(value, row) if self.fmt is not None else FORMATS.get(self.kind, FORMATS["float"])(value)


def shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, keeping both ends (kernel names differ at the end)."""
    if len(text) <= limit:
        return text
    head = (limit - 1) * 2 // 3
    return text[:head] + "…" + text[len(text) - (limit - 1 - head):]


def shorten_apart(texts: list[str], limit: int) -> list[str]:
    """Each of ``texts`` cut to ``limit`` characters as :func:`shorten` cuts it, except that
    different texts never shorten alike: where they would (two ``void
    at::native::vectorized_elementwise_kernel<...>`` differing in their functor), each keeps its
    start, the part from where it first differs from the others, and its end."""
    out = [shorten(t, limit) for t in texts]
    groups: dict[str, set[str]] = {}
    for text, short in zip(texts, out):
        groups.setdefault(short, set()).add(text)
    apart: dict[str, str] = {}
    for same in groups.values():
        if len(same) > 1:
            apart.update(_apart(sorted(same), limit))
    return [apart.get(t, short) for t, short in zip(texts, out)]


def _apart(texts: list[str], limit: int, depth: int = 0) -> dict[str, str]:
    """``head…middle…tail`` of each of ``texts`` (distinct, longer than ``limit``), the middle
    starting where they begin to differ; texts still alike are told apart further in."""
    first = len(os.path.commonprefix(texts))
    tail = min(len(os.path.commonprefix([t[::-1] for t in texts])), max(limit // 6, 1))
    head = min(first, max(limit // 4, 1))
    middle = max(limit - head - tail - 2, 1)
    made = {t: t[:head] + "…" + t[first:first + middle] + "…" + t[len(t) - tail:] for t in texts}
    if len(set(made.values())) == len(made) or depth > 8:
        return made
    groups: dict[str, list[str]] = {}
    for t, short in made.items():
        groups.setdefault(short, []).append(t)
    for same in groups.values():
        if len(same) > 1:
            made.update(_apart(same, limit, depth + 1))
    return made


def _missing(v) -> bool:
    """None, NaN, or pandas' NA (only a value of a DataFrame can be one: pandas is imported then)."""
    pandas = sys.modules.get("pandas")
    return v is None or (isinstance(v, float) and v != v) or (pandas is not None and v is pandas.NA)


def _number(fmt: str) -> Callable[[object], str]:
    def f(v) -> str:
        if _missing(v):
            return "–"
        try:
            return fmt.format(v)
        except (TypeError, ValueError):
            return str(v)
    return f


def _signed(v, fmt: str) -> str:
    """``+1.25`` / ``-0.40``, and a plain ``0.00`` for what rounds to zero (never ``-0.00``)."""
    text = _number(fmt)(v)
    return text[1:] if text[:1] in "+-" and not any(c in "123456789" for c in text) else text


FORMATS: dict[str, Callable[[object], str]] = {
    "int": lambda v: _number("{:,.0f}")(v),
    "ms": lambda v: _number("{:,.2f}")(v / 1000 if isinstance(v, (int, float)) else v),
    "us": _number("{:,.1f}"),
    "pct": lambda v: _number("{:.0%}")(v),
    "x": _number("{:.2f}x"),
    "float": _number("{:,.2f}"),
    "delta_ms": lambda v: _signed(v / 1000 if isinstance(v, (int, float)) else v, "{:+,.2f}"),
    "delta_pct": lambda v: _number("{:+.0%}")(v),
    "text": lambda v: "" if _missing(v) else str(v),
}
FORMATS["name"] = FORMATS["html"] = FORMATS["text"]
LEFT = ("name", "text", "html")


class Rows:
    """Plain rows (dicts) as a :class:`Table`'s ``data``, where pandas is not wanted: the few
    parts of a DataFrame a table reads (``columns``, ``len``, ``head``, ``itertuples``, a
    column by its name)."""

    def __init__(self, rows: list[dict[str, Any]], columns: list[str]) -> None:
        self.rows, self.columns = list(rows), list(columns)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key: str) -> list[Any]:
        return [r.get(key) for r in self.rows]

    def head(self, n: int) -> "Rows":
        return Rows(self.rows[:n], self.columns)

    def itertuples(self, index: bool = False) -> Iterator[tuple]:
        return (tuple(r.get(c) for c in self.columns) for r in self.rows)


@dataclass(frozen=True)
class Table:
    """A formatted view of ``data`` (the full DataFrame, kept for analysis).

    ``columns`` chooses and labels what is shown (default: every column as it is); ``rows``
    limits the rows shown (``data`` keeps them all); ``caption`` says what the table is.
    """

    data: pd.DataFrame | Rows
    columns: list[Column] = field(default_factory=list)
    caption: str = ""
    rows: int | None = None

    # -- a DataFrame's everyday access, so `%npuruns` results can be indexed as before ---------
    def __getitem__(self, key):
        return self.data[key]

    def __len__(self) -> int:
        return len(self.data)

    @property
    def shown_columns(self) -> list[Column]:
        cols = self.columns or [Column(str(c), str(c), _guess(self.data[c])) for c in self.data.columns]
        return [c for c in cols if c.key in self.data.columns][:MAX_COLUMNS]

    def _cells(self, name_chars: int) -> tuple[list[str], list[list[str]], list[list[str]]]:
        """Headers, shown cell texts and full cell texts (row-major)."""
        cols = self.shown_columns
        frame = self.data if self.rows is None else self.data.head(self.rows)
        shown, full = [], []
        for row in frame.itertuples(index=False):
            values = dict(zip(frame.columns, row))
            texts = [c.text(values[c.key], values) for c in cols]
            full.append(texts)
            shown.append(list(texts))
        for i, c in enumerate(cols):
            if c.kind == "name":
                for r, short in zip(shown, shorten_apart([r[i] for r in full], name_chars)):
                    r[i] = short
        return [c.label for c in cols], shown, full

    def styler(self):
        """The pandas Styler of the shown rows and columns (used for the HTML)."""
        import pandas as pd

        cols = self.shown_columns
        headers, shown, full = self._cells(NAME_CHARS)
        cells = [[_cell_html(s, f, c.kind) for s, f, c in zip(srow, frow, cols)] for srow, frow in zip(shown, full)]
        frame = pd.DataFrame(cells, columns=pd.Index(headers)) if cells else pd.DataFrame(columns=pd.Index(headers))
        styles = list(TABLE_CSS)
        for i, c in enumerate(cols):
            align = "left" if c.kind in LEFT else "right"
            styles.append({"selector": f"th.col_heading.col{i}", "props": f"text-align: {align};"})
            wrap = " white-space: normal; min-width: 24em;" if c.kind == "html" else ""
            styles.append({"selector": f"td.col{i}", "props": f"text-align: {align};{wrap}"})
        styler = frame.style.hide(axis="index").set_table_styles(styles).format_index(escape="html", axis=1)
        caption = self.caption
        if self.rows is not None and len(self.data) > self.rows:
            caption += f" (top {self.rows} of {len(self.data)}; all in .data)"
        return styler.set_caption(html.escape(caption)) if caption else styler

    def _repr_html_(self) -> str:
        return self.styler().to_html()

    @terminal_safe
    def to_text(self, width: int | None = None) -> str:
        """The shown table as aligned text, names shortened so lines fit ``width`` characters
        (default: the terminal's width) and the caption wrapped to it; an optional name column
        (a kernel's type) is left out when there is no room for it."""
        width = width or shutil.get_terminal_size((120, 24)).columns
        cols = self.shown_columns
        headers, _, full = self._cells(10**6)

        def widest(i: int) -> int:
            return max([len(headers[i])] + [len(r[i]) for r in full])

        def room_left() -> int:
            fixed = sum(widest(i) for i, c in enumerate(cols) if c.kind != "name")
            return width - fixed - 2 * (len(cols) - 1)

        # optional figures (a second count, a per-call delta) give way, the rightmost first, before
        # the names shrink below what tells them apart
        def names_need() -> int:  # each name column whole, or at least MIN_NAME_CHARS of it
            return sum(min(MIN_NAME_CHARS, widest(i)) for i, c in enumerate(cols) if c.kind == "name")

        while room_left() < names_need() and any(c.optional and c.kind != "name" for c in cols):
            drop = max(i for i, c in enumerate(cols) if c.optional and c.kind != "name")
            cols, headers = cols[:drop] + cols[drop + 1:], headers[:drop] + headers[drop + 1:]
            full = [r[:drop] + r[drop + 1:] for r in full]
        names = [i for i, c in enumerate(cols) if c.kind == "name"]
        room = room_left()
        optional = [i for i in names if cols[i].optional]
        if optional and room < MIN_NAME_CHARS * len(names):
            keep = [i for i in range(len(cols)) if i not in optional]
            cols, headers = [cols[i] for i in keep], [headers[i] for i in keep]
            full = [[r[i] for i in keep] for r in full]
            room += 2 * len(optional)
            names = [i for i, c in enumerate(cols) if c.kind == "name"]
        # the first name column (the kernel) gets twice the room of a later one (its type)
        shares = [2 if k == 0 else 1 for k in range(len(names))]
        budget = {i: max(12, room * share // max(sum(shares), 1)) for i, share in zip(names, shares)}
        rows = [list(r) for r in full]
        for i, limit in budget.items():
            for r, short in zip(rows, shorten_apart([r[i] for r in full], limit)):
                r[i] = short
        widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

        def line(cells: list[str]) -> str:
            return "  ".join(t.ljust(w) if c.kind in LEFT else t.rjust(w)
                             for t, w, c in zip(cells, widths, cols)).rstrip()

        out = ([wrap(self.caption, width, 4)] if self.caption else []) + [line(headers)] + [line(r) for r in rows]
        if self.rows is not None and len(self.data) > self.rows:
            out.append(f"(top {self.rows} of {len(self.data)})")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.to_text()

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(self.to_text())


def _cell_html(shown: str, full: str, kind: str) -> str:
    if kind == "html":  # built by render from escaped parts
        return full
    if kind == "name" and shown != full:
        return f"<span title=\"{html.escape(full)}\">{html.escape(shown)}</span>"
    return html.escape(shown)


def _guess(series: pd.Series) -> str:
    import pandas as pd

    if pd.api.types.is_bool_dtype(series) or not pd.api.types.is_numeric_dtype(series):
        return "text"
    if pd.api.types.is_integer_dtype(series):
        return "int"
    return "float"


# -- the tables the magics and the CLI show -------------------------------------------------------
def _copy_alone(value, row) -> str:
    """The copies' time under no compute or collective (busy - computing - communication not
    overlapped), so compute + comm + copy + idle is the wall; ``memcpy_us`` (in ``.data``) also
    counts copies that ran beside kernels."""
    try:
        alone = max(float(row["busy_us"]) - float(row["computing_us"]) - float(row["comm_not_overlapped_us"]), 0.0)
    except (KeyError, TypeError, ValueError):
        alone = float("nan")
    return FORMATS["ms"](alone)


def format_steps(steps: pd.DataFrame, caption: str = "per-step time") -> Table:
    """The compact step table (ms and device busy %; copies only when any ran, their time alone,
    so the four times add up to the wall); ``.data`` is the full step frame."""
    copies = "memcpy_us" in steps and bool((steps["memcpy_us"] > 0).any())
    return Table(steps, [Column("step", "step", "int"), Column("wall_us", "wall (ms)", "ms"),
                         Column("computing_us", "compute (ms)", "ms"),
                         Column("comm_not_overlapped_us", "comm (ms)", "ms")]
                 + ([Column("memcpy_us", "copy (ms)", fmt=_copy_alone)] if copies else [])
                 + [Column("idle_us", "idle (ms)", "ms"), Column("dataloader_us", "data (ms)", "ms"),
                    Column("device_util", "busy", "pct")], caption)


CPU_OPERATORS = "top CPU operators by self time (an operator's own time, without the operators it calls)"


def kernel_caption(summary) -> str:
    """What a kernel table of ``summary`` lists: device kernels by total time, or on the CPU
    operators by self time (``aten::convolution`` is short beside the ``convolution_backward`` it
    calls into: its time is its children's)."""
    return "top kernels by total time" if summary.meta.get("device_mode", True) else CPU_OPERATORS


def format_kernels(kernels: pd.DataFrame, top: int | None = 15, caption: str = "top kernels by total time") -> Table:
    """Kernels (or CPU operators) by total time; the type column only where it adds something.
    ``caption``: :func:`kernel_caption` says what the rows are."""
    cols = [Column("name", "operator" if caption == CPU_OPERATORS else "kernel", "name")]
    if len(kernels) and (kernels["type"].astype(str) != kernels["name"].astype(str)).any() \
            and (kernels["type"].astype(str) != "").any():
        cols.append(Column("type", "type", "name", optional=True))
    cols += [Column("count", "count", "int"), Column("total_us", "total (ms)", "ms"), Column("mean_us", "mean (µs)", "us"),
             Column("share", "of step time", "pct")]
    if "module" in kernels and (kernels["module"].astype(str) != "").any():  # recorded with modules
        cols.append(Column("module", "module", "name", optional=True))
    return Table(kernels, cols, caption, top)


def _mib(value, row) -> str:
    return "–" if _missing(value) else f"{float(value) / 2**20:,.2f}"


def format_allocators(operators: pd.DataFrame, top: int = 10, caption: str = "top allocators by bytes") -> Table:
    """The memory view's operators (``MemoryView.operators``: most bytes first) with their sizes in
    MiB; ``.data`` keeps every operator, in bytes."""
    return Table(operators, [Column("name", "operator", "name"), Column("allocations", "allocations", "int"),
                             Column("bytes", "allocated (MiB)", fmt=_mib),
                             Column("mean_lifetime_us", "mean lifetime (ms)", "ms"),
                             Column("live_at_step_end_bytes", "live at step end (MiB)", fmt=_mib)], caption, top)


def format_ranks(ranks: pd.DataFrame, caption: str = "ranks") -> Table:
    """One row per rank of a job (ms per step, device busy, the slowest rank where the ranks differ
    by more than 5% of the mean step, and dp/pp/tp where the job recorded them)."""
    cols = [Column("rank", "rank", "int"), Column("steps", "steps", "int", optional=True),
            Column("step_median_us", "median step (ms)", "ms"), Column("computing_us", "compute (ms)", "ms"),
            Column("comm_not_overlapped_us", "comm (ms)", "ms"), Column("free_us", "free (ms)", "ms"),
            Column("dataloader_us", "data (ms)", "ms"), Column("device_util", "busy", "pct")]
    # free is msprof's Free: it leaves out the wait for each step's first device task, which idle counts
    caption += " — free: neither computing nor communicating, after the step's first device task"
    if ranks["slowest"].any():
        cols.append(Column("slowest", "slowest", "text", fmt=lambda v, row: "slowest" if bool(v) else ""))
    elif (ranks["steps"] > 0).sum() > 1:
        caption += "; the ranks' median steps differ by at most 5% of their mean: none is the slowest"
    cols += [Column(k, k, "int") for k in ("dp", "pp", "tp") if k in ranks and (ranks[k] >= 0).any()]
    return Table(ranks, cols, caption)


def rank_caption(summary) -> str:
    """The rank table's caption, naming where its figures come from when that is not npumagic's
    own step model of every rank (a job read as an outline)."""
    source = summary.meta.get("rank_table")
    return f"ranks: {source}" if source else "ranks"


def format_runs(runs: pd.DataFrame | Rows) -> Table:
    """The history, one row per run (``%npuruns``, ``npumagic runs``); ``.data`` is the frame
    (or, for a terminal, the plain rows of :meth:`~npumagic.history.HistoryStore.rows`)."""
    return Table(runs, [Column("name", "run", "name"), Column("created", "created", "text", fmt=_when, optional=True),
                        Column("status", "status", "text"), Column("backend", "backend", "text", optional=True),
                        Column("steps", "steps", "int"), Column("step_median_ms", "median step (ms)", "float"),
                        Column("device_util", "busy (run)", "pct"),
                        Column("bottleneck", "bottleneck", "text"), Column("note", "note", "name")], f"{len(runs)} run{'s' if len(runs) != 1 else ''}")


def _when(value, row) -> str:
    # a datetime, or pandas' Timestamp (one) or NaT (not equal to itself)
    return "" if value is None or value != value else value.strftime("%Y-%m-%d %H:%M")


def _ms_or_pct(value, row) -> str:
    return FORMATS["pct" if row.get("column") == "device_util" else "float"](value)


def _change(value, row) -> str:
    a, b = row.get("a"), row.get("b")
    if row.get("column") == "device_util":
        return FORMATS["text"](f"{(b - a) * 100:+.0f} pts") if a == a and b == b else "–"
    if a == 0 and b == 0:
        return "0%"
    if a == 0:
        return "new"
    return FORMATS["delta_pct"](value)


def format_breakdown(comparison) -> Table:
    """A Comparison's breakdown with the runs' names as column labels and change as %."""
    frame = comparison.breakdown.assign(
        label=comparison.breakdown["metric"].astype(str).str.replace(r"\s*\(ms/step\)$", "", regex=True)
        .str.replace("communication (not overlapped)", "communication, not overlapped", regex=False))
    a, b = comparison.a, comparison.b
    short = max(len(a), len(b)) > SIDE_CHARS  # file names as column labels: A and B, named in the caption
    return Table(frame, [Column("label", "per step (ms)", "text"),
                         Column("a", "A" if short else a, fmt=_ms_or_pct), Column("b", "B" if short else b, fmt=_ms_or_pct),
                         Column("change", "change", fmt=_change), Column("direction", "", "text")],
                 f"B: {b} against A: {a}" if short else f"{b} against {a}")


SIDE_CHARS = 12  # a run's name longer than this is A or B in the kernel diff's column labels


def format_kernel_diff(comparison, top: int = 15) -> Table:
    """Kernels by the size of their change in total time: counts as integers, ms, and a status
    only where a kernel was added or removed."""
    k = comparison.kernels
    a, b = comparison.a, comparison.b
    caption = "kernels by the size of their change in total time"
    if max(len(a), len(b)) > SIDE_CHARS:  # file names as labels would leave the kernel no room
        caption += f" (A: {a}, B: {b})"
        a, b = "A", "B"
    cols = [Column("kernel", "kernel", "name")]
    if len(k) and (k["type"].astype(str) != k["kernel"].astype(str)).any() and (k["type"].astype(str) != "").any():
        cols.append(Column("type", "type", "name", optional=True))
    if len(k) and (k["status"] != "changed").any():
        cols.append(Column("status", "", fmt=lambda v, row: "" if v == "changed" else str(v)))
    cols += [Column("count_a", f"{a} count", "int", optional=True), Column("count_b", f"{b} count", "int", optional=True),
             Column("total_a_us", f"{a} (ms)", "ms"), Column("total_b_us", f"{b} (ms)", "ms"),
             Column("delta_us", "Δ total (ms)", "delta_ms"),
             Column("delta_mean_us", "Δ mean (µs)", fmt=lambda v, row: _signed(v, "{:+,.1f}"), optional=True)]
    return Table(k, cols, caption, top)


def format_memory_changes(m, a: str, b: str, top: int = 10) -> Table:
    """The operators allocating more or less memory from run ``a`` to ``b`` (a MemoryComparison's
    operator_changes), MiB a step (of the capture with a single step a side), the 95% interval."""
    unit = "MiB a step" if m.per_step else "MiB"
    caption = (f"operators allocating more or less memory ({unit}; beyond the run-to-run noise and 1% of "
               f"{'A' if max(len(a), len(b)) > SIDE_CHARS else a}'s bytes, at least 2 MiB)")
    if max(len(a), len(b)) > SIDE_CHARS:
        caption += f" (A: {a}, B: {b})"
        a, b = "A", "B"
    signed = lambda v, row: _signed(float(v) / 2**20, "{:+,.2f}")  # noqa: E731
    interval = lambda v, row: ("–" if _missing(v) else  # noqa: E731
                               f"{_signed(float(v) / 2**20, '{:+,.2f}')} to "
                               f"{_signed(float(row['interval_high_bytes']) / 2**20, '{:+,.2f}')}")
    return Table(m.operator_changes, [Column("name", "operator", "name"), Column("bytes_a", f"{a} ({unit})", fmt=_mib),
                                      Column("bytes_b", f"{b} ({unit})", fmt=_mib),
                                      Column("delta_bytes", "Δ (MiB)", fmt=signed),
                                      Column("interval_low_bytes", "95% interval (MiB)", fmt=interval)], caption, top)


def history_unit(table: pd.DataFrame) -> str:
    """The one unit of a kernel's history, in its table and its figure alike: ``ms`` when the
    totals reach 10 ms, else ``µs``."""
    return "ms" if len(table) and float(table["total_us"].max()) >= 10_000 else "µs"


def format_history(table: pd.DataFrame, kernel: str) -> Table:
    """One kernel across runs (``%npuhistory``), total and mean in :func:`history_unit`."""
    unit = history_unit(table)
    kind = "ms" if unit == "ms" else "us"
    return Table(table, [Column("run", "run", "name"), Column("count", "count", "int"),
                         Column("total_us", f"total ({unit})", kind), Column("mean_us", f"mean ({unit})", kind)],
                 f"{shorten(kernel, 80)} across runs")


def format_advice(advice) -> Table:
    """Findings, most important first: severity, category, what, the fix and where (and the
    ranks that share a finding)."""
    rows = []
    for i, f in enumerate(advice, 1):
        text = f"{html.escape(f.title)}<br/><i>fix:</i> {html.escape(f.fix)}"
        if getattr(f, "predicted_interval", None) is not None:
            from ..analysis.whatif import prediction

            text += f"<br/><i>predicted:</i> {html.escape(prediction(f))}"
        if f.where:
            text += f"<br/><i>where:</i> {html.escape(f.where)}"
        if getattr(f, "place", ""):
            text += f"<br/><i>in:</i> {html.escape(f.place)} ({f.place_share:.0%} of its time)"
        ranks = getattr(f, "ranks", ())
        figures = getattr(f, "figures_of", None)
        rows.append({"#": i, "severity": f.severity, "category": f.category, "finding": text,
                     "ranks": ", ".join(str(r) for r in ranks) + (f" (figures of rank {figures})" if figures is not None else "")})
    import pandas as pd

    frame = pd.DataFrame(rows, columns=["#", "severity", "category", "finding", "ranks"])
    cols = [Column("#", "#", "int"), Column("severity", "severity", "text"), Column("category", "category", "text")]
    if frame["ranks"].astype(bool).any():
        cols.append(Column("ranks", "ranks", "text"))
    cols.append(Column("finding", "finding", "html"))
    title = f"advice for {advice.run}" if getattr(advice, "run", "") else "advice"
    return Table(frame, cols, f"{title}: {len(frame)} finding{'s' if len(frame) != 1 else ''}")
