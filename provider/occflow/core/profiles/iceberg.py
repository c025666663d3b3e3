"""Apache Iceberg profiles: Spark 3.5 writes on Iceberg 1.10 at each row-level isolation level.

``iceberg-serializable`` and ``iceberg-snapshot`` are the two values of Iceberg's
``write.delete.isolation-level`` / ``write.update.isolation-level`` /
``write.merge.isolation-level`` table properties (default ``serializable``; Iceberg's
``IsolationLevel`` javadoc: serializable fails an UPDATE/DELETE/MERGE when a concurrent commit
adds a file that may hold rows matching its condition, snapshot lets it commit).

How each operation commits from Spark, read from the Iceberg 1.10 source and checked against the
bytecode of ``iceberg-spark-runtime-3.5_2.12-1.10.2.jar``:

- ``insert_into``: ``SparkWrite.BatchAppend`` -> ``MergeAppend`` (``AppendFiles``); no
  ``validate()``. Snapshot operation ``append``.
- ``insert_overwrite``: ``SparkWrite.DynamicOverwrite`` -> ``BaseReplacePartitions``, which drops
  the partitions of its new files *at commit*. It validates only when the ``isolation-level``
  *write option* is set (``SparkWriteConf.isolationLevel()`` reads no table property), which SQL
  ``INSERT OVERWRITE`` cannot set, so by default it never fails. Snapshot operation ``overwrite``.
  A DataFrame write that sets it is what ``iceberg-{serializable,snapshot}-validated`` describe
  (the end of this module).
- ``truncate`` (``DELETE FROM t WHERE <whole partitions>``, ``TRUNCATE TABLE``): Spark's
  metadata-only delete, ``SparkTable.deleteWhere`` -> ``StreamingDelete.deleteFromRowFilter``;
  no validation, deletes whatever matches the filter at commit. Snapshot operation ``delete``.
- ``update`` / ``delete`` / ``merge``: copy-on-write (the default ``write.*.mode``),
  ``SparkWrite.CopyOnWriteOperation`` -> ``BaseOverwriteFiles`` deleting the files its scan read,
  with the scan's filter as ``conflictDetectionFilter``. SERIALIZABLE calls
  ``validateNoConflictingData()`` and ``validateNoConflictingDeletes()``, SNAPSHOT only the latter;
  both set ``failMissingDeletePaths()``. It deletes files, not a row filter, so ``rowFilter()`` is
  ``alwaysFalse`` and ``BaseOverwriteFiles.validate`` skips ``validateDeletedDataFiles``: a file it
  read that a newer commit removed fails in ``ManifestFilterManager`` ("Missing required files to
  delete"). Snapshot operation ``overwrite`` (``delete`` when it adds no file).
- ``optimize``: ``rewrite_data_files`` -> ``BaseRewriteFiles``: ``failMissingDeletePaths()`` and
  ``validateNoNewDeletesForDataFiles``; snapshot operation ``replace``. The Spark action rethrows
  a failure as ``RuntimeException("Cannot commit rewrite because of a ValidationException ...")``
  with the ``ValidationException`` as cause.
- ``alter_metadata``: ``SparkCatalog.alterTable`` commits an ``UpdateSchema`` /
  ``UpdateProperties`` through a table ``Transaction``, which refreshes and replays on
  ``CommitFailedException``; it writes no snapshot and data commits do not check the schema.

- ``expire_snapshots``, ``remove_orphan_files``, ``rewrite_manifests``,
  ``rewrite_position_deletes`` (table maintenance, the procedures of the same names): the first
  commits ``RemoveSnapshots`` (no snapshot), the second commits nothing (it deletes files no metadata
  of its table object references), the third a ``RewriteManifests`` ('replace': fails when a manifest
  it replaces is gone, ``validateDeletedManifests``), the last a ``RewriteFiles`` of delete files
  ('replace', ``failMissingDeletePaths``). Their cells are measured pair by pair (the conformance
  runner); the harm beside a running job is in files no commit names (``deletes_files_in_use``).

``MergingSnapshotProducer.validateAddedDataFiles`` looks only at newer ``append`` and
``overwrite`` snapshots, so a compaction (``replace``) is never new data; the missing-files check
looks at the live manifests, whatever removed the file.
Any other failure to swap the metadata pointer is a ``CommitFailedException`` that
``SnapshotProducer.commit`` retries (``commit.retry.num-retries``, default 4) on the refreshed
table, re-running ``validate()``; a ``CommitStateUnknownException`` is never retried. Both stay
outside the matrix (``extra_kinds``).

Merge-on-read (``write.*.mode=merge-on-read``, ``SparkPositionDeltaWrite`` -> ``BaseRowDelta``) is
not modelled: the footprint has no delete files. Its differences are in the cells' notes.

Twenty-five cells were run on real Spark 3.5.9 + Iceberg 1.10.2 (``SPARK_CHECKED``); the rest is read
from the source. The cells assume each job in its own SparkSession. Two jobs sharing one (and so
one cached catalog table) make a copy-on-write job fail before commit with
``IllegalStateException: Runtime file filtering is not possible: the table has been concurrently
modified``: ``RUNTIME_FILTERING`` (the end of the matrix section) says which pairs, and is avoided by
giving each job its own session (``spark.newSession()``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..errors import UnknownOperationError
from ..footprint import FileRef, Footprint, Validator
from ..kinds import ConflictKind
from ..operations import Operation as Op
from .model import Cell, Effect, OverwriteScope, Profile, RuleKind


class IsolationLevel(str, enum.Enum):
    """``org.apache.iceberg.IsolationLevel``, as set by ``write.<command>.isolation-level``."""

    SERIALIZABLE = "serializable"
    SNAPSHOT = "snapshot"


class CommitApi(str, enum.Enum):
    """The Iceberg table operation a Spark job commits through."""

    APPEND_FILES = "AppendFiles"
    REPLACE_PARTITIONS = "ReplacePartitions"
    DELETE_FILES = "DeleteFiles.deleteFromRowFilter"
    OVERWRITE_FILES = "OverwriteFiles (copy-on-write)"
    REWRITE_FILES = "RewriteFiles"
    TABLE_METADATA = "Transaction (UpdateSchema / UpdateProperties)"
    EXPIRE_SNAPSHOTS = "ExpireSnapshots (RemoveSnapshots)"
    # DeleteOrphanFilesSparkAction deletes files and commits nothing to the table.
    DELETE_ORPHAN_FILES = "DeleteOrphanFiles (no commit)"
    REWRITE_MANIFESTS = "RewriteManifests"
    REWRITE_DELETE_FILES = "RewriteFiles (position delete files)"


#: How Spark 3.5 commits each canonical operation on an Iceberg table (module docstring).
COMMIT_API: dict[Op, CommitApi] = {
    Op.INSERT_INTO: CommitApi.APPEND_FILES,
    Op.INSERT_OVERWRITE: CommitApi.REPLACE_PARTITIONS,
    Op.TRUNCATE: CommitApi.DELETE_FILES,
    Op.UPDATE: CommitApi.OVERWRITE_FILES,
    Op.DELETE: CommitApi.OVERWRITE_FILES,
    Op.MERGE: CommitApi.OVERWRITE_FILES,
    Op.OPTIMIZE: CommitApi.REWRITE_FILES,
    Op.ALTER_METADATA: CommitApi.TABLE_METADATA,
    Op.EXPIRE_SNAPSHOTS: CommitApi.EXPIRE_SNAPSHOTS,
    Op.REMOVE_ORPHAN_FILES: CommitApi.DELETE_ORPHAN_FILES,
    Op.REWRITE_MANIFESTS: CommitApi.REWRITE_MANIFESTS,
    Op.REWRITE_POSITION_DELETES: CommitApi.REWRITE_DELETE_FILES,
}

# Iceberg's DataOperations: the ``operation`` a snapshot records.
APPEND, OVERWRITE, DELETE, REPLACE = "append", "overwrite", "delete", "replace"


# The snapshot operation each commit path records (``SnapshotProducer.operation()``); a metadata
# transaction writes no snapshot. OverwriteFiles decides by what it adds and removes.
_SNAPSHOT_OPERATION: dict[CommitApi, str | None] = {
    CommitApi.APPEND_FILES: APPEND,
    CommitApi.REPLACE_PARTITIONS: OVERWRITE,
    CommitApi.DELETE_FILES: DELETE,
    CommitApi.REWRITE_FILES: REPLACE,
    CommitApi.TABLE_METADATA: None,
    CommitApi.EXPIRE_SNAPSHOTS: None,
    CommitApi.DELETE_ORPHAN_FILES: None,
    CommitApi.REWRITE_MANIFESTS: REPLACE,
    CommitApi.REWRITE_DELETE_FILES: REPLACE,
}


def snapshot_operation(footprint: Footprint) -> str | None:
    """The operation of the snapshot a commit writes; ``None``: it writes no snapshot."""
    api = _api(footprint)
    if api is not CommitApi.OVERWRITE_FILES:
        return _SNAPSHOT_OPERATION[api]
    # BaseOverwriteFiles.operation()
    if footprint.files_removed and not footprint.files_added:
        return DELETE
    if footprint.files_added and not footprint.files_removed:
        return APPEND
    return OVERWRITE


class Looks(str, enum.Enum):
    """Which files of a newer snapshot a check inspects."""

    ADDED_IN_SCOPE = "added"  # data files it added within the committing job's filter
    REMOVED_OF_MINE = "mine"  # data files it removed that the committing job also removes
    REMOVED_IN_SCOPE = "removed"  # data files it removed within the committing job's filter
    # the manifests the committing job replaces: a newer snapshot that removed a data file (in any
    # partition: a manifest holds many) rewrote the manifest holding it, and one that rewrote
    # manifests itself (``MANIFEST_REWRITERS``) replaced them all
    MANIFESTS_REPLACED = "manifests"
    # the position delete files the committing job rewrites: a newer commit that dropped whole
    # partitions (``DROPS_DELETE_FILES``) removed their delete files with their data files, and
    # one that rewrote delete files itself replaced them
    DELETE_FILES_REMOVED = "deletes"


def conflict_scope(footprint: Footprint) -> frozenset[str] | None:
    """The partitions a check compares with (``None``: the whole table): ReplacePartitions'
    replaced partitions (the ones it writes), otherwise the scan's filter."""
    if COMMIT_API.get(footprint.operation) is CommitApi.REPLACE_PARTITIONS:
        return footprint.write_partitions
    return footprint.read_partitions


@dataclass(frozen=True)
class Check:
    """One Iceberg commit validation: where it lives, what it says, what it inspects."""

    method: str
    message: str
    looks: Looks
    snapshot_operations: frozenset[str] | None  # newer snapshots it considers; None: all

    def finds(self, current: Footprint, winner: Footprint) -> tuple[FileRef, ...]:
        """The winner's files that make ``current`` fail this check (empty: it passes)."""
        operation = snapshot_operation(winner)
        if operation is None:
            return ()
        if self.snapshot_operations is not None and operation not in self.snapshot_operations:
            return ()
        if self.looks is Looks.MANIFESTS_REPLACED:
            if COMMIT_API.get(winner.operation) in MANIFEST_REWRITERS:
                return (FileRef(f"<every manifest, rewritten by {winner.operation.value}>"),)
            return tuple(sorted(winner.files_removed - winner.files_added))
        if self.looks is Looks.DELETE_FILES_REMOVED:
            api = COMMIT_API.get(winner.operation)
            if api is CommitApi.REWRITE_DELETE_FILES:
                return (FileRef(f"<the delete files, rewritten by {winner.operation.value}>"),)
            return tuple(sorted(winner.files_removed)) if api in DROPS_DELETE_FILES else ()
        if self.looks is Looks.REMOVED_OF_MINE:
            # Liveness, not removal: a winner that rewrote a file into itself left it live.
            return tuple(sorted((winner.files_removed - winner.files_added) & current.files_removed))
        # The conflict detection filter: its partitions, or the whole table.
        scope = conflict_scope(current)
        pool = winner.files_added if self.looks is Looks.ADDED_IN_SCOPE else winner.files_removed
        return tuple(sorted(f for f in pool if scope is None or f.partition in scope))

    def reason(self, current: Footprint, files: tuple[FileRef, ...]) -> str:
        scope = conflict_scope(current)
        where = "true (whole table)" if scope is None else ", ".join(sorted(scope)) or "''"
        paths = ", ".join(f.path for f in files)
        return f"{self.method}: {self.message.format(filter=where)}: [{paths}]"


ADDED_DATA_FILES = Check(
    method="MergingSnapshotProducer.validateAddedDataFiles",
    message="Found conflicting files that can contain records matching {filter}",
    looks=Looks.ADDED_IN_SCOPE,
    snapshot_operations=frozenset({APPEND, OVERWRITE}),
)
MISSING_FILES_TO_DELETE = Check(
    method="ManifestFilterManager.filterManifests (failMissingDeletePaths)",
    message="Missing required files to delete",
    looks=Looks.REMOVED_OF_MINE,
    snapshot_operations=None,
)
# A DELETED manifest entry, not liveness: a file rewritten into itself still counts.
DELETED_DATA_FILES = Check(
    method="MergingSnapshotProducer.validateDeletedDataFiles",
    message="Found conflicting deleted files that can contain records matching {filter}",
    looks=Looks.REMOVED_IN_SCOPE,
    snapshot_operations=frozenset({OVERWRITE, REPLACE, DELETE}),
)

#: BaseRewriteManifests.apply -> validateDeletedManifests (iceberg 1.10.2 core, lines 171-174 and
#: 290-297): every manifest the rewrite replaces must still be in the refreshed current snapshot.
DELETED_MANIFESTS = Check(
    method="BaseRewriteManifests.validateDeletedManifests",
    message="Deleted manifest <manifest> could not be found in the latest snapshot",
    looks=Looks.MANIFESTS_REPLACED,
    snapshot_operations=None,
)
#: RewritePositionDeletesCommitManager.commit (iceberg 1.10.2 core, lines 65-80) -> BaseRewriteFiles
#: (failMissingDeletePaths, lines 27-35): every delete file it rewrites must still be live. Spark
#: rethrows it inside "Cannot commit rewrite because of a ValidationException ..." (seen in the runs).
MISSING_DELETE_FILES = Check(
    method="ManifestFilterManager.filterManifests -> validateRequiredDeletes (lines 228, 278; delete manifests)",
    message="Missing required files to delete",
    looks=Looks.DELETE_FILES_REMOVED,
    snapshot_operations=None,
)
#: The commit paths that drop a partition's delete files with its data files: ReplacePartitions
#: (dropPartition) and a metadata-only delete (deleteByRowFilter), both over the data and the
#: delete manifests. A copy-on-write UPDATE / DELETE / MERGE or a rewrite_data_files leaves the
#: position delete files of the data files it removed in place (measured: the rewrite commits).
DROPS_DELETE_FILES = frozenset({CommitApi.REPLACE_PARTITIONS, CommitApi.DELETE_FILES})
#: The commit path that replaces every data manifest without removing a data file. A rewrite of
#: delete files replaces a delete manifest, which a table with one of them does not have rewritten
#: (measured: a rewrite_manifests after a rewrite_position_delete_files commits).
MANIFEST_REWRITERS = frozenset({CommitApi.REWRITE_MANIFESTS})

# What each commit path validates, in Iceberg's order (validate() first, then apply()'s manifest
# filter). MergingSnapshotProducer.validateNoNewDeletesForDataFiles is left out: copy-on-write
# writers add no delete files, and Footprint has none to compare.
_COPY_ON_WRITE_SERIALIZABLE = (ADDED_DATA_FILES, MISSING_FILES_TO_DELETE)
_COPY_ON_WRITE_SNAPSHOT = (MISSING_FILES_TO_DELETE,)
VALIDATIONS: dict[tuple[CommitApi, IsolationLevel], tuple[Check, ...]] = {
    (CommitApi.OVERWRITE_FILES, IsolationLevel.SERIALIZABLE): _COPY_ON_WRITE_SERIALIZABLE,
    (CommitApi.OVERWRITE_FILES, IsolationLevel.SNAPSHOT): _COPY_ON_WRITE_SNAPSHOT,
    # BaseRewriteFiles sets failMissingDeletePaths() in its constructor, at every level.
    (CommitApi.REWRITE_FILES, IsolationLevel.SERIALIZABLE): (MISSING_FILES_TO_DELETE,),
    (CommitApi.REWRITE_FILES, IsolationLevel.SNAPSHOT): (MISSING_FILES_TO_DELETE,),
    (CommitApi.REWRITE_MANIFESTS, IsolationLevel.SERIALIZABLE): (DELETED_MANIFESTS,),
    (CommitApi.REWRITE_MANIFESTS, IsolationLevel.SNAPSHOT): (DELETED_MANIFESTS,),
    (CommitApi.REWRITE_DELETE_FILES, IsolationLevel.SERIALIZABLE): (MISSING_DELETE_FILES,),
    (CommitApi.REWRITE_DELETE_FILES, IsolationLevel.SNAPSHOT): (MISSING_DELETE_FILES,),
    # No validation: appends, SQL overwrites (no isolation-level write option), metadata deletes
    # by filter and metadata transactions never fail validation.
}
#: A DataFrame overwrite written with the ``isolation-level`` write option (SparkWrite
#: DynamicOverwrite / OverwriteByFilter): validateNoConflictingData at serializable, and
#: validateNoConflictingDeletes at both (validateNoNewDeleteFiles: no delete files modelled).
OVERWRITE_OPTION_VALIDATIONS: dict[IsolationLevel, tuple[Check, ...]] = {
    IsolationLevel.SERIALIZABLE: (ADDED_DATA_FILES, DELETED_DATA_FILES),
    IsolationLevel.SNAPSHOT: (DELETED_DATA_FILES,),
}


def _api(footprint: Footprint) -> CommitApi:
    try:
        return COMMIT_API[footprint.operation]
    except KeyError:
        known = ", ".join(op.value for op in COMMIT_API)
        raise UnknownOperationError(
            f"operation {footprint.operation.value!r} has no Iceberg commit path; the Iceberg "
            f"profiles know: {known}"
        ) from None


def iceberg_validator(level: IsolationLevel, *, overwrite_option: bool = False) -> Validator:
    """The port of Iceberg's commit validations for Spark writes at ``level``; with
    ``overwrite_option`` an INSERT OVERWRITE is written with ``isolation-level=<level>``."""

    def validate(current: Footprint, winner: Footprint) -> tuple[ConflictKind, str] | None:
        _api(winner)  # an operation Iceberg cannot commit is an error, whichever side it is on
        api = _api(current)
        if overwrite_option and api is CommitApi.REPLACE_PARTITIONS:
            checks = OVERWRITE_OPTION_VALIDATIONS[level]
        else:
            checks = VALIDATIONS.get((api, level), ())
        for check in checks:
            files = check.finds(current, winner)
            if files:
                return ConflictKind.VALIDATION_CONFLICT, check.reason(current, files)
        return None

    suffix = "_validated" if overwrite_option else ""
    validate.__name__ = f"iceberg_{level.value}{suffix}_validator"
    return validate


# ---- the matrix -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What happens to the later job at one isolation level; a failure names Iceberg's check."""

    effect: Effect
    check: Check | None = None

    def __post_init__(self) -> None:
        if (self.effect is Effect.LATER_FAILS) != (self.check is not None):
            raise ValueError("a failing outcome names its check, a succeeding one none")


FAILS_ADDED = Outcome(Effect.LATER_FAILS, ADDED_DATA_FILES)
FAILS_MISSING = Outcome(Effect.LATER_FAILS, MISSING_FILES_TO_DELETE)
FAILS_DELETED = Outcome(Effect.LATER_FAILS, DELETED_DATA_FILES)
FAILS_MANIFESTS = Outcome(Effect.LATER_FAILS, DELETED_MANIFESTS)
FAILS_DELETE_FILES = Outcome(Effect.LATER_FAILS, MISSING_DELETE_FILES)
APPENDS = Outcome(Effect.APPEND)
OVERWRITES = Outcome(Effect.OVERWRITE)
APPLIES = Outcome(Effect.APPLIED)
COMPACTS = Outcome(Effect.COMPACTION_COMPLETES)

# The later job's commit path (Iceberg 1.10, spark/v3.5): cited by every cell of its column.
_BY_LATER = {
    Op.INSERT_INTO: "SparkWrite.BatchAppend -> MergeAppend (AppendFiles): no validate()",
    Op.INSERT_OVERWRITE: (
        "SparkWrite.DynamicOverwrite -> BaseReplacePartitions: drops the partition at commit; "
        "validates only with the isolation-level write option (SparkWriteConf.isolationLevel)"
    ),
    Op.TRUNCATE: (
        "SparkTable.deleteWhere -> StreamingDelete.deleteFromRowFilter: no validation, deletes "
        "by filter at commit"
    ),
    Op.UPDATE: "SparkWrite.CopyOnWriteOperation.commitWith{Serializable,Snapshot}Isolation -> BaseOverwriteFiles.validate",
    Op.DELETE: "SparkWrite.CopyOnWriteOperation.commitWith{Serializable,Snapshot}Isolation -> BaseOverwriteFiles.validate",
    Op.MERGE: "SparkWrite.CopyOnWriteOperation.commitWith{Serializable,Snapshot}Isolation -> BaseOverwriteFiles.validate",
    Op.OPTIMIZE: "RewriteDataFilesSparkAction -> BaseRewriteFiles (failMissingDeletePaths)",
    Op.ALTER_METADATA: "SparkCatalog.alterTable -> BaseTransaction.commitTransaction (retries, no data validation)",
    Op.EXPIRE_SNAPSHOTS: (
        "SparkProcedures expire_snapshots -> RemoveSnapshots.commit: refreshes and re-applies on "
        "retry, no data validation"
    ),
    Op.REMOVE_ORPHAN_FILES: (
        "SparkProcedures remove_orphan_files -> DeleteOrphanFilesSparkAction: lists the table location, "
        "deletes files older than older_than that no metadata of its table object references; no commit"
    ),
    Op.REWRITE_MANIFESTS: (
        "SparkProcedures rewrite_manifests -> RewriteManifestsSparkAction.replaceManifests -> "
        "BaseRewriteManifests.apply (validateDeletedManifests)"
    ),
    Op.REWRITE_POSITION_DELETES: (
        "SparkProcedures rewrite_position_delete_files -> RewritePositionDeleteFilesSparkAction -> "
        "RewritePositionDeletesCommitManager.commit -> BaseRewriteFiles of delete files (failMissingDeletePaths)"
    ),
}
# The earlier job's snapshot, which is what the later job's checks inspect.
_BY_EARLIER = {
    Op.INSERT_INTO: "earlier: 'append' snapshot adding a file",
    Op.INSERT_OVERWRITE: "earlier: 'overwrite' snapshot (ReplacePartitions) removing F, adding a file",
    Op.TRUNCATE: "earlier: 'delete' snapshot (StreamingDelete) removing F",
    Op.UPDATE: "earlier: 'overwrite' snapshot (copy-on-write) removing F, adding a file",
    Op.DELETE: "earlier: 'overwrite' snapshot (copy-on-write) removing F, adding a file",
    Op.MERGE: "earlier: 'overwrite' snapshot (copy-on-write) removing F, adding a file",
    Op.OPTIMIZE: "earlier: 'replace' snapshot (RewriteFiles) removing F, adding a file",
    Op.ALTER_METADATA: "earlier: new table metadata, no snapshot",
    Op.EXPIRE_SNAPSHOTS: (
        "earlier: expire_snapshots, new table metadata without the expired snapshots (and their "
        "files deleted), no snapshot"
    ),
    Op.REMOVE_ORPHAN_FILES: "earlier: remove_orphan_files, files deleted, no new metadata",
    Op.REWRITE_MANIFESTS: "earlier: 'replace' snapshot (RewriteManifests) replacing manifests, no data file",
    Op.REWRITE_POSITION_DELETES: "earlier: 'replace' snapshot (RewriteFiles) replacing a position delete file",
}

UNSURE = "UNSURE: "
_S, _N = IsolationLevel.SERIALIZABLE, IsolationLevel.SNAPSHOT

#: Cells run on real Spark 3.5.9 + Iceberg 1.10.2 while writing this matrix (one partition,
#: format v2, copy-on-write; the later job held by a slow UDF between its scan and its commit, each
#: job in its own SparkSession), all as the matrix says. The conformance suite runs them all.
SPARK_CHECKED: frozenset[tuple[IsolationLevel, Op, Op]] = frozenset(
    {
        (_S, Op.INSERT_INTO, Op.UPDATE),
        (_S, Op.TRUNCATE, Op.UPDATE),
        (_S, Op.ALTER_METADATA, Op.UPDATE),
        (_S, Op.UPDATE, Op.UPDATE),
        (_S, Op.INSERT_INTO, Op.DELETE),
        (_S, Op.INSERT_INTO, Op.MERGE),
        (_S, Op.INSERT_OVERWRITE, Op.MERGE),
        (_S, Op.INSERT_INTO, Op.INSERT_OVERWRITE),
        (_S, Op.UPDATE, Op.INSERT_OVERWRITE),
        (_S, Op.OPTIMIZE, Op.INSERT_OVERWRITE),
        (_N, Op.INSERT_INTO, Op.UPDATE),
        (_N, Op.OPTIMIZE, Op.UPDATE),
        (_N, Op.INSERT_INTO, Op.DELETE),
        (_N, Op.UPDATE, Op.DELETE),
        (_N, Op.TRUNCATE, Op.DELETE),
        (_N, Op.INSERT_INTO, Op.MERGE),
        (_N, Op.MERGE, Op.MERGE),
        (_N, Op.OPTIMIZE, Op.MERGE),
        (_N, Op.ALTER_METADATA, Op.MERGE),
        (_N, Op.TRUNCATE, Op.INSERT_OVERWRITE),
        (_S, Op.INSERT_INTO, Op.ALTER_METADATA),
        (_S, Op.TRUNCATE, Op.ALTER_METADATA),
        (_S, Op.UPDATE, Op.ALTER_METADATA),
        (_S, Op.OPTIMIZE, Op.ALTER_METADATA),
        (_S, Op.ALTER_METADATA, Op.ALTER_METADATA),
    }
)
#: The pairs with a maintenance operation, raced by the conformance runner at both levels.
SPARK_CHECKED = SPARK_CHECKED | {
    (level, a, b) for level in (_S, _N) for a in COMMIT_API for b in COMMIT_API if (a.is_maintenance or b.is_maintenance)
}
_NOTE_OVERWRITE = (
    "SQL INSERT OVERWRITE passes no isolation-level write option, so nothing is validated "
    "(checked on Spark after insert_into, update, truncate, optimize); a DataFrame writer with "
    "option('isolation-level', ...) would get validateAddedDataFiles (serializable) and "
    "validateDeletedDataFiles / validateNoNewDeleteFiles (both) on its partitions."
)
_NOTE_TRUNCATE = (
    UNSURE + "not run (a metadata-only delete cannot be held between plan and commit); read from "
    "StreamingDelete, which has nothing to validate. Holds while Spark plans the DELETE as metadata-only (OptimizeMetadataOnlyDeleteFromTable, "
    "SparkTable.canDeleteWhere: whole partitions); a row-level DELETE is the 'delete' column."
)
_NOTE_REWRITE = (
    UNSURE + "checked (all but delete/merge, which commit like update) with Iceberg 1.10.2's RewriteFiles "
    "driven as RewriteDataFilesSparkAction drives it (validateFromSnapshot, rewriteFiles with the "
    "starting sequence number) over py4j, not through the action, which SQL cannot hold between "
    "plan and commit; the action skips groups below min-input-files, so a tiny partition may "
    "rewrite nothing and not fail. Spark rethrows it as RuntimeException 'Cannot commit rewrite "
    "because of a ValidationException ...' (classify by the cause). Merge-on-read: after an earlier MoR update/delete/merge the "
    "rewrite fails in validateNoNewDeletesForDataFiles ('found new position delete for replaced "
    "data file') instead."
)
_NOTE_COW_AFTER_APPEND = (
    "Iceberg's IsolationLevel javadoc example: a concurrent file that may hold matching rows fails "
    "serializable and not snapshot; merge-on-read (BaseRowDelta) behaves the same."
)
_NOTE_COW = (
    "Copy-on-write deletes files, not a row filter, so validateDeletedDataFiles is skipped and "
    "removed inputs fail in the manifest filter. Merge-on-read (SparkPositionDeltaWrite -> "
    "BaseRowDelta) differs: after an earlier MoR row-level write it fails in "
    "validateNoConflictingDeleteFiles ('Found new conflicting delete files'); after a compaction "
    "or removal in validateDataFilesExist ('Cannot commit, missing data files')."
)
_NOTE_ALTER_EARLIER = (
    "No data commit checks the schema id; a schema change that breaks the later job's "
    "written files (e.g. a dropped required column) is not modelled."
)
_NOTE_ALTER_LATER = (
    "SQL ALTER (ADD COLUMN, SET TBLPROPERTIES) builds and commits its change in milliseconds, "
    "from refreshed metadata (checked from a session that had loaded the table before the earlier "
    "commit). Not so for API callers: an UpdateSchema built on a table Transaction before a "
    "concurrent commit is not replayed by BaseTransaction and fails with CommitFailedException "
    "'Table metadata refresh is required' (commit_failed); UpdateProperties is replayed."
)

IN_USE = Outcome(Effect.DELETES_FILES_IN_USE)
_READS_NO_FILE = (Op.INSERT_INTO, Op.INSERT_OVERWRITE, Op.TRUNCATE, Op.ALTER_METADATA)
_VALIDATES_FROM_SNAPSHOT = (Op.UPDATE, Op.DELETE, Op.MERGE, Op.OPTIMIZE)
_NOTE_EXPIRE_SAFE = (
    "Both commit (measured): the job reads no data file and validates from no snapshot, and "
    "expire_snapshots deletes only files no retained snapshot references."
)
_NOTE_EXPIRE_IN_USE = (
    "Both commit from one snapshot (measured); but an expire_snapshots that removes snapshots the "
    "job's validation walks (older_than below the job's run, retain_last too small) fails it with "
    "'Cannot determine history between starting snapshot ... and the last known ancestor ...' and "
    "deletes the files its scan reads (observed: tests/engines/test_maintenance_iceberg.py); "
    "admission keeps them apart."
)

_MAINTENANCE_REWRITES = (Op.REWRITE_MANIFESTS, Op.REWRITE_POSITION_DELETES)
# Measured on Spark 3.5.9 + Iceberg 1.10.2 at both levels (the conformance runner).
_REPLACES_MANIFESTS = (
    Op.INSERT_OVERWRITE, Op.TRUNCATE, Op.UPDATE, Op.DELETE, Op.MERGE, Op.OPTIMIZE, Op.REWRITE_MANIFESTS,
)
_KEEPS_MANIFESTS = (Op.INSERT_INTO, Op.ALTER_METADATA, Op.EXPIRE_SNAPSHOTS)
_REMOVES_DELETES = (Op.INSERT_OVERWRITE, Op.TRUNCATE, Op.REWRITE_POSITION_DELETES)
_KEEPS_DELETES = (Op.INSERT_INTO, Op.UPDATE, Op.DELETE, Op.MERGE, Op.OPTIMIZE, Op.ALTER_METADATA)
_OLD_NINE = (*_READS_NO_FILE, *_VALIDATES_FROM_SNAPSHOT, Op.EXPIRE_SNAPSHOTS)
_NOTE_ORPHANS = (
    "Both commit (measured: remove_orphan_files commits nothing, and the race's files are younger "
    "than its older_than). The harm is in files no commit names yet: a running job's data files, "
    "manifests, manifest list and metadata file are orphans until it commits, and "
    "DeleteOrphanFilesSparkAction.validFileIdentDS (iceberg 1.10.2, lines 282-286) takes the valid "
    "files from the metadata its table object holds, never refreshed: with an older_than later than "
    "the other job's first written file it deletes that job's files and the table loses data files "
    "or its current metadata (deletes_files_in_use). The procedure refuses an older_than under 24 "
    "hours (RemoveOrphanFilesProcedure.validateInterval, lines 213-215), the Action API does not, "
    "occflow refuses under 72 (RETENTION_FLOORS); admission keeps it apart from every commit."
)
_NOTE_ORPHANS_ALONE = (
    "Both run (measured): neither commits or writes a file; the second finds the orphans gone."
)
_NOTE_MANIFESTS_LATER = (
    "rewrite_manifests (RewriteManifestsSparkAction.replaceManifests, lines 399-418) plans on the "
    "manifests of its start snapshot (the data manifests, and the delete manifests when there are "
    "several); a newer commit that replaced one (a removed data file filters its manifest into a new "
    "one, in any partition) fails it at commit: it does not rebase. It walks no snapshot history."
)
_NOTE_MANIFESTS_AFTER_DELETES = (
    "Both commit (measured): the delete-file rewrite replaced the table's one delete manifest, which "
    "rewrite_manifests leaves as it is (a single manifest of a kind is not rewritten: "
    "RewriteManifestsSparkAction.rewriteManifests). On a table with several delete manifests, which it "
    "rewrites too, it would fail in validateDeletedManifests (a validation_conflict, retried): read "
    "from the source, not measured."
)
_NOTE_MANIFESTS_OK = (
    "Both commit (measured): the earlier commit left every manifest the rewrite replaces in place "
    "(an append adds a manifest, a metadata change or expire_snapshots keeps the current one)."
)
_NOTE_MANIFESTS_EARLIER = (
    "Both commit (measured): rewrite_manifests writes a 'replace' snapshot that removes and adds no "
    "data file (the entries move to new manifests as EXISTING), so no data validation finds anything."
)
_NOTE_DELETES_LATER = (
    "rewrite_position_delete_files (RewritePositionDeletesCommitManager.commit, lines 65-80) commits "
    "a RewriteFiles of delete files with validateFromSnapshot(start): BaseRewriteFiles sets "
    "failMissingDeletePaths (lines 27-35), so a delete file it rewrites that a newer commit removed "
    "fails it ('Missing required files to delete'); like any rewrite it is a ValidationException."
)
_NOTE_DELETES_EARLIER = (
    "Both commit (measured): rewrite_position_delete_files writes a 'replace' snapshot of delete "
    "files only; the data files the later job reads are untouched."
)
_NOTE_DELETES_EXPIRE = (
    "Both commit from one snapshot (measured); but the rewrite validates from the snapshot it planned "
    "on, so an expire_snapshots that removes that snapshot's successors fails it with 'Cannot "
    "determine history between starting snapshot ...' and deletes the files it reads, as for "
    "rewrite_data_files (tests/engines/test_maintenance_iceberg.py): admission keeps them apart."
)

# (earlier job, later job, serializable, snapshot, note) -- the 64 pairs on one partition p.
ICEBERG_MATRIX: tuple[tuple[Op, Op, Outcome, Outcome, str], ...] = (
    # later INSERT INTO: AppendFiles never validates.
    (Op.INSERT_OVERWRITE, Op.INSERT_INTO, APPENDS, APPENDS, ""),
    (Op.TRUNCATE, Op.INSERT_INTO, APPENDS, APPENDS, ""),
    (Op.INSERT_INTO, Op.INSERT_INTO, APPENDS, APPENDS, ""),
    (Op.UPDATE, Op.INSERT_INTO, APPENDS, APPENDS, ""),
    (Op.DELETE, Op.INSERT_INTO, APPENDS, APPENDS, ""),
    (Op.MERGE, Op.INSERT_INTO, APPENDS, APPENDS, ""),
    (Op.OPTIMIZE, Op.INSERT_INTO, APPENDS, APPENDS, ""),
    (Op.ALTER_METADATA, Op.INSERT_INTO, APPENDS, APPENDS, ""),
    # later INSERT OVERWRITE: ReplacePartitions replaces what is in p at commit.
    (Op.INSERT_OVERWRITE, Op.INSERT_OVERWRITE, OVERWRITES, OVERWRITES, _NOTE_OVERWRITE),
    (Op.TRUNCATE, Op.INSERT_OVERWRITE, OVERWRITES, OVERWRITES, _NOTE_OVERWRITE),
    (Op.INSERT_INTO, Op.INSERT_OVERWRITE, OVERWRITES, OVERWRITES, _NOTE_OVERWRITE),
    (Op.UPDATE, Op.INSERT_OVERWRITE, OVERWRITES, OVERWRITES, _NOTE_OVERWRITE),
    (Op.DELETE, Op.INSERT_OVERWRITE, OVERWRITES, OVERWRITES, _NOTE_OVERWRITE),
    (Op.MERGE, Op.INSERT_OVERWRITE, OVERWRITES, OVERWRITES, _NOTE_OVERWRITE),
    (Op.OPTIMIZE, Op.INSERT_OVERWRITE, OVERWRITES, OVERWRITES, _NOTE_OVERWRITE),
    (Op.ALTER_METADATA, Op.INSERT_OVERWRITE, OVERWRITES, OVERWRITES, _NOTE_OVERWRITE),
    # later TRUNCATE: deleteFromRowFilter empties p at commit, whatever landed there.
    (Op.INSERT_OVERWRITE, Op.TRUNCATE, OVERWRITES, OVERWRITES, _NOTE_TRUNCATE),
    (Op.TRUNCATE, Op.TRUNCATE, OVERWRITES, OVERWRITES, _NOTE_TRUNCATE),
    (Op.INSERT_INTO, Op.TRUNCATE, OVERWRITES, OVERWRITES, _NOTE_TRUNCATE),
    (Op.UPDATE, Op.TRUNCATE, OVERWRITES, OVERWRITES, _NOTE_TRUNCATE),
    (Op.DELETE, Op.TRUNCATE, OVERWRITES, OVERWRITES, _NOTE_TRUNCATE),
    (Op.MERGE, Op.TRUNCATE, OVERWRITES, OVERWRITES, _NOTE_TRUNCATE),
    (Op.OPTIMIZE, Op.TRUNCATE, OVERWRITES, OVERWRITES, _NOTE_TRUNCATE),
    (Op.ALTER_METADATA, Op.TRUNCATE, OVERWRITES, OVERWRITES, _NOTE_TRUNCATE),
    # later UPDATE: copy-on-write OverwriteFiles of the files it read in p.
    (Op.INSERT_OVERWRITE, Op.UPDATE, FAILS_ADDED, FAILS_MISSING, _NOTE_COW),
    (Op.TRUNCATE, Op.UPDATE, FAILS_MISSING, FAILS_MISSING, _NOTE_COW),
    (Op.INSERT_INTO, Op.UPDATE, FAILS_ADDED, APPLIES, _NOTE_COW_AFTER_APPEND),
    (Op.UPDATE, Op.UPDATE, FAILS_ADDED, FAILS_MISSING, _NOTE_COW),
    (Op.DELETE, Op.UPDATE, FAILS_ADDED, FAILS_MISSING, _NOTE_COW),
    (Op.MERGE, Op.UPDATE, FAILS_ADDED, FAILS_MISSING, _NOTE_COW),
    (Op.OPTIMIZE, Op.UPDATE, FAILS_MISSING, FAILS_MISSING, _NOTE_COW),
    (Op.ALTER_METADATA, Op.UPDATE, APPLIES, APPLIES, _NOTE_ALTER_EARLIER),
    # later DELETE (row-level): the same commit path as UPDATE.
    (Op.INSERT_OVERWRITE, Op.DELETE, FAILS_ADDED, FAILS_MISSING, _NOTE_COW),
    (Op.TRUNCATE, Op.DELETE, FAILS_MISSING, FAILS_MISSING, _NOTE_COW),
    (Op.INSERT_INTO, Op.DELETE, FAILS_ADDED, APPLIES, _NOTE_COW_AFTER_APPEND),
    (Op.UPDATE, Op.DELETE, FAILS_ADDED, FAILS_MISSING, _NOTE_COW),
    (Op.DELETE, Op.DELETE, FAILS_ADDED, FAILS_MISSING, _NOTE_COW),
    (Op.MERGE, Op.DELETE, FAILS_ADDED, FAILS_MISSING, _NOTE_COW),
    (Op.OPTIMIZE, Op.DELETE, FAILS_MISSING, FAILS_MISSING, _NOTE_COW),
    (Op.ALTER_METADATA, Op.DELETE, APPLIES, APPLIES, _NOTE_ALTER_EARLIER),
    # later MERGE: the same commit path as UPDATE.
    (Op.INSERT_OVERWRITE, Op.MERGE, FAILS_ADDED, FAILS_MISSING, _NOTE_COW),
    (Op.TRUNCATE, Op.MERGE, FAILS_MISSING, FAILS_MISSING, _NOTE_COW),
    (Op.INSERT_INTO, Op.MERGE, FAILS_ADDED, APPLIES, _NOTE_COW_AFTER_APPEND),
    (Op.UPDATE, Op.MERGE, FAILS_ADDED, FAILS_MISSING, _NOTE_COW),
    (Op.DELETE, Op.MERGE, FAILS_ADDED, FAILS_MISSING, _NOTE_COW),
    (Op.MERGE, Op.MERGE, FAILS_ADDED, FAILS_MISSING, _NOTE_COW),
    (Op.OPTIMIZE, Op.MERGE, FAILS_MISSING, FAILS_MISSING, _NOTE_COW),
    (Op.ALTER_METADATA, Op.MERGE, APPLIES, APPLIES, _NOTE_ALTER_EARLIER),
    # later OPTIMIZE: RewriteFiles needs every file it replaces to still be live.
    (Op.INSERT_OVERWRITE, Op.OPTIMIZE, FAILS_MISSING, FAILS_MISSING, _NOTE_REWRITE),
    (Op.TRUNCATE, Op.OPTIMIZE, FAILS_MISSING, FAILS_MISSING, _NOTE_REWRITE),
    (Op.INSERT_INTO, Op.OPTIMIZE, COMPACTS, COMPACTS, "The appended file is not among the rewritten ones."),
    (Op.UPDATE, Op.OPTIMIZE, FAILS_MISSING, FAILS_MISSING, _NOTE_REWRITE),
    (Op.DELETE, Op.OPTIMIZE, FAILS_MISSING, FAILS_MISSING, _NOTE_REWRITE),
    (Op.MERGE, Op.OPTIMIZE, FAILS_MISSING, FAILS_MISSING, _NOTE_REWRITE),
    (Op.OPTIMIZE, Op.OPTIMIZE, FAILS_MISSING, FAILS_MISSING, _NOTE_REWRITE),
    (Op.ALTER_METADATA, Op.OPTIMIZE, COMPACTS, COMPACTS, _NOTE_ALTER_EARLIER),
    # later ALTER TABLE: a metadata transaction, no snapshot, no data validation.
    (Op.INSERT_OVERWRITE, Op.ALTER_METADATA, APPLIES, APPLIES, _NOTE_ALTER_LATER),
    (Op.TRUNCATE, Op.ALTER_METADATA, APPLIES, APPLIES, _NOTE_ALTER_LATER),
    (Op.INSERT_INTO, Op.ALTER_METADATA, APPLIES, APPLIES, _NOTE_ALTER_LATER),
    (Op.UPDATE, Op.ALTER_METADATA, APPLIES, APPLIES, _NOTE_ALTER_LATER),
    (Op.DELETE, Op.ALTER_METADATA, APPLIES, APPLIES, _NOTE_ALTER_LATER),
    (Op.MERGE, Op.ALTER_METADATA, APPLIES, APPLIES, _NOTE_ALTER_LATER),
    (Op.OPTIMIZE, Op.ALTER_METADATA, APPLIES, APPLIES, _NOTE_ALTER_LATER),
    (Op.ALTER_METADATA, Op.ALTER_METADATA, APPLIES, APPLIES, _NOTE_ALTER_LATER),
    # expire_snapshots (measured pair by pair on Spark 3.5.9 + Iceberg 1.10.2: both commit, its
    # RemoveSnapshots refreshes and re-applies). Beside a job that validates from the snapshot it
    # read (copy-on-write UPDATE / DELETE / MERGE, a rewrite), an expire that removes that snapshot's
    # successors fails it at commit ('Cannot determine history between starting snapshot ...',
    # MergingSnapshotProducer.validationHistory) and deletes the files its scan reads:
    # tests/engines/test_maintenance_iceberg.py reproduces it. Appends, SQL overwrites,
    # metadata-only deletes and ALTER read no file and validate nothing.
    *((x, Op.EXPIRE_SNAPSHOTS, APPLIES, APPLIES, _NOTE_EXPIRE_SAFE) for x in _READS_NO_FILE),
    *((x, Op.EXPIRE_SNAPSHOTS, IN_USE, IN_USE, _NOTE_EXPIRE_IN_USE) for x in _VALIDATES_FROM_SNAPSHOT),
    (Op.EXPIRE_SNAPSHOTS, Op.INSERT_INTO, APPENDS, APPENDS, _NOTE_EXPIRE_SAFE),
    (Op.EXPIRE_SNAPSHOTS, Op.INSERT_OVERWRITE, OVERWRITES, OVERWRITES, _NOTE_EXPIRE_SAFE),
    (Op.EXPIRE_SNAPSHOTS, Op.TRUNCATE, OVERWRITES, OVERWRITES, _NOTE_EXPIRE_SAFE),
    (Op.EXPIRE_SNAPSHOTS, Op.ALTER_METADATA, APPLIES, APPLIES, _NOTE_EXPIRE_SAFE),
    *((Op.EXPIRE_SNAPSHOTS, x, IN_USE, IN_USE, _NOTE_EXPIRE_IN_USE) for x in _VALIDATES_FROM_SNAPSHOT),
    (Op.EXPIRE_SNAPSHOTS, Op.EXPIRE_SNAPSHOTS, APPLIES, APPLIES, _NOTE_EXPIRE_SAFE),
    # remove_orphan_files (issue 36): measured pair by pair on Spark 3.5.9 + Iceberg 1.10.2, both
    # always commit; kept apart from every job that commits, for the files it has not committed yet.
    *((x, Op.REMOVE_ORPHAN_FILES, IN_USE, IN_USE, _NOTE_ORPHANS) for x in (*_OLD_NINE, *_MAINTENANCE_REWRITES)),
    *((Op.REMOVE_ORPHAN_FILES, x, IN_USE, IN_USE, _NOTE_ORPHANS) for x in (*_OLD_NINE, *_MAINTENANCE_REWRITES)),
    (Op.REMOVE_ORPHAN_FILES, Op.REMOVE_ORPHAN_FILES, APPLIES, APPLIES, _NOTE_ORPHANS_ALONE),
    # rewrite_manifests, later: fails where the earlier commit replaced a manifest (measured).
    *((x, Op.REWRITE_MANIFESTS, FAILS_MANIFESTS, FAILS_MANIFESTS, _NOTE_MANIFESTS_LATER) for x in _REPLACES_MANIFESTS),
    *((x, Op.REWRITE_MANIFESTS, COMPACTS, COMPACTS, _NOTE_MANIFESTS_OK) for x in _KEEPS_MANIFESTS),
    # rewrite_manifests, earlier: the later job commits as after any commit that changes no data.
    (Op.REWRITE_MANIFESTS, Op.INSERT_INTO, APPENDS, APPENDS, _NOTE_MANIFESTS_EARLIER),
    (Op.REWRITE_MANIFESTS, Op.INSERT_OVERWRITE, OVERWRITES, OVERWRITES, _NOTE_MANIFESTS_EARLIER),
    (Op.REWRITE_MANIFESTS, Op.TRUNCATE, OVERWRITES, OVERWRITES, _NOTE_MANIFESTS_EARLIER),
    *((Op.REWRITE_MANIFESTS, x, APPLIES, APPLIES, _NOTE_MANIFESTS_EARLIER) for x in (Op.UPDATE, Op.DELETE, Op.MERGE)),
    (Op.REWRITE_MANIFESTS, Op.OPTIMIZE, COMPACTS, COMPACTS, _NOTE_MANIFESTS_EARLIER),
    (Op.REWRITE_MANIFESTS, Op.ALTER_METADATA, APPLIES, APPLIES, _NOTE_MANIFESTS_EARLIER),
    (Op.REWRITE_MANIFESTS, Op.EXPIRE_SNAPSHOTS, APPLIES, APPLIES, _NOTE_MANIFESTS_EARLIER),
    (Op.REWRITE_MANIFESTS, Op.REWRITE_POSITION_DELETES, COMPACTS, COMPACTS, _NOTE_MANIFESTS_EARLIER),
    # rewrite_position_deletes, later: fails where the earlier commit removed the delete file.
    *((x, Op.REWRITE_POSITION_DELETES, FAILS_DELETE_FILES, FAILS_DELETE_FILES, _NOTE_DELETES_LATER) for x in _REMOVES_DELETES),
    *((x, Op.REWRITE_POSITION_DELETES, COMPACTS, COMPACTS, _NOTE_DELETES_LATER) for x in _KEEPS_DELETES),
    (Op.EXPIRE_SNAPSHOTS, Op.REWRITE_POSITION_DELETES, IN_USE, IN_USE, _NOTE_DELETES_EXPIRE),
    # rewrite_position_deletes, earlier.
    (Op.REWRITE_POSITION_DELETES, Op.INSERT_INTO, APPENDS, APPENDS, _NOTE_DELETES_EARLIER),
    (Op.REWRITE_POSITION_DELETES, Op.INSERT_OVERWRITE, OVERWRITES, OVERWRITES, _NOTE_DELETES_EARLIER),
    (Op.REWRITE_POSITION_DELETES, Op.TRUNCATE, OVERWRITES, OVERWRITES, _NOTE_DELETES_EARLIER),
    *((Op.REWRITE_POSITION_DELETES, x, APPLIES, APPLIES, _NOTE_DELETES_EARLIER) for x in (Op.UPDATE, Op.DELETE, Op.MERGE)),
    (Op.REWRITE_POSITION_DELETES, Op.OPTIMIZE, COMPACTS, COMPACTS, _NOTE_DELETES_EARLIER),
    (Op.REWRITE_POSITION_DELETES, Op.ALTER_METADATA, APPLIES, APPLIES, _NOTE_DELETES_EARLIER),
    (Op.REWRITE_POSITION_DELETES, Op.EXPIRE_SNAPSHOTS, IN_USE, IN_USE, _NOTE_DELETES_EXPIRE),
    (Op.REWRITE_POSITION_DELETES, Op.REWRITE_MANIFESTS, COMPACTS, COMPACTS, _NOTE_MANIFESTS_AFTER_DELETES),
)


# ---- runtime file filtering: a failure before commit, in one SparkSession -------------------------


@dataclass(frozen=True)
class StaleScan:
    """A pair that fails before commit, outside the matrix's cells: the later job's scan snapshot
    went stale in the process it runs in, whichever partitions the two jobs touch."""

    earlier: frozenset[Op]
    later: frozenset[Op]
    kind: ConflictKind
    message: str
    when: str
    source: str

    def fails(self, earlier: Op, later: Op) -> bool:
        return earlier in self.earlier and later in self.later


#: SparkCopyOnWriteScan.filter checks, when Spark hands it the runtime file filter of a copy-on-write
#: UPDATE / DELETE / MERGE (Spark 3.5 RowLevelCommandDynamicPruning, the group filter of a row-level
#: command), that the scan's snapshot is still the table object's current snapshot. Any commit that
#: writes a snapshot moves it (an ALTER writes none); in one SparkSession the catalog's cached table
#: object sees the other job's commit at once; from another process only with catalog caching off.
#: The check is on the table's snapshot id, so the partitions do not matter. Classified as
#: validation_conflict (markers.py): a fresh snapshot in its own session succeeds.
RUNTIME_FILTERING = StaleScan(
    earlier=frozenset({Op.INSERT_INTO, Op.INSERT_OVERWRITE, Op.TRUNCATE, Op.UPDATE, Op.DELETE, Op.MERGE, Op.OPTIMIZE}),
    later=frozenset({Op.UPDATE, Op.DELETE, Op.MERGE}),
    kind=ConflictKind.VALIDATION_CONFLICT,
    message="Runtime file filtering is not possible: the table has been concurrently modified.",
    when=(
        "both jobs share one SparkSession (one cached catalog table), or the catalog has cache-enabled=false "
        "and any writer commits, between the later job's scan and its runtime file filter; any partition"
    ),
    source=(
        "apache/iceberg spark/v3.5/spark/src/main/java/org/apache/iceberg/spark/source/SparkCopyOnWriteScan.java "
        "filter(): Preconditions.checkState(Objects.equals(snapshotId(), currentSnapshotId()), \"Runtime file "
        "filtering is not possible: the table has been concurrently modified. ... If an external process modifies "
        "the table, enable table caching in the catalog. If multiple threads modify the table, use independent "
        "Spark sessions in each thread.\"); seen on Spark 3.5.9 + Iceberg 1.10.2 while checking SPARK_CHECKED"
    ),
)
_NOTE_RUNTIME_FILTERING = (
    f"In one SparkSession (or with catalog caching off) the later job fails before commit instead, in any "
    f"partition: '{RUNTIME_FILTERING.message}' (SparkCopyOnWriteScan.filter; {RUNTIME_FILTERING.kind.value})."
)


def _reason(outcome: Outcome, scope: str) -> str:
    """The Iceberg check a failing cell fails in, as the note's first sentence."""
    if outcome.check is None:
        return ""
    return f"{outcome.check.method}: '{outcome.check.message.format(filter=scope)}'."


def cells_for(level: IsolationLevel) -> tuple[Cell, ...]:
    """The matrix's cells at one isolation level."""
    pick: Callable[[tuple[Op, Op, Outcome, Outcome, str]], Outcome] = (
        (lambda row: row[2]) if level is IsolationLevel.SERIALIZABLE else (lambda row: row[3])
    )
    cells = []
    for row in ICEBERG_MATRIX:
        earlier, later, _, _, note = row
        outcome = pick(row)
        fails = outcome.effect is Effect.LATER_FAILS
        checked = (
            "Checked on Spark 3.5.9 + Iceberg 1.10.2." if (level, earlier, later) in SPARK_CHECKED else ""
        )
        reason = _reason(outcome, "<scan filter>")
        stale = _NOTE_RUNTIME_FILTERING if RUNTIME_FILTERING.fails(earlier, later) else ""
        cells.append(
            Cell(
                earlier=earlier,
                later=later,
                later_fails=fails,
                exception=ConflictKind.VALIDATION_CONFLICT if fails else None,
                effect=outcome.effect,
                source=f"iceberg 1.10 {_BY_LATER[later]}; {_BY_EARLIER[earlier]}",
                note=" ".join(part for part in (reason, note, checked, stale) if part),
            )
        )
    return tuple(cells)


SOURCES = (
    "https://iceberg.apache.org/javadoc/1.10.0/org/apache/iceberg/IsolationLevel.html",
    "https://iceberg.apache.org/docs/1.10.0/configuration/#write-properties (write.*.isolation-level, write.*.mode)",
    "apache/iceberg core/src/main/java/org/apache/iceberg/MergingSnapshotProducer.java",
    "apache/iceberg core/src/main/java/org/apache/iceberg/BaseOverwriteFiles.java",
    "apache/iceberg core/src/main/java/org/apache/iceberg/BaseReplacePartitions.java",
    "apache/iceberg core/src/main/java/org/apache/iceberg/BaseRewriteFiles.java",
    "apache/iceberg core/src/main/java/org/apache/iceberg/StreamingDelete.java",
    "apache/iceberg core/src/main/java/org/apache/iceberg/SnapshotProducer.java",
    "apache/iceberg spark/v3.5/spark/src/main/java/org/apache/iceberg/spark/source/SparkWrite.java",
    "apache/iceberg spark/v3.5/spark/src/main/java/org/apache/iceberg/spark/source/SparkPositionDeltaWrite.java",
)

_EXTRA = (ConflictKind.COMMIT_FAILED, ConflictKind.COMMIT_STATE_UNKNOWN)
_EXPIRE_WHOLE_TABLE = (
    "apache/iceberg core/src/main/java/org/apache/iceberg/RemoveSnapshots.java: expire_snapshots "
    "removes snapshots of the whole table and deletes the files of every partition only they reference"
)
#: Table maintenance works on the whole table, whatever partitions it was declared with.
_MAINTENANCE_OPS = (Op.EXPIRE_SNAPSHOTS, Op.REMOVE_ORPHAN_FILES, Op.REWRITE_MANIFESTS, Op.REWRITE_POSITION_DELETES)
_MAINTENANCE_WHOLE_TABLE = (
    f"{_EXPIRE_WHOLE_TABLE}; DeleteOrphanFilesSparkAction lists the whole table location; "
    "RewriteManifestsSparkAction rewrites the manifests of every partition (a manifest holds many), "
    "and the rewrite_position_delete_files procedure without a where filter the delete files of all"
)

ICEBERG_SERIALIZABLE = Profile(
    name="iceberg-serializable",
    title="Apache Iceberg on Spark 3.5, serializable row-level operations (the default)",
    table_format="iceberg",
    isolation="serializable (write.{delete,update,merge}.isolation-level)",
    rules=RuleKind.FOOTPRINT,
    overwrite_scope=OverwriteScope.PARTITION_AT_COMMIT,
    sources=SOURCES,
    cells=cells_for(IsolationLevel.SERIALIZABLE),
    description=(
        "A copy-on-write UPDATE/DELETE/MERGE fails when a concurrent commit added files matching "
        "its filter (appends included) or removed a file it read; a compaction fails when its input files "
        "were removed; appends, SQL overwrites, metadata-only deletes and ALTER TABLE never fail "
        "validation. Validation is scoped by the scan filter: disjoint partitions never conflict."
    ),
    extra_kinds=_EXTRA,
    reads_whole_table=_MAINTENANCE_OPS,
    reads_whole_table_source=_MAINTENANCE_WHOLE_TABLE,
    validator=iceberg_validator(IsolationLevel.SERIALIZABLE),
)

ICEBERG_SNAPSHOT = Profile(
    name="iceberg-snapshot",
    title="Apache Iceberg on Spark 3.5, snapshot-isolated row-level operations",
    table_format="iceberg",
    isolation="snapshot (write.{delete,update,merge}.isolation-level)",
    rules=RuleKind.FOOTPRINT,
    overwrite_scope=OverwriteScope.PARTITION_AT_COMMIT,
    sources=SOURCES,
    cells=cells_for(IsolationLevel.SNAPSHOT),
    description=(
        "As serializable, except that a copy-on-write UPDATE/DELETE/MERGE ignores files added "
        "concurrently (it commits beside an INSERT INTO and leaves the new rows untouched); it "
        "still fails when a file it read was removed."
    ),
    extra_kinds=_EXTRA,
    reads_whole_table=_MAINTENANCE_OPS,
    reads_whole_table_source=_MAINTENANCE_WHOLE_TABLE,
    validator=iceberg_validator(IsolationLevel.SNAPSHOT),
)


# ---- DataFrame overwrites written with the isolation-level write option ------------------------

#: (earlier job, serializable, snapshot): a later INSERT OVERWRITE written as
#: ``df.writeTo(t).option("isolation-level", L).option("validate-from-snapshot-id", S)``
#: ``.overwritePartitions()`` / ``.overwrite(cond)``. Serializable fails in
#: validateAddedDataFiles on a newer append/overwrite snapshot adding a file to its partitions,
#: then (both levels) in validateDeletedDataFiles on a newer overwrite/replace/delete snapshot
#: removing one; a metadata transaction writes no snapshot.
VALIDATED_OVERWRITE_COLUMN: tuple[tuple[Op, Outcome, Outcome], ...] = (
    (Op.INSERT_OVERWRITE, FAILS_ADDED, FAILS_DELETED),
    (Op.TRUNCATE, FAILS_DELETED, FAILS_DELETED),
    (Op.INSERT_INTO, FAILS_ADDED, OVERWRITES),
    (Op.UPDATE, FAILS_ADDED, FAILS_DELETED),
    (Op.DELETE, FAILS_ADDED, FAILS_DELETED),
    (Op.MERGE, FAILS_ADDED, FAILS_DELETED),
    (Op.OPTIMIZE, FAILS_DELETED, FAILS_DELETED),
    (Op.ALTER_METADATA, OVERWRITES, OVERWRITES),
    # validate-from-snapshot-id names the snapshot it read: an expire of its successors fails it
    (Op.EXPIRE_SNAPSHOTS, IN_USE, IN_USE),
    # its files are orphans until it commits, as in the base matrix
    (Op.REMOVE_ORPHAN_FILES, IN_USE, IN_USE),
    # 'replace' snapshots that remove no data file; a rewritten delete file is not a new delete
    # for validateNoNewDeleteFiles, which looks at overwrite and delete snapshots only
    (Op.REWRITE_MANIFESTS, OVERWRITES, OVERWRITES),
    (Op.REWRITE_POSITION_DELETES, OVERWRITES, OVERWRITES),
)
#: Run on real Spark 3.5 + Iceberg 1.10.2 by tests/conformance_upstream/test_iceberg_validation.py.
VALIDATED_SPARK_CHECKED: frozenset[tuple[IsolationLevel, Op]] = frozenset({(_S, Op.INSERT_INTO)})
_VALIDATED_SOURCE = (
    "iceberg 1.10 SparkWrite.DynamicOverwrite / OverwriteByFilter with write options isolation-level={level} "
    "and validate-from-snapshot-id -> BaseReplacePartitions.validate / BaseOverwriteFiles.validate "
    "({checks}); {earlier}; tests: tests/conformance_upstream/test_iceberg_validation.py::"
    "test_dataframe_overwrite_validates_only_with_the_isolation_level_option, ::test_append_replace_conflict; "
    "upstream spark-extensions TestConflictValidation"
)
_NOTE_VALIDATED = (
    "Only for an overwrite written with the isolation-level write option and "
    "validate-from-snapshot-id = the snapshot it read: without validate-from-snapshot-id Iceberg "
    "validates from the table's first snapshot and fails on any earlier write to the partition "
    "(TestConflictValidation.testOverwriteFilterNoSnapshotIdValidation). Merge-on-read delete files "
    "(validateNoNewDeleteFiles) are not modelled."
)


def validated_cells_for(level: IsolationLevel) -> tuple[Cell, ...]:
    """The base matrix at ``level``, with the INSERT OVERWRITE column validated as the write
    option ``isolation-level=<level>`` makes it."""
    column = {
        earlier: serializable if level is IsolationLevel.SERIALIZABLE else snapshot
        for earlier, serializable, snapshot in VALIDATED_OVERWRITE_COLUMN
    }
    checks = ", ".join(check.method.rsplit(".", 1)[-1] for check in OVERWRITE_OPTION_VALIDATIONS[level])
    cells = []
    for cell in cells_for(level):
        if (cell.earlier, cell.later) == (Op.INSERT_OVERWRITE, Op.EXPIRE_SNAPSHOTS):
            # the overwrite validates from the snapshot it read now: kept apart either way
            cells.append(replace(cell, effect=IN_USE.effect, note=_NOTE_EXPIRE_IN_USE))
            continue
        if cell.later is not Op.INSERT_OVERWRITE:
            cells.append(cell)
            continue
        outcome = column[cell.earlier]
        fails = outcome.effect is Effect.LATER_FAILS
        checked = (
            "Checked on Spark 3.5.9 + Iceberg 1.10.2 (DataFrame overwritePartitions and overwrite(cond))."
            if (level, cell.earlier) in VALIDATED_SPARK_CHECKED
            else "Read from the source, not run."
        )
        source = _VALIDATED_SOURCE.format(level=level.value, checks=checks, earlier=_BY_EARLIER[cell.earlier])
        cells.append(
            Cell(
                earlier=cell.earlier,
                later=cell.later,
                later_fails=fails,
                exception=ConflictKind.VALIDATION_CONFLICT if fails else None,
                effect=outcome.effect,
                source=source,
                note=" ".join(part for part in (_reason(outcome, "<partitions>"), _NOTE_VALIDATED, checked) if part),
            )
        )
    return tuple(cells)


def _validated(base: Profile, level: IsolationLevel) -> Profile:
    return Profile(
        name=f"{base.name}-validated",
        title=f"{base.title}; DataFrame overwrites written with option isolation-level={level.value}",
        table_format="iceberg",
        isolation=f"{base.isolation}; DataFrame write option isolation-level={level.value}",
        rules=RuleKind.FOOTPRINT,
        overwrite_scope=OverwriteScope.PARTITION_AT_COMMIT,
        sources=(
            *SOURCES,
            "apache/iceberg spark/v3.5/spark-extensions/src/test/java/org/apache/iceberg/spark/extensions/TestConflictValidation.java",
        ),
        cells=validated_cells_for(level),
        description=(
            f"As {base.name}, for jobs whose INSERT OVERWRITE is a DataFrame write with "
            f"option('isolation-level', '{level.value}') and option('validate-from-snapshot-id', <the snapshot "
            "it read>) (overwritePartitions() or overwrite(cond)): that overwrite validates its partitions "
            + (
                "and fails when a concurrent commit added or removed a data file there."
                if level is IsolationLevel.SERIALIZABLE
                else "and fails when a concurrent commit removed a data file there; an append does not fail it."
            )
        ),
        extra_kinds=_EXTRA,
        reads_whole_table=_MAINTENANCE_OPS,
        reads_whole_table_source=_MAINTENANCE_WHOLE_TABLE,
    validator=iceberg_validator(level, overwrite_option=True),
    )


ICEBERG_SERIALIZABLE_VALIDATED = _validated(ICEBERG_SERIALIZABLE, IsolationLevel.SERIALIZABLE)
ICEBERG_SNAPSHOT_VALIDATED = _validated(ICEBERG_SNAPSHOT, IsolationLevel.SNAPSHOT)

PROFILES: tuple[Profile, ...] = (
    ICEBERG_SERIALIZABLE,
    ICEBERG_SNAPSHOT,
    ICEBERG_SERIALIZABLE_VALIDATED,
    ICEBERG_SNAPSHOT_VALIDATED,
)
