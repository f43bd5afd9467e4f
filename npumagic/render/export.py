"""The troubleshooting log: every run's verdict, findings and note, as Markdown or CSV."""

from __future__ import annotations

import pandas as pd

from ..history import Run

LOG_COLUMNS = ["name", "created", "status", "backend", "device", "steps", "step_median_ms", "device_util", "bottleneck",
               "next_change", "findings", "note", "run_dir"]


def log_table(runs: list[Run]) -> pd.DataFrame:
    """One row per run: :data:`LOG_COLUMNS` (findings joined into one cell)."""
    rows = []
    for r in runs:
        h, v = r.headline, r.verdict
        rows.append({
            "name": r.name, "created": pd.Timestamp(r.created, unit="s").floor("s").isoformat(), "status": r.status,
            "backend": r.backend, "device": r.device, "steps": h.get("steps"),
            "step_median_ms": round(h["step_median_us"] / 1000, 3) if h.get("step_median_us") is not None else None,
            "device_util": round(h["device_util"], 3) if h.get("device_util") is not None else None,
            "bottleneck": v.get("bottleneck"), "next_change": v.get("next_change"),
            "findings": " | ".join(f"[{f['severity']}] {f['category']}: {f['title']}" for f in v.get("findings", [])),
            "note": r.note, "run_dir": r.run_dir,
        })
    return pd.DataFrame(rows, columns=LOG_COLUMNS)


def render_markdown(runs: list[Run], title: str = "npumagic troubleshooting log") -> str:
    """Each run as a Markdown section: facts, note, checklist table, findings, cell source."""
    out = [f"# {title}", ""]
    for r in runs:
        h, v = r.headline, r.verdict
        median = f"{h['step_median_us'] / 1000:.2f} ms" if h.get("step_median_us") is not None else "-"
        out += [f"## {r.name} — {r.status}", "",
                f"- when: {pd.Timestamp(r.created, unit='s').floor('s')}; backend: {r.backend} ({r.device}); "
                f"steps: {h.get('steps', '-')}; median step: {median}",
                f"- output: `{r.run_dir}`"]
        if r.note:
            out.append(f"- **note:** {r.note}")
        if v.get("steps"):
            out += ["", "| # | checklist | |", "|---|---|---|"]
            out += [f"| {i} | {title} | {text.replace('|', '/')} |" for i, (title, text) in enumerate(v["steps"], 1)]
        if v.get("findings"):
            out += ["", "Findings:", ""]
            out += [f"{i}. **[{f['severity']}] {f['category']}** — {f['title']}  \n   fix: {f['fix']}"
                    for i, f in enumerate(v["findings"], 1)]
        if r.source:
            out += ["", "```python", r.source.strip(), "```"]
        out.append("")
    return "\n".join(out)
