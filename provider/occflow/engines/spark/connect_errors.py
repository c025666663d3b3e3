"""A Spark Connect error as the write's outcome records it (issue 37 item 3, docs/spark-support.md).

Over Connect there is no Py4J exception to walk: the client gets a gRPC status whose details the
PySpark client turns into a ``pyspark.errors.exceptions.connect`` exception. What it keeps is
Spark's error class (``getCondition()``), the SQLSTATE (``getSqlState()``), the message
parameters (``getMessageParameters()``), the message, and, when the session has
``spark.sql.connect.serverStacktrace.enabled`` (``connect.CLIENT_CONF``), the server's stack with
one ``Caused by: <class>: <message>`` line per cause. An error that is not a ``SparkThrowable``
(Iceberg's ``ValidationException``) comes as ``UnknownException`` whose message starts with
``(<java class>)``. The Java class names are read back from those texts, so a lost race over
Connect names the same classes as in-process (measured on Spark 4.1.4, Iceberg 1.12.0).
"""

from __future__ import annotations

import json
import re

from ...core.classifiers.evidence import call_getter, spark_condition
from ..outcome import ErrorInfo

#: Where PySpark's Connect exceptions live; checked by module so nothing of PySpark is imported.
CONNECT_ERRORS_MODULE = "pyspark.errors.exceptions.connect"
#: What ``SparkConnectGrpcException.getMessage`` puts between the message and the server's stack.
STACK_HEADER = "\n\nJVM stacktrace:\n"
_JAVA_CLASS = r"(?:[A-Za-z_][\w$]*\.)+[A-Za-z_][\w$]*"
#: ``(org.apache.iceberg.exceptions.ValidationException) Missing ...``: the reason the server gave.
_REASON = re.compile(rf"\(({_JAVA_CLASS})\) ")
_CAUSED_BY = re.compile(rf"^Caused by: ({_JAVA_CLASS})(?:: ?(.*))?$", re.M)


def is_connect_error(exc: BaseException) -> bool:
    return type(exc).__module__ == CONNECT_ERRORS_MODULE


def connect_error_info(exc: BaseException) -> ErrorInfo | None:
    """``exc`` as an ``ErrorInfo``: the server's Java class first (its stack's first line, else the
    reason in the message), its causes' classes and messages from the stack, Spark's error class,
    and a last message naming the Connect exception, its SQLSTATE and message parameters;
    ``None`` when ``exc`` is not a Connect error."""
    if not is_connect_error(exc):
        return None
    text = str(exc)
    message, _, stack = text.partition(STACK_HEADER)
    stack = stack or str(call_getter(exc, "getStackTrace") or "")
    first = stack.split("\n", 1)[0].strip()
    reason = _REASON.match(message)
    python_class = f"{type(exc).__module__}.{type(exc).__qualname__}"
    top = first if re.fullmatch(_JAVA_CLASS, first) else (reason.group(1) if reason else python_class)
    if reason is not None and reason.group(1) == top:  # the class is the record's own: said once
        message = message[reason.end():]
    causes = [(m.group(1), m.group(2) or "") for m in _CAUSED_BY.finditer(stack)]
    condition = spark_condition(exc)
    details = [f"through Spark Connect as {python_class}"]
    status = call_getter(exc, "getGrpcStatusCode")
    if status is not None:
        details.append(f"gRPC {getattr(status, 'name', status)}")
    sql_state = call_getter(exc, "getSqlState")
    if sql_state:
        details.append(f"SQLSTATE {sql_state}")
    parameters = call_getter(exc, "getMessageParameters")
    if parameters:
        details.append(f"message parameters {json.dumps(dict(parameters), sort_keys=True)}")
    return ErrorInfo(
        exception_class=top,
        messages=(message, *(m for _, m in causes), "; ".join(details)),
        error_class=condition,
        cause_classes=tuple(c for c, _ in causes),
    )


__all__ = ["STACK_HEADER", "connect_error_info", "is_connect_error"]
