"""npumagic's pytest plugin: the ``npuab`` fixture, a performance regression test in the project's
own suite that tells a real slowdown from a busy neighbour.

It runs the interleaved sequential test of ``%npuab`` (:func:`npumagic.ab_run.interleave`,
:mod:`npumagic.analysis.ab`): the two variants alternate in randomised ABBA blocks and the test stops
as soon as the interval of the step-time ratio is decided. Enabled by the entry point ``pytest11``
(``pytest -p npumagic`` where plugins are not loaded automatically)::

    def test_new_collate_is_not_slower(npuab):
        result = npuab(old_step, new_step, threshold=5, max_steps=400)
        result.assert_not_slower()

An undecided result fails with its own message, or is skipped with ``--npuab-undecided=skip``.
This module imports nothing heavy when pytest loads it: numpy comes with the first call."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable

import pytest

UNDECIDED = ("fail", "skip")


def pytest_addoption(parser) -> None:
    group = parser.getgroup("npumagic", "npumagic's npuab fixture")
    group.addoption("--npuab-undecided", choices=UNDECIDED, default="fail",
                    help="what npuab(...).assert_not_slower() does when the step budget ran out before the "
                         "comparison was decided: fail (default) or skip")


@dataclass(frozen=True)
class NpuAB:
    """The interleaved comparison of the reference A with the variant B (``.result``: the
    :class:`~npumagic.analysis.ab.ABResult`, as ``%npuab`` returns it)."""

    result: Any
    undecided: str = "fail"

    @property
    def ratio(self) -> float:
        """Step time B / A: above 1, B is slower."""
        return 1 / self.result.speedup

    @property
    def ci(self) -> tuple[float, float]:
        """The 95% interval (an always-valid confidence sequence) of :attr:`ratio`; (0, inf) while unbounded."""
        low, high = self.result.ci
        return 1 / high, (1 / low if low > 0 else math.inf)

    def report(self) -> str:
        """The ratio, its interval and the steps spent, in one line."""
        r = self.result
        low, high = self.ci
        ci = f"95% CI {low:.3f}–{high:.3f}x" if 0 < low and high < math.inf else "95% CI not yet bounded"
        return (f"step time {r.b}/{r.a} {self.ratio:.3f}x, {ci} "
                f"(threshold {r.threshold:.0%}), {r.steps} steps interleaved of --max-steps {r.max_steps}")

    def assert_not_slower(self) -> None:
        """Fail when B is slower than A beyond the threshold; an undecided comparison fails too,
        or is skipped with ``--npuab-undecided=skip``."""
        __tracebackhide__ = True  # noqa: F841 - the failure points at the test's line
        r = self.result
        if not r.decided:
            more = f"about {r.more_steps} more steps would decide" if r.more_steps else "more steps would decide"
            message = f"npuab undecided: {r.b} against {r.a}: {self.report()}; {more} (raise max_steps)"
            if self.undecided == "skip":
                pytest.skip(message)
            pytest.fail(message, pytrace=False)
        if r.significant and self.ratio > 1:
            amount = f"{self.ratio:.2f}x" if self.ratio >= 1.5 else f"{self.ratio - 1:.1%}"
            pytest.fail(f"npuab: {r.b} is {amount} slower than {r.a}: {self.report()}", pytrace=False)

    def __str__(self) -> str:
        return self.report()


def _check(fn: Callable, side: str) -> None:
    if not callable(fn):
        raise TypeError(f"npuab: {side} is a {type(fn).__name__}, not callable; give a zero-argument function")
    if inspect.iscoroutinefunction(fn):
        raise TypeError(f"npuab: {side} is an async function; give a plain zero-argument function")
    try:
        inspect.signature(fn).bind()
    except TypeError:
        raise TypeError(f"npuab: {side} needs arguments; give a zero-argument function (functools.partial)") from None
    except ValueError:  # a builtin without a signature: called as it is
        pass


@pytest.fixture
def npuab(request) -> Callable[..., NpuAB]:
    """``npuab(a, b, threshold=5, max_steps=400, warmup=2, seed=None)``: alternate the two
    zero-argument callables (one step each) until the step-time ratio is decided, as ``%npuab``
    does; ``threshold`` in percent. Returns an :class:`NpuAB` (``.assert_not_slower()``)."""
    undecided = request.config.getoption("--npuab-undecided", default="fail")

    def run(a: Callable[[], object], b: Callable[[], object], threshold: float = 5, max_steps: int = 400,
            warmup: int = 2, seed: int | None = None) -> NpuAB:
        from .analysis.ab import MIN_BLOCKS
        from .ab_run import interleave

        _check(a, "a")
        _check(b, "b")
        if not 0 < threshold < 100:
            raise ValueError(f"npuab: threshold {threshold:g}: a percentage above 0 and below 100")
        if max_steps < 4 * MIN_BLOCKS:
            raise ValueError(f"npuab: max_steps {max_steps}: at least {4 * MIN_BLOCKS} ({MIN_BLOCKS} ABBA blocks, the fewest the test can decide on)")
        if warmup < 0:
            raise ValueError(f"npuab: warmup {warmup}: 0 or more")
        names = (getattr(a, "__name__", "a"), getattr(b, "__name__", "b"))
        if names[0] == names[1]:
            names = (f"{names[0]} (a)", f"{names[1]} (b)")
        result = interleave(a, b, names, threshold / 100, max_steps, warmup, seed)
        return NpuAB(result, undecided)

    return run
