"""Delta Lake with row-level concurrency: ``delta-serializable-rlc``, ``delta-write-serializable-rlc``.

Spec 004 ("Write conflicts with row-level concurrency"): on Databricks Runtime 14.2+, tables with
deletion vectors and no partitions detect conflicts at the row level. The spec's text names the
rules in prose (its table's cells are not in the text), and this module reads them so:

- UPDATE, DELETE and MERGE INTO "automatically resolv[e] conflicts that occur when concurrent
  writes update or delete different rows in the same data file": those pairs fail only when both
  jobs modify the same rows (``Condition.SAME_ROWS``), at both isolation levels; a blind INSERT
  before them fails them only under Serializable, and again only on the same rows.
- OPTIMIZE: "[tables] can still avoid conflicts between OPTIMIZE and all other write operations
  when deletion vectors are enabled", which row-level concurrency requires; REORG ... APPLY
  (PURGE) "has isolation semantics identical to OPTIMIZE". Two OPTIMIZEs are not "other write
  operations": they keep spec 004's ConcurrentDeleteDelete ("two concurrent compaction
  operations rewriting the same files").
- INSERT OVERWRITE and TRUNCATE are not in the spec's row-level table. On a table without
  partitions they replace every row, so they always touch the rows of any concurrent row-level
  write: their cells are the ones without row-level concurrency (``delta.py``).
- Metadata changes and REORG ... APPLY (UPGRADE ...) conflict with everything, as without it.

occflow cannot see rows. A ``SAME_ROWS`` cell carries the exception the later job gets when the
rows meet; admission, the DAG linter and the reference engine (``RowLevelConflictChecker``)
treat every overlapping footprint as meeting, so such pairs are serialised exactly as without
row-level concurrency. What the profile buys is the OPTIMIZE cells (a compaction runs beside
every data write), and the knowledge that a loss in a ``SAME_ROWS`` cell is rarer.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..footprint import Footprint
from ..kinds import ConflictKind
from ..operations import Operation
from ..operations import Operation as Op
from .delta import (
    CONCURRENT_APPEND,
    DELTA_EXTRA_KINDS,
    DELTA_MATRIX,
    DELTA_SOURCES,
    OK_APPEND,
    OK_APPLIED,
    OK_COMPACTS,
    Conflict,
    ConflictChecker,
    IsolationLevel,
    Outcome,
    cell_at,
    check_app_ids,
    check_deleted_files_deleted,
    check_no_metadata_updates,
    check_protocol_compatibility,
    first_conflict,
    src,
)
from .model import Cell, Condition, Effect, OverwriteScope, Profile, RuleKind

# --------------------------------------------------------------------------------------------
# The validator
# --------------------------------------------------------------------------------------------


def _is_compaction(fp: Footprint) -> bool:
    return fp.operation is Op.OPTIMIZE and not fp.data_change


@dataclass(frozen=True)
class RowLevelConflictChecker:
    """A ``Validator`` for row-level concurrency over footprints that do not name rows.

    With OPTIMIZE on one side and no metadata change in the committing job, only the protocol,
    metadata and app-id checks run (two OPTIMIZEs:
    the delete-delete check too, first, as Databricks reports it); every other pair runs Delta's
    checker (``delta.ConflictChecker``), which is what "the same rows" looks like when all that
    is known is the files.
    """

    table_isolation: IsolationLevel

    def __call__(self, current: Footprint, winner: Footprint) -> Conflict | None:
        # A metadata or protocol change beside OPTIMIZE is not "another write operation".
        beside_compaction = _is_compaction(current) or _is_compaction(winner)
        if not beside_compaction or current.metadata_change:
            return ConflictChecker(self.table_isolation)(current, winner)
        checks = [check_protocol_compatibility, check_no_metadata_updates]
        if _is_compaction(current) and _is_compaction(winner):
            checks.append(check_deleted_files_deleted)
        checks.append(check_app_ids)
        return first_conflict(checks, current, winner, self.table_isolation)


# --------------------------------------------------------------------------------------------
# The literal changes to the matrix without row-level concurrency (delta.DELTA_MATRIX)
# --------------------------------------------------------------------------------------------

S004_RLC = (
    "spec 004 write conflicts with row-level concurrency: concurrent writes that update or delete "
    "different rows in the same data file do not conflict"
)
S004_RLC_OPT = (
    "spec 004: tables avoid conflicts between OPTIMIZE and all other write operations when deletion "
    "vectors are enabled (row-level concurrency requires them)"
)
S004_DD = "spec 004 ConcurrentDeleteDeleteException: two concurrent compaction operations rewriting the same files"
RLC_CHECK = "RowLevelConflictChecker: rows are not visible, so overlapping footprints count as the same rows"
RLC_OPT_CHECK = "RowLevelConflictChecker: with OPTIMIZE on one side only the protocol, metadata and app-id checks run"
RLC_DD_CHECK = "RowLevelConflictChecker: two OPTIMIZEs run ConflictChecker.checkForDeletedFilesAgainstCurrentTxnDeletedFiles"

N_SAME_ROWS = (
    "row-level concurrency: fails only when both jobs modify the same rows, both commit otherwise (the later "
    "change applies on top); occflow cannot see rows, so admission serialises the pair on any overlapping "
    "footprint and the reference engine fails it"
)
N_SAME_ROWS_S = (
    "Serializable: fails only when the appended rows are rows the later job modifies; "
    "WriteSerializable: never (blind appends do not conflict). " + N_SAME_ROWS
)
N_OPTIMIZE = (
    "deletion vectors let OPTIMIZE and any other data write both commit; the live Databricks page excepts "
    "OPTIMIZE ... ZORDER BY, which spec 004's text does not name"
)
N_OPT_NOTHING_LEFT = (
    "deletion vectors let OPTIMIZE commit after any other data write; this one replaced every row OPTIMIZE "
    "read, so it commits with nothing left to compact"
)
N_OPT_OPT = (
    "two OPTIMIZEs are not 'other write operations': compactions of the same files keep spec 004's "
    "ConcurrentDeleteDelete (what Databricks, the only engine with row-level concurrency, raises)"
)

SAME_ROWS = Condition.SAME_ROWS
ALWAYS = Condition.ALWAYS
DELETE_DELETE = Outcome(ConflictKind.CONCURRENT_DELETE_DELETE, Effect.LATER_FAILS)
_ROW_LEVEL = (Op.UPDATE, Op.DELETE, Op.MERGE)
_DATA_WRITES = (Op.INSERT_INTO, Op.INSERT_OVERWRITE, Op.TRUNCATE, *_ROW_LEVEL)

#: (earlier, later, Serializable, WriteSerializable, condition of a failing outcome, source, note).
#: Every other cell is the cell without row-level concurrency: INSERT OVERWRITE and TRUNCATE
#: (not in the spec's row-level table) replace every row of a table without partitions, so they
#: always meet the other job's rows; ALTER and REORG ... APPLY (UPGRADE) conflict with everything.
RLC_CHANGES: tuple[tuple[Operation, Operation, Outcome, Outcome, Condition, str, str], ...] = (
    # a blind INSERT, then UPDATE / DELETE / MERGE
    *(
        (Op.INSERT_INTO, later, CONCURRENT_APPEND, OK_APPLIED, SAME_ROWS, src(S004_RLC, RLC_CHECK), N_SAME_ROWS_S)
        for later in _ROW_LEVEL
    ),
    # UPDATE / DELETE / MERGE, then UPDATE / DELETE / MERGE
    *(
        (earlier, later, CONCURRENT_APPEND, CONCURRENT_APPEND, SAME_ROWS, src(S004_RLC, RLC_CHECK), N_SAME_ROWS)
        for earlier in _ROW_LEVEL
        for later in _ROW_LEVEL
    ),
    # OPTIMIZE, then any data write; any data write, then OPTIMIZE
    *(
        (Op.OPTIMIZE, later, ok, ok, ALWAYS, src(S004_RLC_OPT, RLC_OPT_CHECK), N_OPTIMIZE)
        for later in _DATA_WRITES
        for ok in [OK_APPEND if later is Op.INSERT_INTO else OK_APPLIED]
    ),
    *(
        (earlier, Op.OPTIMIZE, OK_COMPACTS, OK_COMPACTS, ALWAYS, src(S004_RLC_OPT, RLC_OPT_CHECK), N_OPTIMIZE)
        for earlier in (Op.INSERT_INTO, *_ROW_LEVEL)
    ),
    *(
        (earlier, Op.OPTIMIZE, OK_APPLIED, OK_APPLIED, ALWAYS, src(S004_RLC_OPT, RLC_OPT_CHECK), N_OPT_NOTHING_LEFT)
        for earlier in (Op.INSERT_OVERWRITE, Op.TRUNCATE)
    ),
    (Op.OPTIMIZE, Op.OPTIMIZE, DELETE_DELETE, DELETE_DELETE, ALWAYS, src(S004_DD, RLC_DD_CHECK), N_OPT_OPT),
)


def cells_for(level: IsolationLevel) -> tuple[Cell, ...]:
    """``DELTA_MATRIX`` at one isolation level, with ``RLC_CHANGES`` in place of its cells."""
    changes = {(row[0], row[1]): row for row in RLC_CHANGES}
    cells: list[Cell] = []
    for earlier, later, serializable, write_serializable, source, note in DELTA_MATRIX:
        condition = ALWAYS
        if (earlier, later) in changes:
            _, _, serializable, write_serializable, condition, source, note = changes[(earlier, later)]
        outcome = serializable if level is IsolationLevel.SERIALIZABLE else write_serializable
        cells.append(
            Cell(
                earlier=earlier,
                later=later,
                later_fails=outcome.exception is not None,
                exception=outcome.exception,
                effect=outcome.effect,
                source=source,
                note=note,
                condition=condition if outcome.exception is not None else ALWAYS,
            )
        )
    return tuple(cells)


_RLC_SOURCES = (
    *DELTA_SOURCES[:2],
    "spec 004 'Write conflicts with row-level concurrency' (Databricks Runtime 14.2+, deletion vectors, no partitions)",
    *DELTA_SOURCES[2:],
)
_DESCRIPTION = (
    "Databricks row-level concurrency (Runtime 14.2+, deletion vectors, no partitions). UPDATE, DELETE and "
    "MERGE fail each other only when they modify the same rows; {insert}. occflow cannot see rows and treats "
    "any overlap as the same rows (the cells whose note says so). OPTIMIZE runs beside every data write. "
    "INSERT OVERWRITE, TRUNCATE, metadata changes and protocol upgrades conflict as without row-level concurrency."
)

DELTA_SERIALIZABLE_RLC = Profile(
    name="delta-serializable-rlc",
    title="Delta Lake on Databricks, Serializable, row-level concurrency",
    table_format="delta",
    isolation="Serializable with row-level concurrency (deletion vectors, no partitions, Databricks Runtime 14.2+)",
    rules=RuleKind.FOOTPRINT,
    overwrite_scope=OverwriteScope.FILES_READ,
    sources=_RLC_SOURCES,
    cells=cells_for(IsolationLevel.SERIALIZABLE),
    description=_DESCRIPTION.format(insert="a blind INSERT before them fails them too, on the same rows only"),
    extra_kinds=DELTA_EXTRA_KINDS,
    compaction_follows_rows=True,
    validator=RowLevelConflictChecker(IsolationLevel.SERIALIZABLE),
)

DELTA_WRITE_SERIALIZABLE_RLC = Profile(
    name="delta-write-serializable-rlc",
    title="Delta Lake on Databricks, WriteSerializable, row-level concurrency",
    table_format="delta",
    isolation="WriteSerializable with row-level concurrency (deletion vectors, no partitions, Databricks Runtime 14.2+)",
    rules=RuleKind.FOOTPRINT,
    overwrite_scope=OverwriteScope.FILES_READ,
    sources=_RLC_SOURCES,
    cells=cells_for(IsolationLevel.WRITE_SERIALIZABLE),
    description=_DESCRIPTION.format(insert="a blind INSERT never fails them"),
    extra_kinds=DELTA_EXTRA_KINDS,
    compaction_follows_rows=True,
    validator=RowLevelConflictChecker(IsolationLevel.WRITE_SERIALIZABLE),
)

PROFILES: tuple[Profile, ...] = (DELTA_SERIALIZABLE_RLC, DELTA_WRITE_SERIALIZABLE_RLC)

# --------------------------------------------------------------------------------------------
# OPTIMIZE ... ZORDER BY (issue 23): the exception Databricks' row-level table names
# --------------------------------------------------------------------------------------------

DBX_RLC_ZORDER = (
    "docs.databricks.com/aws/en/optimizations/isolation/row-level-concurrency, 'Conflict matrix with "
    "row-level concurrency', row OPTIMIZE x column UPDATE, DELETE, MERGE INTO: can conflict when ZORDER BY is "
    "used, cannot conflict otherwise"
)
N_ZORDER = (
    "OPTIMIZE ... ZORDER BY rewrites the rows it compacts in a new order, so deletion vectors do not let it "
    "commit beside a row-level write: the pair keeps its cell without row-level concurrency (delta.DELTA_MATRIX)"
)

#: The pairs in which an ``OPTIMIZE ... ZORDER BY`` keeps the cell without row-level concurrency:
#: (earlier, later, source, note). The page's table names the pair once; it holds in both
#: commit orders. Two OPTIMIZEs already keep theirs (``RLC_CHANGES``).
ZORDER_CHANGES: tuple[tuple[Operation, Operation, str, str], ...] = (
    *((Op.OPTIMIZE, later, src(DBX_RLC_ZORDER, RLC_CHECK), N_ZORDER) for later in _ROW_LEVEL),
    *((earlier, Op.OPTIMIZE, src(DBX_RLC_ZORDER, RLC_CHECK), N_ZORDER) for earlier in _ROW_LEVEL),
)

#: Each row-level concurrency profile, and the profile whose matrix an ``OPTIMIZE ... ZORDER BY``
#: on its table follows: the same isolation level without row-level concurrency, which holds
#: every ``ZORDER_CHANGES`` cell (``zorder_cells``) and keeps the other pairs at least as apart.
ZORDER_PROFILE: dict[str, str] = {
    DELTA_SERIALIZABLE_RLC.name: "delta-serializable",
    DELTA_WRITE_SERIALIZABLE_RLC.name: "delta-write-serializable",
}


def zorder_cells(level: IsolationLevel) -> tuple[Cell, ...]:
    """The ``ZORDER_CHANGES`` pairs at one isolation level: ``DELTA_MATRIX``'s outcome (the cell
    without row-level concurrency), citing the ZORDER exception."""
    changes = {(row[0], row[1]): row for row in ZORDER_CHANGES}
    return tuple(
        cell_at(level, row, *changes[(row[0], row[1])][2:4])
        for row in DELTA_MATRIX if (row[0], row[1]) in changes
    )
