"""``modules``: each nn.Module of a path or run recorded with modules on, forward and backward:
calls, host time inclusive and exclusive, device time launched inside; backward charged through
autograd's sequence numbers where the trace carries them."""

from __future__ import annotations

from .base import TARGET, Command, rank
from .regions import Tree, _rank

RECORD_MODULES = ("no nn.Module spans recorded: profile with {0}, or "
                  "torch.profiler.profile(with_modules=True, with_stack=True): torch 2.13 writes the module spans "
                  "only with both; on torch_npu, with_modules=True and with_stack=True at profiler_level Level1 or "
                  "above")


def record_modules() -> str:
    """:data:`RECORD_MODULES` in the words of the user's shell."""
    from ..wording import say

    return RECORD_MODULES.format(say("record_modules"))


def modules(places, target: str, rank: int | None = None) -> Tree:
    from ..analysis.modules import modules as module_table
    from ..analysis.modules import sequence_files

    label, trace = places.trace(target)
    chosen = _rank(trace, rank, label)
    files = sequence_files(trace.meta, chosen)
    return Tree("modules", label, chosen, module_table(trace.events, trace.steps, files, chosen, warn=False),
                record_modules())


COMMAND = Command(
    "modules", "the time of each nn.Module, forward and backward (recorded with --modules)",
    (TARGET, rank("rank to read (default the lowest)")), modules,
    about="Each nn.Module of a path or run recorded with --modules (with_modules and with_stack) as a tree, forward "
          "and backward (charged through autograd's sequence numbers where recorded): calls, host time inclusive "
          "and exclusive, the device time launched inside; the median over the steps (each step in the JSON). Says "
          "what to record where the run has none.")
