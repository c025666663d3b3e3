"""VACUUM on delta-spark as a write: the retention it asks for is checked against the table's own
floor before Delta lists or deletes a file, and Delta's own retention check is turned off for that
one statement, and put back after it, only when the user said ``allow_unsafe_retention=True``.

delta-spark refuses a VACUUM below the table's ``delta.deletedFileRetentionDuration`` itself
(``VacuumCommand.checkRetentionPeriodSafety``: "Are you sure you would like to vacuum files with
such a low retention period?", an ``IllegalArgumentException``), and only a session setting turns
that off (``spark.databricks.delta.retentionDurationCheck.enabled``). occflow's floor is the same
property read by Delta's own parser (``DeltaConfigs``), raised to ``RETENTION_FLOORS``' week: a
refusal names the table, the retention asked and the floor, and nothing runs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ...core.errors import InvalidDeclarationError
from ...core.operations import Operation, check_retention, parse_operation, statement_retention_hours
from ...core.sqlread import split_statements
from .iceberg_rewrite import run_statement
from .identifiers import quote_table

#: The session setting that turns delta-spark's own retention check off.
RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"
_MS_PER_HOUR = 3_600_000.0
# One VACUUM at a time turns the check off: another thread's restore must not turn it back on
# under a VACUUM still running, nor leave it off after both.
_check_lock = threading.Lock()


def retention_floor_hours(spark: Any, table: str) -> float:
    """The table's ``delta.deletedFileRetentionDuration`` in hours, as delta-spark reads it
    (``DeltaConfigs.parseCalendarInterval``; unset: the property's default, 1 week)."""
    detail = spark.sql(f"DESCRIBE DETAIL {quote_table(table)}").collect()[0].asDict()
    configs = spark._jvm.org.apache.spark.sql.delta.DeltaConfigs
    value = (detail.get("properties") or {}).get(
        RETENTION_PROPERTY
    ) or configs.TOMBSTONE_RETENTION().defaultValue()
    try:
        interval = configs.parseCalendarInterval(str(value))
    except Exception as exc:  # Py4J's error for Delta's IllegalArgumentException: name the value
        raise InvalidDeclarationError(
            f"{table}: {RETENTION_PROPERTY} is {value!r}, not an interval delta-spark reads "
            "('interval 7 days', 'interval 168 hours')"
        ) from exc
    return float(configs.getMilliSeconds(interval)) / _MS_PER_HOUR


def vacuum_retention(
    spark: Any, table: str, statement: str, *, allow_unsafe_retention: bool, where: str
) -> tuple[float | None, float]:
    """The retention ``statement`` asks for (``RETAIN n HOURS``; ``None``: the table's) and the
    table's floor; below the safe minimum (``core.operations.check_retention``, raised by the
    table's floor) an ``InvalidDeclarationError`` naming the table, unless allowed."""
    hours = statement_retention_hours(Operation.VACUUM, statement, datetime.now(timezone.utc))
    floor = retention_floor_hours(spark, table)
    check_retention(
        Operation.VACUUM,
        hours,
        table_minimum_hours=floor,
        allow_unsafe_retention=allow_unsafe_retention,
        where=f"{where}: VACUUM {table} RETAIN {hours:g} HOURS" if hours is not None else where,
    )
    return hours, floor


@contextlib.contextmanager
def retention_check_off(spark: Any) -> Iterator[None]:
    """delta-spark's retention check off for what runs inside, then as it was (unset stays
    unset): never left off for the session."""
    with _check_lock:
        before = spark.conf.get(RETENTION_CHECK, None)
        spark.conf.set(RETENTION_CHECK, "false")
        try:
            yield
        finally:
            if before is None:
                spark.conf.unset(RETENTION_CHECK)
            else:
                spark.conf.set(RETENTION_CHECK, before)


def is_vacuum(statement: str) -> bool:
    try:
        return parse_operation(statement) is Operation.VACUUM
    except InvalidDeclarationError:
        return False


@dataclass(frozen=True)
class DeltaVacuumJob:
    """A SQL job holding a VACUUM of ``table``, run as a callable job ``(spark, context)``: each
    VACUUM's retention is checked against the table's floor when it runs (the property may have
    changed since the DAG was parsed), and one below Delta's own floor runs with Delta's check
    off, which ``vacuum_retention`` allows only with ``allow_unsafe_retention``."""

    sql: str
    table: str
    allow_unsafe_retention: bool = False
    where: str = "VACUUM"

    def __call__(self, spark: Any, context: Any) -> None:
        for statement in split_statements(self.sql):
            if not is_vacuum(statement):
                run_statement(spark, statement)
                continue
            hours, floor = vacuum_retention(
                spark,
                self.table,
                statement,
                allow_unsafe_retention=self.allow_unsafe_retention,
                where=self.where,
            )
            below = hours is not None and hours < floor
            with retention_check_off(spark) if below else contextlib.nullcontext():
                run_statement(spark, statement)


__all__ = [
    "RETENTION_CHECK",
    "DeltaVacuumJob",
    "is_vacuum",
    "retention_check_off",
    "retention_floor_hours",
    "vacuum_retention",
]
