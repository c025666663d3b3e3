"""delta-rs's own conflict tests, replayed on the real ``deltalake`` package, as the oracle for the
``delta-rs`` profile.

Source: delta-io/delta-rs ``crates/core/src/kernel/transaction/conflict_checker.rs``, its
``#[cfg(test)] mod tests`` (identical test list at tag python-v1.6.3 and at the mirrored HEAD
2c996fa9). Upstream drives ``ConflictChecker`` with hand-made actions (files whose ``value`` column
has min/max statistics, a read predicate, a winning commit). Here each case is the same race on a
real unpartitioned table: one file per ``values`` list (so each file's statistics are its min and
max), two ``DeltaTable`` objects loaded at one version, the earlier job commits from the first,
the later job plans on the second and commits after it, so delta-rs runs its checker against the
winner. What each case asserts:

1. the real engine gives upstream's outcome (commits, or which ``CommitConflictError``), read from
   the error text delta-rs prints for each enum variant, and the table holds the rows it should;
2. the ``delta-rs`` profile cell for the pair of operations (an unpartitioned table is the one
   partition a cell talks about) is never LESS conservative than the engine: where the engine
   fails the later job, the cell says the later job fails; where both commit and rows are
   duplicated, the cell's effect corrupts data. A cell that says "fails" where the engine commits
   is coarser (the profile matches by partition, delta-rs by each file's min/max statistics, also
   on unpartitioned tables: docs/conformance/upstream.md, fact (a));
3. separately (``test_profile_cell_names_the_engines_exception``), that the cell names the
   exception the engine raises, as its usual kind or as one it ``also_raises`` (a DELETE that
   removes whole files, a feature upgrade: ``ALSO_RAISES`` in core/profiles/deltars.py).

Cases upstream builds from actions that no Python API call produces (a winner that only removes
with ``dataChange=false``; a current transaction with no actions) are replaced by the nearest real
operation, and the docstring of the case says what differs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, TableFeatures, Transaction, write_deltalake

from occflow.core.classify import classify
from occflow.core.footprint import Footprint
from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation as Op
from occflow.core.profiles import get_profile

PROFILE = get_profile("delta-rs")
UPSTREAM = "delta-rs crates/core/src/kernel/transaction/conflict_checker.rs tests::"

# CommitConflictError's #[error(...)] texts (conflict_checker.rs), the engine's own words.
ENGINE_TEXT = {
    "a concurrent transactions added new data": ConflictKind.CONCURRENT_APPEND,
    "a concurrent transaction deleted data this operation read": ConflictKind.CONCURRENT_DELETE_READ,
    "a concurrent transaction deleted the same data your transaction deletes": ConflictKind.CONCURRENT_DELETE_DELETE,
    "Metadata changed since last commit": ConflictKind.METADATA_CHANGED,
    "Concurrent transaction failed": ConflictKind.CONCURRENT_TRANSACTION,
    "Protocol changed since last commit": ConflictKind.PROTOCOL_CHANGED,
}

Job = Callable[[DeltaTable], object]


def rows(values: list[int]) -> pa.Table:
    return pa.table({"value": pa.array(values, pa.int64())})


def append(values: list[int], app_id: str | None = None) -> Job:
    props = None if app_id is None else CommitProperties(app_transactions=[Transaction(app_id=app_id, version=1)])
    return lambda dt: write_deltalake(dt, rows(values), mode="append", commit_properties=props)


def overwrite(values: list[int], predicate: str | None = None) -> Job:
    return lambda dt: write_deltalake(dt, rows(values), mode="overwrite", predicate=predicate)


def delete(predicate: str) -> Job:
    return lambda dt: dt.delete(predicate)


def update(predicate: str, value: int) -> Job:
    return lambda dt: dt.update(new_values={"value": value}, predicate=predicate)


def merge(values: list[int]) -> Job:
    """MERGE on the value column only: no partition, so delta-rs checks it as a whole-table read."""

    def run(dt: DeltaTable) -> object:
        builder = dt.merge(rows(values), predicate="t.value = s.value", source_alias="s", target_alias="t")
        return builder.when_not_matched_insert_all().execute()

    return run


def compact() -> Job:
    return lambda dt: dt.optimize.compact()


def set_property() -> Job:
    return lambda dt: dt.alter.set_table_properties({"delta.appendOnly": "false"})


def add_feature() -> Job:
    return lambda dt: dt.alter.add_feature(TableFeatures.ChangeDataFeed, allow_protocol_versions_increase=True)


@dataclass(frozen=True)
class Case:
    """One upstream test as a real race; ``expected`` is upstream's outcome (None: commits)."""

    upstream: str
    files: tuple[tuple[int, ...], ...]
    earlier: Job
    later: Job
    cell: tuple[Op, Op]
    expected: ConflictKind | None
    rows_after: tuple[int, ...] | None = None
    duplicates: bool = False
    note: str = ""


CASES: dict[str, Case] = {
    "append_append": Case(
        "test_concurrent_append_append",
        ((1, 10),),
        append([1, 10]),
        append([1, 10]),
        (Op.INSERT_INTO, Op.INSERT_INTO),
        None,
        rows_after=(1, 1, 1, 10, 10, 10),
    ),
    "disjoint_delete_read": Case(
        "test_disjoint_delete_read",
        ((1, 10), (100, 10000)),
        delete("value <= 10"),  # removes the whole file 1..10, adds nothing
        delete("value > 10"),  # reads only the file 100..10000 by its statistics
        (Op.DELETE, Op.DELETE),
        None,
        rows_after=(),
    ),
    "disjoint_add_read/fact_a_commits": Case(
        "test_disjoint_add_read (fact a: DELETE WHERE value > 50 after an append of 1..10)",
        ((100, 110),),
        append(list(range(1, 11))),
        delete("value > 50"),
        (Op.INSERT_INTO, Op.DELETE),
        None,
        rows_after=tuple(range(1, 11)),
    ),
    "add_read/fact_a_fails": Case(
        "test_concurrent_add_conflicts_with_read_and_write (fact a: the same DELETE after an append of 60..70)",
        ((100, 110),),
        append(list(range(60, 71))),
        delete("value > 50"),
        (Op.INSERT_INTO, Op.DELETE),
        ConflictKind.CONCURRENT_APPEND,
        rows_after=(*range(60, 71), 100, 110),
    ),
    "add_conflicts_with_replace_where": Case(
        "test_concurrent_add_conflicts_with_read_and_write",
        ((1, 10),),
        append([1, 10]),
        overwrite([5], predicate="value <= 10"),
        (Op.INSERT_INTO, Op.INSERT_OVERWRITE),
        ConflictKind.CONCURRENT_APPEND,
        rows_after=(1, 1, 10, 10),
    ),
    "delete_conflicts_with_read": Case(
        "test_concurrent_delete_conflicts_with_read / test_data_delete_conflicts_with_read",
        ((1, 10),),
        delete("value <= 10"),  # removes the file (dataChange=true), adds none
        update("value <= 10", 5),
        (Op.DELETE, Op.UPDATE),
        ConflictKind.CONCURRENT_DELETE_READ,
        rows_after=(),
    ),
    "metadata_change": Case(
        "test_concurrent_metadata_change",
        ((1,),),
        set_property(),
        append([2]),
        (Op.ALTER_METADATA, Op.INSERT_INTO),
        ConflictKind.METADATA_CHANGED,
        rows_after=(1,),
    ),
    "protocol_upgrade": Case(
        "test_concurrent_protocol_upgrade",
        ((1,),),
        add_feature(),
        add_feature(),
        (Op.ALTER_METADATA, Op.ALTER_METADATA),
        ConflictKind.PROTOCOL_CHANGED,
        rows_after=(1,),
        note="declared as alter_metadata: the delta-rs profile has no upgrade_protocol operation",
    ),
    "protocol_upgrade_then_append": Case(
        "test_concurrent_protocol_upgrade (the loser an append)",
        ((1,),),
        add_feature(),
        append([2]),
        (Op.ALTER_METADATA, Op.INSERT_INTO),
        ConflictKind.PROTOCOL_CHANGED,
        rows_after=(1,),
        note="declared as alter_metadata: the delta-rs profile has no upgrade_protocol operation",
    ),
    "whole_table_read_vs_append": Case(
        "test_read_whole_table_disallows_concurrent_append",
        ((1, 10),),
        append([500, 600]),  # disjoint from the merge source's values
        merge([5, 6]),
        (Op.INSERT_INTO, Op.MERGE),
        ConflictKind.CONCURRENT_APPEND,
        rows_after=(1, 10, 500, 600),
    ),
    "whole_table_read_vs_remove": Case(
        "test_read_whole_table_disallows_concurrent_remove",
        ((1, 10), (100, 200)),
        delete("value >= 100"),  # removes the file 100..200, adds none
        merge([5, 6]),
        (Op.DELETE, Op.MERGE),
        ConflictKind.CONCURRENT_DELETE_READ,
        rows_after=(1, 10),
    ),
    "compaction_vs_whole_table_read": Case(
        "test_compaction_does_not_conflict_with_whole_table_read / test_compaction_remove_does_not_conflict_with_read",
        ((1,), (2,)),
        compact(),
        append([7]),  # no read predicate: every file of the snapshot counts as read
        (Op.OPTIMIZE, Op.INSERT_INTO),
        None,
        rows_after=(1, 2, 7),
    ),
    "compaction_vs_predicate_read": Case(
        "test_compaction_remove_does_not_conflict_with_read (with the compacted file a real OPTIMIZE adds)",
        ((1,), (2,)),
        compact(),
        delete("value <= 10"),
        (Op.OPTIMIZE, Op.DELETE),
        ConflictKind.CONCURRENT_APPEND,
        rows_after=(1, 2),
        note="upstream's winner only removes (dataChange=false) and passes; a real compaction also adds the "
        "compacted file, which the DELETE's predicate matches: the added-files check fails it",
    ),
    "double_compaction": Case(
        "test_concurrent_compaction_double_delete_still_conflicts",
        ((1,), (2,), (3,)),
        compact(),
        compact(),
        (Op.OPTIMIZE, Op.OPTIMIZE),
        None,
        rows_after=(1, 1, 2, 2, 3, 3),
        duplicates=True,
        note="upstream's checker unit test expects ConcurrentDeleteDelete; deltalake 1.6.6 end to end commits "
        "both compactions and the rows appear twice (the profile says so: duplicates_rows)",
    ),
    "add_matching_read_range": Case(
        "test_disjoint_partitions_add_and_write",
        ((1, 10),),
        append([100, 200]),
        delete("value <= 200"),
        (Op.INSERT_INTO, Op.DELETE),
        ConflictKind.CONCURRENT_APPEND,
        rows_after=(1, 10, 100, 200),
    ),
    "add_outside_read_range": Case(
        "test_disjoint_partitions_read_write_different_ranges",
        ((1, 10),),
        append([100, 200]),
        delete("value <= 50"),
        (Op.INSERT_INTO, Op.DELETE),
        None,
        rows_after=(100, 200),
    ),
    "same_app_id": Case(
        "test_conflicting_app_transactions",
        ((1,),),
        append([2], app_id="q1"),
        append([3], app_id="q1"),
        (Op.INSERT_INTO, Op.INSERT_INTO),
        ConflictKind.CONCURRENT_TRANSACTION,
        rows_after=(1, 2),
        note="an app-id clash is not a matrix cell: the profile's validator checks it (see its own test)",
    ),
    "different_app_ids": Case(
        "test_non_conflicting_different_app_transactions",
        ((1,),),
        append([2], app_id="q1"),
        append([3], app_id="q2"),
        (Op.INSERT_INTO, Op.INSERT_INTO),
        None,
        rows_after=(1, 2, 3),
    ),
    "replace_where_empty_read_conflicts": Case(
        "test_replace_where_initial_empty_conflicts_on_concurrent_add",
        ((1,),),
        append([3]),
        overwrite([2], predicate="value >= 2"),
        (Op.INSERT_INTO, Op.INSERT_OVERWRITE),
        ConflictKind.CONCURRENT_APPEND,
        rows_after=(1, 3),
    ),
    "replace_where_disjoint_commits": Case(
        "test_replace_where_disjoint_empty_allows_commit",
        ((1,),),
        append([5]),
        overwrite([2], predicate="value > 1 AND value <= 3"),
        (Op.INSERT_INTO, Op.INSERT_OVERWRITE),
        None,
        rows_after=(1, 2, 5),
    ),
    "fact_b_overwrite_without_predicate_after_delete": Case(
        "fact (b): write_deltalake mode=overwrite without a predicate after a concurrent DELETE",
        ((1, 2), (3, 4)),
        delete("value = 1"),  # rewrites the file 1..2 into one holding 2
        overwrite([9]),
        (Op.DELETE, Op.INSERT_OVERWRITE),
        ConflictKind.CONCURRENT_DELETE_READ,
        rows_after=(2, 3, 4),
        note="no read predicate: no added-files check; every file of the snapshot counts as read",
    ),
    "fact_b_overwrite_without_predicate_after_append": Case(
        "fact (b): write_deltalake mode=overwrite without a predicate after a concurrent append",
        ((1, 2),),
        append([5]),
        overwrite([9]),
        (Op.INSERT_INTO, Op.INSERT_OVERWRITE),
        None,
        rows_after=(5, 9),
        note="commits, and the appended row survives: the overwrite removes only the files it read",
    ),
}

@dataclass(frozen=True)
class Observed:
    kind: ConflictKind | None
    text: str
    versions_added: int
    values: tuple[int, ...]
    occflow_kind: ConflictKind | None


def engine_kind(text: str) -> ConflictKind:
    found = [kind for marker, kind in ENGINE_TEXT.items() if marker in text]
    assert len(found) == 1, f"not exactly one CommitConflictError text in {text!r}"
    return found[0]


def race(root: Path, case: Case) -> Observed:
    path = str(root)
    for values in case.files:
        write_deltalake(path, rows(list(values)), mode="append")
    start = DeltaTable(path).version()
    first, second = DeltaTable(path), DeltaTable(path)  # one snapshot, two writers
    case.earlier(first)
    assert DeltaTable(path).version() == start + 1, "the earlier job must commit"
    try:
        case.later(second)
        kind, text, occflow_kind = None, "", None
    except Exception as exc:  # noqa: BLE001 - the engine's error is the observation
        text = str(exc)
        kind = engine_kind(text)
        occflow_kind = classify(exc).kind
    final = DeltaTable(path)
    values = tuple(sorted(final.to_pyarrow_table()["value"].to_pylist()))
    return Observed(kind, text, final.version() - start, values, occflow_kind)


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Observed]:
    """Every case raced once on its own fresh table (each takes a fraction of a second)."""
    root = tmp_path_factory.mktemp("deltars-upstream")
    return {name: race(root / name.replace("/", "_"), case) for name, case in CASES.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_the_engine_gives_upstreams_outcome(name: str, observed: dict[str, Observed]) -> None:
    case, seen = CASES[name], observed[name]
    assert seen.kind is case.expected, f"{UPSTREAM}{case.upstream}: {seen.text}"
    # a commit is a real new version (a later job that matched nothing would commit nothing and
    # prove nothing); a loss leaves the earlier commit alone
    assert seen.versions_added == (2 if case.expected is None else 1)
    if case.rows_after is not None:
        assert seen.values == case.rows_after
    if case.expected is not None:
        assert seen.occflow_kind is case.expected, "occflow's classifier reads the engine's error"


@pytest.mark.parametrize("name", list(CASES))
def test_the_profile_is_never_less_conservative_than_the_engine(name: str, observed: dict[str, Observed]) -> None:
    case, seen = CASES[name], observed[name]
    cell = PROFILE.cell(*case.cell)
    if seen.kind is ConflictKind.CONCURRENT_TRANSACTION:
        return  # not a cell: test_an_app_id_clash_is_the_validators_not_a_cells
    if seen.kind is not None:
        assert cell.later_fails, f"profile says {cell.effect.value} where delta-rs raises {seen.kind.value}"
    if case.duplicates:
        assert len(set(seen.values)) < len(seen.values), "the race should have duplicated rows"
        assert cell.effect.corrupts_data and PROFILE.conflicts(*case.cell)


@pytest.mark.parametrize(
    "name",
    [n for n, c in CASES.items() if c.expected is not None and c.expected is not ConflictKind.CONCURRENT_TRANSACTION],
)
def test_profile_cell_names_the_engines_exception(name: str, observed: dict[str, Observed]) -> None:
    case, seen = CASES[name], observed[name]
    assert seen.kind in PROFILE.cell(*case.cell).kinds


def test_where_the_profile_is_coarser_it_is_only_by_value_ranges(observed: dict[str, Observed]) -> None:
    """Every pair the engine commits but the cell fails: the later job's predicate (or the
    winner's removal) missed the other job's files by their min/max statistics, or the overwrite
    had no predicate. Listed so the documentation's table stays true."""
    coarser = sorted(
        n for n, c in CASES.items() if observed[n].kind is None and PROFILE.cell(*c.cell).later_fails
    )
    assert coarser == sorted(
        [
            "add_outside_read_range",
            "disjoint_add_read/fact_a_commits",
            "disjoint_delete_read",
            "fact_b_overwrite_without_predicate_after_append",
            "replace_where_disjoint_commits",
        ]
    )


def test_an_app_id_clash_is_the_validators_not_a_cells(observed: dict[str, Observed]) -> None:
    assert observed["same_app_id"].kind is ConflictKind.CONCURRENT_TRANSACTION
    assert ConflictKind.CONCURRENT_TRANSACTION in PROFILE.extra_kinds
    assert PROFILE.validator is not None
    mine = Footprint(Op.INSERT_INTO, app_id="q1", app_version=1)
    found = PROFILE.validator(mine, Footprint(Op.INSERT_INTO, app_id="q1", app_version=1))
    assert found is not None and found[0] is ConflictKind.CONCURRENT_TRANSACTION
    assert PROFILE.validator(mine, Footprint(Op.INSERT_INTO, app_id="q2", app_version=1)) is None
