"""A report's MIME bundle with its live view's widget in it: a front end with widgets shows the
widget, any other the bundle's text and HTML."""

from __future__ import annotations

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def live_bundle(bundle: dict, live_view, include=None, exclude=None) -> dict:
    """``bundle`` with the live view's widget added (a front end with widgets shows that first)."""
    if live_view is None:
        return bundle
    widget = live_view._repr_mimebundle_(include=include, exclude=exclude) or {}
    return {**bundle, **({WIDGET_MIME: widget[WIDGET_MIME]} if WIDGET_MIME in widget else {})}
