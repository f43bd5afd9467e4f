"""npumagic's own exception types: every reader and analysis failure is one of these."""

from __future__ import annotations


class NpumagicError(Exception):
    """Base class of every error npumagic raises on purpose. Its message is shown on terminals
    and names inputs (file names, trace strings): control characters in it read as U+FFFD."""

    def __str__(self) -> str:
        from .terminal import safe_text

        return safe_text(super().__str__())


class TraceError(NpumagicError, ValueError):
    """A profiler output that cannot be read: names the file and what was expected."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self):
        # rebuilt from its own arguments, so it survives pickling (a Dask worker raising it)
        return type(self), (self.path, self.problem)


class RunNameTaken(NpumagicError):
    """A run name that is already in the history."""


class UnknownRun(NpumagicError, KeyError):
    """A run name not in the history; the message lists the known ones."""

    def __str__(self) -> str:
        return self.args[0]
