"""Spark errors as the engine raised them: the exception class, Spark's error class and the cause
chain (Java's when the JVM raised it), and occflow's classification of them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...core.causes import explicit_chain
from ...core.classify import classify
from ...core.kinds import Classification
from ..outcome import ErrorInfo
from .connect_errors import connect_error_info
from .winner import delta_spark_winner

#: Causes recorded at most: Spark's wrapper stacks stay well under it.
MAX_CHAIN = 20


def _java_throwable(exc: BaseException) -> Any:
    """The Java exception behind a PySpark error (Py4JJavaError or a captured exception)."""
    java = getattr(exc, "java_exception", None)
    if java is None:
        java = getattr(exc, "_origin", None)
    return java


def _java_error_class(throwable: Any) -> str | None:
    try:
        value = throwable.getErrorClass()
    except Exception:  # not a SparkThrowable: py4j raises when the method does not exist
        return None
    return str(value) if value else None


def _java_chain(java: Any) -> tuple[list[str], list[str], str | None]:
    """Class names, messages and the first error class along a Java ``getCause()`` chain."""
    classes: list[str] = []
    messages: list[str] = []
    error_class: str | None = None
    current = java
    while current is not None and len(classes) < MAX_CHAIN:
        try:
            classes.append(str(current.getClass().getName()))
            msg = current.getMessage()
            messages.append("" if msg is None else str(msg))
            error_class = error_class or _java_error_class(current)
            nxt = current.getCause()
        except Exception:  # the JVM went away under us: keep what we have
            break
        if nxt is None or nxt.equals(current):
            break
        current = nxt
    return classes, messages, error_class


def _python_error_class(exc: BaseException) -> str | None:
    """Spark's error class of a PySpark exception that has no JVM exception behind it."""
    getter = getattr(exc, "getErrorClass", None)
    if not callable(getter):
        return None
    try:
        value = getter()
    except Exception:  # a getter that fails tells us nothing
        return None
    return str(value) if value else None


def error_info(exc: BaseException) -> ErrorInfo:
    """The exception class, error class and cause chain (Java's when Spark raised it, read back
    from the server's texts over Spark Connect)."""
    connect = connect_error_info(exc)
    if connect is not None:
        return connect
    java = _java_throwable(exc)
    classes, messages, error_class = ([], [], None) if java is None else _java_chain(java)
    if not classes:
        chain = list(explicit_chain(exc, limit=MAX_CHAIN))
        classes = [f"{type(e).__module__}.{type(e).__qualname__}" for e in chain]
        messages = [str(e) for e in chain]
    if error_class is None:
        error_class = _python_error_class(exc)
    return ErrorInfo(
        exception_class=classes[0],
        messages=tuple(messages),
        error_class=error_class,
        cause_classes=tuple(classes[1:]),
    )


def classify_error(error: BaseException | ErrorInfo | str) -> Classification:
    """occflow's classification of the error. An ``ErrorInfo`` is passed whole, so the
    classifier sees its error class and exact exception class names, not only their text.

    A delta-spark conflict that prints its ``Conflicting commit`` names the winner with all
    its commit info (the Airflow try that made it too, from occflow's tag in ``userMetadata``).
    """
    found = classify(error)
    if not found.is_conflict:
        return found
    winner = delta_spark_winner(_text(error))
    return found if winner is None else replace(found, winning_commit=winner)


def _text(error: BaseException | ErrorInfo | str) -> str:
    if isinstance(error, ErrorInfo):
        return "\n".join(error.messages)
    if isinstance(error, str):
        return error
    return "\n".join(str(e) for e in explicit_chain(error, limit=MAX_CHAIN))
