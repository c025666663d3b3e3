"""The ``delta-rs`` profile: what delta-rs (``deltalake`` 1.6.6) really does, cell by cell.

The documented Delta matrices (``delta-serializable``, ``delta-write-serializable`` in
``delta.py``) describe Delta Lake as the docs and delta-spark's checker define it. delta-rs
implements the same checks (crates/core/src/kernel/transaction/conflict_checker.rs) with three
differences that change the outcome of real pairs, each observed by the conformance run
(``occflow conformance --engine delta-rs``, docs/conformance/delta-rs.md):

1. No read predicate means "read every file". ``DeltaOperation::read_predicate`` is ``None`` for
   appends, OPTIMIZE and metadata changes, and delta-rs then counts every file of the
   transaction's snapshot as read (``TransactionInfo::read_files``): an append fails with
   ConcurrentDeleteRead when any concurrent commit removed a data file, in any partition.
2. Appends are never blind. delta-rs writes no ``isBlindAppend`` into commitInfo, so
   ``WinningCommitSummary::is_blind_append`` is false and an append's files count against every
   reader whose predicate matches them, under WriteSerializable as well as Serializable: the
   WriteSerializable exemption for blind INSERTs does not exist here.
3. Removes with ``dataChange=false`` (OPTIMIZE) are not checked against the later job's reads or
   removes (delta-io/delta-rs#3982). A blind append survives a concurrent OPTIMIZE, but two
   concurrent OPTIMIZEs of the same files both commit and the table then holds the compacted
   rows twice (tests/engines/test_deltars.py shows it).

Both isolation levels behave the same for these pairs: with no blind appends the only
difference left is the SnapshotIsolation downgrade of no-data-change commits, which skips an
added-files check that OPTIMIZE (no read predicate) never fails anyway. So there is one profile.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..footprint import Footprint
from ..kinds import ConflictKind
from ..operations import Operation
from ..operations import Operation as Op
from .delta import (
    Conflict,
    IsolationLevel,
    check_app_ids,
    check_no_metadata_updates,
    check_protocol_compatibility,
)
from .model import Cell, Effect, OverwriteScope, Profile, RuleKind

#: Operations whose ``DeltaOperation`` carries no read predicate in delta-rs.
NO_READ_PREDICATE: frozenset[Operation] = frozenset(
    {Op.INSERT_INTO, Op.OPTIMIZE, Op.ALTER_METADATA, Op.VACUUM}
)
#: Whole-table forms with no predicate either: ``write_deltalake(mode="overwrite")`` without a
#: predicate and ``DeltaTable.delete()`` without one (what the engine runs on an unpartitioned table).
#: A whole-table UPDATE / DELETE may still carry a predicate on other columns; a whole-table MERGE
#: is delta-rs's ``read_whole_table`` (no predicate: every added file counts).
NO_PREDICATE_WHEN_WHOLE_TABLE: frozenset[Operation] = frozenset({Op.INSERT_OVERWRITE, Op.TRUNCATE})


def reads_every_file(fp: Footprint) -> bool:
    """delta-rs counts every file of the snapshot as read when the operation has no predicate,
    and then runs no added-files check (``read_predicates`` is ``None``, ``read_whole_table`` false)."""
    if fp.operation in NO_READ_PREDICATE:
        return True
    return fp.read_whole_table and fp.operation in NO_PREDICATE_WHEN_WHOLE_TABLE


def _data_removes(winner: Footprint) -> list[str]:
    # delta-rs#3982: removes with dataChange=false (compaction) do not conflict with reads/removes
    return sorted(f.path for f in winner.files_removed) if winner.data_change else []


def check_added_files_read(current: Footprint, winner: Footprint, level: IsolationLevel) -> Conflict | None:
    """``check_for_added_files_that_should_have_been_read_by_current_txn`` as delta-rs runs it.

    Every file the winner added counts (delta-rs records no blind appends). Only a transaction
    with a read predicate (or a whole-table MERGE) can match them: appends, OPTIMIZE and ALTER
    never fail here. Serializable downgrades no-data-change commits to SnapshotIsolation.
    """
    if level is IsolationLevel.SERIALIZABLE and not current.data_change and not current.metadata_change:
        return None
    if reads_every_file(current):
        return None
    for added in sorted(winner.files_added):
        if current.read_partitions is None or added.partition in current.read_partitions or added.partition == "":
            return (
                ConflictKind.CONCURRENT_APPEND,
                "Commit failed: a concurrent transactions added new data "
                f"({added.path}, by a concurrent {winner.operation.value}).",
            )
    return None


def check_deleted_files_read(current: Footprint, winner: Footprint, level: IsolationLevel) -> Conflict | None:
    """``check_for_deleted_files_against_current_txn_read_files``: a file this job read is gone."""
    removed = _data_removes(winner)
    if not removed:
        return None
    read = {f.path for f in current.files_read}
    hit = next((p for p in removed if p in read), None)
    if hit is None and (reads_every_file(current) or current.read_whole_table):
        hit = removed[0]
    if hit is None:
        return None
    return (
        ConflictKind.CONCURRENT_DELETE_READ,
        f"Commit failed: a concurrent transaction deleted data this operation read ({hit}, by a "
        f"concurrent {winner.operation.value}).",
    )


def check_deleted_files_deleted(current: Footprint, winner: Footprint, level: IsolationLevel) -> Conflict | None:
    """``check_for_deleted_files_against_current_txn_deleted_files``: a file removed twice."""
    mine = {f.path for f in current.files_removed}
    hit = next((p for p in _data_removes(winner) if p in mine), None)
    if hit is None:
        return None
    return (
        ConflictKind.CONCURRENT_DELETE_DELETE,
        f"Commit failed: a concurrent transaction deleted the same data your transaction deletes ({hit}).",
    )


#: ``ConflictChecker::check_conflicts`` in delta-rs's order.
CHECKS = (
    check_protocol_compatibility,
    check_no_metadata_updates,
    check_added_files_read,
    check_deleted_files_read,
    check_deleted_files_deleted,
    check_app_ids,
)


@dataclass(frozen=True)
class DeltaRsConflictChecker:
    """A ``Validator``: the first of delta-rs's checks that fails ``current`` against ``winner``."""

    table_isolation: IsolationLevel = IsolationLevel.WRITE_SERIALIZABLE

    def __call__(self, current: Footprint, winner: Footprint) -> Conflict | None:
        for check in CHECKS:
            found = check(current, winner, self.table_isolation)
            if found is not None:
                return found
        return None


# --------------------------------------------------------------------------------------------
# The literal matrix (observed with deltalake 1.6.6; both isolation levels alike)
# --------------------------------------------------------------------------------------------

CC = "delta-rs crates/core/src/kernel/transaction/conflict_checker.rs"
S_META = f"{CC} check_no_metadata_updates"
S_ADDED = f"{CC} check_for_added_files_that_should_have_been_read_by_current_txn (appends are not blind in delta-rs)"
S_DEL_READ = f"{CC} check_for_deleted_files_against_current_txn_read_files"
S_DEL_READ_ALL = f"{S_DEL_READ} (no read predicate: every file of the snapshot counts as read)"
S_NO_PRED = f"{CC}: no read predicate, so no added-files check; the winner removed no data file"
S_DC_FALSE = f"{CC} with delta-io/delta-rs#3982: OPTIMIZE's dataChange=false removes are not checked"
OBSERVED = "observed: occflow conformance --engine delta-rs, deltalake 1.6.6"

N_APPEND_FAILS = (
    "differs from the docs: delta-rs's append has no read predicate, so it 'read' every file and any "
    "concurrent data-changing removal fails it (in any partition)"
)
N_NOT_BLIND = (
    "differs from delta-write-serializable: delta-rs records no isBlindAppend, so the appended file "
    "counts against the later job's partition predicate at both isolation levels"
)
N_ALTER_AFTER_REWRITE = "differs from the docs: ALTER has no read predicate and so counts every file as read"
N_OPT_OPT = (
    "differs from the docs, and loses data integrity: both compactions commit and the partition's rows "
    "appear twice (delta-rs does not check dataChange=false removes against each other), so admission "
    "never lets two compactions of one partition run together (Profile.conflicts)"
)
N_AFTER_OPTIMIZE_APPEND = "OPTIMIZE's removes carry dataChange=false and are not checked"
N_APPEND_FIRST = "the earlier commit's new file lands in the partition the later job read; that check runs first"
N_NO_PREDICATE = (
    "with the partition as predicate; without a predicate (the whole table, e.g. an unpartitioned table) "
    "delta-rs runs no added-files check: ConcurrentDeleteRead after a data-changing removal, a commit after an "
    "append (the appended rows survive), and after OPTIMIZE a commit that leaves the compacted rows in place "
    "(delta-rs#3982; observed with deltalake 1.6.6)"
)

OK_APPEND = (None, Effect.APPEND)
OK_APPLIED = (None, Effect.APPLIED)
OK_COMPACTS = (None, Effect.COMPACTION_COMPLETES)
APPEND = (ConflictKind.CONCURRENT_APPEND, Effect.LATER_FAILS)
DELETE_READ = (ConflictKind.CONCURRENT_DELETE_READ, Effect.LATER_FAILS)
META = (ConflictKind.METADATA_CHANGED, Effect.LATER_FAILS)

Outcome = tuple[ConflictKind | None, Effect]

# (earlier, later, outcome, source, note): two jobs on one partition, "earlier" commits first.
DELTA_RS_MATRIX: tuple[tuple[Operation, Operation, Outcome, str, str], ...] = (
    # earlier: INSERT INTO (delta-rs append)
    (Op.INSERT_INTO, Op.INSERT_INTO, OK_APPEND, S_NO_PRED, ""),
    (Op.INSERT_INTO, Op.INSERT_OVERWRITE, APPEND, S_ADDED, f"{N_NOT_BLIND}; {N_NO_PREDICATE}"),
    (Op.INSERT_INTO, Op.TRUNCATE, APPEND, S_ADDED, f"{N_NOT_BLIND}; {N_NO_PREDICATE}"),
    (Op.INSERT_INTO, Op.UPDATE, APPEND, S_ADDED, N_NOT_BLIND),
    (Op.INSERT_INTO, Op.DELETE, APPEND, S_ADDED, N_NOT_BLIND),
    (Op.INSERT_INTO, Op.MERGE, APPEND, S_ADDED, N_NOT_BLIND),
    (Op.INSERT_INTO, Op.OPTIMIZE, OK_COMPACTS, S_NO_PRED, "the appended file is not in OPTIMIZE's snapshot"),
    (Op.INSERT_INTO, Op.ALTER_METADATA, OK_APPLIED, S_NO_PRED, ""),
    # earlier: INSERT OVERWRITE (write mode=overwrite with the partition as predicate)
    (Op.INSERT_OVERWRITE, Op.INSERT_INTO, DELETE_READ, S_DEL_READ_ALL, N_APPEND_FAILS),
    (Op.INSERT_OVERWRITE, Op.INSERT_OVERWRITE, APPEND, S_ADDED, f"{N_APPEND_FIRST}; {N_NO_PREDICATE}"),
    (Op.INSERT_OVERWRITE, Op.TRUNCATE, APPEND, S_ADDED, f"{N_APPEND_FIRST}; {N_NO_PREDICATE}"),
    (Op.INSERT_OVERWRITE, Op.UPDATE, APPEND, S_ADDED, N_APPEND_FIRST),
    (Op.INSERT_OVERWRITE, Op.DELETE, APPEND, S_ADDED, N_APPEND_FIRST),
    (Op.INSERT_OVERWRITE, Op.MERGE, APPEND, S_ADDED, N_APPEND_FIRST),
    (Op.INSERT_OVERWRITE, Op.OPTIMIZE, DELETE_READ, S_DEL_READ_ALL, ""),
    (Op.INSERT_OVERWRITE, Op.ALTER_METADATA, DELETE_READ, S_DEL_READ_ALL, N_ALTER_AFTER_REWRITE),
    # earlier: TRUNCATE (delete with the partition as predicate: removes, adds nothing)
    (Op.TRUNCATE, Op.INSERT_INTO, DELETE_READ, S_DEL_READ_ALL, N_APPEND_FAILS),
    (Op.TRUNCATE, Op.INSERT_OVERWRITE, DELETE_READ, S_DEL_READ, N_NO_PREDICATE),
    (Op.TRUNCATE, Op.TRUNCATE, DELETE_READ, S_DEL_READ, N_NO_PREDICATE),
    (Op.TRUNCATE, Op.UPDATE, DELETE_READ, S_DEL_READ, ""),
    (Op.TRUNCATE, Op.DELETE, DELETE_READ, S_DEL_READ, ""),
    (Op.TRUNCATE, Op.MERGE, DELETE_READ, S_DEL_READ, ""),
    (Op.TRUNCATE, Op.OPTIMIZE, DELETE_READ, S_DEL_READ_ALL, ""),
    (Op.TRUNCATE, Op.ALTER_METADATA, DELETE_READ, S_DEL_READ_ALL, N_ALTER_AFTER_REWRITE),
    # earlier: UPDATE
    (Op.UPDATE, Op.INSERT_INTO, DELETE_READ, S_DEL_READ_ALL, N_APPEND_FAILS),
    (Op.UPDATE, Op.INSERT_OVERWRITE, APPEND, S_ADDED, f"{N_APPEND_FIRST}; {N_NO_PREDICATE}"),
    (Op.UPDATE, Op.TRUNCATE, APPEND, S_ADDED, f"{N_APPEND_FIRST}; {N_NO_PREDICATE}"),
    (Op.UPDATE, Op.UPDATE, APPEND, S_ADDED, N_APPEND_FIRST),
    (Op.UPDATE, Op.DELETE, APPEND, S_ADDED, N_APPEND_FIRST),
    (Op.UPDATE, Op.MERGE, APPEND, S_ADDED, N_APPEND_FIRST),
    (Op.UPDATE, Op.OPTIMIZE, DELETE_READ, S_DEL_READ_ALL, ""),
    (Op.UPDATE, Op.ALTER_METADATA, DELETE_READ, S_DEL_READ_ALL, N_ALTER_AFTER_REWRITE),
    # earlier: DELETE
    (Op.DELETE, Op.INSERT_INTO, DELETE_READ, S_DEL_READ_ALL, N_APPEND_FAILS),
    (Op.DELETE, Op.INSERT_OVERWRITE, APPEND, S_ADDED, f"{N_APPEND_FIRST}; {N_NO_PREDICATE}"),
    (Op.DELETE, Op.TRUNCATE, APPEND, S_ADDED, f"{N_APPEND_FIRST}; {N_NO_PREDICATE}"),
    (Op.DELETE, Op.UPDATE, APPEND, S_ADDED, N_APPEND_FIRST),
    (Op.DELETE, Op.DELETE, APPEND, S_ADDED, N_APPEND_FIRST),
    (Op.DELETE, Op.MERGE, APPEND, S_ADDED, N_APPEND_FIRST),
    (Op.DELETE, Op.OPTIMIZE, DELETE_READ, S_DEL_READ_ALL, ""),
    (Op.DELETE, Op.ALTER_METADATA, DELETE_READ, S_DEL_READ_ALL, N_ALTER_AFTER_REWRITE),
    # earlier: MERGE
    (Op.MERGE, Op.INSERT_INTO, DELETE_READ, S_DEL_READ_ALL, N_APPEND_FAILS),
    (Op.MERGE, Op.INSERT_OVERWRITE, APPEND, S_ADDED, f"{N_APPEND_FIRST}; {N_NO_PREDICATE}"),
    (Op.MERGE, Op.TRUNCATE, APPEND, S_ADDED, f"{N_APPEND_FIRST}; {N_NO_PREDICATE}"),
    (Op.MERGE, Op.UPDATE, APPEND, S_ADDED, N_APPEND_FIRST),
    (Op.MERGE, Op.DELETE, APPEND, S_ADDED, N_APPEND_FIRST),
    (Op.MERGE, Op.MERGE, APPEND, S_ADDED, N_APPEND_FIRST),
    (Op.MERGE, Op.OPTIMIZE, DELETE_READ, S_DEL_READ_ALL, ""),
    (Op.MERGE, Op.ALTER_METADATA, DELETE_READ, S_DEL_READ_ALL, N_ALTER_AFTER_REWRITE),
    # earlier: OPTIMIZE (compact; dataChange=false)
    (Op.OPTIMIZE, Op.INSERT_INTO, OK_APPEND, S_DC_FALSE, N_AFTER_OPTIMIZE_APPEND),
    (Op.OPTIMIZE, Op.INSERT_OVERWRITE, APPEND, S_ADDED, f"{N_APPEND_FIRST}; {N_NO_PREDICATE}"),
    (Op.OPTIMIZE, Op.TRUNCATE, APPEND, S_ADDED, f"{N_APPEND_FIRST}; {N_NO_PREDICATE}"),
    (Op.OPTIMIZE, Op.UPDATE, APPEND, S_ADDED, N_APPEND_FIRST),
    (Op.OPTIMIZE, Op.DELETE, APPEND, S_ADDED, N_APPEND_FIRST),
    (Op.OPTIMIZE, Op.MERGE, APPEND, S_ADDED, N_APPEND_FIRST),
    (Op.OPTIMIZE, Op.OPTIMIZE, (None, Effect.DUPLICATES_ROWS), S_DC_FALSE, N_OPT_OPT),
    (Op.OPTIMIZE, Op.ALTER_METADATA, OK_APPLIED, S_DC_FALSE, N_AFTER_OPTIMIZE_APPEND),
    # earlier: ALTER TABLE (set properties: a Metadata action)
    (Op.ALTER_METADATA, Op.INSERT_INTO, META, S_META, ""),
    (Op.ALTER_METADATA, Op.INSERT_OVERWRITE, META, S_META, ""),
    (Op.ALTER_METADATA, Op.TRUNCATE, META, S_META, ""),
    (Op.ALTER_METADATA, Op.UPDATE, META, S_META, ""),
    (Op.ALTER_METADATA, Op.DELETE, META, S_META, ""),
    (Op.ALTER_METADATA, Op.MERGE, META, S_META, ""),
    (Op.ALTER_METADATA, Op.OPTIMIZE, META, S_META, ""),
    (Op.ALTER_METADATA, Op.ALTER_METADATA, META, S_META, ""),
)


# The same pair, another form of the earlier job, another kind: the later job fails either way
# (so admission is unchanged), but the kind drives the retry policy, so a cell names both.
S_WHOLE_FILES = (
    f"{S_DEL_READ}: a DELETE whose predicate covers whole files removes them and adds none, so the "
    "added-files check passes and the read-files check raises ConcurrentDeleteRead (observed: "
    "tests/engines/test_deltars_profile.py; upstream delete_conflicts_with_read, "
    "whole_table_read_vs_remove and fact (b) in tests/conformance_upstream/test_deltars_conflict_checker.py)"
)
S_FEATURE_UPGRADE = (
    f"{CC} check_protocol_compatibility, which runs before check_no_metadata_updates: an ALTER that adds a "
    "table feature (alter.add_feature) commits a Protocol action and the later job fails with ProtocolChanged "
    "(observed: tests/engines/test_deltars_profile.py; upstream test_concurrent_protocol_upgrade)"
)
_ANY_LATER = (
    Op.INSERT_INTO, Op.INSERT_OVERWRITE, Op.TRUNCATE, Op.UPDATE, Op.DELETE, Op.MERGE, Op.OPTIMIZE, Op.ALTER_METADATA,
)  # not VACUUM: planned before a feature upgrade, real delta-rs's vacuum of a table with nothing
# to delete commits nothing, so no ProtocolChanged was ever seen for it (test_deltars_profile.py)

#: (earlier, later) -> (the other kinds delta-rs raises for the pair, the source saying when).
ALSO_RAISES: dict[tuple[Operation, Operation], tuple[tuple[ConflictKind, ...], str]] = {
    # a DELETE that removes whole files, then any job with a predicate on that partition
    (Op.DELETE, Op.INSERT_OVERWRITE): ((ConflictKind.CONCURRENT_DELETE_READ,), S_WHOLE_FILES),
    (Op.DELETE, Op.TRUNCATE): ((ConflictKind.CONCURRENT_DELETE_READ,), S_WHOLE_FILES),
    (Op.DELETE, Op.UPDATE): ((ConflictKind.CONCURRENT_DELETE_READ,), S_WHOLE_FILES),
    (Op.DELETE, Op.DELETE): ((ConflictKind.CONCURRENT_DELETE_READ,), S_WHOLE_FILES),
    (Op.DELETE, Op.MERGE): ((ConflictKind.CONCURRENT_DELETE_READ,), S_WHOLE_FILES),
    # an ALTER that upgrades the protocol (a table feature), then any job
    **{(Op.ALTER_METADATA, later): ((ConflictKind.PROTOCOL_CHANGED,), S_FEATURE_UPGRADE) for later in _ANY_LATER},
}


# VACUUM (deltalake 1.6.6 ``DeltaTable.vacuum``): it commits VACUUM START, deletes, then commits
# VACUUM END, both with commitInfo only (no add, no remove), so nothing it commits fails a job
# beside it; but its own commit has no read predicate (``DeltaOperation::VacuumStart``), so it
# counts every file as read and a VACUUM planned before a data-changing removal or a metadata
# change fails its START commit (measured) and deletes nothing. What it does beside a job that
# commits: it deletes the files removed by versions older than its retention (and, ``full=True``,
# files no log entry names), so a job running across it on an older snapshot reads deleted files
# and fails, not with a conflict but "Object at location ... not found" (never retried;
# tests/engines/test_maintenance_deltars.py reproduces it: an UPDATE planned before an OPTIMIZE
# and a VACUUM RETAIN 0 HOURS). Those cells say so (``Effect.DELETES_FILES_IN_USE``) and
# admission keeps VACUUM apart from every job that reads or writes data files.
S_VACUUM = (
    "delta-rs crates/core/src/operations/vacuum.rs (VACUUM START / END commit commitInfo only; files "
    "removed by versions older than the retention are deleted)"
)
S_VACUUM_COMMITS = f"{S_VACUUM}; {CC}: no add or remove, nothing for the later job to fail on"
S_VACUUM_READS_ALL = f"{S_VACUUM}; {S_DEL_READ_ALL} (VacuumStart has no read predicate)"
S_VACUUM_META = f"{S_VACUUM}; {S_META}"
N_VACUUM_IN_USE = (
    "both commit from one snapshot; under a retention shorter than the other job's run VACUUM deletes "
    "files that job's snapshot still reads (an OPTIMIZE or a rewrite removed them meanwhile): it fails "
    "with 'Object at location ... not found', not a conflict (never retried); with full=True an "
    "append's uncommitted files go too (observed: tests/engines/test_maintenance_deltars.py)"
)
N_VACUUM_FAILS = (
    "VACUUM's START commit counts every file as read: planned before a data-changing removal it fails "
    "and deletes nothing; differs from delta-spark (delta-write-serializable, delta-serializable), "
    "whose VACUUM START commits at the latest version and never fails"
)
N_VACUUM_AFTER_ALTER = (
    "differs from delta-spark (delta-write-serializable, delta-serializable): delta-rs's VACUUM START "
    "planned before a metadata change fails its first commit and deletes nothing; delta-spark's "
    "commits at the latest version"
)
N_VACUUM_NO_FILES = "an ALTER reads no data file; two VACUUMs delete the same unreferenced files and both commit"
IN_USE: Outcome = (None, Effect.DELETES_FILES_IN_USE)
_DATA_REMOVERS = (Op.INSERT_OVERWRITE, Op.TRUNCATE, Op.UPDATE, Op.DELETE, Op.MERGE)
_VACUUM_PEERS = (Op.INSERT_INTO, *_DATA_REMOVERS, Op.OPTIMIZE)
VACUUM_MATRIX: tuple[tuple[Operation, Operation, Outcome, str, str], ...] = (
    *((remover, Op.VACUUM, DELETE_READ, S_VACUUM_READS_ALL, N_VACUUM_FAILS) for remover in _DATA_REMOVERS),
    (Op.INSERT_INTO, Op.VACUUM, IN_USE, S_VACUUM_COMMITS, N_VACUUM_IN_USE),
    (Op.OPTIMIZE, Op.VACUUM, IN_USE, f"{S_VACUUM}; {S_DC_FALSE}", N_VACUUM_IN_USE),
    (Op.ALTER_METADATA, Op.VACUUM, META, S_VACUUM_META, N_VACUUM_AFTER_ALTER),
    *((Op.VACUUM, peer, IN_USE, S_VACUUM_COMMITS, N_VACUUM_IN_USE) for peer in _VACUUM_PEERS),
    (Op.VACUUM, Op.ALTER_METADATA, OK_APPLIED, S_VACUUM_COMMITS, N_VACUUM_NO_FILES),
    (Op.VACUUM, Op.VACUUM, OK_APPLIED, S_VACUUM_COMMITS, N_VACUUM_NO_FILES),
)


def _cells() -> tuple[Cell, ...]:
    cells = []
    for earlier, later, (exception, effect), source, note in (*DELTA_RS_MATRIX, *VACUUM_MATRIX):
        also, also_source = ALSO_RAISES.get((earlier, later), ((), ""))
        cells.append(
            Cell(
                earlier=earlier,
                later=later,
                later_fails=exception is not None,
                exception=exception,
                effect=effect,
                source="; ".join(part for part in (source, also_source, OBSERVED) if part),
                note=note,
                also_raises=also,
            )
        )
    return tuple(cells)


DELTA_RS = Profile(
    name="delta-rs",
    title="Delta Lake as delta-rs (deltalake 1.6.6) commits it",
    table_format="delta",
    isolation="WriteSerializable or Serializable: delta-rs behaves the same for these pairs",
    rules=RuleKind.FOOTPRINT,
    overwrite_scope=OverwriteScope.FILES_READ,
    sources=(
        "delta-io/delta-rs crates/core/src/kernel/transaction/conflict_checker.rs",
        "delta-io/delta-rs crates/core/src/protocol/mod.rs (DeltaOperation::read_predicate)",
        "delta-io/delta-rs#3982 (dataChange=false removes)",
        "docs/conformance/delta-rs.md (observed)",
    ),
    cells=_cells(),
    description=(
        "As delta-spark, except: appends are not blind (they fail overwrites, updates, deletes and merges "
        "of their partition at both isolation levels), operations without a read predicate (append, "
        "OPTIMIZE, ALTER) count every file as read (an append fails against any concurrent data-changing "
        "removal, in any partition), and OPTIMIZE's removes are not checked (two compactions both commit)."
    ),
    extra_kinds=(
        ConflictKind.CONCURRENT_DELETE_DELETE,
        ConflictKind.PROTOCOL_CHANGED,
        ConflictKind.CONCURRENT_TRANSACTION,
        ConflictKind.COMMIT_RETRIES_EXHAUSTED,
    ),
    reads_whole_table=(Operation.INSERT_INTO, Operation.OPTIMIZE, Operation.VACUUM),
    reads_whole_table_source=(
        "delta-io/delta-rs crates/core/src/protocol/mod.rs (DeltaOperation::read_predicate is None for "
        "Write/append, Optimize and VacuumStart; conflict_checker.rs then counts every file as read); "
        "observed on deltalake 1.6.6: an append on q fails with concurrent_delete_read after an UPDATE "
        "on p, a VACUUM after an UPDATE fails alike"
    ),
    validator=DeltaRsConflictChecker(),
)

PROFILES: tuple[Profile, ...] = (DELTA_RS,)
