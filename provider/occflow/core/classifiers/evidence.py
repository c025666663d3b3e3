"""Turn whatever a caller hands to ``classify`` into frames: one per exception in its chain.

Pure Python and duck-typed, so ``occflow.core`` imports neither py4j, PySpark, deltalake nor the
engines package. It understands:

- Python exceptions and everything behind them (``core.causes.causes``: cause, context even when
  suppressed, exception-group members);
- py4j's ``Py4JJavaError`` (``java_exception`` with ``getClass().getName()``, ``getMessage()``,
  ``getCause()``) and PySpark's ``CapturedException`` (``getErrorClass()``/``getCondition()``,
  ``desc``, ``stackTrace``, ``cause``);
- an ``ErrorInfo``-like record from the spark-submit outcome channel (``exception_class``,
  ``error_class``, ``messages``, ``cause_classes``);
- plain text (a message, a stack trace, a driver log tail, a Databricks run error), which
  ``log_records`` cuts into log records (a header line with its level, and the lines after it)
  so that the classifier can weigh them in order.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any

from ..causes import causes

# A JVM chain is rarely deeper than ~10; the cap guards against cycles that no id set can see
# (py4j hands out a new proxy object for the same Java throwable on every call).
MAX_JAVA_DEPTH = 32
# Log tails can be long; the conflict is reported near the end, so keep the tail. The same
# budget bounds all the text gathered from one exception graph.
MAX_TEXT = 1_000_000


@dataclass(frozen=True)
class Frame:
    """One exception in a chain, outermost first."""

    classes: tuple[str, ...]  # qualified class names, most specific first
    error_class: str | None
    message: str


def call_getter(obj: Any, name: str) -> Any:
    """Call a zero-argument method if it exists; a dead py4j gateway or a missing method gives None."""
    method = getattr(obj, name, None)
    if not callable(method):
        return None
    try:
        return method()
    except Exception:  # noqa: BLE001 - a failing bridge must not break classification
        return None


def _java_frames(throwable: Any, frames: list[Frame]) -> None:
    """Walk a py4j JavaObject throwable through ``getCause()``."""
    current = throwable
    for _ in range(MAX_JAVA_DEPTH):
        if current is None:
            break
        cls = call_getter(current, "getClass")
        name = call_getter(cls, "getName") if cls is not None else None
        message = call_getter(current, "getMessage")
        error_class = call_getter(current, "getErrorClass")
        frames.append(
            Frame(
                classes=(str(name),) if name else (),
                error_class=str(error_class) if error_class else None,
                message=str(message)[-MAX_TEXT:] if message else "",
            )
        )
        cause = call_getter(current, "getCause")
        if cause is None or cause is current:
            break
        current = cause


def _python_class_names(error: BaseException) -> tuple[str, ...]:
    names = []
    for cls in type(error).__mro__:
        if cls is BaseException or cls is object:
            break
        names.append(f"{cls.__module__}.{cls.__qualname__}")
    return tuple(names)


def spark_condition(error: object) -> str | None:
    """Spark's error class of a PySpark exception (in-process or Spark Connect): ``getCondition()``
    on PySpark 4, which deprecates ``getErrorClass`` (a FutureWarning on every call), else 3.5's
    ``getErrorClass()``."""
    name = "getCondition" if hasattr(error, "getCondition") else "getErrorClass"
    value = call_getter(error, name)
    return value if isinstance(value, str) and value else None


def _python_error_class(error: BaseException) -> str | None:
    condition = spark_condition(error)
    if condition is not None:
        return condition
    # PyODPS keeps the ODPS code (or a tunnel error code) on ``code``.
    code = getattr(error, "code", None)
    if isinstance(code, str) and code:
        return code
    return None


def _safe_str(error: object) -> str:
    try:
        return str(error)[-MAX_TEXT:]
    except Exception:  # noqa: BLE001 - str() of a py4j error calls into the JVM
        return ""


def _exception_frames(error: BaseException, frames: list[Frame]) -> None:
    budget = MAX_TEXT
    for current in causes(error):
        if budget <= 0:  # a pathological graph of huge messages: what is gathered is enough
            break
        start = len(frames)
        frames.append(
            Frame(
                classes=_python_class_names(current),
                error_class=_python_error_class(current),
                message=_safe_str(current),
            )
        )
        java = getattr(current, "java_exception", None)  # py4j.protocol.Py4JJavaError
        if java is not None:
            _java_frames(java, frames)
        desc = getattr(current, "desc", None)  # pyspark CapturedException
        if isinstance(desc, str) and desc and desc not in frames[start].message:
            frames.append(Frame(classes=(), error_class=None, message=desc))
        trace = getattr(current, "stackTrace", None)
        if isinstance(trace, str) and trace:
            frames.append(Frame(classes=(), error_class=None, message=trace))
        java_cause = getattr(current, "cause", None)
        if callable(getattr(java_cause, "getClass", None)) and not isinstance(java_cause, BaseException):
            _java_frames(java_cause, frames)
        budget -= sum(len(frame.message) for frame in frames[start:])


def _error_info_frames(info: Any, frames: list[Frame]) -> None:
    messages = tuple(str(m) for m in (getattr(info, "messages", ()) or ()))
    frames.append(
        Frame(
            classes=(str(info.exception_class),),
            error_class=str(info.error_class) if getattr(info, "error_class", None) else None,
            message="\n".join(messages),
        )
    )
    for name in getattr(info, "cause_classes", ()) or ():
        frames.append(Frame(classes=(str(name),), error_class=None, message=""))


def is_error_info(value: object) -> bool:
    return (
        not isinstance(value, (str, BaseException))
        and isinstance(getattr(value, "exception_class", None), str)
        and hasattr(value, "messages")
    )


def frames_of(error: object) -> list[Frame]:
    """The chain of ``error`` as frames; raises TypeError for things that are not an error."""
    frames: list[Frame] = []
    if isinstance(error, str):
        frames.append(Frame(classes=(), error_class=None, message=error[-MAX_TEXT:]))
    elif isinstance(error, BaseException):
        _exception_frames(error, frames)
    elif is_error_info(error):
        _error_info_frames(error, frames)
    elif getattr(error, "java_exception", None) is not None or callable(getattr(error, "getCause", None)):
        _java_frames(getattr(error, "java_exception", error), frames)
    else:
        raise TypeError(
            "classify() takes an exception, the text of one, or an ErrorInfo-like record "
            "(exception_class, error_class, messages, cause_classes); "
            f"got {type(error).__module__}.{type(error).__qualname__}"
        )
    return frames


# "pkg.Class: message" (Throwable.toString, Python tracebacks, "Caused by: ...") or a class alone
# at the end of a line. A bare simple name ("ConcurrentModificationException in HashMap") is not
# a qualified class and never matches.
QUALIFIED_CLASS_IN_TEXT = re.compile(r"(?<![\w.$])((?:[A-Za-z_][\w$]*\.)+[A-Z][\w$]*)(?=:|[ \t]*$)", re.M)
# "[DELTA_CONCURRENT_APPEND]" or "[DELTA_CONCURRENT_APPEND.WITH_PARTITION_HINT]" as Spark prints them.
ERROR_CLASS_IN_TEXT = re.compile(r"\[([A-Z][A-Z0-9_]{2,})((?:\.[A-Z0-9_]+)?)\]")


# --------------------------------------------------------------------------- log records


class RecordLevel(str, enum.Enum):
    """How a log record is weighed: what its header says, or that it has none."""

    LOW = "low"  # TRACE / DEBUG / INFO / WARN: an engine telling what it does, its own retries too
    ERROR = "error"  # ERROR / SEVERE / FATAL / CRITICAL
    NONE = "none"  # no header: an exception's text, a traceback or a line a job printed itself


_LEVELS = {
    "TRACE": RecordLevel.LOW,
    "DEBUG": RecordLevel.LOW,
    "INFO": RecordLevel.LOW,
    "WARN": RecordLevel.LOW,
    "WARNING": RecordLevel.LOW,
    "ERROR": RecordLevel.ERROR,
    "SEVERE": RecordLevel.ERROR,
    "FATAL": RecordLevel.ERROR,
    "CRITICAL": RecordLevel.ERROR,
}

# A log record's first line: prefix tokens (a date and a time, "[thread]", "{file.py:12}") and
# the level, as log4j prints it for Spark ("24/11/21 20:05:41 WARN Tasks: ..."), Python logging
# for Airflow ("[2024-11-21, 20:03:11 UTC] {taskinstance.py:3311} ERROR - ...", "WARNING:root:")
# and structlog's console ("2024-11-21 20:03:11 [error    ] ..."). A layout always has some
# punctuation around the level (a timestamp, brackets, "ERROR:", "ERROR -"): a line of prose
# that starts with "WARN" or "INFO" is not a record.
LOG_HEADER = re.compile(
    r"(?P<prefix>(?:(?:\[[^\]\n]{1,80}\]|\{[^}\n]{1,80}\}|\d[\d.,]*[/:\-][\d/:.,+\-TZ]{1,30})[ \t]+){0,4})"
    r"(?:\[[ \t]*(?i:(?P<bracketed>trace|debug|info|warning|warn|error|critical|fatal))[ \t]*\]"
    r"|(?P<level>TRACE|DEBUG|INFO|WARN|WARNING|ERROR|SEVERE|FATAL|CRITICAL)(?P<after>[ \t]*[:\-]|[ \t]|$))"
)
# An uncaught error printed raw (Python's traceback, the JVM's default handler) is a record of its
# own, unless it is the traceback of the record just above it or the next link of a chain.
_RAW_START = re.compile(r'Traceback \(most recent call last\):|Exception in thread "')
_CHAIN_LINK = re.compile(
    r"The above exception was the direct cause of the following exception:"
    r"|During handling of the above exception, another exception occurred:"
)


@dataclass(frozen=True)
class LogRecord:
    """One record of a log text: where it starts, its level, and its first line."""

    start: int
    level: RecordLevel
    first_line: str


def header_level(line: str) -> RecordLevel | None:
    """The level of ``line`` if it is the first line of a log record, else None."""
    found = LOG_HEADER.match(line)
    if found is None:
        return None
    if found["level"] and not found["prefix"] and not found["after"].strip():
        return None  # "WARN x": a word, not a layout
    return _LEVELS[(found["level"] or found["bracketed"]).upper()]


def log_records(text: str) -> list[LogRecord]:
    """``text`` as log records, in order: each header line with the lines after it.

    Text before the first header is one record without a level; so is an uncaught error printed
    raw. A text with no header at all (an exception's message) is one record.
    """
    records: list[LogRecord] = []
    offset = 0
    previous, previous_was_header = "", False
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        level = header_level(line)
        if level is not None:
            records.append(LogRecord(offset, level, stripped))
        elif not records or (
            _RAW_START.match(line) and not previous_was_header and not _CHAIN_LINK.search(previous)
        ):
            records.append(LogRecord(offset, RecordLevel.NONE, stripped))
        if stripped:
            previous, previous_was_header = stripped, level is not None
        offset += len(line)
    return records
