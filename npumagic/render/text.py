"""Text and HTML of the analysis objects (Summary, Verdict, Finding, Advice, Comparison): the
analysis layer returns data and asks this module to display it. Pure pandas, no matplotlib."""

from __future__ import annotations

import html

import numpy as np

from ..analysis.advice import steps_inferred
from ..analysis.whatif import prediction
from ..terminal import terminal_safe, wrap
from .tables import format_advice, format_breakdown, format_kernel_diff, format_memory_changes, format_steps


def _ms(us: float) -> str:
    return "-" if us != us else f"{us / 1000:,.2f} ms"


def _pct(v: float) -> str:
    return "-" if v != v else f"{v:.0%}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


# -- Summary ----------------------------------------------------------------------------------
def summary_headline(summary) -> str:
    """One line: backend, device, rank, steps, median and p90 step, busy/comm/DataLoader shares of
    all steps' time (the checklist's Baseline gives the median step's busy share)."""
    h, m = summary.headline, summary.meta
    return (f"{m.get('backend', '?')} on {m.get('device_name', '?')}, rank {m.get('rank', 0)}: "
            f"{_plural(int(h['steps']), 'step')}, median {_ms(h['step_median_us'])}, p90 {_ms(h['step_p90_us'])}; "
            f"of all steps' time {summary.busy_label} {_pct(h['device_util'])}, communication {_pct(h['communication_share'])}, "
            f"dataloader {_pct(h['dataloader_share'])}")


INFERRED_STEP = ("no ProfilerStep marks in the trace (no schedule, or prof.step() never called): "
                 "the whole trace is one inferred step")


def _inferred(summary) -> str:
    return INFERRED_STEP if steps_inferred(summary) else ""


@terminal_safe
def summary_text(summary, width: int | None = None) -> str:
    """The headline, the inferred-step note and the step table; with ``width``, lines wrapped
    (and the table fitted) to that many columns."""
    lines = [wrap(line, width, 4) for line in [summary_headline(summary)] + ([_inferred(summary)] if _inferred(summary) else [])]
    if len(summary.steps):
        lines.append(format_steps(summary.steps, caption="").to_text(width))
    return "\n".join(lines)


def summary_html(summary) -> str:
    note = f"<p style='color:#777;margin:0'>{html.escape(_inferred(summary))}</p>" if _inferred(summary) else ""
    return f"<p>{html.escape(summary_headline(summary))}</p>" + note + (
        format_steps(summary.steps)._repr_html_() if len(summary.steps) else "")


# -- Verdict ----------------------------------------------------------------------------------
@terminal_safe
def verdict_text(verdict, width: int | None = None) -> str:
    """The five steps, one a line; with ``width``, each wrapped under its text column."""
    pad = max(len(title) for title, _ in verdict.steps)
    lines = [wrap(f"{i}. {title:<{pad}}  {text}", width, len(f"{i}. ") + pad + 2)
             for i, (title, text) in enumerate(verdict.steps, 1)]
    if getattr(verdict, "where", ""):
        lines.append(wrap(f"   {'Where':<{pad}}  {verdict.where}", width, pad + 5))
    return "\n".join(lines)


def verdict_html(verdict) -> str:
    rows = "".join(f"<tr><td style='text-align:right;vertical-align:top'>{i}</td>"
                   f"<th style='text-align:left;vertical-align:top;white-space:nowrap;padding-right:12px'>"
                   f"{html.escape(t)}</th><td style='text-align:left'>{html.escape(x)}</td></tr>"
                   for i, (t, x) in enumerate(verdict.steps, 1))
    if getattr(verdict, "where", ""):
        rows += (f"<tr style='color:#777'><td></td><th style='text-align:left;vertical-align:top;padding-right:12px'>"
                 f"Where</th><td style='text-align:left'>{html.escape(verdict.where)}</td></tr>")
    return ("<table style='border-collapse:collapse;font-size:13px;max-width:100%'>"
            "<caption style='caption-side:top;text-align:left;font-weight:bold'>checklist</caption>"
            f"{rows}</table>")


# -- Findings and Advice -------------------------------------------------------------------------
@terminal_safe
def finding_text(finding, width: int | None = None, number: str = "") -> str:
    """A finding in three lines (title, fix, where), ``number`` before it; with ``width``, each
    wrapped with a hanging indent."""
    ranks = getattr(finding, "ranks", ())
    figures = getattr(finding, "figures_of", None)
    whose = f"; figures of rank {figures}" if figures is not None else ""
    on = f" (ranks {', '.join(str(r) for r in ranks)}{whose})" if len(ranks) > 1 else f" (rank {ranks[0]})" if ranks else ""
    rule = getattr(finding, "rule", "")
    label = f"{finding.category}/{rule}" if rule and rule != finding.category else finding.category
    lines = [wrap(f"{number}[{finding.severity}] {label}: {finding.title}{on}", width, 4),
             wrap(f"    fix: {finding.fix}", width, 9)]
    if getattr(finding, "predicted_interval", None) is not None:
        lines.append(wrap(f"    predicted: {prediction(finding)}", width, 15))
    if finding.where:
        lines.append(wrap(f"    where: {finding.where}", width, 11))
    if getattr(finding, "place", ""):
        lines.append(_wrap_path(f"    in: {finding.place} ({finding.place_share:.0%} of its time)", width, 8))
    return "\n".join(lines)


def _wrap_path(line: str, width: int | None, indent: int) -> str:
    """``line`` wrapped as :func:`wrap` does, and also after any ``/`` where it must: a module or
    region path has no space to break at, and cut it would lose the part that tells layers apart."""
    if width is None or len(line) <= width:
        return line
    return wrap(line.replace("/", "/ "), width, indent).replace("/ ", "/")


def hidden_note(advice) -> str:
    """The lines saying how many low-severity findings were left out and which ranks' findings
    are not in the advice, or ""."""
    n = getattr(advice, "hidden_low", 0)
    others = getattr(advice, "others_hidden", {})
    lines = [f"{_plural(n, 'low-severity finding')} not shown"] if n else []
    if others:
        ranks = advice.other_ranks
        whose = (f"rank {ranks[0]}'s" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}'")
        counts = ", ".join(f"{others[s]} {s}" for s in ("high", "medium", "low") if others.get(s))
        lines = [(f"{lines[0]}, nor" if lines else "not shown:") + f" {whose} own findings ({counts})"]
    if lines:
        lines[0] += "; all of them, of every rank: --all" if others else " (all of them: --all)"
    if getattr(advice, "ranks_left", ""):
        lines.append(f"{advice.ranks_left} (--every-rank)")
    return "\n".join(lines)


def _caveat(advice) -> str:
    """What every finding rests on, said before them (one step inferred from the whole trace, a
    contended machine), or ""."""
    said = [f"{INFERRED_STEP}; per-step figures cover all of it"] if getattr(advice, "steps_inferred", False) else []
    said += [advice.untrusted] if getattr(advice, "untrusted", "") else []
    return "\n".join(said)


def lead_text(advice) -> str:
    """The run's bottleneck when no finding names it (compute-bound, balanced, no verdict), as
    the checklist's Classify says it, with its fix; "" when the first finding is the answer."""
    judged = getattr(advice, "lead", None)
    if judged is None or judged.finding is not None:
        return ""
    return f"{judged.label or judged.category}: {judged.title}\n    fix: {judged.fix}"


@terminal_safe
def advice_text(advice, width: int | None = None) -> str:
    """The advice in text; with ``width``, every line wrapped to that many columns."""
    head = f"npumagic advice{' for ' + advice.run if advice.run else ''}: "
    note = f"\n{hidden_note(advice)}" if hidden_note(advice) else ""
    caveat = f"\n{_caveat(advice)}" if _caveat(advice) else ""
    lead = lead_text(advice)
    findings = "\n".join(finding_text(f, width, f"{i}. ") for i, f in enumerate(advice.findings, 1))
    if not advice.findings:
        text = head + (lead or "no bottleneck past its threshold") + caveat + note
    elif lead:  # the answer first; the findings under it are each below the verdict's threshold
        text = (head + lead + caveat + f"\n{_plural(len(advice.findings), 'smaller finding')}, none past the verdict's "
                "threshold:")
        return _wrapped(text, width) + "\n" + findings + _wrapped(note, width)
    else:
        text = head + f"{_plural(len(advice.findings), 'finding')}{caveat}"
        return _wrapped(text, width) + "\n" + findings + _wrapped(note, width)
    return _wrapped(text, width)


def _wrapped(text: str, width: int | None) -> str:
    """Each line of ``text`` wrapped to ``width``, indented lines under their own indent + 4."""
    return "\n".join(wrap(line, width, len(line) - len(line.lstrip()) + 4) for line in text.split("\n"))


def advice_html(advice) -> str:
    note = "".join(f"<p style='color:#777;margin:0'>{html.escape(line)}</p>"
                   for line in [_caveat(advice), *hidden_note(advice).splitlines()] if line)
    lead = lead_text(advice)
    first = f"<p><b>{html.escape(lead.splitlines()[0])}</b><br>{html.escape(lead.splitlines()[1].strip())}</p>" if lead else ""
    if not advice.findings:
        return (first or f"<p>{html.escape(advice_text(advice).splitlines()[0])}</p>") + note
    return first + format_advice(advice)._repr_html_() + note


# -- Comparison -----------------------------------------------------------------------------------
@terminal_safe
def comparison_text(comparison, top: int = 10, width: int | None = None) -> str:
    """The comparison in text; with ``width``, its sentences wrapped and its tables fitted to it."""
    c = comparison
    lines = [wrap(c.sentence(), width, 4), "", format_breakdown(c).to_text(width)]
    if c.memory is not None:
        lines += ["", wrap(c.memory.sentence(c.a, c.b), width, 4)]
        if len(c.memory.operator_changes):
            lines += [format_memory_changes(c.memory, c.a, c.b).to_text(width)]
    if len(c.changed) > 1:
        lines += ["", f"{len(c.changed)} things changed between the runs — the checklist's rule is one change at a time:"]
    elif c.changed:
        lines += ["", "what changed:"]
    lines += [wrap(f"  - {x}", width, 4) for x in c.changed]
    for key, diff in c.diffs.items():
        lines += ["", f"{key} diff:", diff]
    if len(c.kernels):
        lines += ["", format_kernel_diff(c, top).to_text(width)]
    return "\n".join(lines)


def comparison_html(comparison, figure_html: str = "", top: int = 15) -> str:
    c = comparison
    parts = [f"<p><b>{html.escape(c.sentence())}</b></p>", format_breakdown(c)._repr_html_()]
    if c.memory is not None:
        parts.append(f"<p>{html.escape(c.memory.sentence(c.a, c.b))}</p>")
        if len(c.memory.operator_changes):
            parts.append(format_memory_changes(c.memory, c.a, c.b)._repr_html_())
    if c.changed:
        warn = " — the checklist's rule is one change at a time" if len(c.changed) > 1 else ""
        parts.append(f"<p>What changed{warn}:</p><ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in c.changed) + "</ul>")
    for diff in c.diffs.values():
        parts.append(f"<pre style='max-width:100%;overflow-x:auto'>{html.escape(diff)}</pre>")
    if figure_html:
        parts.append(figure_html)
    if len(c.kernels):
        parts.append(format_kernel_diff(c, top)._repr_html_())
    return "\n".join(parts)



# -- Interleaved A/B ----------------------------------------------------------------------------
def _ab_rows(result) -> list[tuple[str, str, str, int]]:
    """(variant, median, min, steps) of each side that ran."""
    return [(name, _ms(1e6 * float(np.median(times))), _ms(1e6 * float(times.min())), int(times.size))
            for name, times in ((result.a, result.times_a), (result.b, result.times_b)) if times.size]


def ab_text(result, width: int | None = None) -> str:
    rows = [f"{'variant':<16}{'median':>14}{'min':>14}{'steps':>7}"]
    rows += [f"{name[:15]:<16}{median:>14}{low:>14}{n:>7}" for name, median, low, n in _ab_rows(result)]
    if result.comparison is not None:
        rows += ["", wrap(_profiled(result), width), comparison_text(result.comparison, width=width)]
    return "\n".join([wrap(result.sentence(), width), ""] + rows)


def _profiled(result) -> str:
    c = result.comparison
    return (f"where the difference goes (profiled {c.n_a} steps of each as runs {c.a} and {c.b}; the verdict above is "
            "the interleaved one):")


def ab_html(result) -> str:
    cells = "".join(f"<tr><td>{html.escape(name)}</td><td>{median}</td><td>{low}</td><td>{n}</td></tr>"
                    for name, median, low, n in _ab_rows(result))
    profiled = ("" if result.comparison is None else
                f"<p>{html.escape(_profiled(result))}</p>" + comparison_html(result.comparison))
    return (f"<p><b>{html.escape(result.sentence())}</b></p><table><tr><th>variant</th><th>median</th><th>min</th>"
            f"<th>steps</th></tr>{cells}</table>{profiled}")


# -- Across hardware ----------------------------------------------------------------------------
def operator_match_text(table, a: str, b: str, top: int = 15) -> str:
    """The per-operator device time of two runs (see :func:`~npumagic.analysis.crossbackend.match_operators`)."""
    head = f"{'operator (device time per step)':<40}{a[:14]:>16}{b[:14]:>16}{'B/A':>8}{'calls A':>9}{'calls B':>9}"
    rows = [head]
    for r in table.head(top).itertuples(index=False):
        ratio = "-" if r.b_over_a != r.b_over_a else f"{r.b_over_a:.2f}x"
        rows.append(f"{r.operator[:39]:<40}{_ms(r.device_a_us):>16}{_ms(r.device_b_us):>16}{ratio:>8}"
                    f"{r.calls_a:>9.0f}{r.calls_b:>9.0f}")
    if len(table) > top:
        rows.append(f"... {len(table) - top} more operators")
    return "\n".join(rows)
