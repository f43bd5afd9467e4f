"""What a %%npuprofile cell still runs after its window closed: no profiler (torch's is left, not
stepped on with a "NONE" schedule), no host sampling, and once the cell ends, none of its hooks
(issue 45: the loop after the window costs what it costs unwrapped). Observed from inside the
loop, in a real shell with the real CPU profiler."""

from __future__ import annotations

from npumagic.capture import host

# each iteration: whether a profiler records (any Kineto or legacy session), at which iteration
# torch's profiler is stepped or left, and at a few iterations only (gc.get_objects() is slow)
# whether any of npumagic's host samplers samples
PROBE = """
import gc
from torch.optim.optimizer import _global_optimizer_post_hooks as post_hooks
from torch.profiler import profile
from torch.utils.data import DataLoader
from npumagic.capture.host import HostSampler
earlier = {id(s) for s in gc.get_objects() if type(s) is HostSampler}  # other tests' samplers, still in memory
def sampling():  # a stopped sampler keeps _active set (to wake its thread): only one not stopping samples
    return any(s._active.is_set() and not s._stopping.is_set() for s in gc.get_objects()
               if type(s) is HostSampler and id(s) not in earlier)
enabled, sampled, calls = [], {}, []
hooks_before, iter_before = len(post_hooks), DataLoader.__iter__
torch_step, torch_exit = profile.step, profile.__exit__
def step(self):
    calls.append(("step", len(enabled)))
    return torch_step(self)
def leave(self, *exc):
    calls.append(("exit", len(enabled)))
    return torch_exit(self, *exc)
profile.step, profile.__exit__ = step, leave
"""
LOOP = """%%npuprofile --wait 1 --warmup 1 --steps 2 --name window
for i in range(10):
    train_step()
    enabled.append(torch._C._autograd._profiler_enabled())
    if i in (1, 6, 9):
        sampled[i] = sampling()
"""


def test_after_the_window_nothing_records_and_the_hooks_are_gone(trainer):
    # GIVEN a loop of 10 steps and a window of steps 2-3 (wait 1, warm-up 1)
    assert trainer.run_cell(PROBE).success
    # WHEN the cell runs under %%npuprofile
    try:
        result = trainer.run_cell(LOOP)
    finally:
        trainer.run_cell("profile.step, profile.__exit__ = torch_step, torch_exit")
    assert result.success, result.error_in_exec
    ns = trainer.user_ns
    # THEN the profiler records through the two active steps (each probe runs after its iteration's
    # optimizer step, so in the step that follows), and is off for every step after the window
    assert ns["enabled"] == [False, True, True, False, False, False, False, False, False, False]
    # and torch's profiler is stepped at the window's boundaries only, and left at its last one
    # (iteration 3's optimizer step), not kept and stepped with nothing scheduled
    assert ns["calls"] == [("step", 1), ("step", 2), ("step", 3), ("exit", 3)]
    # and the host sampler samples in the window only
    assert ns["sampled"] == {1: host.available(), 6: False, 9: False}
    # and once the cell is done, its step hook and DataLoader patch are gone
    assert len(ns["post_hooks"]) == ns["hooks_before"]
    assert ns["DataLoader"].__iter__ is ns["iter_before"]
