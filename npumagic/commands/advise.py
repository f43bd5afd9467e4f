"""``advise``: the ranked findings of a path or a run, each with its evidence and fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import TARGET, Arg, Command, Result, rank


@dataclass(frozen=True)
class Advised(Result):
    label: str
    advice: Any

    def to_dict(self) -> dict[str, Any]:
        from ..jsonout import advice_doc

        return advice_doc(self.advice, self.label)

    def text(self, width: int | None = None) -> str:
        from ..render.text import advice_text

        return advice_text(self.advice, width)

    def html(self) -> str:
        return self.advice._repr_html_()


def advise(places, target: str, rank: int | None = None, every_rank: bool = False) -> Advised:
    found = places.target(target, rank)
    return Advised(found.label, places.advise(found, every_rank))


COMMAND = Command(
    "advise", "ranked findings with evidence and fixes",
    (TARGET, rank("rank to advise on (default the lowest)"),
     Arg("every_rank", "every rank of a multi-rank job, and low-severity findings", bool, flag="--all")),
    advise, about="Ranked findings of a profiler output path or a recorded run, each with its evidence and the fix to "
                  "try next; every_rank: every rank of a multi-rank job, and the low-severity findings.")
