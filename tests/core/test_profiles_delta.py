"""Delta Lake profiles: every cell against the literal table, the spec texts and the ported checker.

Three independent statements of the same rules check each other here:

- ``DELTA_MATRIX`` (the literal table in occflow/core/profiles/delta.py),
- the spec texts (003's write-conflicts table, 004's metadata and blind-append rules), restated
  below as data, and
- ``ConflictChecker`` (the port of Delta's ConflictChecker.scala) run on the canonical footprints
  of the two operations on one partition.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from occflow.core.errors import InvalidFootprintError, UnknownOperationError
from occflow.core.footprint import FileRef, Footprint
from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation as Op
from occflow.core.profiles import Effect, OverwriteScope, Profile, RuleKind, get_profile
from occflow.core.profiles.delta import (
    DELTA_MATRIX,
    DELTA_OPERATIONS,
    ConflictChecker,
    IsolationLevel,
    Outcome,
    canonical_footprint,
    isolation_level_to_use,
)

SERIALIZABLE = get_profile("delta-serializable")
WRITE_SERIALIZABLE = get_profile("delta-write-serializable")
LEVELS = {"serializable": SERIALIZABLE, "write-serializable": WRITE_SERIALIZABLE}
Row = tuple[Op, Op, Outcome, Outcome, str, str]

P, Q = "ds=2024-01-01", "ds=2024-01-02"
# The live files of each partition at the snapshot both transactions start from.
F_P = frozenset({FileRef(f"{P}/part-0.parquet", P), FileRef(f"{P}/part-1.parquet", P)})
F_Q = frozenset({FileRef(f"{Q}/part-0.parquet", Q)})
TABLE = F_P | F_Q


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _cell_id(level: str, row: Row) -> str:
    earlier, later, source = row[0], row[1], row[4]
    # The first citation names the spec row (003's table cell, a 004 rule); the last method of
    # Delta's code cited names the check that decides the cell.
    spec = _slug(source.split(";")[0].split(":")[0].replace("write conflicts", ""))
    code = re.findall(r"(?:ConflictChecker|OptimisticTransaction)\.(\w+)", source)
    return f"{level}:{earlier.value}->{later.value}[{spec}|{code[-1] if code else 'no-check'}]"


def _outcome(level: str, row: Row) -> Outcome:
    return row[2] if level == "serializable" else row[3]


CELL_CASES = [
    pytest.param(level, row, id=_cell_id(level, row)) for level in LEVELS for row in DELTA_MATRIX
]


def _footprints(earlier: Op, later: Op, *, earlier_on: str = P, later_on: str = P) -> tuple[Footprint, Footprint]:
    """Canonical footprints of two jobs that both start on the same snapshot."""
    live = {P: F_P, Q: F_Q}
    first = canonical_footprint(earlier, earlier_on, live[earlier_on], new_file="earlier.parquet")
    second = canonical_footprint(later, later_on, live[later_on], new_file="later.parquet")
    return first, second


# --- the literal table ------------------------------------------------------------------------


def test_matrix_holds_each_of_the_81_pairs_exactly_once() -> None:
    pairs = [(row[0], row[1]) for row in DELTA_MATRIX]
    assert len(pairs) == len(set(pairs)) == 81
    assert {a for a, _ in pairs} == {b for _, b in pairs} == set(DELTA_OPERATIONS)


@pytest.mark.parametrize("profile", [SERIALIZABLE, WRITE_SERIALIZABLE], ids=lambda p: p.name)
def test_profiles_validate_by_footprint_and_overwrite_only_files_read(profile: Profile) -> None:
    assert profile.rules is RuleKind.FOOTPRINT
    assert profile.overwrite_scope is OverwriteScope.FILES_READ
    assert profile.validator is not None
    assert set(profile.operations) == {*DELTA_OPERATIONS, Op.VACUUM}
    assert profile.table_format == "delta"


@pytest.mark.parametrize(("level", "row"), CELL_CASES)
def test_profile_cell_is_the_literal_row(level: str, row: Row) -> None:
    earlier, later, _, _, source, note = row
    outcome = _outcome(level, row)
    cell = LEVELS[level].cell(earlier, later)
    assert cell.exception == outcome.exception
    assert cell.effect == outcome.effect
    assert cell.later_fails == (outcome.exception is not None)
    assert cell.source == source and cell.note == note
    # Every cell cites the documentation and the code it rests on.
    assert re.search(r"spec 00[34]|INSERT OVERWRITE/TRUNCATE", cell.source), cell.source
    assert re.search(r"ConflictChecker|OptimisticTransaction", cell.source), cell.source


@pytest.mark.parametrize(("level", "row"), CELL_CASES)
def test_checker_on_canonical_footprints_reproduces_the_cell(level: str, row: Row) -> None:
    profile = LEVELS[level]
    earlier, later = row[0], row[1]
    cell = profile.cell(earlier, later)
    winner, current = _footprints(earlier, later)
    assert profile.validator is not None
    verdict = profile.validator(current, winner)
    if cell.later_fails:
        assert verdict is not None, f"{cell.source}: the checker lets {later.value} commit"
        assert verdict[0] is cell.exception, verdict[1]
        assert verdict[1]  # the loser gets a reason
    else:
        assert verdict is None, f"{cell.source}: the checker fails {later.value}: {verdict}"


# --- the spec texts, restated independently of the module ---------------------------------------

# Spec 003's write-conflicts table: (group, group) -> (can conflict in Serializable, in WriteSerializable).
_GROUPS = {"INSERT": (Op.INSERT_INTO,), "UDM": (Op.UPDATE, Op.DELETE, Op.MERGE), "OPTIMIZE": (Op.OPTIMIZE,)}
SPEC_003_TABLE = {
    ("INSERT", "INSERT"): (False, False),  # "Cannot conflict"
    ("UDM", "INSERT"): (True, False),  # "Can conflict in Serializable, cannot conflict in WriteSerializable"
    ("UDM", "UDM"): (True, True),  # "Can conflict in Serializable and WriteSerializable"
    ("OPTIMIZE", "INSERT"): (False, False),  # "Cannot conflict"
    ("OPTIMIZE", "UDM"): (True, True),
    ("OPTIMIZE", "OPTIMIZE"): (True, True),
}
SPEC_003_CASES = [
    pytest.param(level, a, b, expected[0 if level == "serializable" else 1], id=f"{level}:{a.value}x{b.value}[spec-003-{ga}x{gb}]")
    for (ga, gb), expected in SPEC_003_TABLE.items()
    for a in _GROUPS[ga]
    for b in _GROUPS[gb]
    for level in LEVELS
]


@pytest.mark.parametrize(("level", "a", "b", "can_conflict"), SPEC_003_CASES)
def test_pairs_conflict_as_spec_003_write_conflicts_table_says(level: str, a: Op, b: Op, can_conflict: bool) -> None:
    profile = LEVELS[level]
    assert profile.conflicts(a, b) is can_conflict


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("later", DELTA_OPERATIONS, ids=lambda op: op.value)
def test_metadata_change_fails_every_concurrent_write_spec_004(level: str, later: Op) -> None:
    profile = LEVELS[level]
    cell = profile.cell(Op.ALTER_METADATA, later)
    assert cell.exception is ConflictKind.METADATA_CHANGED


@pytest.mark.parametrize("later", [op for op in DELTA_OPERATIONS if op is not Op.UPGRADE_PROTOCOL], ids=lambda op: op.value)
def test_blind_append_fails_nothing_under_write_serializable_spec_004(later: Op) -> None:
    assert not WRITE_SERIALIZABLE.later_fails(Op.INSERT_INTO, later)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("other", DELTA_OPERATIONS, ids=lambda op: op.value)
def test_protocol_upgrade_conflicts_with_every_operation_in_both_orders_spec_004(level: str, other: Op) -> None:
    """REORG ... APPLY (UPGRADE ...): "conflicts with all ongoing operations" (spec 004)."""
    profile = LEVELS[level]
    first = profile.cell(Op.UPGRADE_PROTOCOL, other)
    assert first.exception is ConflictKind.PROTOCOL_CHANGED
    assert "REORG to apply an upgrade" in first.source and "checkProtocolCompatibility" in first.source
    assert profile.cell(other, Op.UPGRADE_PROTOCOL).later_fails
    assert profile.conflicts(Op.UPGRADE_PROTOCOL, other)


def test_protocol_upgrade_after_a_blind_append_fails_even_under_write_serializable() -> None:
    # The upgrade changes metadata, so Delta counts blind appends against it (checkForAddedFiles...).
    cell = WRITE_SERIALIZABLE.cell(Op.INSERT_INTO, Op.UPGRADE_PROTOCOL)
    assert cell.exception is ConflictKind.CONCURRENT_APPEND
    append, upgrade = _footprints(Op.INSERT_INTO, Op.UPGRADE_PROTOCOL)
    assert upgrade.protocol_change and upgrade.metadata_change and upgrade.read_whole_table
    assert WRITE_SERIALIZABLE.validator is not None
    assert WRITE_SERIALIZABLE.validator(replace(upgrade, metadata_change=False, protocol_change=False), append) is None


@pytest.mark.parametrize("later", [Op.INSERT_OVERWRITE, Op.TRUNCATE, Op.UPDATE, Op.DELETE, Op.MERGE], ids=lambda op: op.value)
def test_blind_append_fails_a_later_reader_under_serializable_with_concurrent_append_spec_003(later: Op) -> None:
    assert SERIALIZABLE.cell(Op.INSERT_INTO, later).exception is ConflictKind.CONCURRENT_APPEND


def test_write_serializable_overwrite_after_append_keeps_the_appended_rows() -> None:
    cell = WRITE_SERIALIZABLE.cell(Op.INSERT_INTO, Op.INSERT_OVERWRITE)
    assert not cell.later_fails and cell.effect is Effect.APPLIED
    assert "survive" in cell.note
    # The overwrite removes only what it read: the earlier append's file is not among its removals.
    append, overwrite = _footprints(Op.INSERT_INTO, Op.INSERT_OVERWRITE)
    assert not (append.files_added & overwrite.files_removed)


def test_cells_where_docs_and_code_differ_say_so() -> None:
    for profile in (SERIALIZABLE, WRITE_SERIALIZABLE):
        optimize_twice = profile.cell(Op.OPTIMIZE, Op.OPTIMIZE)
        assert optimize_twice.exception is ConflictKind.CONCURRENT_DELETE_READ
        assert "ConcurrentDeleteDelete" in optimize_twice.note and "differ" in optimize_twice.note
        assert "differs" in profile.cell(Op.OPTIMIZE, Op.UPDATE).note


# --- the checker beyond one partition -----------------------------------------------------------

DISJOINT_CASES = [
    pytest.param(level, earlier, later, id=f"{level}:{earlier.value}@q->{later.value}@p")
    for level in LEVELS
    for earlier in DELTA_OPERATIONS
    for later in DELTA_OPERATIONS
]


@pytest.mark.parametrize(("level", "earlier", "later"), DISJOINT_CASES)
def test_disjoint_partitions_conflict_only_through_metadata(level: str, earlier: Op, later: Op) -> None:
    profile = LEVELS[level]
    winner, current = _footprints(earlier, later, earlier_on=Q, later_on=P)
    assert profile.validator is not None
    verdict = profile.validator(current, winner)
    if earlier is Op.UPGRADE_PROTOCOL:
        assert verdict is not None and verdict[0] is ConflictKind.PROTOCOL_CHANGED
    elif earlier is Op.ALTER_METADATA:
        assert verdict is not None and verdict[0] is ConflictKind.METADATA_CHANGED
    elif later is Op.UPGRADE_PROTOCOL:  # it depends on every file of the table
        assert verdict is not None and earlier is not Op.ALTER_METADATA
    else:
        assert verdict is None, verdict


def _merge_without_partition_predicate() -> Footprint:
    return canonical_footprint(Op.MERGE, P, F_P, new_file="merge.parquet", whole_table=TABLE)


def test_merge_without_partition_predicate_loses_to_append_elsewhere_only_under_serializable() -> None:
    append_q = canonical_footprint(Op.INSERT_INTO, Q, F_Q, new_file="append-q.parquet")
    merge = _merge_without_partition_predicate()
    assert merge.read_partitions is None
    s = SERIALIZABLE.validator
    ws = WRITE_SERIALIZABLE.validator
    assert s is not None and ws is not None
    verdict = s(merge, append_q)
    assert verdict is not None and verdict[0] is ConflictKind.CONCURRENT_APPEND
    assert Q in verdict[1]
    assert ws(merge, append_q) is None


@pytest.mark.parametrize("level", LEVELS)
def test_merge_without_partition_predicate_loses_to_update_elsewhere(level: str) -> None:
    profile = LEVELS[level]
    update_q = canonical_footprint(Op.UPDATE, Q, F_Q, new_file="update-q.parquet")
    assert profile.validator is not None
    verdict = profile.validator(_merge_without_partition_predicate(), update_q)
    # The update's rewritten file lands in a partition the merge read: the added-files check
    # fires before the merge's read of the removed file is looked at.
    assert verdict is not None and verdict[0] is ConflictKind.CONCURRENT_APPEND
    # With the partition in its condition the same merge does not conflict.
    narrow = canonical_footprint(Op.MERGE, P, F_P, new_file="merge.parquet")
    assert profile.validator(narrow, update_q) is None


@pytest.mark.parametrize("level", LEVELS)
def test_whole_table_reader_loses_to_any_removal(level: str) -> None:
    profile = LEVELS[level]
    # An OPTIMIZE elsewhere adds a file too, so strip the adds to reach the delete-read check.
    truncate_q = canonical_footprint(Op.TRUNCATE, Q, F_Q)
    whole_reader = Footprint(operation=Op.UPDATE, read_partitions=None, write_partitions=frozenset({P}))
    assert profile.validator is not None
    verdict = profile.validator(whole_reader, truncate_q)
    assert verdict is not None and verdict[0] is ConflictKind.CONCURRENT_DELETE_READ


@pytest.mark.parametrize("level", LEVELS)
def test_same_application_transaction_id_is_a_concurrent_transaction(level: str) -> None:
    profile = LEVELS[level]
    first = canonical_footprint(Op.INSERT_INTO, P, F_P, new_file="batch-1.parquet", app_id="stream-1")
    second = canonical_footprint(Op.INSERT_INTO, P, F_P, new_file="batch-2.parquet", app_id="stream-1")
    other = canonical_footprint(Op.INSERT_INTO, P, F_P, new_file="batch-3.parquet", app_id="stream-2")
    assert profile.validator is not None
    verdict = profile.validator(second, first)
    assert verdict is not None and verdict[0] is ConflictKind.CONCURRENT_TRANSACTION
    assert "stream-1" in verdict[1]
    assert profile.validator(other, first) is None


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("later", DELTA_OPERATIONS, ids=lambda op: op.value)
def test_protocol_change_fails_every_later_transaction(level: str, later: Op) -> None:
    profile = LEVELS[level]
    upgrade = Footprint(operation=Op.ALTER_METADATA, protocol_change=True, metadata_change=True)
    current = canonical_footprint(later, Q, F_Q)
    assert profile.validator is not None
    verdict = profile.validator(current, upgrade)
    # Protocol is checked before metadata, so an upgrade that also sets properties says so.
    assert verdict is not None and verdict[0] is ConflictKind.PROTOCOL_CHANGED


def test_write_serializable_counts_blind_appends_when_the_later_job_changes_metadata() -> None:
    append, update = _footprints(Op.INSERT_INTO, Op.UPDATE)
    evolving = replace(update, metadata_change=True)  # e.g. an UPDATE/MERGE with schema evolution
    assert WRITE_SERIALIZABLE.validator is not None
    assert WRITE_SERIALIZABLE.validator(update, append) is None
    verdict = WRITE_SERIALIZABLE.validator(evolving, append)
    assert verdict is not None and verdict[0] is ConflictKind.CONCURRENT_APPEND


def test_files_removed_twice_without_being_read_is_delete_delete() -> None:
    # Delta raises ConcurrentDeleteDelete only when the loser did not register the file as read
    # (the Databricks OPTIMIZE case); the delete-read check would fire first otherwise.
    first = canonical_footprint(Op.OPTIMIZE, P, F_P, new_file="c1.parquet")
    blind_remover = Footprint(
        operation=Op.OPTIMIZE, files_removed=F_P, files_added=frozenset({FileRef("c2.parquet", P)}), data_change=False
    )
    for profile in (SERIALIZABLE, WRITE_SERIALIZABLE):
        assert profile.validator is not None
        verdict = profile.validator(blind_remover, first)
        assert verdict is not None and verdict[0] is ConflictKind.CONCURRENT_DELETE_DELETE


def test_unpartitioned_table_files_are_seen_by_every_reader() -> None:
    table_files = frozenset({FileRef("part-0.parquet")})
    append = canonical_footprint(Op.INSERT_INTO, "", table_files, new_file="part-1.parquet")
    delete = canonical_footprint(Op.DELETE, "", table_files, new_file="part-2.parquet")
    assert SERIALIZABLE.validator is not None
    verdict = SERIALIZABLE.validator(delete, append)
    assert verdict is not None and verdict[0] is ConflictKind.CONCURRENT_APPEND
    assert "root of the table" in verdict[1]


# --- which isolation level a commit runs under --------------------------------------------------


def test_isolation_level_follows_optimistic_transaction() -> None:
    optimize = canonical_footprint(Op.OPTIMIZE, P, F_P)
    empty_delete = Footprint(operation=Op.DELETE, read_partitions=frozenset({P}), write_partitions=frozenset({P}))
    s, ws, si = IsolationLevel.SERIALIZABLE, IsolationLevel.WRITE_SERIALIZABLE, IsolationLevel.SNAPSHOT_ISOLATION
    # No data change: SnapshotIsolation at both levels.
    assert isolation_level_to_use(optimize, s) is si
    assert isolation_level_to_use(optimize, ws) is si
    # An empty commit: downgraded under Serializable; under WriteSerializable only if the
    # operation itself does not change data.
    assert isolation_level_to_use(empty_delete, s) is si
    assert isolation_level_to_use(empty_delete, ws) is ws
    # Metadata, protocol and SetTransaction actions keep the table's level.
    for fp in (
        replace(optimize, metadata_change=True),
        replace(optimize, protocol_change=True),
        replace(optimize, app_id="job-7"),
    ):
        assert isolation_level_to_use(fp, s) is s
        assert isolation_level_to_use(fp, ws) is ws
    # A data-changing commit keeps the table's level.
    assert isolation_level_to_use(canonical_footprint(Op.UPDATE, P, F_P), ws) is ws


def test_optimize_with_app_id_loses_to_an_append_it_would_otherwise_ignore() -> None:
    # SetTransaction is an "incompatible action": no SnapshotIsolation, so a rewrite in the
    # partition OPTIMIZE read fails it with ConcurrentAppend.
    update = canonical_footprint(Op.UPDATE, P, frozenset(), new_file="u.parquet")
    optimize = canonical_footprint(Op.OPTIMIZE, P, F_P, app_id="compactor")
    plain = canonical_footprint(Op.OPTIMIZE, P, F_P)
    checker = ConflictChecker(IsolationLevel.WRITE_SERIALIZABLE)
    verdict = checker(optimize, update)
    assert verdict is not None and verdict[0] is ConflictKind.CONCURRENT_APPEND
    assert checker(plain, update) is None


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("op", [Op.MINOR_COMPACT, Op.MAJOR_COMPACT, Op.SMALL_FILE_MERGE], ids=lambda op: op.value)
def test_operations_outside_delta_are_rejected_with_the_known_ones(op: Op) -> None:
    with pytest.raises(UnknownOperationError, match=r"not a Delta operation; known: insert_into"):
        canonical_footprint(op, P, F_P)
    with pytest.raises(UnknownOperationError, match="delta-serializable"):
        SERIALIZABLE.cell(op, Op.UPDATE)


def test_footprint_rejects_files_of_another_partition_and_whole_table_blind_appends() -> None:
    with pytest.raises(InvalidFootprintError, match=r"not in partition 'ds=2024-01-01'"):
        canonical_footprint(Op.UPDATE, P, F_Q)
    with pytest.raises(InvalidFootprintError, match="reads no files"):
        canonical_footprint(Op.INSERT_INTO, P, F_P, whole_table=TABLE)


# --- delta-rs: an overwrite without a predicate -------------------------------------------------


def _race(path, first, second) -> str | None:  # type: ignore[no-untyped-def]
    """Both writers load the same version; ``first`` commits, then ``second``: its error text."""
    import pyarrow as pa  # optional heavy dependency (tests only)
    from deltalake import DeltaTable, write_deltalake

    write_deltalake(str(path), pa.table({"id": [1, 2], "value": [1, 2]}))
    jobs = {
        "append": lambda t: write_deltalake(t, pa.table({"id": [10], "value": [10]}), mode="append"),
        "overwrite": lambda t: write_deltalake(t, pa.table({"id": [20], "value": [20]}), mode="overwrite"),
        "update": lambda t: t.update(updates={"value": "value + 1"}),
    }
    a, b = DeltaTable(str(path)), DeltaTable(str(path))
    jobs[first](a)
    try:
        jobs[second](b)
    except Exception as exc:  # noqa: BLE001 - the engine's commit error is what is observed
        return str(exc)
    return None


@pytest.mark.parametrize(
    ("first", "expected"),
    [("append", None), ("update", ConflictKind.CONCURRENT_DELETE_READ), ("overwrite", ConflictKind.CONCURRENT_DELETE_READ)],
)
def test_delta_rs_overwrite_without_predicate_loses_with_delete_read_not_append(tmp_path, first, expected) -> None:  # type: ignore[no-untyped-def]
    """A whole-table ``mode="overwrite"`` has no read predicate: no added-files check (it commits
    after an append), and every file counts as read (ConcurrentDeleteRead after a rewrite)."""
    message = _race(tmp_path / "t", first, "overwrite")
    words = {None: None, ConflictKind.CONCURRENT_DELETE_READ: "deleted data this operation read"}
    assert (message is None) is (expected is None), message
    if expected is not None:
        assert words[expected] in str(message) and "added new data" not in str(message)
    # The port agrees: the same pair on footprints of a table without partitions.
    table = frozenset({FileRef("part-0.parquet")})
    winner = canonical_footprint(Op(first.replace("append", "insert_into").replace("overwrite", "insert_overwrite")), "", table, new_file="w.parquet")
    whole = canonical_footprint(Op.INSERT_OVERWRITE, "", table, new_file="o.parquet", whole_table=table)
    validator = get_profile("delta-rs").validator
    assert validator is not None
    verdict = validator(whole, winner)
    assert (None if verdict is None else verdict[0]) is expected
    # With the partition as predicate the overwrite gets ConcurrentAppend instead (the matrix cell).
    scoped = canonical_footprint(Op.INSERT_OVERWRITE, "", table, new_file="o.parquet")
    assert validator(scoped, winner) is not None
