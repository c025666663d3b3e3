"""MaxCompute (ODPS) errors classified from the texts MaxCompute prints.

MaxCompute is a remote service that cannot run here, so the texts are its documentation's samples
(the error code pages, the SQL error codes page) and one a user posted, copied as printed;
``xxx`` placeholders of a sample are left as they are. Each text is classified three ways: as
text, as the exception PyODPS itself raises for a failed instance (the real
``odps.errors.parse_instance_error`` that ``Instance.wait_for_success`` calls, so the class and
``code`` are PyODPS's), and inside a traceback-like log. The expected kinds are written here, from
the pages' own descriptions of each error (a concurrent-write cause, or a user error), not taken
from the marker table.
"""

from __future__ import annotations

import pytest
from odps import errors as odps_errors
from odps.tunnel.errors import MetaTransactionFailed

from occflow.core.classify import classify
from occflow.core.kinds import ConflictKind
from occflow.engines.maxcompute import errors as mc_errors

K = ConflictKind

# (text as MaxCompute prints it, the kind its documentation implies, where it is from)
CONFLICTS = [
    (
        "ODPS-0110061: Failed to run ddltask - Modify DDL meta encounter exception : ODPS-0429311:Transaction "
        "aborted - MaxC Transaction aborted. Can't update ObjectId(objectType:PARTITION, dbName:mc_gjpt, "
        "tableName:xxxx, tableId:xxx, partitionId:xxxx, partitionName:pt=20221125, tenantId:, catalogName:xxx, "
        "catalogId:xxx, dbId:, projectName:xxx). BeginTs is less than lastCommitTs.objectId:ObjectId(objectType:"
        "PARTITION, dbName:xxx, tableName:xxxx, tableId:xxx, partitionId:xxx, partitionName:pt=20221125, tenantId:, "
        "catalogName:xxxx, catalogId:xxx, dbId:, projectName:xxxx), txnId:xxxxx, lastCommitTs:1709410212584448, "
        "lastMaxBeginTs:1709410182400000, isolation:NONSTRICT_SNAPSHOT_ISOLATION, op:UPDATE, "
        "isConstraintNotAllowInsertIntoReorder:false",
        K.OPERATION_CONFLICT,
        "ODPS-0110061 page, error 2: MetaService OCC aborts the later transaction",
    ),
    (
        "ODPS-0121096:MetaStore transaction conflict - Reached maximum retry times because of "
        "OTSStorageTxnLockKeyFail(Inner exception: Transaction timeout because cannot acquire exclusive lock.)",
        K.METADATA_LOCK_CONFLICT,
        "ODPS-0121096 page, error 1: concurrent jobs compete for the table's metadata lock",
    ),
    (
        "ODPS-0110041: Invalid meta operation - AlreadyExistsException(message:Partition already exists, existed values:)",
        K.METADATA_LOCK_CONFLICT,
        "SQL error codes page: metadata contention between concurrent operations on one partition",
    ),
    (
        "ODPS-0110061: Failed to run ddltask - AlreadyExistsException(message:Partition already exists, existed values:)",
        K.METADATA_LOCK_CONFLICT,
        "SQL error codes page: the same contention, reported by the DDL task",
    ),
    (
        "failed: ODPS-0110061: Failed to run ddltask - AlreadyExistsException(message:Partition already exists, "
        'existed values: ["2017-09-05"])',
        K.METADATA_LOCK_CONFLICT,
        "developer.aliyun.com/ask/619904: an INSERT INTO from an ODPS Spark node, as the user posted it",
    ),
    (
        "ODPS-0110061:Failed to run ddltask - SimpleLock conflict failure, add partition is already on-going",
        K.METADATA_LOCK_CONFLICT,
        "SQL error codes page (help.aliyun.com 64654): two jobs adding one partition at once",
    ),
]

NEAR_MISSES = [
    (
        "FAILED: Catalog Service Failed, ErrorCode: 152, Error Message: ODPS-0110061: Failed to run "
        "ddltask-Schema evolution DDLs is not enabled in current project:xxxx",
        "ODPS-0110061 page, error 1: the same code for a project setting",
    ),
    (
        "ODPS-0110061: Failed to run ddltask - Your project is not allowed to install the package",
        "SQL error codes page: the same code for a data masking package",
    ),
    (
        "FAILED: ODPS-0130071:[1,24] Semantic analysis exception - the number of input partition columns (0) "
        "doesn't equal to table's partition columns (2)",
        "ODPS-0130071 page, error 1: a partition clause that does not match the table",
    ),
    (
        "FAILED: ODPS-0130071:[1,8] Semantic analysis exception - column reference t.value should appear in GROUP BY key",
        "Rewrite incompatible SQL statements page: group.by.with.star",
    ),
    (
        "FAILED: ODPS-0130071:[2,11] Semantic analysis exception - column cnt cannot be resolved\n"
        "ODPS-0130071:[2,11] Semantic analysis exception - column reference cnt should appear in GROUP BY key",
        "Rewrite incompatible SQL statements page: agg.having.ref.prev.agg.alias",
    ),
    (
        "FAILED: ODPS-0130161:[1,19] Parse exception - unexpected escape sequence: 01\n"
        "ODPS-0130161:[1,38] Parse exception - unexpected escape sequence: 0001",
        "Rewrite incompatible SQL statements page: bad.escape",
    ),
    (
        "ODPS-0123031:ODPS partition exception - maximum 60000 partitions allowed",
        "ODPS-0123031 page, error 1: a partition limit",
    ),
    (
        "ODPS-0123031:Partition exception - a single instance cannot output data to more than 10000 partitions",
        "ODPS-0123031 page, error 2: a partition limit",
    ),
]


def _pyodps(text: str) -> Exception:
    """The exception PyODPS raises for a failed instance whose task result is ``text``."""
    error: Exception = odps_errors.parse_instance_error(text)
    error.instance_id = "20241121120312345gabc1234"  # type: ignore[attr-defined]
    return error


def _in_a_log(text: str) -> str:
    return (
        "2024-11-21 12:03:12,345 INFO odps.models.instance: Instance ID: 20241121120312345gabc1234\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/airflow/dags/load.py", line 12, in <module>\n'
        "    instance.wait_for_success()\n"
        f"odps.errors.ODPSError: {text}\n"
    )


@pytest.mark.parametrize(("text", "kind", "source"), CONFLICTS, ids=[s for *_, s in CONFLICTS])
def test_a_documented_odps_conflict_is_classified_in_every_form(text: str, kind: ConflictKind, source: str) -> None:
    for form in (text, _pyodps(text), _in_a_log(text)):
        found = classify(form)
        assert found.kind is kind, (type(form).__name__, found)
        assert found.engine == "maxcompute"
        assert found.retry_safe


@pytest.mark.parametrize(("text", "source"), NEAR_MISSES, ids=[s for _, s in NEAR_MISSES])
def test_an_odps_error_that_is_not_a_conflict_is_never_one(text: str, source: str) -> None:
    for form in (text, _pyodps(text), _in_a_log(text)):
        found = classify(form)
        assert found.kind is K.NOT_A_CONFLICT, (type(form).__name__, found)
        assert not found.retry_safe


def test_the_aborted_transaction_names_the_last_commit_as_the_winner() -> None:
    found = classify(_pyodps(CONFLICTS[0][0]))
    assert found.winning_commit is not None
    assert found.winning_commit.tag == {"lastCommitTs": "1709410212584448"}
    assert found.error_class == "ODPS-0110061"


def test_pyodps_code_and_class_carry_the_lock_conflict_without_the_text() -> None:
    assert classify(odps_errors.ODPSError("timed out", code="ODPS-0121096")).kind is K.METADATA_LOCK_CONFLICT
    tunnel = MetaTransactionFailed("RequestId: 20241121120312abcdef", code="MetaTransactionFailed")
    assert classify(tunnel).kind is K.METADATA_LOCK_CONFLICT


# ODPS-0110999: the commit failed and its rollback failed too ("possible breach of atomicity"): the
# data may or may not have landed, so the write must never be retried blindly.
ROLLBACK_FAILED = (
    "ODPS-0110999: Critical! Internal error happened in commit operation and rollback failed, possible breach "
    "of atomicity - Rename directory failed during DDLTask."
)


def test_a_commit_whose_rollback_failed_is_an_unknown_commit_state_in_every_form() -> None:
    for form in (ROLLBACK_FAILED, _pyodps(ROLLBACK_FAILED), _in_a_log(ROLLBACK_FAILED), "FAILED: " + ROLLBACK_FAILED):
        found = classify(form)
        assert found.kind is K.COMMIT_STATE_UNKNOWN, (type(form).__name__, found)
        assert found.engine == "maxcompute"
        assert not found.retry_safe
    assert classify(odps_errors.ODPSError("rollback failed", code="ODPS-0110999")).kind is K.COMMIT_STATE_UNKNOWN


def test_an_unknown_odps_error_is_never_a_conflict() -> None:
    for text in (
        "ODPS-0010000:System internal error - fuxi job failed, caused by: the quota is exhausted",
        "ODPS-0130131:Table not found - table proj.events cannot be resolved",
        "ODPS-0110061: Failed to run ddltask - an error text occflow has never seen",
    ):
        assert classify(_pyodps(text)).kind is K.NOT_A_CONFLICT, text


def test_the_stand_in_fails_with_texts_classified_as_their_error_pages_say() -> None:
    aborted = mc_errors.transaction_aborted("proj", "events", "ds=2024-01-01", "t9", 1709410212584448, 1709410182400000, "update")
    assert classify(_pyodps(aborted)).kind is K.OPERATION_CONFLICT
    assert classify(_pyodps(mc_errors.METADATA_LOCK)).kind is K.METADATA_LOCK_CONFLICT
    exists = mc_errors.PARTITION_ALREADY_EXISTS.format(values="2024-01-01")
    assert classify(_pyodps(exists)).kind is K.METADATA_LOCK_CONFLICT
    mismatch = mc_errors.PARTITION_COLUMNS_MISMATCH.format(given=0, expected=2)
    assert classify(_pyodps(mismatch)).kind is K.NOT_A_CONFLICT
