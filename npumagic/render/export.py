"""The troubleshooting log: every run's verdict, findings and note, as Markdown or CSV. The
Markdown is made from the runs' records without pandas (``npumagic export`` prints it at once);
the CSV's table imports it."""

from __future__ import annotations

import sys

import re
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

from ..errors import NpumagicError
from ..records import Run, when
from ..safeio import write_atomic
from ..terminal import safe_text

LOG_COLUMNS = ["name", "created", "status", "backend", "device", "steps", "step_median_ms", "device_util", "bottleneck",
               "next_change", "findings", "note", "run_dir"]


def log_table(runs: list[Run]) -> pd.DataFrame:
    """One row per run: :data:`LOG_COLUMNS` (findings joined into one cell)."""
    import pandas as pd

    rows = []
    for r in runs:
        h, v = r.headline, r.verdict
        rows.append({
            "name": r.name, "created": _iso(when(r.created)), "status": r.status,
            "backend": r.backend, "device": r.device, "steps": h.steps,
            "step_median_ms": round(h.step_median_us / 1000, 3) if h.step_median_us is not None else None,
            "device_util": round(h.device_util, 3) if h.device_util is not None else None,
            "bottleneck": v.bottleneck, "next_change": v.next_change,
            "findings": " | ".join(f"[{f.severity}] {f.category}: {f.title}" for f in v.findings),
            "note": r.note, "run_dir": r.run_dir,
        })
    return pd.DataFrame(rows, columns=LOG_COLUMNS)


def render_markdown(runs: list[Run], title: str = "npumagic troubleshooting log") -> str:
    """Each run as a Markdown section: facts, note, checklist table, findings, cell source.

    Everything that comes from a trace, a note or a cell is escaped: it cannot start a heading,
    close a table cell, inject HTML or end the code fence around the cell source, and its control
    characters cannot reach the terminal that shows the file."""
    out = [f"# {md(title)}", ""]
    for r in runs:
        h, v = r.headline, r.verdict
        median = f"{h.step_median_us / 1000:.2f} ms" if h.step_median_us is not None else "-"
        out += [f"## {md(r.name)} — {md(r.status)}", "",
                f"- when: {when(r.created) or '-'}; backend: {md(r.backend)} ({md(r.device)}); "
                f"steps: {md(h.steps if h.steps is not None else '-')}; median step: {median}",
                f"- output: {code(r.run_dir)}"]
        if r.note:
            out.append(f"- **note:** {md(r.note)}")
        if v.steps:
            out += ["", "| # | checklist | |", "|---|---|---|"]
            out += [f"| {i} | {md(step[0] if step else '')} | {md(step[1] if len(step) > 1 else '')} |"
                    for i, step in enumerate(v.steps, 1)]
        if v.findings:
            out += ["", "Findings:", ""]
            out += [f"{i}. **[{md(f.severity)}] {md(f.category)}** — {md(f.title)}  \n"
                    f"   fix: {md(f.fix)}" for i, f in enumerate(v.findings, 1)]
        if r.source:
            out += ["", *fenced(r.source.strip(), "python")]
        out.append("")
    return safe_text("\n".join(out))


# what is special inside a line (emphasis, code, links, table cells, strikethrough); what is
# special only at a line's start (#, -, +, 1., >) stays as written: md() never starts a line
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_ENTITY = re.compile(r"&(?=#?\w+;)")


def md(value: object) -> str:
    """Text as inert Markdown within a line: emphasis, code, link and table characters
    backslash-escaped, ``<`` (an HTML tag) and ``&`` before an entity's name as entities; the
    rest (``->``, ``1.5``, ``step-time``) reads as written."""
    text = " ".join(str("" if value is None else value).split())
    text = _ENTITY.sub("&amp;", text).replace("<", "&lt;")
    return _MD_SPECIAL.sub(r"\\\1", text)


def code(value: object) -> str:
    """Inline code that no backtick in ``value`` can close early (padded with a space only where
    ``value`` starts or ends with a backtick, as CommonMark needs)."""
    text = " ".join(str("-" if value is None else value).split())
    ticks = "`" * (1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def fenced(text: str, lang: str = "") -> list[str]:
    """A fenced code block whose fence is longer than any backtick run inside ``text``."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{lang}", text, fence]


_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def inert_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each text cell that a spreadsheet would run as a formula (it starts with
    ``= + - @``, a tab or CR) prefixed with ``'``, so it shows as the text it is."""
    import pandas as pd

    def inert(value: object) -> object:
        return f"'{value}" if isinstance(value, str) and value.startswith(_FORMULA) else value

    return frame.apply(lambda column: column if pd.api.types.is_numeric_dtype(column) else column.map(inert))


def _iso(stamp: datetime | None) -> str | None:
    return stamp.isoformat() if stamp is not None else None


def write_log(runs: list[Run], md: str | Path | None = None, csv: str | Path | None = None) -> None:
    """Write the troubleshooting log of ``runs`` as Markdown and/or CSV (the magics and the CLI
    both export through this); an unwritable file raises NpumagicError naming it."""
    for path, render in ((md, lambda: render_markdown(runs)),
                         (csv, lambda: inert_cells(log_table(runs)).to_csv(index=False))):
        if path is None:
            continue
        if str(path) == "-":  # standard output, as the CLI's `--md -`
            sys.stdout.write(render())
            continue
        try:
            write_atomic(path, render())  # an interrupt or a full disk leaves an existing file whole
        except OSError as exc:
            raise NpumagicError(f"cannot write {path}: {exc.strerror or exc}") from None
