"""MaxCompute's error texts as the service prints them, and the errors occflow raises about them.

The texts are the samples of MaxCompute's error code pages, with their placeholders (``xxx``)
filled in; the stand-in (``standin.py``) fails its instances with them, through PyODPS's own
``odps.errors.parse_instance_error`` (what ``Instance.wait_for_success`` raises), so what the
operator classifies is what PyODPS would hand it. The classifier's markers for them are in
``occflow.core.classifiers.markers``.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from ..outcome import NeverRetry

#: ODPS-0110061, error 2 (alibabacloud.com/help/en/maxcompute/user-guide/odps-0110061): MetaService's
#: OCC aborts the later transaction ("BeginTs is less than lastCommitTs").
TRANSACTION_ABORTED = (
    "ODPS-0110061: Failed to run ddltask - Modify DDL meta encounter exception : ODPS-0429311:Transaction "
    "aborted - MaxC Transaction aborted. Can't update ObjectId(objectType:{object_type}, dbName:{project}, "
    "tableName:{table}, tableId:{table_id}, partitionId:{partition_id}, partitionName:{partition}, tenantId:, "
    "catalogName:odps, catalogId:0, dbId:, projectName:{project}). BeginTs is less than lastCommitTs."
    "objectId:ObjectId(objectType:{object_type}, dbName:{project}, tableName:{table}, tableId:{table_id}, "
    "partitionId:{partition_id}, partitionName:{partition}, tenantId:, catalogName:odps, catalogId:0, dbId:, "
    "projectName:{project}), txnId:{txn_id}, lastCommitTs:{last_commit_ts}, lastMaxBeginTs:{begin_ts}, "
    "isolation:NONSTRICT_SNAPSHOT_ISOLATION, op:{op}, isConstraintNotAllowInsertIntoReorder:false"
)

#: ODPS-0121096, error 1 (help.aliyun.com/en/maxcompute/user-guide/odps-0121096): the table-level
#: metadata lock could not be taken within ~30 s, after MaxCompute's own retries.
METADATA_LOCK = (
    "ODPS-0121096:MetaStore transaction conflict - Reached maximum retry times because of "
    "OTSStorageTxnLockKeyFail(Inner exception: Transaction timeout because cannot acquire exclusive lock.)"
)

#: ODPS-0110061 on the SQL error codes page: two jobs adding one partition at once.
PARTITION_ALREADY_EXISTS = (
    "ODPS-0110061: Failed to run ddltask - AlreadyExistsException(message:Partition already exists, "
    "existed values: [\"{values}\"])"
)

#: ODPS-0130071 (alibabacloud.com/help/en/maxcompute/user-guide/odps-0130071), error 1: a user
#: error, never a conflict (a near miss in the tests).
PARTITION_COLUMNS_MISMATCH = (
    "ODPS-0130071:[1,24] Semantic analysis exception - the number of input partition columns ({given}) "
    "doesn't equal to table's partition columns ({expected})"
)

FAULTS = {"metadata_lock": METADATA_LOCK, "partition_exists": PARTITION_ALREADY_EXISTS}


def transaction_aborted(
    project: str, table: str, partition: str, txn_id: str, last_commit_ts: int, begin_ts: int, op: str
) -> str:
    """The OCC abort text for a job on ``partition`` ("" for a non-partitioned table)."""
    return TRANSACTION_ABORTED.format(
        object_type="PARTITION" if partition else "TABLE",
        project=project,
        table=table,
        table_id=zlib.crc32(table.encode()),
        partition_id=zlib.crc32(f"{table}/{partition}".encode()),
        partition=partition.replace("/", ","),
        txn_id=txn_id,
        last_commit_ts=last_commit_ts,
        begin_ts=begin_ts,
        op=op.upper(),
    )


def odps_error(text: str, instance_id: str) -> Exception:
    """The exception PyODPS raises for a failed instance whose task result is ``text``."""
    # pyodps is an optional dependency (the [maxcompute] extra): imported where it is needed.
    from odps import errors

    error: Exception = errors.parse_instance_error(text)
    error.instance_id = instance_id  # type: ignore[attr-defined]
    return error


class ResidueError(NeverRetry):
    """A failed INSERT INTO on a standard table whose rows may still be in the table (spec 000:
    "If an INTO job fails due to a conflict, data from the failed job may remain")."""

    def __init__(self, instance_id: str, table: str, partitions: Sequence[str], detail: str, error: str) -> None:
        where = ", ".join(partitions) if partitions else "the whole table"
        super().__init__(
            f"INSERT INTO instance {instance_id} on the standard table {table} failed ({error.splitlines()[0]}) "
            f"and left rows behind in {where}: {detail}. occflow does not retry it (a retry would write "
            "those rows twice): remove the failed job's rows (INSERT OVERWRITE the partition from its "
            "source) and clear the task"
        )
        self.instance_id = instance_id
        self.table = table
        self.partitions = tuple(partitions)
