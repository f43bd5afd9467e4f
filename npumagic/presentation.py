"""How npumagic's result objects show themselves, without the analysis layer naming a renderer.

``Summary``, ``Verdict``, ``Advice``, ``Finding``, ``Comparison`` and ``ABResult`` are data:
their ``__str__`` and ``_repr_html_`` ask :func:`text` and :func:`html`, and
:mod:`npumagic.render.display` registers a function for each class. The renderer is a setting
(:data:`RENDERER`, a module name) loaded on the first ask, as pandas loads its plotting backend:
data flows one way (render imports analysis, never the reverse), and the analysis layer works
and is tested without render."""

from __future__ import annotations

import importlib
from typing import Any, Callable

from .terminal import display_width

RENDERER = "npumagic.render.display"  # the module whose import registers every class's text and HTML

_TEXT: dict[type, Callable[[Any], str]] = {}
_HTML: dict[type, Callable[[Any], str]] = {}


def register(cls: type, text: Callable[..., str], html: Callable[[Any], str] | None = None) -> None:
    """Show instances of ``cls`` (and its subclasses) as ``text(obj, width=W)`` (W: the columns
    to wrap to, or None) and, in a notebook, ``html(obj)``."""
    _TEXT[cls] = text
    if html is not None:
        _HTML[cls] = html


def _lookup(table: dict[type, Callable[[Any], str]], obj: Any) -> Callable[[Any], str] | None:
    if not _TEXT:
        importlib.import_module(RENDERER)
    return next((table[k] for k in type(obj).__mro__ if k in table), None)


def text(obj: Any) -> str:
    """``obj`` as text (a terminal, ``print``), wrapped to the terminal where output goes to one;
    its dataclass repr where no renderer is registered."""
    shown = _lookup(_TEXT, obj)
    return shown(obj, width=display_width()) if shown is not None else repr(obj)


def html(obj: Any) -> str | None:
    """``obj`` as HTML for a notebook; None (IPython then shows the text) where none is registered."""
    shown = _lookup(_HTML, obj)
    return shown(obj) if shown is not None else None
