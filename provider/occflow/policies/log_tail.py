"""The last lines this process logged: evidence for operators whose exception says nothing.

``SparkSubmitOperator`` raises "Cannot execute: spark-submit ... Error code is: 1" and
``BashOperator`` "Bash command failed": the engine's conflict text is only in the lines they
logged from the child process. A task process runs one task, so a small ring buffer of the log
events (kept by a structlog processor, which is how Airflow 3 task logs are emitted) holds that
task's log tail; each line keeps its time so a try only reads what it logged itself.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import MutableMapping
from typing import Any

MAX_LINES = 400
MAX_LINE_CHARS = 8000

_lines: deque[tuple[float, str]] = deque(maxlen=MAX_LINES)
_lock = threading.Lock()


def _capture(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: remember the event text, pass the event on unchanged."""
    try:
        text = str(event.get("event", ""))
        error = event.get("exception") or event.get("exc_info")
        if isinstance(error, str):
            text = f"{text}\n{error}"
        with _lock:
            _lines.append((time.time(), text[:MAX_LINE_CHARS]))
    except Exception:  # noqa: BLE001 - evidence gathering must never break logging
        pass
    return event


_capture.occflow_log_tail = True  # type: ignore[attr-defined]


def install() -> bool:
    """Put the capturing processor first in structlog's chain, once per process.

    Returns whether it is installed. Airflow configures structlog before it parses DAG files in
    the task process, so a retry policy built at parse time installs it in time for the task.
    """
    try:
        import structlog
    except ImportError:  # pragma: no cover - structlog ships with Airflow 3
        return False
    processors = structlog.get_config().get("processors")
    if not isinstance(processors, list):
        return False
    if not any(getattr(p, "occflow_log_tail", False) for p in processors):
        processors.insert(0, _capture)
    return True


def tail(since: float | None = None, lines: int = 80) -> str:
    """The last ``lines`` lines logged at or after ``since`` (a POSIX timestamp), oldest first."""
    with _lock:
        picked = [text for stamp, text in _lines if since is None or stamp >= since]
    return "\n".join(picked[-lines:])
