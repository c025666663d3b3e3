"""Spark: write jobs on a Spark session (Iceberg, Delta via delta-spark, plain Parquet/Hive) or in
a spark-submit driver, with each format's commit tags, exactly-once ledger, error records and the
Iceberg conformance runner. PySpark is imported where a session is used, so importing this
package costs nothing where Spark is not installed.

``driver.py`` is the script spark-submit runs; it is not imported here.
"""

from __future__ import annotations

from ...core.sql import split_statements
from .config import TABLE_FORMATS, SparkConfig, table_format_for
from .delta_spark import DeltaFormat, DeltaSparkLedger, delta_spark_session_conf, delta_spark_write_options
from .errors import classify_error, error_info
from .formats import CommitInfo, NoConflictDetectionWarning, PlainFormat, TableFormat
from .iceberg import (
    IcebergFormat,
    IcebergLedger,
    current_snapshot,
    iceberg_commit_properties,
    iceberg_write_options,
    pinned_session,
    set_commit_retries,
)
from .iceberg_catalog import IcebergCatalogConfig
from .iceberg_conformance import (
    IcebergPairRunner,
    conformance_meta,
    conformance_runners,
    run_iceberg_conformance,
)
from .identifiers import quote_table, split_table, sql_string
from .jobs import ApplicationJob, CallableJob, Job, JobContext, SqlJob, as_job
from .session import SparkEngine
from .settings import SparkConfigError
from .submit import SubmitError, SubmittedJob, outcome_from_dict, read_outcome, submit_job

__all__ = [
    "TABLE_FORMATS",
    "ApplicationJob",
    "CallableJob",
    "CommitInfo",
    "DeltaFormat",
    "DeltaSparkLedger",
    "IcebergCatalogConfig",
    "IcebergFormat",
    "IcebergLedger",
    "IcebergPairRunner",
    "Job",
    "JobContext",
    "NoConflictDetectionWarning",
    "PlainFormat",
    "SparkConfig",
    "SparkConfigError",
    "SparkEngine",
    "SqlJob",
    "SubmitError",
    "SubmittedJob",
    "TableFormat",
    "as_job",
    "classify_error",
    "conformance_meta",
    "conformance_runners",
    "current_snapshot",
    "delta_spark_session_conf",
    "delta_spark_write_options",
    "error_info",
    "iceberg_commit_properties",
    "iceberg_write_options",
    "outcome_from_dict",
    "pinned_session",
    "quote_table",
    "read_outcome",
    "run_iceberg_conformance",
    "set_commit_retries",
    "split_statements",
    "split_table",
    "sql_string",
    "submit_job",
    "table_format_for",
]
