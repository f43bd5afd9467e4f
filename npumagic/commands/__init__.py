"""The commands every shell offers (:data:`COMMANDS`): the CLI's subcommands, the MCP server's
tools and ``%npu NAME ...`` are built from this one list. A new command is one module declaring
a :class:`~npumagic.commands.base.Command`, and one line here."""

from __future__ import annotations

from . import (advise, analyze, compare, export, memcompare, memfit, memory, modules, query, regions, rules, runs, steps,
               trace)
from .base import ERRORS, Arg, Command, Result
from .places import Places, Target

COMMANDS: list[Command] = [analyze.COMMAND, advise.COMMAND, compare.COMMAND, steps.COMMAND, runs.COMMAND,
                           export.COMMAND, rules.COMMAND, regions.COMMAND, modules.COMMAND, memory.COMMAND,
                           memcompare.COMMAND, memfit.COMMAND, trace.COMMAND, query.COMMAND]


def find(name: str) -> Command | None:
    return next((c for c in COMMANDS if c.name == name), None)


__all__ = ["COMMANDS", "ERRORS", "Arg", "Command", "Places", "Result", "Target", "find"]
