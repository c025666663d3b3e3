"""Conflict markers as data: each row says what to look for, what it means, and where the text is from.

A marker is anchored to something an engine emits verbatim — a fully qualified exception class, an
error class, or an exact message template — never to a loose word such as "conflict" or
"concurrent". Rows are expanded from the small tables below; precedence between kinds (when one
error's chain holds evidence of several) is ``PRECEDENCE``.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from ..kinds import ConflictKind
from .maxcompute import MAXCOMPUTE_CLASSES, MAXCOMPUTE_CODES, MAXCOMPUTE_TEMPLATES
from .pyiceberg import PYICEBERG_TEMPLATES

K = ConflictKind


class Evidence(str, enum.Enum):
    """Where in an error a marker is looked for."""

    CLASS = "class"  # a fully qualified exception class in the chain (or "pkg.Class: msg" in text)
    ERROR_CLASS = "error_class"  # an engine error class / code, structured or as "[CLASS.SUB]" in text
    MESSAGE = "message"  # a regular expression built from an exact message template


@dataclass(frozen=True)
class Marker:
    kind: ConflictKind
    engine: str
    evidence: Evidence
    value: str
    source: str


# Sources, named once so each row can cite them.
DELTA_JSON = "delta-io/delta spark/src/main/resources/error/delta-error-classes.json (Delta 3.x-4.0 templates)"
DELTA_41 = (
    "Delta error conditions with sub-classes and 'Transaction conflict detected' text "
    "(docs.databricks.com/error-messages/delta-concurrent-*-error-class, the format after Delta 4.1)"
)
DELTA_PY = "delta-io/delta python/delta/exceptions/captured.py (Python classes, no shared conflict base)"
DELTA_JAVA = "delta-io/delta io.delta.exceptions / org.apache.spark.sql.delta (DeltaErrors.scala)"
DELTA_RS_CONFLICT = "delta-io/delta-rs crates/core/src/kernel/transaction/conflict_checker.rs CommitConflictError"
DELTA_RS_TXN = "delta-io/delta-rs crates/core/src/kernel/transaction/mod.rs TransactionError"
DELTA_RS_TABLE = "delta-io/delta-rs crates/core/src/errors.rs DeltaTableError::VersionAlreadyExists"
DELTA_RS_DEBUG = (
    "delta-io/delta-rs crates/core/src/kernel/transaction/mod.rs, conflict_checker.rs, errors.rs: "
    "#[derive(Debug)] of TransactionError / CommitConflictError / DeltaTableError::Transaction { source }"
)
DELTA_RS_LOG = (
    "delta-io/delta-rs crates/core/src/kernel/transaction/mod.rs PreparedCommit::into_future "
    "error!(\"conflict detected, aborting transaction\") / error!(\"exceeded maximum commit attempts\") / "
    "warn!(\"table updated but max_retries is 0, failing immediately\") (target "
    "deltalake_core::kernel::transaction; lines 848, 896, 972 at 2c996fa9b; strings present in deltalake 1.6.6)"
)
AIRFLOW_JSON_LOG = (
    "apache/airflow shared/logging/src/airflow_shared/logging/structlog.py structlog_processors(json_output=True): "
    "the task log's exception as structlog's ExceptionDictTransformer writes it (exc_type = the class's name, "
    "exc_value = str)"
)
ICEBERG_EXC = "apache/iceberg api/src/main/java/org/apache/iceberg/exceptions/"
PYICEBERG_EXC = "apache/iceberg-python pyiceberg/exceptions.py"
ICEBERG_MSP = "apache/iceberg core/src/main/java/org/apache/iceberg/MergingSnapshotProducer.java"
ICEBERG_MFM = "apache/iceberg core/src/main/java/org/apache/iceberg/ManifestFilterManager.java"
ICEBERG_BRM = "apache/iceberg core/src/main/java/org/apache/iceberg/BaseRewriteManifests.java"
ICEBERG_ROW_DELTA = (
    "apache/iceberg core/src/main/java/org/apache/iceberg/BaseRowDelta.java "
    "validateNoConflictingFileAndPositionDeletes (1.10, PR #12861)"
)
ICEBERG_HIVE_LOCK = (
    "apache/iceberg hive-metastore/src/main/java/org/apache/iceberg/hive/MetastoreLock.java LockException "
    "(HiveTableOperations.doCommit rethrows it as CommitFailedException)"
)
ICEBERG_REQUIREMENT = "apache/iceberg core/src/main/java/org/apache/iceberg/UpdateRequirement.java (REST catalog)"
PYICEBERG_REQUIREMENT = (
    "apache/iceberg-python pyiceberg/table/update/__init__.py TableRequirement.validate "
    "(raises CommitFailedException with this text)"
)
ICEBERG_SPARK_COW_SCAN = (
    "apache/iceberg spark/v3.5/spark/src/main/java/org/apache/iceberg/spark/source/SparkCopyOnWriteScan.java"
)

# Delta's conflict exceptions: the same simple names in the Java packages and the Python modules.
_DELTA_CLASSES: tuple[tuple[str, ConflictKind], ...] = (
    ("ConcurrentAppendException", K.CONCURRENT_APPEND),
    ("ConcurrentDeleteReadException", K.CONCURRENT_DELETE_READ),
    ("ConcurrentDeleteDeleteException", K.CONCURRENT_DELETE_DELETE),
    ("MetadataChangedException", K.METADATA_CHANGED),
    ("ProtocolChangedException", K.PROTOCOL_CHANGED),
    ("ConcurrentTransactionException", K.CONCURRENT_TRANSACTION),
    ("ConcurrentWriteException", K.CONCURRENT_WRITE),
    # The common Java base; raised on its own only for conflicts without a finer class.
    ("DeltaConcurrentModificationException", K.CONCURRENT_WRITE),
)
_DELTA_JAVA_PACKAGES = ("io.delta.exceptions", "org.apache.spark.sql.delta")
# delta-spark's Python classes live in several modules across versions; none share a conflict base.
_DELTA_PYTHON_MODULES = (
    "delta.exceptions",
    "delta.exceptions.captured",
    "delta.exceptions.base",
    "delta.connect.exceptions",
)

_DELTA_ERROR_CLASSES: tuple[tuple[str, ConflictKind], ...] = (
    ("DELTA_CONCURRENT_APPEND", K.CONCURRENT_APPEND),
    ("DELTA_CONCURRENT_DELETE_READ", K.CONCURRENT_DELETE_READ),
    ("DELTA_CONCURRENT_DELETE_DELETE", K.CONCURRENT_DELETE_DELETE),
    ("DELTA_METADATA_CHANGED", K.METADATA_CHANGED),
    ("DELTA_PROTOCOL_CHANGED", K.PROTOCOL_CHANGED),
    ("DELTA_CONCURRENT_TRANSACTION", K.CONCURRENT_TRANSACTION),
    ("DELTA_CONCURRENT_WRITE", K.CONCURRENT_WRITE),
    ("DELTA_MAX_COMMIT_RETRIES_EXCEEDED", K.COMMIT_RETRIES_EXHAUSTED),
    # "Cannot drop feature because a concurrent transaction modified the table. Please try the
    # operation again." — a lost race on DROP FEATURE, retried from a fresh snapshot.
    ("DELTA_FEATURE_DROP_CONFLICT_REVALIDATION_FAIL", K.CONCURRENT_WRITE),
    # "The schema of your Delta table has changed in an incompatible way since your DataFrame or
    # DeltaTable object was created." A schema change committed between the statement's analysis
    # and its transaction (delta-spark 3.3.3 MergeIntoCommand.run: `target.schema.size !=
    # deltaTxn.metadata.schema.size`; TahoeLogFileIndex.getSnapshot on read): the statement lost
    # a race with a metadata commit, and a fresh analysis (a new attempt) sees the new schema.
    ("DELTA_SCHEMA_CHANGE_SINCE_ANALYSIS", K.METADATA_CHANGED),
)

# Message templates, "<param>" placeholders turned into regular expressions.
_DELTA_TEMPLATES: tuple[tuple[ConflictKind, str, str], ...] = (
    # Before Delta 4.1 (and, without the "XxxException: " prefix, before 3.0).
    (K.CONCURRENT_APPEND, r"Files were added to .{1,2000}? by a concurrent update\.", DELTA_JSON),
    (
        K.CONCURRENT_DELETE_READ,
        r"This transaction attempted to read one or more files that were deleted "
        r"\(for example .{0,2000}?\) by a concurrent update\.",
        DELTA_JSON,
    ),
    (
        K.CONCURRENT_DELETE_DELETE,
        r"This transaction attempted to delete one or more files that were deleted "
        r"\(for example .{0,2000}?\) by a concurrent update\.",
        DELTA_JSON,
    ),
    (
        K.METADATA_CHANGED,
        r"The metadata of the Delta table (?:\S+ )?has been changed by a concurrent update\.",
        DELTA_JSON,
    ),
    (
        K.PROTOCOL_CHANGED,
        r"The protocol version of the Delta table has been changed by a concurrent update\.",
        DELTA_JSON,
    ),
    (
        K.CONCURRENT_TRANSACTION,
        r"This error occurs when multiple streaming queries are using the same checkpoint to write "
        r"into this table\.",
        DELTA_JSON,
    ),
    (
        K.CONCURRENT_WRITE,
        r"A concurrent transaction has written new data since the current transaction read the table\.",
        DELTA_JSON,
    ),
    (
        K.COMMIT_RETRIES_EXHAUSTED,
        r"This commit has failed as it has been tried \d+ times but did not succeed\.",
        DELTA_JSON,
    ),
    # After Delta 4.1: one sentence per error class, the sub-class gives the detail.
    (
        K.CONCURRENT_APPEND,
        r"Transaction conflict detected\. A concurrent .{1,200}? added data to table .{1,1000}? "
        r"committed at version \d+",
        DELTA_41,
    ),
    (
        K.CONCURRENT_DELETE_READ,
        r"Transaction conflict detected, a concurrent .{1,200}? deleted data from table .{1,1000}? "
        r"\(committed at version \d+\) that this transaction read\.",
        DELTA_41,
    ),
    (
        K.CONCURRENT_DELETE_DELETE,
        r"Transaction conflict detected, a concurrent .{1,200}? deleted data from table .{1,1000}? "
        r"\(committed at version \d+\) that this transaction attempted to delete\.",
        DELTA_41,
    ),
)

# delta-rs wraps every CommitConflictError in TransactionError "Failed to commit transaction: {0}",
# so each Display template is anchored on that prefix. Rust logs and `{:?}` print the same errors
# in two more shapes, anchored on delta-rs's own words too: the Debug form of the enums
# (`Transaction { source: CommitConflict(ConcurrentDeleteRead) }`), and the commit loop's
# `error!(error = %err, "conflict detected, aborting transaction")` record, whose `error` field is
# the CommitConflictError's Display without the TransactionError prefix.
_DELTA_RS_PREFIX = r"Failed to commit transaction: "
_DELTA_RS_DEBUG = r"(?<![\w])CommitConflict\("
_DELTA_RS_LOGGED = r"conflict detected, aborting transaction\b.{0,400}?\berror\W{0,4}"
_DELTA_RS_TEMPLATES: tuple[tuple[ConflictKind, str, str], ...] = (
    (
        K.CONCURRENT_APPEND,
        _DELTA_RS_PREFIX + r"Commit failed: a concurrent transactions added new data\.",
        DELTA_RS_CONFLICT,
    ),
    (
        K.CONCURRENT_DELETE_READ,
        _DELTA_RS_PREFIX + r"Commit failed: a concurrent transaction deleted data this operation read\.",
        DELTA_RS_CONFLICT,
    ),
    (
        K.CONCURRENT_DELETE_DELETE,
        _DELTA_RS_PREFIX
        + r"Commit failed: a concurrent transaction deleted the same data your transaction deletes\.",
        DELTA_RS_CONFLICT,
    ),
    (K.METADATA_CHANGED, _DELTA_RS_PREFIX + r"Metadata changed since last commit\.", DELTA_RS_CONFLICT),
    (K.CONCURRENT_TRANSACTION, _DELTA_RS_PREFIX + r"Concurrent transaction failed\.", DELTA_RS_CONFLICT),
    (K.PROTOCOL_CHANGED, _DELTA_RS_PREFIX + r"Protocol changed since last commit: ", DELTA_RS_CONFLICT),
    # TransactionError::MaxCommitAttempts(i32) renders as the bare number of attempts: alone on its
    # line, after the class in a traceback, or as the exception's value in Airflow 3's JSON task log.
    (
        K.COMMIT_RETRIES_EXHAUSTED,
        r"(?m)(?:^|CommitFailedError: )" + _DELTA_RS_PREFIX + r"\d+[ \t]*$",
        DELTA_RS_TXN,
    ),
    (
        K.COMMIT_RETRIES_EXHAUSTED,
        r'"exc_type":\s*"CommitFailedError",\s*"exc_value":\s*"' + _DELTA_RS_PREFIX + r'\d+"',
        f"{DELTA_RS_TXN}; {AIRFLOW_JSON_LOG}",
    ),
    (K.CONCURRENT_WRITE, r"Tried committing existing table version: \d+", DELTA_RS_TXN),
    (K.CONCURRENT_WRITE, r"Delta transaction failed, version \d+ already exists\.", DELTA_RS_TABLE),
    # Debug forms (#[derive(Debug)] on TransactionError, CommitConflictError, DeltaTableError).
    (K.CONCURRENT_APPEND, _DELTA_RS_DEBUG + r"ConcurrentAppend\)", DELTA_RS_DEBUG),
    (K.CONCURRENT_DELETE_READ, _DELTA_RS_DEBUG + r"ConcurrentDeleteRead\)", DELTA_RS_DEBUG),
    (K.CONCURRENT_DELETE_DELETE, _DELTA_RS_DEBUG + r"ConcurrentDeleteDelete\)", DELTA_RS_DEBUG),
    (K.METADATA_CHANGED, _DELTA_RS_DEBUG + r"MetadataChanged\)", DELTA_RS_DEBUG),
    (K.CONCURRENT_TRANSACTION, _DELTA_RS_DEBUG + r"ConcurrentTransaction\)", DELTA_RS_DEBUG),
    (K.PROTOCOL_CHANGED, _DELTA_RS_DEBUG + r"ProtocolChanged\(", DELTA_RS_DEBUG),
    (K.COMMIT_RETRIES_EXHAUSTED, r"(?<![\w])MaxCommitAttempts\(\d+\)", DELTA_RS_DEBUG),
    (K.CONCURRENT_WRITE, r"(?<![\w])VersionAlreadyExists\(\d+\)", DELTA_RS_DEBUG),
    # The commit loop's records (tracing's text or JSON layout), in deltalake_core's target.
    (K.CONCURRENT_APPEND, _DELTA_RS_LOGGED + r"Commit failed: a concurrent transactions added new data\.", DELTA_RS_LOG),
    (
        K.CONCURRENT_DELETE_READ,
        _DELTA_RS_LOGGED + r"Commit failed: a concurrent transaction deleted data this operation read\.",
        DELTA_RS_LOG,
    ),
    (
        K.CONCURRENT_DELETE_DELETE,
        _DELTA_RS_LOGGED + r"Commit failed: a concurrent transaction deleted the same data your transaction deletes\.",
        DELTA_RS_LOG,
    ),
    (K.METADATA_CHANGED, _DELTA_RS_LOGGED + r"Metadata changed since last commit\.", DELTA_RS_LOG),
    (K.CONCURRENT_TRANSACTION, _DELTA_RS_LOGGED + r"Concurrent transaction failed\.", DELTA_RS_LOG),
    (K.PROTOCOL_CHANGED, _DELTA_RS_LOGGED + r"Protocol changed since last commit: ", DELTA_RS_LOG),
    (
        K.COMMIT_RETRIES_EXHAUSTED,
        r"exceeded maximum commit attempts(?: max_retries=|\W{1,6}max_retries\W{1,4})\d+",
        DELTA_RS_LOG,
    ),
    # With max_retries 0 the loop gives up at its first sight of a newer version, at WARN, before any
    # conflict check, and returns MaxCommitAttempts(0): the record is the failure, not a retry.
    (K.COMMIT_RETRIES_EXHAUSTED, r"table updated but max_retries is 0, failing immediately", DELTA_RS_LOG),
)

_ICEBERG_CLASSES: tuple[tuple[str, ConflictKind, str], ...] = (
    (
        "org.apache.iceberg.exceptions.CommitStateUnknownException",
        K.COMMIT_STATE_UNKNOWN,
        ICEBERG_EXC + "CommitStateUnknownException.java",
    ),
    ("org.apache.iceberg.exceptions.CommitFailedException", K.COMMIT_FAILED, ICEBERG_EXC + "CommitFailedException.java"),
    # PyIceberg's own classes ("Commit failed, refresh and try again" / "... unknown reason").
    ("pyiceberg.exceptions.CommitStateUnknownException", K.COMMIT_STATE_UNKNOWN, PYICEBERG_EXC),
    ("pyiceberg.exceptions.CommitFailedException", K.COMMIT_FAILED, PYICEBERG_EXC),
    # Another writer held the table's Hive Metastore lock ("Timed out after N ms waiting for lock
    # on db.t"); Iceberg itself turns it into a CommitFailedException. A heartbeat lost DURING the
    # commit is wrapped in CommitStateUnknownException instead, which outranks it.
    ("org.apache.iceberg.hive.LockException", K.COMMIT_FAILED, ICEBERG_HIVE_LOCK),
)

# ValidationException is also raised for plain user errors, so only these templates count.
_ICEBERG_TEMPLATES: tuple[tuple[ConflictKind, str, str], ...] = (
    (K.VALIDATION_CONFLICT, r"Found conflicting files that can contain records matching ", ICEBERG_MSP),
    (
        K.VALIDATION_CONFLICT,
        r"Found new conflicting delete files that can apply to records matching ",
        ICEBERG_MSP,
    ),
    (
        K.VALIDATION_CONFLICT,
        r"Found conflicting deleted files that can (?:contain|apply to) records matching ",
        ICEBERG_MSP,
    ),
    (K.VALIDATION_CONFLICT, r"Cannot commit, missing data files: ", ICEBERG_MSP),
    (
        K.VALIDATION_CONFLICT,
        r"Cannot commit, found new (?:position )?delete for replaced data file: ",
        ICEBERG_MSP,
    ),
    (K.VALIDATION_CONFLICT, r"Missing required files to delete: ", ICEBERG_MFM),
    # rewrite_manifests: a manifest it replaces was rewritten by a concurrent commit
    # (BaseRewriteManifests.validateDeletedManifests; "Manifest is missing: " before Iceberg 1.6).
    (
        K.VALIDATION_CONFLICT,
        r"Deleted manifest \S+ could not be found in the latest snapshot -?\d+|Manifest is missing: ",
        ICEBERG_BRM,
    ),
    # Iceberg 1.10 deletion vectors: a concurrent commit added a DV for a data file this commit
    # also writes a DV for (validateAddedDVs / validateConcurrentColocatedDVs).
    (K.VALIDATION_CONFLICT, r"Found concurrently added DV for \S+: ", ICEBERG_MSP),
    (
        K.VALIDATION_CONFLICT,
        r"Cannot delete data files \[.{0,2000}?\] that are referenced by new delete files",
        ICEBERG_ROW_DELTA,
    ),
    # validationHistory: the snapshots between the job's starting snapshot and the table's current
    # one are gone (expired, or the branch was replaced) while the job ran; the older text said
    # "... and current <id>".
    (
        K.VALIDATION_CONFLICT,
        r"Cannot determine history between starting snapshot \S+ and (?:the last known ancestor|current) ",
        ICEBERG_MSP,
    ),
    # A copy-on-write UPDATE/DELETE/MERGE whose scan snapshot went stale before Spark's runtime
    # filter ran (two jobs in one session): a fresh snapshot in a new session succeeds.
    (
        K.VALIDATION_CONFLICT,
        r"Runtime file filtering is not possible: the table has been concurrently modified\.",
        ICEBERG_SPARK_COW_SCAN,
    ),
    # The text CommitStateUnknownException puts after the cause, for logs that lost the class.
    (
        K.COMMIT_STATE_UNKNOWN,
        r"Cannot determine whether the commit was successful or not, the underlying data files may "
        r"or may not be needed\.",
        ICEBERG_EXC + "CommitStateUnknownException.java",
    ),
    # A catalog requirement failed because another writer committed first: the texts of
    # CommitFailedException (Java REST catalog "expected id A != B"; PyIceberg "expected id A,
    # found B"), for logs that lost the class. "Table UUID does not match" is not a race.
    (
        K.COMMIT_FAILED,
        r"Requirement failed: (?:branch|tag) \S+ has changed: expected id -?\d+(?:, found | != )-?\d+",
        f"{ICEBERG_REQUIREMENT}; {PYICEBERG_REQUIREMENT}",
    ),
    (
        K.COMMIT_FAILED,
        r"Requirement failed: (?:branch|tag) \S+ was created concurrently",
        f"{ICEBERG_REQUIREMENT}; {PYICEBERG_REQUIREMENT}",
    ),
    (
        K.COMMIT_FAILED,
        r"Requirement failed: (?:current schema|last assigned field|last assigned partition|default partition spec"
        r"|default spec|default sort order)(?: id)? (?:has )?changed: expected (?:id )?-?\d+(?:, found | != )-?\d+",
        f"{ICEBERG_REQUIREMENT}; {PYICEBERG_REQUIREMENT}",
    ),
)


def _rows() -> tuple[Marker, ...]:
    rows: list[Marker] = []
    for name, kind in _DELTA_CLASSES:
        for package in _DELTA_JAVA_PACKAGES:
            rows.append(Marker(kind, "delta-spark", Evidence.CLASS, f"{package}.{name}", DELTA_JAVA))
        for module in _DELTA_PYTHON_MODULES:
            rows.append(Marker(kind, "delta-spark", Evidence.CLASS, f"{module}.{name}", DELTA_PY))
    for error_class, kind in _DELTA_ERROR_CLASSES:
        rows.append(Marker(kind, "delta-spark", Evidence.ERROR_CLASS, error_class, DELTA_JSON))
    for kind, pattern, source in _DELTA_TEMPLATES:
        rows.append(Marker(kind, "delta-spark", Evidence.MESSAGE, pattern, source))
    for kind, pattern, source in _DELTA_RS_TEMPLATES:
        rows.append(Marker(kind, "delta-rs", Evidence.MESSAGE, pattern, source))
    for name, kind, source in _ICEBERG_CLASSES:
        rows.append(Marker(kind, "iceberg", Evidence.CLASS, name, source))
    for kind, pattern, source in _ICEBERG_TEMPLATES:
        rows.append(Marker(kind, "iceberg", Evidence.MESSAGE, pattern, source))
    for kind, pattern, source in MAXCOMPUTE_TEMPLATES:
        rows.append(Marker(kind, "maxcompute", Evidence.MESSAGE, pattern, source))
    for kind, pattern, source in PYICEBERG_TEMPLATES:
        rows.append(Marker(kind, "iceberg", Evidence.MESSAGE, pattern, source))
    for code, kind, source in MAXCOMPUTE_CODES:
        rows.append(Marker(kind, "maxcompute", Evidence.ERROR_CLASS, code, source))
    for name, kind, source in MAXCOMPUTE_CLASSES:
        rows.append(Marker(kind, "maxcompute", Evidence.CLASS, name, source))
        # The service's ErrorCode is the class's name: a TunnelError keeps it on ``code``.
        rows.append(Marker(kind, "maxcompute", Evidence.ERROR_CLASS, name.rsplit(".", 1)[1], source))
    return tuple(rows)


MARKERS: tuple[Marker, ...] = _rows()

# When one chain holds evidence of several kinds, the kind that is least safe to retry wins:
# an unknown commit state or a protocol change must never be retried because a wrapper or a
# cause also looked like an ordinary conflict.
PRECEDENCE: tuple[ConflictKind, ...] = (
    K.COMMIT_STATE_UNKNOWN,
    K.PROTOCOL_CHANGED,
    K.CONCURRENT_TRANSACTION,
    K.COMMIT_RETRIES_EXHAUSTED,
    K.METADATA_CHANGED,
    K.CONCURRENT_DELETE_DELETE,
    K.CONCURRENT_DELETE_READ,
    K.CONCURRENT_APPEND,
    K.VALIDATION_CONFLICT,
    K.OPERATION_CONFLICT,
    K.METADATA_LOCK_CONFLICT,
    K.CONCURRENT_WRITE,
    K.COMMIT_FAILED,
)

COMPILED: dict[str, re.Pattern[str]] = {
    m.value: re.compile(m.value) for m in MARKERS if m.evidence is Evidence.MESSAGE
}
