"""delta-rs errors as an outcome records and classifies them.

delta-rs raises plain Python exceptions (``CommitFailedError`` and friends), so the record is the
exception chain Python prints, and the classification is ``occflow.core.classify``: the one
place that knows delta-rs's conflict texts.
"""

from __future__ import annotations

from ...core.classify import classify
from ...core.kinds import Classification
from ..outcome import ErrorInfo


def error_info(exc: BaseException) -> ErrorInfo:
    """The exception as the outcome records it: class, message chain, cause classes."""
    return ErrorInfo.from_exception(exc)


def classify_error(exc: BaseException) -> Classification:
    """``occflow.core.classify`` on the exception and everything behind it."""
    return classify(exc)
