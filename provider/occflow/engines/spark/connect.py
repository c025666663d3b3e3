"""Spark Connect (``remote: "sc://host:port"``): the checks a Connect session passes before any
write (issue 37, docs/spark-support.md).

Over Connect the jars, SQL extensions and catalogs are the server's: the client cannot add them.
So before a job runs, the endpoint must answer (a TCP connection within a few seconds, instead of
the client's own retries, which wait minutes and end in a gRPC ``UNAVAILABLE``), and the server
must have the table format's SQL extensions and catalog classes; each failure is one
``SparkConfigError`` naming the URL and what is missing.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from .settings import SparkConfigError

#: Spark Connect's default port (``spark.connect.grpc.binding.port``).
DEFAULT_PORT = 15002
#: How long the endpoint has to accept a TCP connection.
CONNECT_TIMEOUT = 5.0
EXTENSIONS_KEY = "spark.sql.extensions"
#: What a Connect session occflow builds sets on its server-side session (the job's own ``conf``
#: wins): the server's stack, with a ``Caused by`` line per cause, comes back with each error, so
#: a conflict wrapped in another exception is still classified (``connect_errors.py``).
CLIENT_CONF = {"spark.sql.connect.serverStacktrace.enabled": "true"}


def endpoint(url: str) -> tuple[str, int]:
    """The host and port of ``sc://host[:port][/;key=value...]``."""
    parts = urlsplit(url.split("/;", 1)[0])
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise SparkConfigError(f"Spark Connect URL {url!r} has no valid port") from None
    if parts.scheme != "sc" or not parts.hostname:
        raise SparkConfigError(f"Spark Connect URL {url!r} is not sc://host[:port]")
    return parts.hostname, port


def check_answers(url: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """``SparkConfigError`` unless the Connect endpoint of ``url`` accepts a TCP connection."""
    host, port = endpoint(url)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return
    except OSError as exc:
        raise SparkConfigError(
            f"the Spark Connect server {url} does not answer: {host}:{port} accepted no connection within "
            f"{timeout:g} s ({exc}); nothing was written. Start the server (spark-submit --class "
            "org.apache.spark.sql.connect.service.SparkConnectServer) or fix the connection's host"
        ) from None


def _server_value(spark: Any, key: str) -> str | None:
    try:
        value = spark.conf.get(key, None)
    except Exception:  # a setting the server does not know reads as unset over Connect
        return None
    return None if value is None else str(value)


def missing_server_settings(spark: Any, needed: Mapping[str, str]) -> list[str]:
    """What of the format's ``needed`` settings (its ``spark_conf()``) the server lacks: each SQL
    extension class, and each catalog's implementation class (``spark.sql.catalog.<name>``)."""
    missing: list[str] = []
    wanted = [c.strip() for c in needed.get(EXTENSIONS_KEY, "").split(",") if c.strip()]
    has = {c.strip() for c in (_server_value(spark, EXTENSIONS_KEY) or "").split(",")}
    missing += [f"{EXTENSIONS_KEY} has no {c}" for c in wanted if c not in has]
    for key, value in sorted(needed.items()):
        if key.startswith("spark.sql.catalog.") and key.count(".") == 3:
            got = _server_value(spark, key)
            if got != value:
                missing.append(f"{key} is {got!r}, not {value!r}")
    return missing


def check_server(spark: Any, url: str, table_format: str, needed: Mapping[str, str]) -> None:
    """``SparkConfigError`` naming every setting of ``needed`` the Connect server lacks."""
    missing = missing_server_settings(spark, needed)
    if missing:
        raise SparkConfigError(
            f"the Spark Connect server {url} is not set up for {table_format} tables: " + "; ".join(missing)
            + f". Over Connect the server's jars, extensions and catalogs are used: start it with the {table_format} "
            "runtime jars and these settings; nothing was written"
        )


__all__ = ["CLIENT_CONF", "CONNECT_TIMEOUT", "DEFAULT_PORT", "check_answers", "check_server", "endpoint", "missing_server_settings"]
