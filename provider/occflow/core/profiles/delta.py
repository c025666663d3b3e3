"""Delta Lake profiles: ``delta-serializable`` and ``delta-write-serializable``.

Two sources, held side by side:

- the documentation (spec 003 "Concurrency Control": the write-conflicts table and the conflict
  exceptions; spec 004 "Isolation levels and write conflicts": metadata changes, blind appends,
  WriteSerializable vs Serializable), and
- Delta's own conflict checker (delta-io/delta ``ConflictChecker.scala`` and the isolation-level
  choice in ``OptimisticTransaction.scala``), which decides *which* exception the loser gets.

``DELTA_MATRIX`` below is the literal table: one row per (earlier, later) pair of the nine
operations, for two jobs on the same partition (or unpartitioned table), with the outcome under
each isolation level and the source of both. ``ConflictChecker`` is a port of the checker over
two ``Footprint`` s. The matrix is stated for the canonical footprints of ``canonical_footprint``;
tests/core/test_profiles_delta.py runs the checker on those footprints for every cell, so the
data and the algorithm check each other.

Where documentation and code disagree the matrix follows the code and says so in the cell's
note (the docs name ConcurrentDeleteDelete for two compactions; the code raises
ConcurrentDeleteRead, because OPTIMIZE registers the files it rewrites as read and the
delete-read check runs first).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..errors import InvalidFootprintError, UnknownOperationError
from ..footprint import FileRef, Footprint, PartitionKey
from ..kinds import ConflictKind
from ..operations import Operation
from ..operations import Operation as Op
from .model import Cell, Effect, OverwriteScope, Profile, RuleKind

# --------------------------------------------------------------------------------------------
# The port of ConflictChecker
# --------------------------------------------------------------------------------------------

#: What a failed check returns: the kind, and a message in the words of Delta's exception.
Conflict = tuple[ConflictKind, str]


class IsolationLevel(str, enum.Enum):
    """Delta's isolation levels (``delta.isolationLevel``; SnapshotIsolation is never a table
    setting, only what a no-data-change commit is downgraded to)."""

    SERIALIZABLE = "Serializable"
    WRITE_SERIALIZABLE = "WriteSerializable"
    SNAPSHOT_ISOLATION = "SnapshotIsolation"


def is_blind_append(fp: Footprint) -> bool:
    """Delta's ``isBlindAppend``: only adds files and depends on no file it read.

    Derived from what the transaction did, as ``OptimisticTransaction.commit`` derives it (so an
    ALTER TABLE that touches no files is a blind append too), not from the declared flag.
    """
    reads_nothing = fp.read_partitions is not None and not fp.read_partitions and not fp.files_read
    return reads_nothing and not fp.files_removed


def isolation_level_to_use(current: Footprint, table_level: IsolationLevel) -> IsolationLevel:
    """``OptimisticTransaction.getIsolationLevelToUse`` / ``canDowngradeToSnapshotIsolation``.

    A commit whose file actions all have ``dataChange=false`` (OPTIMIZE) or that has no file
    actions at all runs under SnapshotIsolation, which skips the added-files check. Metadata,
    protocol and SetTransaction (app id) actions are "incompatible" and keep the table's level;
    under WriteSerializable the operation itself must not change data either.
    """
    if current.metadata_change or current.protocol_change or current.app_id is not None:
        return table_level
    data_changed = current.data_change and bool(current.files_added or current.files_removed)
    if table_level is IsolationLevel.SERIALIZABLE:
        downgrade = not data_changed
    else:
        downgrade = not data_changed and not current.operation.changes_data
    return IsolationLevel.SNAPSHOT_ISOLATION if downgrade else table_level


def _where(partition: PartitionKey) -> str:
    return "the root of the table" if partition == "" else f"partition [{partition}]"


def _winner(winner: Footprint) -> str:
    return f"conflicting commit: {winner.operation.value}"


def check_protocol_compatibility(current: Footprint, winner: Footprint, level: IsolationLevel) -> Conflict | None:
    """``checkProtocolCompatibility``.

    The code fails the current transaction only when it changes the protocol too, when the
    winner drops features or adds features that must fail concurrent transactions, or (as
    InvalidProtocolVersion) when the client cannot read or write the new protocol. A Footprint
    does not say which, so this follows spec 004: "Metadata changes cause all concurrent write
    operations to fail. These operations include changes to table protocol".
    """
    if winner.protocol_change:
        return (
            ConflictKind.PROTOCOL_CHANGED,
            f"The protocol version of the Delta table has been changed by a concurrent update "
            f"({_winner(winner)}).",
        )
    return None


def check_no_metadata_updates(current: Footprint, winner: Footprint, level: IsolationLevel) -> Conflict | None:
    """``checkNoMetadataUpdates``: any winning Metadata action fails every later transaction.

    (The code tolerates identity-high-water-mark-only and allow-listed feature-enablement
    updates; a Footprint's ``metadata_change`` means a real schema or property change.)
    """
    if winner.metadata_change:
        return (
            ConflictKind.METADATA_CHANGED,
            f"The metadata of the Delta table has been changed by a concurrent update ({_winner(winner)}).",
        )
    return None


def check_added_files_read(current: Footprint, winner: Footprint, level: IsolationLevel) -> Conflict | None:
    """``checkForAddedFilesThatShouldHaveBeenReadByCurrentTxn``.

    Serializable: every file the winner added counts. WriteSerializable: a blind append's files
    do not, unless the current transaction changes metadata. SnapshotIsolation: nothing counts.
    The winner's non-blind adds count whatever their ``dataChange`` (an OPTIMIZE's compacted
    file too). A blind-append current transaction read nothing and never fails here; on an
    unpartitioned table (partition ``""``) Delta does not filter by predicate at all.
    """
    if level is IsolationLevel.SNAPSHOT_ISOLATION or is_blind_append(current):
        return None
    if level is IsolationLevel.WRITE_SERIALIZABLE and not current.metadata_change and is_blind_append(winner):
        return None
    for added in sorted(winner.files_added):
        if (
            current.read_partitions is None
            or added.partition in current.read_partitions
            or added.partition == ""
        ):
            return (
                ConflictKind.CONCURRENT_APPEND,
                f"Files were added to {_where(added.partition)} by a concurrent update "
                f"({_winner(winner)}). Please try the operation again.",
            )
    return None


def check_deleted_files_read(current: Footprint, winner: Footprint, level: IsolationLevel) -> Conflict | None:
    """``checkForDeletedFilesAgainstCurrentTxnReadFiles`` (not skipped under SnapshotIsolation)."""
    read_paths = {f.path for f in current.files_read}
    for removed in sorted(winner.files_removed):
        if removed.path in read_paths:
            return (
                ConflictKind.CONCURRENT_DELETE_READ,
                f"This transaction attempted to read one or more files that were deleted (for "
                f"example {removed.path} in {_where(removed.partition)}) by a concurrent update "
                f"({_winner(winner)}).",
            )
    if winner.files_removed and current.read_whole_table:
        first = min(winner.files_removed)
        return (
            ConflictKind.CONCURRENT_DELETE_READ,
            f"This transaction read the whole table and a concurrent update deleted {first.path} "
            f"({_winner(winner)}).",
        )
    return None


def check_deleted_files_deleted(current: Footprint, winner: Footprint, level: IsolationLevel) -> Conflict | None:
    """``checkForDeletedFilesAgainstCurrentTxnDeletedFiles``: a file removed twice."""
    mine = {f.path for f in current.files_removed}
    for removed in sorted(winner.files_removed):
        if removed.path in mine:
            return (
                ConflictKind.CONCURRENT_DELETE_DELETE,
                f"This transaction attempted to delete one or more files that were deleted (for "
                f"example {removed.path}) by a concurrent update ({_winner(winner)}).",
            )
    return None


def check_app_ids(current: Footprint, winner: Footprint, level: IsolationLevel) -> Conflict | None:
    """``checkForUpdatedApplicationTransactionIdsThatCurrentTxnDependsOn``."""
    if current.app_id is not None and current.app_id == winner.app_id:
        return (
            ConflictKind.CONCURRENT_TRANSACTION,
            f"A concurrent transaction committed application transaction id {current.app_id!r} "
            f"({_winner(winner)}): two writers share one streaming checkpoint or txnAppId.",
        )
    return None


Check = Callable[[Footprint, Footprint, IsolationLevel], "Conflict | None"]

#: ``ConflictChecker.checkConflicts`` in order; the first failing check names the exception.
#: This is the order of delta-rs (the embedded engine here) and of Delta's core/ checker;
#: delta-spark's newer spark/ checker moves the app-id check before the file checks, which
#: only matters when one winner both shares the app id and clashes on files.
CHECKS: tuple[Check, ...] = (
    check_protocol_compatibility,
    check_no_metadata_updates,
    check_added_files_read,
    check_deleted_files_read,
    check_deleted_files_deleted,
    check_app_ids,
)


@dataclass(frozen=True)
class ConflictChecker:
    """A ``Validator``: ``checker(current, winner)`` is the first failing check, or ``None``."""

    table_isolation: IsolationLevel

    def __call__(self, current: Footprint, winner: Footprint) -> Conflict | None:
        if current.operation is Op.VACUUM:
            # delta-spark's VACUUM starts the transaction of each of its commits right before
            # committing it (VacuumCommand.logVacuumStart / logVacuumEnd): no commit lands between
            # its snapshot and its commit, so no check has a winner to find (VACUUM_MATRIX).
            return None
        return first_conflict(CHECKS, current, winner, isolation_level_to_use(current, self.table_isolation))



def first_conflict(
    checks: Iterable[Check], current: Footprint, winner: Footprint, level: IsolationLevel
) -> Conflict | None:
    """The first of ``checks``, in their order, that finds a conflict (Delta runs its checks in
    a fixed order and reports the first); ``None`` when none does."""
    for check in checks:
        found = check(current, winner, level)
        if found is not None:
            return found
    return None


# --------------------------------------------------------------------------------------------
# Canonical footprints: what each operation reads, removes and adds on one partition
# --------------------------------------------------------------------------------------------

DELTA_OPERATIONS: tuple[Operation, ...] = (
    Op.INSERT_INTO,
    Op.INSERT_OVERWRITE,
    Op.TRUNCATE,
    Op.UPDATE,
    Op.DELETE,
    Op.MERGE,
    Op.OPTIMIZE,
    Op.ALTER_METADATA,
    Op.UPGRADE_PROTOCOL,
)


def canonical_footprint(
    operation: Operation,
    partition: PartitionKey,
    live_files: Iterable[FileRef],
    *,
    new_file: str | None = None,
    whole_table: Iterable[FileRef] | None = None,
    app_id: str | None = None,
) -> Footprint:
    """The footprint the matrix assumes for ``operation`` on ``partition``.

    ``live_files`` are the partition's files at the transaction's snapshot (F). Blind append:
    reads nothing, adds one file. INSERT OVERWRITE, TRUNCATE, UPDATE, DELETE, MERGE: read the
    partition (files_read = F), remove F, add one file (TRUNCATE none). OPTIMIZE: the same with
    ``data_change=False``. ALTER: a metadata change, no files. UPGRADE_PROTOCOL: a protocol and
    metadata change that reads every file (``read_partitions=None``) and commits none. ``whole_table`` (every live file
    of the table) makes a read-modify-write operation read the whole table, as a MERGE, UPDATE or
    DELETE whose condition names no partition does (``read_partitions=None``).
    """
    if operation not in DELTA_OPERATIONS:
        known = ", ".join(op.value for op in DELTA_OPERATIONS)
        raise UnknownOperationError(f"operation {operation.value!r} is not a Delta operation; known: {known}")
    files = frozenset(live_files)
    strays = sorted(f.path for f in files if f.partition != partition)
    if strays:
        raise InvalidFootprintError(f"live files {strays} are not in partition {partition!r}")
    added = frozenset({FileRef(new_file or f"{partition}/{operation.value}.parquet", partition)})
    if operation is Op.UPGRADE_PROTOCOL:
        # REORG ... APPLY (UPGRADE ...): Protocol and Metadata actions, and a rewrite of every
        # file that lacks the new feature, so it depends on the whole table (spec 004: "conflicts
        # with all ongoing operations"). The rewrite's files are left out: it is its own commit.
        return Footprint(
            operation=operation,
            read_partitions=None,
            write_partitions=frozenset(),
            files_read=files | frozenset(whole_table or ()),
            data_change=False,
            metadata_change=True,
            protocol_change=True,
            app_id=app_id,
        )
    if operation is Op.ALTER_METADATA or operation is Op.INSERT_INTO:
        if whole_table is not None:
            raise InvalidFootprintError(f"{operation.value} reads no files; it cannot read the whole table")
        if operation is Op.ALTER_METADATA:
            return Footprint(operation=operation, metadata_change=True, app_id=app_id)
        return Footprint(
            operation=operation,
            write_partitions=frozenset({partition}),
            files_added=added,
            blind_append=True,
            app_id=app_id,
        )
    read_partitions: frozenset[PartitionKey] | None = frozenset({partition})
    files_read = files
    if whole_table is not None:
        read_partitions = None
        files_read = frozenset(whole_table) | files
    return Footprint(
        operation=operation,
        read_partitions=read_partitions,
        write_partitions=frozenset({partition}),
        files_read=files_read,
        files_removed=files,
        files_added=frozenset() if operation is Op.TRUNCATE else added,
        data_change=operation is not Op.OPTIMIZE,
        app_id=app_id,
    )


# --------------------------------------------------------------------------------------------
# The literal matrix
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """The later job's fate: the exception it gets (``None``: it commits) and the data effect."""

    exception: ConflictKind | None
    effect: Effect


OK_APPEND = Outcome(None, Effect.APPEND)
OK_APPLIED = Outcome(None, Effect.APPLIED)
OK_COMPACTS = Outcome(None, Effect.COMPACTION_COMPLETES)
CONCURRENT_APPEND = Outcome(ConflictKind.CONCURRENT_APPEND, Effect.LATER_FAILS)
DELETE_READ = Outcome(ConflictKind.CONCURRENT_DELETE_READ, Effect.LATER_FAILS)
METADATA_CHANGED = Outcome(ConflictKind.METADATA_CHANGED, Effect.LATER_FAILS)
PROTOCOL_CHANGED = Outcome(ConflictKind.PROTOCOL_CHANGED, Effect.LATER_FAILS)

# Spec 003's write-conflicts table (rows x columns; lower triangle, unordered pairs).
T_INS_INS = "spec 003 write conflicts [INSERT x INSERT]: cannot conflict"
T_UDM_INS = "spec 003 write conflicts [UPDATE, DELETE, MERGE INTO x INSERT]: can conflict in Serializable, cannot in WriteSerializable"
T_UDM_UDM = "spec 003 write conflicts [UPDATE, DELETE, MERGE INTO x UPDATE, DELETE, MERGE INTO]: can conflict in both"
T_OPT_INS = "spec 003 write conflicts [OPTIMIZE x INSERT]: cannot conflict"
T_OPT_UDM = "spec 003 write conflicts [OPTIMIZE x UPDATE, DELETE, MERGE INTO]: can conflict in both"
T_OPT_OPT = "spec 003 write conflicts [OPTIMIZE x OPTIMIZE]: can conflict in both"
# INSERT OVERWRITE and TRUNCATE are not in spec 003's table; Delta runs them as read-modify-write
# (filterFiles, then remove what was read), so they take the UPDATE, DELETE, MERGE INTO row.
RMW = "INSERT OVERWRITE/TRUNCATE read and remove the partition's files, as UPDATE/DELETE/MERGE do"
S004_META = "spec 004: metadata changes cause all concurrent write operations to fail"
S004_BLIND = "spec 004 ConcurrentAppendException: blind INSERTs do not conflict under WriteSerializable"
S004_ALTER = "spec 004: ALTER TABLE is a metadata change"
S004_UPGRADE = (
    "spec 004: when you use REORG to apply an upgrade, table protocols change, which conflicts with all "
    "ongoing operations"
)
# Delta's code.
CC_META = "ConflictChecker.checkNoMetadataUpdates"
CC_PROTOCOL = "ConflictChecker.checkProtocolCompatibility"
REORG_UPGRADE = (
    "ReorgTableForUpgradeUniformHelper.enableIcebergCompat commits Protocol and Metadata actions, then "
    "rewrites the files lacking the feature"
)
CC_ADDED = "ConflictChecker.checkForAddedFilesThatShouldHaveBeenReadByCurrentTxn"
CC_DEL_READ = "ConflictChecker.checkForDeletedFilesAgainstCurrentTxnReadFiles"
CC_BLIND = "ConflictChecker.getFirstFileMatchingPartitionPredicates: a blind append reads nothing, no check fails"
OT_SI = "OptimisticTransaction.canDowngradeToSnapshotIsolation: OPTIMIZE (dataChange=false) skips the added-files check"


#: What delta-spark really raised where the matrix names another kind (both fail the later job):
#: after a protocol upgrade that also writes Metadata (a ``delta.feature.*`` / feature-enabling
#: property), a later job that changes no protocol itself gets MetadataChangedException, because
#: ``checkProtocolCompatibility`` fails only a transaction that changes the protocol too (or on
#: dropped / concurrency-failing features) and ``checkNoMetadataUpdates`` runs next.
M_UPGRADE_METADATA = (
    "measured: delta-spark 3.3.3, occflow conformance --engine delta-spark (docs/conformance/delta-spark.md), "
    "all 8 table layouts: MetadataChangedException"
)


def src(*parts: str) -> str:
    return "; ".join(parts)


# Notes on the cells a reader might not expect.
N_WS_OVERWRITE = (
    "WriteSerializable: both succeed and the appended rows survive the overwrite, because the overwrite "
    "removes only the files it read (OverwriteScope.FILES_READ); Serializable: ConcurrentAppend"
)
N_WS_RMW = (
    "WriteSerializable: both succeed and the later job does not see the appended rows (spec 004's "
    "'a reader could see a table that does not exist in the Delta log'); Serializable: ConcurrentAppend"
)
N_APPEND_FIRST = (
    "ConcurrentAppend, not ConcurrentDeleteRead: the earlier commit's rewritten file lands in the partition "
    "the later job read, and the added-files check runs before the deleted-files checks"
)
N_AFTER_OPTIMIZE = (
    "code differs from what the docs suggest: OPTIMIZE's compacted file is not a blind append, so it counts "
    "as a file added to the partition the later job read even though dataChange=false (delta-io/delta#1305 "
    "proposed ignoring dataChange=false adds; not merged): ConcurrentAppend, not ConcurrentDeleteRead"
)
N_TRUNCATE_FIRST = "TRUNCATE adds no file, so the added-files check passes and the removal of the files read fails"
N_OPTIMIZE_LOSES = "OPTIMIZE runs under SnapshotIsolation (no added-files check) but the files it read were removed"
N_OPT_OPT = (
    "docs and code differ: spec 003/004 name ConcurrentDeleteDelete for two compactions rewriting the same "
    "files; OSS Delta's OPTIMIZE registers those files as read (txn.filterFiles) and the delete-read check runs "
    "before delete-delete, so it raises ConcurrentDeleteRead (Databricks Runtime reports ConcurrentDeleteDelete). "
    "Matrix follows the code"
)
N_OPT_AFTER_APPEND = "the appended file is not in OPTIMIZE's snapshot: it stays uncompacted"
N_ALTER_LATER = "ALTER reads no files (a blind append in Delta's sense) and the earlier commit changed no metadata"
N_APPEND_LATER = "a blind append reads nothing, so nothing committed concurrently can invalidate it"
N_UPGRADE_FIRST = (
    "the winner changed the protocol: spec 004 fails every ongoing operation; Delta's code raises "
    "ProtocolChangedException when the later job changes the protocol too, or the upgrade drops features or "
    "adds ones that fail concurrent transactions, and otherwise MetadataChangedException for the properties "
    "the upgrade sets (both fail the later job; the matrix names the spec's kind)"
)
N_UPGRADE_LATER = (
    "the upgrade depends on every file of the table (it rewrites those lacking the feature) and changes "
    "metadata, so the table's isolation level holds and blind appends count under WriteSerializable too: "
    "any concurrent data write fails it (spec 004: it conflicts with all ongoing operations). Delta commits "
    "the properties first (a metadata-only commit) and rewrites afterwards, so the real error may come "
    "from either step"
)

# (earlier op, later op, outcome under Serializable, outcome under WriteSerializable, source, note)
# Two jobs on the same partition (or unpartitioned table); "earlier" commits first; the later job
# is validated against it. Rows grouped by the earlier operation.
#: One row of ``DELTA_MATRIX``: earlier, later, Serializable outcome, WriteSerializable outcome, source, note.
MatrixRow = tuple[Operation, Operation, Outcome, Outcome, str, str]

DELTA_MATRIX: tuple[MatrixRow, ...] = (
    # earlier: INSERT INTO (blind append)
    (Op.INSERT_INTO, Op.INSERT_INTO, OK_APPEND, OK_APPEND, src(T_INS_INS, CC_BLIND), N_APPEND_LATER),
    (Op.INSERT_INTO, Op.INSERT_OVERWRITE, CONCURRENT_APPEND, OK_APPLIED, src(T_UDM_INS, RMW, S004_BLIND, CC_ADDED), N_WS_OVERWRITE),
    (Op.INSERT_INTO, Op.TRUNCATE, CONCURRENT_APPEND, OK_APPLIED, src(T_UDM_INS, RMW, S004_BLIND, CC_ADDED), N_WS_OVERWRITE),
    (Op.INSERT_INTO, Op.UPDATE, CONCURRENT_APPEND, OK_APPLIED, src(T_UDM_INS, S004_BLIND, CC_ADDED), N_WS_RMW),
    (Op.INSERT_INTO, Op.DELETE, CONCURRENT_APPEND, OK_APPLIED, src(T_UDM_INS, S004_BLIND, CC_ADDED), N_WS_RMW),
    (Op.INSERT_INTO, Op.MERGE, CONCURRENT_APPEND, OK_APPLIED, src(T_UDM_INS, S004_BLIND, CC_ADDED), N_WS_RMW),
    (Op.INSERT_INTO, Op.OPTIMIZE, OK_COMPACTS, OK_COMPACTS, src(T_OPT_INS, OT_SI), N_OPT_AFTER_APPEND),
    (Op.INSERT_INTO, Op.ALTER_METADATA, OK_APPLIED, OK_APPLIED, src(S004_ALTER, CC_META, CC_BLIND), N_ALTER_LATER),
    (Op.INSERT_INTO, Op.UPGRADE_PROTOCOL, CONCURRENT_APPEND, CONCURRENT_APPEND, src(S004_UPGRADE, REORG_UPGRADE, CC_ADDED), N_UPGRADE_LATER),
    # earlier: INSERT OVERWRITE
    (Op.INSERT_OVERWRITE, Op.INSERT_INTO, OK_APPEND, OK_APPEND, src(T_UDM_INS, RMW, CC_BLIND), N_APPEND_LATER),
    (Op.INSERT_OVERWRITE, Op.INSERT_OVERWRITE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_UDM_UDM, RMW, CC_ADDED), N_APPEND_FIRST),
    (Op.INSERT_OVERWRITE, Op.TRUNCATE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_UDM_UDM, RMW, CC_ADDED), N_APPEND_FIRST),
    (Op.INSERT_OVERWRITE, Op.UPDATE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_UDM_UDM, RMW, CC_ADDED), N_APPEND_FIRST),
    (Op.INSERT_OVERWRITE, Op.DELETE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_UDM_UDM, RMW, CC_ADDED), N_APPEND_FIRST),
    (Op.INSERT_OVERWRITE, Op.MERGE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_UDM_UDM, RMW, CC_ADDED), N_APPEND_FIRST),
    (Op.INSERT_OVERWRITE, Op.OPTIMIZE, DELETE_READ, DELETE_READ, src(T_OPT_UDM, RMW, OT_SI, CC_DEL_READ), N_OPTIMIZE_LOSES),
    (Op.INSERT_OVERWRITE, Op.ALTER_METADATA, OK_APPLIED, OK_APPLIED, src(S004_ALTER, CC_META, CC_BLIND), N_ALTER_LATER),
    (Op.INSERT_OVERWRITE, Op.UPGRADE_PROTOCOL, CONCURRENT_APPEND, CONCURRENT_APPEND, src(S004_UPGRADE, REORG_UPGRADE, CC_ADDED), N_UPGRADE_LATER),
    # earlier: TRUNCATE
    (Op.TRUNCATE, Op.INSERT_INTO, OK_APPEND, OK_APPEND, src(T_UDM_INS, RMW, CC_BLIND), N_APPEND_LATER),
    (Op.TRUNCATE, Op.INSERT_OVERWRITE, DELETE_READ, DELETE_READ, src(T_UDM_UDM, RMW, CC_DEL_READ), N_TRUNCATE_FIRST),
    (Op.TRUNCATE, Op.TRUNCATE, DELETE_READ, DELETE_READ, src(T_UDM_UDM, RMW, CC_DEL_READ), N_TRUNCATE_FIRST),
    (Op.TRUNCATE, Op.UPDATE, DELETE_READ, DELETE_READ, src(T_UDM_UDM, RMW, CC_DEL_READ), N_TRUNCATE_FIRST),
    (Op.TRUNCATE, Op.DELETE, DELETE_READ, DELETE_READ, src(T_UDM_UDM, RMW, CC_DEL_READ), N_TRUNCATE_FIRST),
    (Op.TRUNCATE, Op.MERGE, DELETE_READ, DELETE_READ, src(T_UDM_UDM, RMW, CC_DEL_READ), N_TRUNCATE_FIRST),
    (Op.TRUNCATE, Op.OPTIMIZE, DELETE_READ, DELETE_READ, src(T_OPT_UDM, RMW, OT_SI, CC_DEL_READ), N_OPTIMIZE_LOSES),
    (Op.TRUNCATE, Op.ALTER_METADATA, OK_APPLIED, OK_APPLIED, src(S004_ALTER, CC_META, CC_BLIND), N_ALTER_LATER),
    (Op.TRUNCATE, Op.UPGRADE_PROTOCOL, DELETE_READ, DELETE_READ, src(S004_UPGRADE, REORG_UPGRADE, CC_DEL_READ), N_UPGRADE_LATER),
    # earlier: UPDATE
    (Op.UPDATE, Op.INSERT_INTO, OK_APPEND, OK_APPEND, src(T_UDM_INS, CC_BLIND), N_APPEND_LATER),
    (Op.UPDATE, Op.INSERT_OVERWRITE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_UDM_UDM, RMW, CC_ADDED), N_APPEND_FIRST),
    (Op.UPDATE, Op.TRUNCATE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_UDM_UDM, RMW, CC_ADDED), N_APPEND_FIRST),
    (Op.UPDATE, Op.UPDATE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_UDM_UDM, CC_ADDED), N_APPEND_FIRST),
    (Op.UPDATE, Op.DELETE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_UDM_UDM, CC_ADDED), N_APPEND_FIRST),
    (Op.UPDATE, Op.MERGE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_UDM_UDM, CC_ADDED), N_APPEND_FIRST),
    (Op.UPDATE, Op.OPTIMIZE, DELETE_READ, DELETE_READ, src(T_OPT_UDM, OT_SI, CC_DEL_READ), N_OPTIMIZE_LOSES),
    (Op.UPDATE, Op.ALTER_METADATA, OK_APPLIED, OK_APPLIED, src(S004_ALTER, CC_META, CC_BLIND), N_ALTER_LATER),
    (Op.UPDATE, Op.UPGRADE_PROTOCOL, CONCURRENT_APPEND, CONCURRENT_APPEND, src(S004_UPGRADE, REORG_UPGRADE, CC_ADDED), N_UPGRADE_LATER),
    # earlier: DELETE
    (Op.DELETE, Op.INSERT_INTO, OK_APPEND, OK_APPEND, src(T_UDM_INS, CC_BLIND), N_APPEND_LATER),
    (Op.DELETE, Op.INSERT_OVERWRITE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_UDM_UDM, RMW, CC_ADDED), N_APPEND_FIRST),
    (Op.DELETE, Op.TRUNCATE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_UDM_UDM, RMW, CC_ADDED), N_APPEND_FIRST),
    (Op.DELETE, Op.UPDATE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_UDM_UDM, CC_ADDED), N_APPEND_FIRST),
    (Op.DELETE, Op.DELETE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_UDM_UDM, CC_ADDED), N_APPEND_FIRST),
    (Op.DELETE, Op.MERGE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_UDM_UDM, CC_ADDED), N_APPEND_FIRST),
    (Op.DELETE, Op.OPTIMIZE, DELETE_READ, DELETE_READ, src(T_OPT_UDM, OT_SI, CC_DEL_READ), N_OPTIMIZE_LOSES),
    (Op.DELETE, Op.ALTER_METADATA, OK_APPLIED, OK_APPLIED, src(S004_ALTER, CC_META, CC_BLIND), N_ALTER_LATER),
    (Op.DELETE, Op.UPGRADE_PROTOCOL, CONCURRENT_APPEND, CONCURRENT_APPEND, src(S004_UPGRADE, REORG_UPGRADE, CC_ADDED), N_UPGRADE_LATER),
    # earlier: MERGE
    (Op.MERGE, Op.INSERT_INTO, OK_APPEND, OK_APPEND, src(T_UDM_INS, CC_BLIND), N_APPEND_LATER),
    (Op.MERGE, Op.INSERT_OVERWRITE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_UDM_UDM, RMW, CC_ADDED), N_APPEND_FIRST),
    (Op.MERGE, Op.TRUNCATE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_UDM_UDM, RMW, CC_ADDED), N_APPEND_FIRST),
    (Op.MERGE, Op.UPDATE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_UDM_UDM, CC_ADDED), N_APPEND_FIRST),
    (Op.MERGE, Op.DELETE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_UDM_UDM, CC_ADDED), N_APPEND_FIRST),
    (Op.MERGE, Op.MERGE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_UDM_UDM, CC_ADDED), N_APPEND_FIRST),
    (Op.MERGE, Op.OPTIMIZE, DELETE_READ, DELETE_READ, src(T_OPT_UDM, OT_SI, CC_DEL_READ), N_OPTIMIZE_LOSES),
    (Op.MERGE, Op.ALTER_METADATA, OK_APPLIED, OK_APPLIED, src(S004_ALTER, CC_META, CC_BLIND), N_ALTER_LATER),
    (Op.MERGE, Op.UPGRADE_PROTOCOL, CONCURRENT_APPEND, CONCURRENT_APPEND, src(S004_UPGRADE, REORG_UPGRADE, CC_ADDED), N_UPGRADE_LATER),
    # earlier: OPTIMIZE
    (Op.OPTIMIZE, Op.INSERT_INTO, OK_APPEND, OK_APPEND, src(T_OPT_INS, CC_BLIND), N_APPEND_LATER),
    (Op.OPTIMIZE, Op.INSERT_OVERWRITE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_OPT_UDM, RMW, CC_ADDED), N_AFTER_OPTIMIZE),
    (Op.OPTIMIZE, Op.TRUNCATE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_OPT_UDM, RMW, CC_ADDED), N_AFTER_OPTIMIZE),
    (Op.OPTIMIZE, Op.UPDATE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_OPT_UDM, CC_ADDED), N_AFTER_OPTIMIZE),
    (Op.OPTIMIZE, Op.DELETE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_OPT_UDM, CC_ADDED), N_AFTER_OPTIMIZE),
    (Op.OPTIMIZE, Op.MERGE, CONCURRENT_APPEND, CONCURRENT_APPEND, src(T_OPT_UDM, CC_ADDED), N_AFTER_OPTIMIZE),
    (Op.OPTIMIZE, Op.OPTIMIZE, DELETE_READ, DELETE_READ, src(T_OPT_OPT, OT_SI, CC_DEL_READ), N_OPT_OPT),
    (Op.OPTIMIZE, Op.ALTER_METADATA, OK_APPLIED, OK_APPLIED, src(S004_ALTER, CC_META, CC_BLIND), N_ALTER_LATER),
    (Op.OPTIMIZE, Op.UPGRADE_PROTOCOL, CONCURRENT_APPEND, CONCURRENT_APPEND, src(S004_UPGRADE, REORG_UPGRADE, CC_ADDED), N_UPGRADE_LATER),
    # earlier: ALTER TABLE (metadata change): every later write fails
    (Op.ALTER_METADATA, Op.INSERT_INTO, METADATA_CHANGED, METADATA_CHANGED, src(S004_META, CC_META), ""),
    (Op.ALTER_METADATA, Op.INSERT_OVERWRITE, METADATA_CHANGED, METADATA_CHANGED, src(S004_META, CC_META), ""),
    (Op.ALTER_METADATA, Op.TRUNCATE, METADATA_CHANGED, METADATA_CHANGED, src(S004_META, CC_META), ""),
    (Op.ALTER_METADATA, Op.UPDATE, METADATA_CHANGED, METADATA_CHANGED, src(S004_META, CC_META), ""),
    (Op.ALTER_METADATA, Op.DELETE, METADATA_CHANGED, METADATA_CHANGED, src(S004_META, CC_META), ""),
    (Op.ALTER_METADATA, Op.MERGE, METADATA_CHANGED, METADATA_CHANGED, src(S004_META, CC_META), ""),
    (Op.ALTER_METADATA, Op.OPTIMIZE, METADATA_CHANGED, METADATA_CHANGED, src(S004_META, CC_META), ""),
    (Op.ALTER_METADATA, Op.ALTER_METADATA, METADATA_CHANGED, METADATA_CHANGED, src(S004_META, CC_META), ""),
    (Op.ALTER_METADATA, Op.UPGRADE_PROTOCOL, METADATA_CHANGED, METADATA_CHANGED, src(S004_META, S004_UPGRADE, CC_META), ""),
    # earlier: REORG ... APPLY (UPGRADE ...) (a protocol change): every later write fails
    (Op.UPGRADE_PROTOCOL, Op.INSERT_INTO, PROTOCOL_CHANGED, PROTOCOL_CHANGED, src(S004_UPGRADE, CC_PROTOCOL, M_UPGRADE_METADATA), N_UPGRADE_FIRST),
    (Op.UPGRADE_PROTOCOL, Op.INSERT_OVERWRITE, PROTOCOL_CHANGED, PROTOCOL_CHANGED, src(S004_UPGRADE, CC_PROTOCOL, M_UPGRADE_METADATA), N_UPGRADE_FIRST),
    (Op.UPGRADE_PROTOCOL, Op.TRUNCATE, PROTOCOL_CHANGED, PROTOCOL_CHANGED, src(S004_UPGRADE, CC_PROTOCOL, M_UPGRADE_METADATA), N_UPGRADE_FIRST),
    (Op.UPGRADE_PROTOCOL, Op.UPDATE, PROTOCOL_CHANGED, PROTOCOL_CHANGED, src(S004_UPGRADE, CC_PROTOCOL, M_UPGRADE_METADATA), N_UPGRADE_FIRST),
    (Op.UPGRADE_PROTOCOL, Op.DELETE, PROTOCOL_CHANGED, PROTOCOL_CHANGED, src(S004_UPGRADE, CC_PROTOCOL, M_UPGRADE_METADATA), N_UPGRADE_FIRST),
    (Op.UPGRADE_PROTOCOL, Op.MERGE, PROTOCOL_CHANGED, PROTOCOL_CHANGED, src(S004_UPGRADE, CC_PROTOCOL, M_UPGRADE_METADATA), N_UPGRADE_FIRST),
    (Op.UPGRADE_PROTOCOL, Op.OPTIMIZE, PROTOCOL_CHANGED, PROTOCOL_CHANGED, src(S004_UPGRADE, CC_PROTOCOL, M_UPGRADE_METADATA), N_UPGRADE_FIRST),
    (Op.UPGRADE_PROTOCOL, Op.ALTER_METADATA, PROTOCOL_CHANGED, PROTOCOL_CHANGED, src(S004_UPGRADE, CC_PROTOCOL, M_UPGRADE_METADATA), N_UPGRADE_FIRST),
    (Op.UPGRADE_PROTOCOL, Op.UPGRADE_PROTOCOL, PROTOCOL_CHANGED, PROTOCOL_CHANGED, src(S004_UPGRADE, CC_PROTOCOL), N_UPGRADE_FIRST),
)

def cells_for(level: IsolationLevel) -> tuple[Cell, ...]:
    """The profile's cells: ``DELTA_MATRIX`` read at one isolation level's column."""
    if level is IsolationLevel.SNAPSHOT_ISOLATION:
        raise ValueError("SnapshotIsolation is not a table isolation level; it has no matrix")
    return tuple(cell_at(level, row) for row in DELTA_MATRIX)


def cell_at(level: IsolationLevel, row: MatrixRow, source: str | None = None, note: str | None = None) -> Cell:
    """One ``DELTA_MATRIX`` row read at ``level``'s column (``source`` / ``note``: another
    citation for the same outcome, as the row-level-concurrency exceptions give)."""
    earlier, later, serializable, write_serializable, row_source, row_note = row
    outcome = serializable if level is IsolationLevel.SERIALIZABLE else write_serializable
    also = ALSO_RAISES.get((earlier, later), ())
    return Cell(
        earlier=earlier,
        later=later,
        later_fails=outcome.exception is not None,
        exception=outcome.exception,
        effect=outcome.effect,
        source=row_source if source is None else source,
        note=row_note if note is None else note,
        also_raises=also,
    )


#: The kinds a cell's later job really raises besides its ``exception`` (see M_UPGRADE_METADATA).
ALSO_RAISES: dict[tuple[Operation, Operation], tuple[ConflictKind, ...]] = {
    (Op.UPGRADE_PROTOCOL, later): (ConflictKind.METADATA_CHANGED,)
    for later in DELTA_OPERATIONS
    if later is not Op.UPGRADE_PROTOCOL
}


# --------------------------------------------------------------------------------------------
# VACUUM (issue 36), measured on delta-spark 3.3.3
# --------------------------------------------------------------------------------------------

# delta-spark's VACUUM (VacuumCommand.gc) lists every file under the table's root and deletes the
# ones its snapshot does not name that are older than the retention: files removed by earlier
# versions, and untracked files (a running writer's files not committed yet among them). Its log
# records are two empty commits (VACUUM START and VACUUM END, commitInfo only), each on a
# transaction it starts at the latest version right before committing it (logVacuumStart /
# logVacuumEnd: deltaLog.startTransaction(), then commit(Seq(), ...)): nothing it commits fails a
# job beside it, and no commit made while it lists can fail it. The harm is in the files, not the
# log: beside a job that reads or writes data files the cells say ``Effect.DELETES_FILES_IN_USE``
# and admission keeps the two apart (tests/engines/test_maintenance_delta_spark.py reproduces the
# failure and its prevention). Unlike delta-rs (core/profiles/deltars.py), a VACUUM after a data
# removal or a metadata change commits: it has no older snapshot to be validated against.
S_SPARK_VACUUM = (
    "delta-io/delta VacuumCommand.scala (3.3): logVacuumStart / logVacuumEnd commit no action on a transaction "
    "started at the latest version; gc deletes every file its snapshot does not name that is older than the "
    "retention (removed or untracked)"
)
M_SPARK_VACUUM = (
    "measured: delta-spark 3.3.3, the conformance runner's VACUUM pairs on a WriteSerializable partitioned "
    "table with deletion vectors and a Serializable unpartitioned one without (docs/conformance/delta-spark.md)"
)
S_SPARK_VACUUM_ALL = src(S_SPARK_VACUUM, M_SPARK_VACUUM)
IN_USE = Outcome(None, Effect.DELETES_FILES_IN_USE)
N_SPARK_VACUUM_IN_USE = (
    "both commit (VACUUM's commits hold no add or remove, and its START transaction starts at the latest "
    "version); but under a retention shorter than the other job's run VACUUM deletes what that job still "
    "needs: files an OPTIMIZE or a rewrite removed while the job was reading them (it fails with "
    "SparkFileNotFoundException, not a conflict: never retried; tests/engines/test_maintenance_delta_spark.py) "
    "and, as it deletes every untracked file older than the retention, a running writer's files not yet "
    "committed (measured: on a table without partitions an INSERT that had opened its file before a VACUUM "
    "RETAIN 0 HOURS failed with TASK_WRITE_FAILED)"
)
N_SPARK_VACUUM_NO_FILES = (
    "both commit: an ALTER reads and writes no data file, and two VACUUMs delete the same unreferenced files"
)
_SPARK_VACUUM_PEERS = (
    Op.INSERT_INTO, Op.INSERT_OVERWRITE, Op.TRUNCATE, Op.UPDATE, Op.DELETE, Op.MERGE, Op.OPTIMIZE,
    Op.UPGRADE_PROTOCOL,  # REORG ... APPLY (UPGRADE) rewrites the files lacking the feature
)
#: VACUUM's rows, in ``DELTA_MATRIX``'s shape (the same outcome at both isolation levels, measured).
VACUUM_MATRIX: tuple[MatrixRow, ...] = (
    *((peer, Op.VACUUM, IN_USE, IN_USE, S_SPARK_VACUUM_ALL, N_SPARK_VACUUM_IN_USE) for peer in _SPARK_VACUUM_PEERS),
    (Op.ALTER_METADATA, Op.VACUUM, OK_APPLIED, OK_APPLIED, S_SPARK_VACUUM_ALL, N_SPARK_VACUUM_NO_FILES),
    *((Op.VACUUM, peer, IN_USE, IN_USE, S_SPARK_VACUUM_ALL, N_SPARK_VACUUM_IN_USE) for peer in _SPARK_VACUUM_PEERS),
    (Op.VACUUM, Op.ALTER_METADATA, OK_APPLIED, OK_APPLIED, S_SPARK_VACUUM_ALL, N_SPARK_VACUUM_NO_FILES),
    (Op.VACUUM, Op.VACUUM, OK_APPLIED, OK_APPLIED, S_SPARK_VACUUM_ALL, N_SPARK_VACUUM_NO_FILES),
)
#: VACUUM lists and deletes in every partition: its footprint is the whole table.
VACUUM_READS_WHOLE_TABLE_SOURCE = (
    "delta-io/delta VacuumCommand.scala: gc lists every file under the table's root, whatever partition "
    "(VACUUM of a partition is refused: 'Vacuuming specific partitions is currently not supported')"
)


def profile_cells(level: IsolationLevel) -> tuple[Cell, ...]:
    """A delta-spark profile's cells: ``DELTA_MATRIX`` and ``VACUUM_MATRIX`` at one level."""
    return (*cells_for(level), *(cell_at(level, row) for row in VACUUM_MATRIX))


DELTA_SOURCES = (
    "shared/specs/003_27084d7666c983fb.txt",
    "shared/specs/004_d2e63394a8cb21c3.txt",
    "delta-io/delta spark/src/main/scala/org/apache/spark/sql/delta/ConflictChecker.scala",
    "delta-io/delta spark/src/main/scala/org/apache/spark/sql/delta/OptimisticTransaction.scala",
    "delta-io/delta-rs crates/core/src/kernel/transaction/conflict_checker.rs",
)

# Kinds a Delta writer raises beyond the matrix: delete-delete (files removed without being
# read), protocol upgrades, duplicated txnAppIds, the generic ConcurrentWriteException and the
# commit retry budget (maxCommitRetriesExceeded).
DELTA_EXTRA_KINDS = (
    ConflictKind.CONCURRENT_DELETE_DELETE,
    ConflictKind.PROTOCOL_CHANGED,
    ConflictKind.CONCURRENT_TRANSACTION,
    ConflictKind.CONCURRENT_WRITE,
    ConflictKind.COMMIT_RETRIES_EXHAUSTED,
)

DELTA_SERIALIZABLE = Profile(
    name="delta-serializable",
    title="Delta Lake, Serializable isolation",
    table_format="delta",
    isolation="Serializable (delta.isolationLevel = 'Serializable'); OPTIMIZE downgrades to SnapshotIsolation",
    rules=RuleKind.FOOTPRINT,
    overwrite_scope=OverwriteScope.FILES_READ,
    sources=DELTA_SOURCES,
    cells=profile_cells(IsolationLevel.SERIALIZABLE),
    description=(
        "Any file added to a partition a job read fails it (ConcurrentAppend), blind appends included; "
        "removing a file a job read fails it (ConcurrentDeleteRead); a metadata change fails every "
        "concurrent writer. Blind appends and OPTIMIZE never fail because of appends."
    ),
    extra_kinds=DELTA_EXTRA_KINDS,
    reads_whole_table=(Op.VACUUM,),
    reads_whole_table_source=VACUUM_READS_WHOLE_TABLE_SOURCE,
    validator=ConflictChecker(IsolationLevel.SERIALIZABLE),
)

DELTA_WRITE_SERIALIZABLE = Profile(
    name="delta-write-serializable",
    title="Delta Lake, WriteSerializable isolation (the default)",
    table_format="delta",
    isolation="WriteSerializable (Delta's default); OPTIMIZE downgrades to SnapshotIsolation",
    rules=RuleKind.FOOTPRINT,
    overwrite_scope=OverwriteScope.FILES_READ,
    sources=DELTA_SOURCES,
    cells=profile_cells(IsolationLevel.WRITE_SERIALIZABLE),
    description=(
        "As Serializable, except that files added by blind appends do not fail a job that read their "
        "partition (unless that job changes metadata): the appended rows survive a concurrent "
        "overwrite, update, delete or merge of the files it read."
    ),
    extra_kinds=DELTA_EXTRA_KINDS,
    reads_whole_table=(Op.VACUUM,),
    reads_whole_table_source=VACUUM_READS_WHOLE_TABLE_SOURCE,
    validator=ConflictChecker(IsolationLevel.WRITE_SERIALIZABLE),
)

PROFILES: tuple[Profile, ...] = (DELTA_SERIALIZABLE, DELTA_WRITE_SERIALIZABLE)
