"""How a predicted change of the step time is said: ``-X ms (-HI to -LO)``, the interval signed
as the prediction is (a saving of 13.7-27.5 ms is a change of -27.5 to -13.7 ms). No imports:
the CLI's light commands say it too."""

from __future__ import annotations


def change_ms(saving_ms: float, low_ms: float, high_ms: float) -> str:
    """``-20.59 ms (-27.46 to -13.73)`` for a saving of 20.59 ms within 13.73-27.46 ms."""
    return f"-{saving_ms:,.2f} ms (-{high_ms:,.2f} to -{low_ms:,.2f})"
