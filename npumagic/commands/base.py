"""The core of commands under every shell (after memray's ``commands/``): a :class:`Command`
declares its name, its one-line help and its arguments (:class:`Arg`) once, and its ``run``
returns a :class:`Result` with ``.to_dict()``, text and HTML. The CLI, the MCP server and the
``%npu`` magic build their subcommands, tools and parsers from these declarations, call ``run``
and present; each catches :data:`ERRORS` in one place and says them in its own way."""

from __future__ import annotations

import argparse
import html as html_escape
import inspect
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import NpumagicError

# what a command raises on purpose (NpumagicError) or for an input it cannot use (a number out of
# range, a file it cannot read): the exit status 2 of the CLI, a tool error, a UsageError
ERRORS = (NpumagicError, ValueError, OSError)


@dataclass(frozen=True)
class Arg:
    """One argument of a command: ``name`` is its Python and MCP parameter; on a command line it
    is a positional (``positional``, shown as ``metavar``) or the option ``flag`` (default
    ``--name-with-dashes``); ``type`` bool is an on/off flag."""

    name: str
    help: str
    type: type = str
    default: Any = None
    positional: bool = False
    flag: str | None = None
    metavar: str | None = None
    many: bool = False  # repeatable: a list of values (None when none is given)

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Declare this argument on an argparse parser (its dest is :attr:`name`)."""
        if self.positional:
            parser.add_argument(self.name, metavar=self.metavar or self.name, help=self.help)
        elif self.many:
            parser.add_argument(self.option, dest=self.name, type=self.type, action="append", default=None,
                                metavar=self.metavar, help=self.help)
        elif self.type is bool:
            parser.add_argument(self.option, dest=self.name, action="store_true", help=self.help)
        else:
            parser.add_argument(self.option, dest=self.name, type=self.type, default=self.default,
                                metavar=self.metavar, help=self.help)

    def parameter(self) -> inspect.Parameter:
        """The keyword parameter of a function taking this argument (an MCP tool's signature)."""
        if self.positional:
            return inspect.Parameter(self.name, inspect.Parameter.KEYWORD_ONLY, annotation=self.type)
        if self.many:
            return inspect.Parameter(self.name, inspect.Parameter.KEYWORD_ONLY, annotation=list[self.type] | None,
                                     default=None)
        annotation = self.type if self.type is bool or self.default is not None else self.type | None
        default = bool(self.default) if self.type is bool else self.default
        return inspect.Parameter(self.name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


class Result:
    """What a command returns: its JSON document (:meth:`to_dict`, :mod:`npumagic.jsonout`'s),
    its text (a terminal, ``print``) and its HTML (a notebook shows it)."""

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def text(self, width: int | None = None) -> str:
        raise NotImplementedError

    def html(self) -> str:
        return f"<pre>{html_escape.escape(self.text())}</pre>"

    def __str__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        return self.html()

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(self.text())


@dataclass(frozen=True)
class Command:
    """A command every shell offers: ``run(places, **arguments)`` answers it, where ``places``
    (:class:`~npumagic.commands.places.Places`) finds the paths and runs it names. ``about``
    is the longer description a tool or ``%npu NAME?`` shows (default ``help``)."""

    name: str
    help: str
    args: tuple[Arg, ...]
    run: Callable[..., Result]
    about: str = ""

    @property
    def description(self) -> str:
        return self.about or self.help


def at_least_one(value: int | None, what: str) -> int | None:
    """``value``, a count asked for, else NpumagicError: a table of -1 rows is no question."""
    if value is not None and value < 1:
        raise NpumagicError(f"{what} must be 1 or more, not {value}")
    return value


TARGET = Arg("target", "a torch.profiler or torch_npu output directory (one rank or several), or a trace file",
             positional=True, metavar="path")


def rank(help_text: str) -> Arg:
    return Arg("rank", help_text, int)
