"""The text and HTML of every analysis result, registered with :mod:`npumagic.presentation` on
import: ``print(summary)`` in a script, the CLI's output and a notebook's display all come from
:mod:`.text`. Importing this module is all it takes (``presentation`` does it on the first ask)."""

from __future__ import annotations

from .. import presentation
from ..analysis.ab import ABResult
from ..analysis.advice import Advice
from ..analysis.checklist import Verdict
from ..analysis.compare import Comparison
from ..analysis.finding import Finding
from ..analysis.summary import Summary
from . import text

presentation.register(Summary, text.summary_text, text.summary_html)
presentation.register(Verdict, text.verdict_text, text.verdict_html)
presentation.register(Advice, text.advice_text, text.advice_html)
presentation.register(Finding, text.finding_text)
presentation.register(Comparison, text.comparison_text, text.comparison_html)
presentation.register(ABResult, text.ab_text, text.ab_html)
