"""The reference engine agrees with the matrices: every profile, every cell, every scope.

For each cell (earlier, later) of each profile, on a table whose partitions already hold files
(two seeding commits), both jobs begin on one snapshot, the earlier commits, then the later: it
must fail with the cell's exception iff the cell says the later job fails.

- Same partition (table-level operations, ALTER and protocol upgrades, on the whole table): every
  cell, exactly. ``SAME_ROWS`` cells: the engine cannot express rows (a footprint names files and
  partitions, and every job on a partition touches its rows), so this is the same-rows case.
- Whole table (both jobs, or one of them, on the whole table): every cell, exactly, except where
  delta-rs itself differs: an overwrite or truncate of the whole table has no read predicate
  (``DELTARS_LATER_WHOLE_TABLE``).
- Two different partitions: both commit, except where delta-rs itself fails the later job: an
  append or OPTIMIZE has no read predicate and counts every file as read
  (``DELTARS_OTHER_PARTITION``).

Both delta-rs exceptions are what real ``deltalake`` 1.6.6 does: the last tests race it.
docs/reference-engine.md, "Where the engine is more lenient than the matrix", lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from occflow.core.classify import classify
from occflow.core.errors import CommitConflict
from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation as Op
from occflow.core.profiles import PROFILES, Cell, Effect, RuleKind
from occflow.core.reference import ReferenceTable, Transaction

PARTS = ("p", "q")
#: Operations on the table, never on one partition (they are begun on the whole table).
# Manifests and orphan files span partitions: these are never run as per-partition jobs.
TABLE_LEVEL = frozenset({
    Op.ALTER_METADATA, Op.UPGRADE_PROTOCOL, Op.VACUUM, Op.EXPIRE_SNAPSHOTS,
    Op.REMOVE_ORPHAN_FILES, Op.REWRITE_MANIFESTS, Op.REWRITE_POSITION_DELETES,
})
CELLS = [(name, cell) for name, profile in PROFILES.items() for cell in profile.cells]
IDS = [f"{name}:{cell.earlier.value}->{cell.later.value}" for name, cell in CELLS]
PARTITION_CELLS = [(n, c) for n, c in CELLS if c.earlier not in TABLE_LEVEL and c.later not in TABLE_LEVEL]
PARTITION_IDS = [f"{n}:{c.earlier.value}->{c.later.value}" for n, c in PARTITION_CELLS]

Scope = Sequence[str] | None  # None: the whole table
#: (earlier's scope, later's scope) when neither job is on the other's partition only.
WHOLE_TABLE_SCOPES: dict[str, tuple[Scope, Scope]] = {
    "both-whole": (None, None),
    "whole-then-partition": (None, ["p"]),
    "partition-then-whole": (["p"], None),
}

# delta-rs (deltalake 1.6.6), from its conflict_checker.rs and observed on the real engine below
# and in docs/conformance/upstream.md (fact (b)); the cells' notes say the same (N_NO_PREDICATE).
_DATA_REMOVERS = (Op.INSERT_OVERWRITE, Op.TRUNCATE, Op.UPDATE, Op.DELETE, Op.MERGE)
_UNPREDICATED_WHOLE = (Op.INSERT_OVERWRITE, Op.TRUNCATE)
#: Later job an overwrite / truncate of the whole table: no read predicate, so no added-files
#: check (it commits after an append or OPTIMIZE, whose rows survive) and every file counts as
#: read (ConcurrentDeleteRead after a data-changing removal, where the cell names
#: ConcurrentAppend, the kind for the partition as predicate).
DELTARS_LATER_WHOLE_TABLE: dict[tuple[Op, Op], ConflictKind | None] = {
    **{(earlier, later): None for earlier in (Op.INSERT_INTO, Op.OPTIMIZE) for later in _UNPREDICATED_WHOLE},
    **{
        (earlier, later): ConflictKind.CONCURRENT_DELETE_READ
        for earlier in _DATA_REMOVERS
        for later in _UNPREDICATED_WHOLE
    },
}
#: Later job an append or OPTIMIZE of another partition: no read predicate, every file of the
#: snapshot counts as read, so a data-changing removal in any partition fails it.
DELTARS_OTHER_PARTITION: dict[tuple[Op, Op], ConflictKind] = {
    (earlier, later): ConflictKind.CONCURRENT_DELETE_READ
    for earlier in _DATA_REMOVERS
    for later in (Op.INSERT_INTO, Op.OPTIMIZE)
}


def _seeded(profile_name: str, seeds: int = 2) -> ReferenceTable:
    table = ReferenceTable(profile_name, partitions=PARTS, rows_per_insert=4)
    ops = table.profile.operations
    seed = Op.INSERT_INTO if Op.INSERT_INTO in ops else ops[0]
    for _ in range(seeds):  # two commits: each partition holds two files
        table.run(seed, None)
    return table


def _scope(op: Op, scope: Scope) -> Scope:
    return None if op in TABLE_LEVEL else scope


class Race:
    """Both jobs begun on one snapshot, the earlier committed, then the later."""

    def __init__(self, profile_name: str, cell: Cell, earlier: Scope, later: Scope, seeds: int = 2) -> None:
        self.table = _seeded(profile_name, seeds)
        self.earlier = self.table.begin(cell.earlier, _scope(cell.earlier, earlier))
        self.later: Transaction = self.table.begin(cell.later, _scope(cell.later, later))
        self.earlier.commit()
        self.after_earlier = {p: dict(rows) for p, rows in self.table.snapshot().rows.items()}
        self.error: CommitConflict | None = None
        try:
            self.later.commit()
        except CommitConflict as exc:
            self.error = exc

    @property
    def kind(self) -> ConflictKind | None:
        return None if self.error is None else self.error.kind

    def rows(self, partition: str) -> dict[str, int]:
        return dict(self.table.snapshot().rows[partition])


def _check(race: Race, cell: Cell, expected: ConflictKind | None, scope: str = "one partition") -> None:
    where = f"{cell.earlier.value}->{cell.later.value}, {scope} ({cell.source})"
    assert race.kind is expected, f"{where}: expected {expected}, the engine gave {race.error!r}"
    if race.error is not None:
        assert race.error.winner is not None and race.error.winner.version == race.table.version
        assert {p: race.rows(p) for p in PARTS} == race.after_earlier, "the loser wrote nothing"
        return
    assert race.table.history[-1].txn_id == race.later.txn_id
    if expected is cell.exception:  # the cell's outcome: its effect on the data, too
        _check_effect(race, cell)


def _check_effect(race: Race, cell: Cell) -> None:
    """What both committing does to the rows of the partitions both jobs wrote."""
    written = race.later.footprint.write_partitions or frozenset()
    for p in sorted(written & (race.earlier.footprint.write_partitions or frozenset())):
        rows, before = race.rows(p), race.after_earlier[p]
        if cell.effect is Effect.OVERWRITE and cell.later is Op.TRUNCATE:
            assert rows == {}, p
        elif cell.effect is Effect.OVERWRITE:
            assert rows and all(r.startswith(f"{race.later.txn_id}-") for r in rows), p
        elif cell.effect is Effect.APPEND:
            assert set(before) < set(rows) and {r: rows[r] for r in before} == before, p
        elif cell.effect is Effect.COMPACTION_COMPLETES:
            assert rows == before, p


@pytest.mark.parametrize(("profile_name", "cell"), CELLS, ids=IDS)
def test_same_partition_fails_exactly_when_the_cell_says(profile_name: str, cell: Cell) -> None:
    _check(Race(profile_name, cell, ["p"], ["p"]), cell, cell.exception)


def _whole_table_expectation(profile_name: str, cell: Cell, later: Scope) -> ConflictKind | None:
    later_whole = later is None or cell.later in TABLE_LEVEL
    if profile_name == "delta-rs" and later_whole:
        return DELTARS_LATER_WHOLE_TABLE.get((cell.earlier, cell.later), cell.exception)
    return cell.exception


@pytest.mark.parametrize(("profile_name", "cell"), CELLS, ids=IDS)
def test_whole_table_fails_exactly_when_the_cell_says(profile_name: str, cell: Cell) -> None:
    for scope, (earlier, later) in WHOLE_TABLE_SCOPES.items():
        race = Race(profile_name, cell, earlier, later)
        expected = _whole_table_expectation(profile_name, cell, later)
        _check(race, cell, expected, scope)
        if expected is None and cell.later_fails:
            _check_earlier_survives(race, cell)


def _check_earlier_survives(race: Race, cell: Cell) -> None:
    """delta-rs's overwrite / truncate without a predicate commits and leaves what the earlier
    job wrote in place: the rows it appended, or the rows OPTIMIZE compacted."""
    for p in sorted(race.earlier.footprint.write_partitions or PARTS):
        before = race.after_earlier[p]
        kept = {r: v for r, v in before.items() if cell.earlier is Op.OPTIMIZE or r.startswith(f"{race.earlier.txn_id}-")}
        assert kept and kept.items() <= race.rows(p).items(), p


@pytest.mark.parametrize(("profile_name", "cell"), PARTITION_CELLS, ids=PARTITION_IDS)
def test_different_partitions_both_commit(profile_name: str, cell: Cell) -> None:
    race = Race(profile_name, cell, ["p"], ["q"])
    expected = DELTARS_OTHER_PARTITION.get((cell.earlier, cell.later)) if profile_name == "delta-rs" else None
    where = f"{profile_name} {cell.earlier.value} on p, then {cell.later.value} on q"
    assert race.kind is expected, f"{where}: expected {expected}, the engine gave {race.error!r}"
    if expected is None:
        assert race.rows("p") == race.after_earlier["p"], "the later job left the other partition alone"


@pytest.mark.parametrize("profile_name", sorted(PROFILES))
def test_on_an_empty_table_the_engine_is_never_stricter_than_the_cell(profile_name: str) -> None:
    """No file yet: a job that read, removed or added no file cannot conflict at file level.

    Footprint-level profiles then let some later jobs commit that the cell fails (the cell's
    precondition, data in the partition, does not hold); they never fail one the cell lets
    commit, nor with another kind. Operation-level profiles (MaxCompute) agree exactly.
    """
    lenient = []
    for cell in PROFILES[profile_name].cells:
        race = Race(profile_name, cell, ["p"], ["p"], seeds=0)
        if race.kind is not cell.exception:
            assert race.kind is None, f"{cell.earlier.value}->{cell.later.value}: {race.error!r}"
            lenient.append(cell)
    if PROFILES[profile_name].rules is RuleKind.OPERATION:
        assert lenient == []
    else:
        assert lenient, "a file-level checker has nothing to find on an empty table"


# --------------------------------------------------------------------------------------------
# The delta-rs exceptions on the real engine (deltalake 1.6.6), next to the reference engine
# --------------------------------------------------------------------------------------------

Job = Callable[[object], object]


def _real_jobs() -> dict[str, tuple[Op, Scope, Job]]:
    pa = pytest.importorskip("pyarrow")
    deltalake = pytest.importorskip("deltalake")

    def rows(part: str, value: int) -> object:
        return pa.table({"part": [part], "v": [value]})

    def overwrite_all(t: object) -> object:
        return deltalake.write_deltalake(t, rows("p", 9), mode="overwrite")

    return {
        "update p": (Op.UPDATE, ["p"], lambda t: t.update(updates={"v": "v + 1"}, predicate="part = 'p'")),
        "append p": (Op.INSERT_INTO, ["p"], lambda t: deltalake.write_deltalake(t, rows("p", 7), mode="append")),
        "append q": (Op.INSERT_INTO, ["q"], lambda t: deltalake.write_deltalake(t, rows("q", 7), mode="append")),
        "optimize q": (Op.OPTIMIZE, ["q"], lambda t: t.optimize.compact(partition_filters=[("part", "=", "q")])),
        "optimize table": (Op.OPTIMIZE, None, lambda t: t.optimize.compact()),
        "overwrite table": (Op.INSERT_OVERWRITE, None, overwrite_all),
    }


#: (earlier, later): the issue-13 pair in both orders, and the two delta-rs exceptions.
REAL_RACES = [
    ("append p", "optimize table"),
    ("optimize table", "append p"),
    ("update p", "append q"),
    ("update p", "optimize q"),
    ("append p", "overwrite table"),
    ("update p", "overwrite table"),
]


def _real_outcome(tmp_path: Path, earlier: Job, later: Job) -> ConflictKind | None:
    pa = pytest.importorskip("pyarrow")
    deltalake = pytest.importorskip("deltalake")
    uri = str(tmp_path / "t")
    for part, value in [("p", 1), ("q", 2), ("p", 3), ("q", 4)]:  # two files per partition
        deltalake.write_deltalake(uri, pa.table({"part": [part], "v": [value]}), mode="append", partition_by=["part"])
    first, second = deltalake.DeltaTable(uri), deltalake.DeltaTable(uri)
    earlier(first)
    try:
        later(second)
    except deltalake.exceptions.CommitFailedError as exc:
        return classify(exc).kind
    return None


@pytest.mark.parametrize(("earlier", "later"), REAL_RACES, ids=[f"{a} -> {b}" for a, b in REAL_RACES])
def test_the_reference_engine_does_what_real_delta_rs_does(tmp_path: Path, earlier: str, later: str) -> None:
    jobs = _real_jobs()
    (op_a, scope_a, run_a), (op_b, scope_b, run_b) = jobs[earlier], jobs[later]
    real = _real_outcome(tmp_path, run_a, run_b)
    cell = PROFILES["delta-rs"].cell(op_a, op_b)
    race = Race("delta-rs", cell, scope_a, scope_b)
    assert race.kind is real, f"real delta-rs: {real}; reference engine: {race.error!r}"
