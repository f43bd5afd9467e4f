"""Message wording: how a message names what the user can do next, in the words of the shell they use.

The core (session, history) says *what* to do ("remove that run", "list the runs"); this table
says it as a magic in a notebook and as a command in a terminal. The shells set :data:`SHELL`
(``cli.main`` and the MCP server to ``"cli"``; the magics keep the default, ``"notebook"``), so
no message of the core names a magic or a flag the user's shell does not have."""

from __future__ import annotations

from contextvars import ContextVar

SHELL: ContextVar[str] = ContextVar("npumagic_shell", default="notebook")

SAYINGS = {
    "name_taken": {"notebook": "choose another --name or remove it with %npurm {0}",
                   "cli": "choose another --name"},
    "list_runs": {"notebook": "%npuruns lists them", "cli": "`npumagic runs` lists them"},
    "add_note": {"notebook": '; add your conclusion with %npunote {0} "..."', "cli": ""},
    "profiled": {"notebook": "the cell", "cli": "the command"},
    "decide_anyway": {
        "notebook": "to decide on this shared machine anyway, time the two variants interleaved in this kernel: "
                    "%npuab STEP_A STEP_B (two zero-argument functions, one training step each) alternates them in "
                    "ABBA blocks, so a neighbour's load hits both alike; or profile both again on a quiet machine",
        "cli": "to decide on this shared machine anyway, alternate them: `npumagic ab SCRIPT_A SCRIPT_B` runs short "
               "captures of each script in turn (A B B A ...) and decides on their paired median steps; or time the "
               "two variants interleaved in one process: "
               "%npuab STEP_A STEP_B in IPython or a notebook (two zero-argument functions, one training step each), "
               "or the pytest fixture npuab, alternates them in ABBA blocks, so a neighbour's load hits both alike; "
               "or profile both again on a quiet machine"},
    "record_modules": {"notebook": "%%npuprofile --modules (npumagic run --modules in a terminal)",
                       "cli": "`npumagic run --modules`"},
    "first_run": {"notebook": "profile a cell with %%npuprofile first",
                  "cli": "record one with `npumagic run -- CMD` first"},
}


def say(what: str, *args: object) -> str:
    """The words for ``what`` in the current shell, formatted with ``args``."""
    return SAYINGS[what][SHELL.get()].format(*args)
