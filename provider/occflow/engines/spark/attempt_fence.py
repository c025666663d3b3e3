"""The lease check inside an in-process Spark write's Iceberg or Delta commit (issues 31 and 34,
docs/exactly-once.md).

A spark-submit driver checks its lease inside Iceberg's commit through the lease-fenced catalog,
and inside delta-spark's through the lease-fenced log store (``submit_fence.py``). An in-process
write (``SparkTarget``: the SQL, DataFrame and callable jobs of ``SparkWriteOperator``) runs on a
session that every write of the process shares, so the catalog (or log store) cannot name one
write's window in its settings. Instead:

- the session starts with its Iceberg catalog wrapped in the lease-fenced catalog, or on Delta
  its log stores replaced by the lease-fenced log store, in their ``thread`` scope
  (``session_conf``, from ``SparkEngine.session``), when the jar is built;
- each attempt under a lease publishes its window (fence, live until, from the lease's keeper)
  to a file of its own, kept fresh by a ``WindowPublisher`` while the attempt runs, and names
  that file to the JVM thread that runs its statements (``attempt_window``);
- every commit on that thread reads the file inside ``TableOperations.commit`` (Iceberg) or
  right before ``LogStore.write`` of the ``_delta_log/<version>.json`` commit file (Delta), after
  the statement wrote its files: a writer that stalls inside the engine call past its lease
  refuses its own commit (``LeaseNotLiveException``), and the target raises ``LeaseNotLive``.

Why a thread-local (``occflow.lease.AttemptWindow.CURRENT``) rather than a Spark conf: a conf
of the shared session is one value for every concurrent write of the process, and a session per
attempt would build (and leak) a catalog with its JDBC pool per attempt. Spark commits a statement
on the driver thread that runs it, and PySpark in its default pinned-thread mode gives each Python
thread its own JVM thread, so concurrent writes from different Python threads each see only their
own window. Iceberg's ``CommitMetadata`` carries a write's snapshot properties the same way (and
``iceberg.iceberg_commit_properties`` relies on it already). A commit on a thread that runs no
attempt (creating a table, a conformance run) passes unchecked, as through the plain catalog;
so does a commit a callable job makes from a thread it started itself.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .config import SparkConfig
from .lease_window import WindowPublisher
from .settings import SparkConfigError
from .submit_fence import (
    AT_COMMIT,
    AT_STATEMENT_START,
    COMMIT_MARGIN,
    DELTA_LOG_STORE_KEY,
    DELTA_SETTING,
    FENCE_KEY,
    FENCED_CATALOG,
    FENCED_LOG_STORE,
    MARGIN_KEY,
    SCOPE_KEY,
    THREAD_SCOPE,
    WINDOW_KEY,
    CommitFence,
    plan,
)

_log = logging.getLogger(__name__)

#: The JVM class whose thread-local names the attempt's window (``java/occflow/lease/``).
ATTEMPT_WINDOW_CLASS = "occflow.lease.AttemptWindow"


def session_conf(conf: Mapping[str, str], config: SparkConfig) -> dict[str, str]:
    """An in-process session's conf: its Iceberg catalog wrapped in the thread-scoped lease-fenced
    catalog, or its Delta log stores the thread-scoped lease-fenced log store, when ``plan`` says
    the commit can be fenced (Iceberg's ``SparkCatalog`` or delta-spark, the jar built); ``conf``
    unchanged otherwise (``in_session`` says why, at each attempt)."""
    if config.remote:
        return dict(conf)
    return plan(config).attempt_conf(conf)


def in_session(spark: Any, config: SparkConfig) -> CommitFence:
    """Where an attempt on ``spark`` has its lease checked last: inside each commit (the
    session's catalog is the thread-scoped lease-fenced catalog, or on Delta its log store the
    thread-scoped lease-fenced log store, and PySpark pins threads), or right before its write
    statement starts, and why. The session's conf is the truth."""
    catalog = config.table_catalog
    delta = config.table_format == "delta"
    fmt = {"table_format": config.table_format} if delta else {}
    if config.remote:
        return CommitFence(AT_STATEMENT_START, catalog=catalog, **fmt, reason=(
            "a Spark Connect session commits in a JVM this process cannot name the attempt's window to"))
    if delta:
        what = "Delta log store"
        fenced = (spark.conf.get(DELTA_LOG_STORE_KEY.format("file"), None) == FENCED_LOG_STORE
                  and spark.conf.get(DELTA_SETTING.format(SCOPE_KEY), None) == THREAD_SCOPE)
    else:
        what = f"catalog {catalog}"
        prefix = f"spark.sql.catalog.{catalog}"
        fenced = (spark.conf.get(f"{prefix}.catalog-impl", None) == FENCED_CATALOG
                  and spark.conf.get(f"{prefix}.{SCOPE_KEY}", None) == THREAD_SCOPE)
    if not fenced:
        planned = plan(config)
        if not planned.at_commit:
            return planned
        return CommitFence(AT_STATEMENT_START, catalog=catalog, **fmt, reason=(
            f"this session's {what} is not the thread-scoped lease-fenced one (a session "
            "started before the jar was built, or by someone else: SparkEngine.attach)"))
    if not _pinned_threads(spark):
        return CommitFence(AT_STATEMENT_START, catalog=catalog, **fmt, reason=(
            "PySpark runs without pinned threads (PYSPARK_PIN_THREAD=false): a Python thread's calls may run "
            f"on any JVM thread, so the {what} cannot tell which attempt a commit belongs to"))
    return CommitFence(AT_COMMIT, catalog=catalog, **fmt,
                       jar=str(spark.sparkContext.getConf().get("spark.jars", "")))


def _pinned_threads(spark: Any) -> bool:
    from py4j.clientserver import ClientServer  # optional heavy dependency (comes with pyspark)

    return isinstance(getattr(spark.sparkContext, "_gateway", None), ClientServer)


def _thread_window(spark: Any) -> Any:
    """``AttemptWindow.CURRENT``, loaded through Spark's class loader (where ``spark.jars`` are)."""
    try:
        cls = spark._jvm.org.apache.spark.util.Utils.classForName(ATTEMPT_WINDOW_CLASS, True, False)
        return cls.getField("CURRENT").get(None)
    except Exception as exc:
        raise SparkConfigError(
            f"the session's catalog (or log store) is the lease-fenced one but {ATTEMPT_WINDOW_CLASS} cannot be loaded "
            f"from its jars ({exc}): start the session with the jar in spark.jars"
        ) from exc


@contextlib.contextmanager
def attempt_window(
    spark: Any, fence: int, live_until: Callable[[], float | None], margin: float = COMMIT_MARGIN
) -> Iterator[Path]:
    """Inside, every Iceberg or Delta commit this thread makes on ``spark`` checks the lease of ``fence``:
    its window file (yielded), kept fresh from ``live_until`` (epoch seconds; ``None`` or 0: lost).

    On the way out the window says "lost", then the file goes: a statement that the task gave up
    on (a task timeout) but whose JVM thread still runs finds no live window at its commit."""
    local = _thread_window(spark)
    with tempfile.TemporaryDirectory(prefix="occflow-attempt-lease-") as home:
        path = Path(home) / "window.json"
        with WindowPublisher(path, fence, live_until):
            window = spark._jvm.java.util.HashMap()
            for key, value in ((WINDOW_KEY, str(path)), (FENCE_KEY, str(int(fence))), (MARGIN_KEY, repr(margin))):
                window.put(key, value)
            local.set(window)
            try:
                yield path
            finally:
                try:
                    local.remove()
                except Exception as exc:  # noqa: BLE001 - a stale binding fails closed: its window is gone
                    _log.warning("could not clear the attempt's lease window on its JVM thread: %s", exc)


__all__ = ["ATTEMPT_WINDOW_CLASS", "attempt_window", "in_session", "session_conf"]
