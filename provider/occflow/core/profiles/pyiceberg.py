"""The ``pyiceberg-serializable`` and ``pyiceberg-snapshot`` profiles: what pyiceberg 0.12 (Iceberg
written from Python, no JVM) really does, cell by cell, measured on real tables.

Not a copy of the Java matrix (``iceberg.py``): pyiceberg validates a write against the commits it
raced only when it retries a commit that lost the catalog's compare-and-swap
(``Transaction.commit_transaction`` -> ``_rebuild_snapshot_updates`` -> ``_validate_concurrency``,
pyiceberg/table/__init__.py and table/update/snapshot.py), with its own checks
(pyiceberg/table/update/validate.py), and its schema change asserts only the schema id. Measured by
``occflow conformance --engine pyiceberg`` (docs/conformance/pyiceberg.md) on a SQL catalog on
SQLite with pyiceberg's default commit retries, partitioned (identity) and unpartitioned tables
alike (every cell agrees on both), a dynamic partition overwrite alike a filtered overwrite:

- an append is a fast append, which validates nothing (``_FastAppendFiles._validate_concurrency``):
  it commits beside every write;
- an overwrite, delete or upsert after a commit that deleted files its filter matches fails with
  "Deleted data files were found matching the filter" (``_validate_deleted_data_files``), at both
  levels; after an append whose files its filter matches it fails only at ``serializable``
  ("Added data files ...", ``_validate_added_data_files``);
- a schema change commits beside every data write, either order (the data commit asserts the
  branch's snapshot, the schema change the schema id); two schema changes: the later fails with the
  catalog's ``CommitFailedException`` ("current schema id has changed"), which pyiceberg does not
  retry (a transaction without a snapshot is not rebuilt).

- ``expire_snapshots`` (``ExpireSnapshots``: one ``RemoveSnapshotsUpdate``, no requirement, no
  snapshot, no file deleted) commits beside every write, either order, at both levels: the catalog
  applies it to the metadata current at its commit. Two expires planned on one snapshot: pyiceberg
  fails the later one's update with a ``ValueError`` ("Snapshot with snapshot id ... does not
  exist"), and occflow's expire plans again on the fresh table and commits (as Java's
  ``RemoveSnapshots`` does): both commit. Beside a write the pair commits, yet an expire that removes the
  snapshot a running write started from fails that write's next commit attempt ("Cannot find
  starting snapshot", ``CommitWindow.resolve``, an append too) once a third commit made it retry:
  those cells keep the two apart (``Effect.DELETES_FILES_IN_USE``), as Iceberg on Spark's do.

pyiceberg reads the level of an overwrite from ``write.update.isolation-level`` and of a delete from
``write.delete.isolation-level`` (``TableMetadata.isolation_level``); occflow holds a table whose two
levels differ to ``pyiceberg-serializable``.
"""

from __future__ import annotations

from ..kinds import ConflictKind
from ..operations import Operation
from ..operations import Operation as Op
from .model import Cell, Effect, OverwriteScope, Profile, RuleKind

V = "apache/iceberg-python pyiceberg/table/update/validate.py (pyiceberg 0.12.0)"
S_FAST_APPEND = (
    "pyiceberg/table/update/snapshot.py _FastAppendFiles._validate_concurrency: an append validates nothing "
    "and re-commits on the new head"
)
S_ADDED = f"{V} _validate_added_data_files (serializable only)"
S_DELETED = f"{V} _validate_deleted_data_files (both levels)"
S_NO_ADDED_CHECK = "pyiceberg/table/update/snapshot.py _validate_concurrency: no added-files check at snapshot isolation"
S_SCHEMA = (
    "pyiceberg/table/update/schema.py UpdateSchema: asserts the current schema id (AssertCurrentSchemaId); a data "
    "commit asserts the branch's snapshot id (AssertRefSnapshotId) and retries on the new head"
)
S_SCHEMA_TWICE = (
    "pyiceberg/catalog/sql.py SqlCatalog.commit_table: 'Requirement failed: current schema id has changed'; "
    "Transaction.commit_transaction retries only transactions that commit a snapshot"
)
S_EXPIRE = (
    "pyiceberg/table/update/snapshot.py ExpireSnapshots._commit: one RemoveSnapshotsUpdate, no requirement "
    "(table/update/__init__.py applies it to the metadata current at the commit; no file deleted)"
)
S_EXPIRE_WINDOW = (
    f"{S_EXPIRE}; pyiceberg/table/update/snapshot.py CommitWindow.resolve: 'Cannot find starting snapshot' "
    "when a retried commit's starting snapshot was expired (tests/engines/test_pyiceberg_maintenance.py)"
)
S_EXPIRE_TWICE = (
    "pyiceberg/table/update/__init__.py _apply_table_update(RemoveSnapshotsUpdate): 'Snapshot with snapshot id "
    "... does not exist' (a ValueError, not retried by pyiceberg); occflow's engines/pyiceberg/maintenance.py "
    "expire_snapshots plans again on the fresh table"
)
OBSERVED = "observed: occflow conformance --engine pyiceberg, pyiceberg 0.12.0, SQL catalog on SQLite"

N_MERGE_AFTER_APPEND = (
    "the upsert's filter is its source rows' keys: an appended row with another key is not matched "
    "(the pair's jobs write distinct keys)"
)
N_DIFFERS_FROM_JAVA = "differs from the Java matrix: pyiceberg's schema change and data commits assert different things"
N_FAST_APPEND = "an append is a fast append: pyiceberg validates nothing for it and commits it on the new head"
N_DELETED = (
    "the earlier commit deleted files the later write's filter matches: pyiceberg validates deleted files for "
    "every filtered write (overwrite, delete, upsert) at both levels, where Spark's INSERT OVERWRITE on Java "
    "Iceberg (ReplacePartitions without validation) commits"
)
N_ADDED = (
    "the appended file matches the later write's filter: at serializable pyiceberg validates added files for "
    "every filtered write, an overwrite included"
)
N_NO_ADDED = "snapshot isolation: pyiceberg runs no added-files check, the appended rows survive the later write"
N_SCHEMA_TWICE = (
    "both change the schema: the catalog refuses the second (its schema id moved) and pyiceberg does not retry "
    "a transaction without a snapshot, so the later one fails with the catalog's CommitFailedException, "
    "where Java Iceberg's schema update refreshes and retries"
)

N_EXPIRE_IN_USE = (
    "both commit from one snapshot (pyiceberg's expire asserts nothing and deletes no file), but an expire that "
    "removes the snapshot a running write started from fails that write's commit retry ('Cannot find starting "
    "snapshot', an append's too) once a third commit made it retry: admission keeps the two apart; at the "
    "retention floor no running write's snapshot is old enough"
)
N_EXPIRE_ALTER = "a schema change commits no snapshot, so it has no starting snapshot to lose: both commit"
N_EXPIRE_TWICE = (
    "both expire the same snapshots: the later one's ids are gone when the catalog applies its update, "
    "pyiceberg raises a ValueError, and occflow's expire plans again on the fresh table and commits what is "
    "left (nothing here), as Java's RemoveSnapshots refreshes and re-applies"
)

OK_APPEND = (None, Effect.APPEND)
OK_APPLIED = (None, Effect.APPLIED)
VALIDATION = (ConflictKind.VALIDATION_CONFLICT, Effect.LATER_FAILS)
CATALOG = (ConflictKind.COMMIT_FAILED, Effect.LATER_FAILS)
IN_USE = (None, Effect.DELETES_FILES_IN_USE)

Outcome = tuple[ConflictKind | None, Effect]
#: The writes that validate against the commits they raced (they carry a filter).
FILTERED = (Op.INSERT_OVERWRITE, Op.TRUNCATE, Op.DELETE, Op.MERGE)
#: The writes that commit a snapshot (and so resolve the snapshot they started from on a retry).
SNAPSHOT_WRITES = (Op.INSERT_INTO, *FILTERED)
OPERATIONS = (*SNAPSHOT_WRITES, Op.ALTER_METADATA, Op.EXPIRE_SNAPSHOTS)


def _expire_cell(earlier: Operation, later: Operation) -> tuple[Outcome, str, str]:
    """A pair with ``expire_snapshots`` in it (measured alike at both levels)."""
    if earlier is later:
        return OK_APPLIED, S_EXPIRE_TWICE, N_EXPIRE_TWICE
    if Op.ALTER_METADATA in (earlier, later):
        return OK_APPLIED, S_EXPIRE, N_EXPIRE_ALTER
    return IN_USE, S_EXPIRE_WINDOW, N_EXPIRE_IN_USE


def _matrix(serializable: bool) -> tuple[tuple[Operation, Operation, Outcome, str, str], ...]:
    """(earlier, later, outcome, source, note) for every pair at one isolation level."""
    rows: list[tuple[Operation, Operation, Outcome, str, str]] = []
    for earlier in OPERATIONS:
        for later in OPERATIONS:
            if Op.EXPIRE_SNAPSHOTS in (earlier, later):
                rows.append((earlier, later, *_expire_cell(earlier, later)))
            elif earlier is Op.ALTER_METADATA and later is Op.ALTER_METADATA:
                rows.append((earlier, later, CATALOG, S_SCHEMA_TWICE, N_SCHEMA_TWICE))
            elif Op.ALTER_METADATA in (earlier, later):
                rows.append((earlier, later, OK_APPLIED, S_SCHEMA, N_DIFFERS_FROM_JAVA))
            elif later is Op.INSERT_INTO:
                rows.append((earlier, later, OK_APPEND, S_FAST_APPEND, N_FAST_APPEND))
            elif earlier is Op.INSERT_INTO and later is Op.MERGE:
                rows.append((earlier, later, OK_APPLIED, S_ADDED if serializable else S_NO_ADDED_CHECK,
                             N_MERGE_AFTER_APPEND))
            elif earlier is Op.INSERT_INTO:
                rows.append((earlier, later, VALIDATION if serializable else OK_APPLIED,
                             S_ADDED if serializable else S_NO_ADDED_CHECK, N_ADDED if serializable else N_NO_ADDED))
            else:
                rows.append((earlier, later, VALIDATION, S_DELETED, N_DELETED))
    return tuple(rows)


def _cells(serializable: bool) -> tuple[Cell, ...]:
    return tuple(
        Cell(
            earlier=earlier,
            later=later,
            later_fails=kind is not None,
            exception=kind,
            effect=effect,
            source=f"{source}; {OBSERVED}",
            note=note,
        )
        for earlier, later, (kind, effect), source, note in _matrix(serializable)
    )


def _profile(level: str, isolation: str, description: str) -> Profile:
    return Profile(
        name=f"pyiceberg-{level}",
        title=f"Iceberg as pyiceberg 0.12 commits it, {level} isolation",
        table_format="iceberg",
        isolation=isolation,
        rules=RuleKind.OPERATION,
        overwrite_scope=OverwriteScope.PARTITION_AT_COMMIT,
        sources=(
            f"{V}",
            "apache/iceberg-python pyiceberg/table/__init__.py Transaction.commit_transaction (pyiceberg 0.12.0)",
            "docs/conformance/pyiceberg.md (observed)",
        ),
        cells=_cells(serializable=level == "serializable"),
        description=description,
        extra_kinds=(ConflictKind.COMMIT_FAILED, ConflictKind.COMMIT_STATE_UNKNOWN),
        # The expire lists and removes snapshots of every partition, whatever it was declared with.
        reads_whole_table=(Op.EXPIRE_SNAPSHOTS,),
        reads_whole_table_source=S_EXPIRE,
    )


PYICEBERG_SERIALIZABLE = _profile(
    "serializable",
    "serializable (write.update.isolation-level / write.delete.isolation-level, pyiceberg's default)",
    "Appends never fail; an overwrite, delete or upsert fails after a commit that added or deleted files its "
    "filter matches; schema changes commit beside data writes, and fail only against each other; "
    "expire_snapshots commits beside every write but is kept apart from those that commit a snapshot.",
)
PYICEBERG_SNAPSHOT = _profile(
    "snapshot",
    "snapshot (write.update.isolation-level and write.delete.isolation-level both snapshot)",
    "As pyiceberg-serializable, except that an overwrite or delete commits after a concurrent append (no "
    "added-files check): only deleted files fail a filtered write.",
)

PROFILES: tuple[Profile, ...] = (PYICEBERG_SERIALIZABLE, PYICEBERG_SNAPSHOT)

__all__ = ["OPERATIONS", "PROFILES", "SNAPSHOT_WRITES", "PYICEBERG_SERIALIZABLE", "PYICEBERG_SNAPSHOT"]
