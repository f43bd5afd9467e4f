"""A run's verdict as the history stores it (JSON) and reads it back: versioned as
:mod:`.persist` stores a Summary. Format 1 carries its number; format 0, the verdict's
``as_dict`` with its alert and no number, is read the same way. Either is read leniently (a
history edited by hand or by another tool): text where text is read, a wrong shape as missing.
Imports nothing of npumagic, so the run records (:mod:`npumagic.records`) can hold it."""

from __future__ import annotations

import dataclasses
from typing import Any


VERDICT_FORMAT = 1
_VERDICT_FIELDS = ("bottleneck", "next_change", "steps", "findings")


def verdict_record(verdict, alert: dict | None = None) -> dict[str, Any]:
    """The stored form of a checklist ``Verdict`` (with the step-time ``alert``'s dict, if any)."""
    return {"format": VERDICT_FORMAT, **verdict.as_dict(), "alert": alert}


@dataclasses.dataclass(frozen=True)
class StoredFinding:
    """One finding of a stored verdict: its text fields, and every field as stored (:meth:`to_dict`)."""

    severity: str
    category: str
    title: str
    fix: str
    fields: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.fields)


@dataclasses.dataclass(frozen=True)
class VerdictRecord:
    """A run's stored verdict, as :func:`read_verdict_record` reads it: the bottleneck category,
    the next change, the checklist's (title, text) steps, the findings, and the other stored
    entries (``evidence``, ``alert``) in ``extras``."""

    bottleneck: str | None = None
    next_change: str | None = None
    steps: tuple[tuple[str, ...], ...] = ()  # (title, text); a hand-edited step may hold less
    findings: tuple[StoredFinding, ...] = ()
    extras: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def evidence(self) -> dict[str, Any]:
        return self.extras.get("evidence") or {}

    @property
    def alert(self) -> dict[str, Any] | None:
        """The step-time alert's dict (``outside``, ``band``, ...), where the run had a baseline."""
        alert = self.extras.get("alert")
        return alert if isinstance(alert, dict) else None

    def to_dict(self) -> dict[str, Any]:
        """The verdict as run logs print it (``npumagic log --json``): the stored dict, cleaned."""
        out = dict(self.extras)
        for key in ("bottleneck", "next_change"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out["steps"] = [list(s) for s in self.steps]
        out["findings"] = [f.to_dict() for f in self.findings]
        return out


def read_verdict_record(stored: Any) -> VerdictRecord:
    """The :class:`VerdictRecord` of a stored verdict of any readable format (a later format is
    read by the fields it shares; anything that is no dict is an empty record)."""
    if not isinstance(stored, dict):
        return VerdictRecord()
    text = lambda key: stored[key] if isinstance(stored.get(key), str) else None  # noqa: E731
    steps, findings = stored.get("steps"), stored.get("findings")
    steps = [[str(x) for x in s[:2]] for s in steps if isinstance(s, list)] if isinstance(steps, list) else []
    findings = [{**f, **{k: str(f.get(k, "")) for k in ("severity", "category", "title", "fix")}}
                for f in findings if isinstance(f, dict)] if isinstance(findings, list) else []
    return VerdictRecord(
        bottleneck=text("bottleneck"), next_change=text("next_change"), steps=tuple(tuple(s) for s in steps),
        findings=tuple(StoredFinding(f["severity"], f["category"], f["title"], f["fix"], f) for f in findings),
        extras={k: v for k, v in stored.items() if k not in _VERDICT_FIELDS and k != "format"})
