"""Lines of an engine's or Airflow's log that say what became of a commit without naming a
conflict: the engine retried, committed, gave up, or only reported a failure. Knowledge, with
the source of each line, like ``markers``."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class LineRole(str, enum.Enum):
    """What a log line without a conflict says about the commit; see ``classify``'s log rules."""

    RETRYING = "retrying"  # the engine retries its own commit: a conflict in this record is recovered
    COMMITTED = "committed"  # the commit succeeded: a conflict logged before it was retried away
    GAVE_UP = "gave_up"  # the engine abandoned the write: a retried conflict before it was the end
    REPORT = "report"  # a failure reported without its cause: says nothing either way


@dataclass(frozen=True)
class LogLine:
    role: LineRole
    engine: str
    pattern: str
    source: str


SPARK_V2_WRITE = "apache/spark sql/core/.../datasources/v2/WriteToDataSourceV2Exec.scala V2TableWriteExec (Spark 3.5)"
SPARK_FILE_WRITER = "apache/spark sql/core/.../datasources/FileFormatWriter.scala (Spark 3.5)"
AIRFLOW_TASK_RUNNER = "apache/airflow task-sdk/src/airflow/sdk/execution_time/task_runner.py (Airflow 3)"

LOG_LINES: tuple[LogLine, ...] = (
    # Iceberg's Tasks.runTaskWithRetry, WARN with the exception: "... failure: sleepTimeMs=100 <msg>"
    # (1.10; "... failure: <msg>" before). Only the first line of a record is matched for this role.
    LogLine(
        LineRole.RETRYING,
        "iceberg",
        r"Retrying task after failure: ",
        "apache/iceberg core/src/main/java/org/apache/iceberg/util/Tasks.java",
    ),
    LogLine(
        LineRole.COMMITTED,
        "iceberg",
        r"Committed snapshot -?\d+ \(\w+\)",
        "apache/iceberg core/src/main/java/org/apache/iceberg/SnapshotProducer.java",
    ),
    LogLine(
        LineRole.COMMITTED,
        "iceberg",
        r"Successfully committed to (?:existing|new) table: ",
        "apache/iceberg core/src/main/java/org/apache/iceberg/jdbc/JdbcTableOperations.java",
    ),
    LogLine(
        LineRole.COMMITTED,
        "delta-spark",
        r"Committed delta #\d+ to ",
        "delta-io/delta spark/src/main/scala/org/apache/spark/sql/delta/OptimisticTransaction.scala",
    ),
    # delta-rs's commit loop, info!(version, num_retries, "transaction committed successfully").
    LogLine(
        LineRole.COMMITTED,
        "delta-rs",
        r"transaction committed successfully",
        "delta-io/delta-rs crates/core/src/kernel/transaction/mod.rs PreparedCommit::into_future",
    ),
    LogLine(LineRole.COMMITTED, "spark", r"Data source write support .{1,2000}? committed\.", SPARK_V2_WRITE),
    LogLine(LineRole.GAVE_UP, "spark", r"Data source write support .{1,2000}? (?:is aborting|aborted)\.", SPARK_V2_WRITE),
    LogLine(LineRole.GAVE_UP, "spark", r"Aborting job [\w-]+\.", SPARK_FILE_WRITER),
    LogLine(
        LineRole.GAVE_UP,
        "iceberg",
        r"Stopping retries after \d+ ms",
        "apache/iceberg core/src/main/java/org/apache/iceberg/util/Tasks.java",
    ),
    LogLine(LineRole.REPORT, "airflow", r"Task failed with exception", AIRFLOW_TASK_RUNNER),
    LogLine(LineRole.REPORT, "airflow", r"Task exited\b", AIRFLOW_TASK_RUNNER),
)

LOG_LINES_COMPILED: tuple[tuple[LogLine, re.Pattern[str]], ...] = tuple(
    (line, re.compile(line.pattern)) for line in LOG_LINES
)


__all__ = ["LOG_LINES", "LOG_LINES_COMPILED", "LineRole", "LogLine"]
