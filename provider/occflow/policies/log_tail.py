"""The last lines this process logged: evidence for operators whose exception says nothing.

``SparkSubmitOperator`` raises "Cannot execute: spark-submit ... Error code is: 1" and
``BashOperator`` "Bash command failed": the engine's conflict text is only in the lines they
logged from the child process. A task process runs one task, so a small ring buffer of the log
events (kept by a structlog processor, which is how Airflow 3 task logs are emitted) holds that
task's log tail; each line keeps its time so a try only reads what it logged itself, and its
level, because the classifier weighs a log in order and by level (``occflow.core.classify``): a
conflict an engine retried by itself at WARN is not the failure, a later ERROR is.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import MutableMapping
from typing import Any

import structlog

from ..core.classifiers.evidence import header_level
from ..core.classifiers.loglines import LOG_LINES_COMPILED, LineRole

MAX_LINES = 400
#: A longer event keeps its first line (the level and logger) and the tail (where a
#: traceback ends with the error).
MAX_LINE_CHARS = 8000
_FIRST_LINE_CHARS = 500

# structlog's method names, as log levels.
_LEVELS = {
    "debug": "DEBUG",
    "info": "INFO",
    "msg": "INFO",
    "warn": "WARNING",
    "warning": "WARNING",
    "error": "ERROR",
    "err": "ERROR",
    "exception": "ERROR",
    "critical": "CRITICAL",
    "fatal": "CRITICAL",
}

_lines: deque[tuple[float, str, str]] = deque(maxlen=MAX_LINES)
_lock = threading.Lock()


def _bounded(text: str) -> str:
    if len(text) <= MAX_LINE_CHARS:
        return text
    first = text.split("\n", 1)[0][:_FIRST_LINE_CHARS]
    return f"{first}\n...\n{text[-(MAX_LINE_CHARS - len(first) - 5):]}"


def _capture(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: remember the event text and level, pass the event on unchanged."""
    try:
        text = str(event.get("event", ""))
        error = event.get("exception") or event.get("exc_info")
        if isinstance(error, str):
            text = f"{text}\n{error}"
        level = _LEVELS.get(str(event.get("level") or method).lower(), "INFO")
        with _lock:
            _lines.append((time.time(), level, _bounded(text)))
    except Exception:  # noqa: BLE001 - evidence gathering must never break logging
        pass
    return event


_capture.occflow_log_tail = True  # type: ignore[attr-defined]


def install() -> bool:
    """Put the capturing processor first in structlog's chain, once per process.

    Returns whether it is installed. Airflow configures structlog before it parses DAG files in
    the task process, so a retry policy built at parse time installs it in time for the task.
    """
    processors = structlog.get_config().get("processors")
    if not isinstance(processors, list):
        return False
    if not any(getattr(p, "occflow_log_tail", False) for p in processors):
        processors.insert(0, _capture)
    return True


def _as_record(level: str, text: str) -> str:
    """The event as a log record the classifier can weigh.

    A line relayed from a child process (BashOperator and SparkSubmitHook log each at INFO)
    keeps its own layout and level ("24/11/21 20:05:41 WARN Tasks: ..."), or stays raw text; an
    event logged at WARNING or above without a layout of its own gets its level written in front.
    """
    if level in ("WARNING", "ERROR", "CRITICAL") and header_level(text) is None:
        return f"{level} - {text}"
    return text


def _reports_the_failure(text: str) -> bool:
    first = text.split("\n", 1)[0]
    return any(line.role is LineRole.REPORT and pattern.search(first) for line, pattern in LOG_LINES_COMPILED)


def tail(since: float | None = None, lines: int = 80) -> str:
    """The last ``lines`` events logged at or after ``since`` (a POSIX timestamp), oldest first.

    The job's log ends where Airflow reports the task's failure ("Task failed with exception"):
    what the failure handling logs after it (XCom lookups, callbacks, alerts) is not evidence.
    """
    with _lock:
        picked = [(level, text) for stamp, level, text in _lines if since is None or stamp >= since]
    ends = [i for i, (_, text) in enumerate(picked) if _reports_the_failure(text)]
    if ends:
        picked = picked[: ends[-1] + 1]
    return "\n".join(_as_record(level, text) for level, text in picked[-lines:])
