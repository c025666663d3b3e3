"""The reference engine against every cell of every profile, and its commit protocol."""

from __future__ import annotations

import random
import threading
import time

import pytest

from occflow.core.errors import CommitConflict, InvalidFootprintError, UnknownOperationError
from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation as Op
from occflow.core.profiles import PROFILES, Effect
from occflow.core.reference import ReferenceTable

ALL_CELLS = [(name, cell) for name, profile in PROFILES.items() for cell in profile.cells]


def _run_pair(profile_name, earlier, later):
    """Seed the partition, start both jobs on one snapshot, commit ``earlier`` then ``later``."""
    table = ReferenceTable(profile_name, partitions=["p"], rows_per_insert=4)
    seed = Op.INSERT_INTO if Op.INSERT_INTO in table.profile.operations else table.profile.operations[0]
    table.run(seed, ["p"])
    first = table.begin(earlier, ["p"])
    second = table.begin(later, ["p"])
    first.commit()
    after_earlier = {r: v for r, v in table.snapshot().rows["p"].items()}
    try:
        second.commit()
        error = None
    except CommitConflict as exc:
        error = exc
    return table, second, after_earlier, error


@pytest.mark.parametrize(
    "profile_name, cell",
    ALL_CELLS,
    ids=[f"{n}:{c.earlier.value}->{c.later.value}" for n, c in ALL_CELLS],
)
def test_engine_reproduces_every_cell(profile_name, cell):
    table, later, after_earlier, error = _run_pair(profile_name, cell.earlier, cell.later)
    rows = table.snapshot().rows["p"]
    if cell.later_fails:
        assert error is not None, f"{cell.source}: the later job should fail"
        assert error.kind is cell.exception
        assert error.winner is not None and error.winner.version == table.version
        assert rows == after_earlier  # the loser wrote nothing
        return
    assert error is None, f"{cell.source}: the later job should commit, got {error!r}"
    assert table.history[-1].txn_id == later.txn_id
    if cell.effect is Effect.OVERWRITE:
        if cell.later is Op.TRUNCATE:
            assert rows == {}
        else:
            assert rows and all(r.startswith(later.txn_id) for r in rows)
    elif cell.effect is Effect.APPEND:
        assert set(after_earlier) < set(rows)
        assert {r: rows[r] for r in after_earlier} == after_earlier
    elif cell.effect is Effect.COMPACTION_COMPLETES:
        assert rows == after_earlier
        # There was something left to compact: a compaction writes data files of its own. Table
        # maintenance (rewrite_manifests, rewrite_position_deletes) rewrites metadata or delete
        # files, which the reference engine does not model: no data file of its own.
        if rows and not cell.later.is_maintenance:
            assert any(f.path.startswith(f"{later.txn_id}-") for f in table.snapshot().files)
        elif cell.later.is_maintenance:
            assert not any(f.path.startswith(f"{later.txn_id}-") for f in table.snapshot().files)


def test_versions_are_id_versions_and_time_versions_skip_compaction():
    table = ReferenceTable("maxcompute-transactional", partitions=["p"])
    table.run("insert_into", ["p"])
    table.run("minor_compact", ["p"])
    table.run("update", ["p"])
    table.run("major_compact", ["p"])
    assert [c.version for c in table.history] == [1, 2, 3, 4]
    assert [c.time_version is None for c in table.history] == [False, True, False, True]
    first_time = table.history[0].time_version
    by_time = table.changes_since(first_time, by="time")
    assert [c.operation for c in by_time] == [Op.UPDATE]
    assert [c.version for c in table.changes_since(2, by="id")] == [3, 4]
    with pytest.raises(ValueError, match="by 'id' or 'time'"):
        table.changes_since(0, by="size")


def test_meta_level_retry_rebases_a_stale_commit_without_redoing_its_work():
    table = ReferenceTable("maxcompute-standard", partitions=["p", "q"])
    slow = table.begin("insert_into", ["p"])
    for _ in range(3):
        table.run("insert_into", ["p"])
    planned = dict(slow.change.upserts)
    commit = slow.commit()
    assert commit.rebased and commit.read_version == 0 and commit.version == 4
    assert table.rebases == 1
    assert slow.change.upserts == planned  # the staged rows were committed as they were
    assert set(planned["p"]) <= set(table.snapshot().rows["p"])


def test_smart_resolution_compaction_and_append_both_succeed_where_the_profile_says_so():
    table = ReferenceTable("maxcompute-transactional", partitions=["p"])
    table.run("insert_into", ["p"])
    compaction = table.begin("minor_compact", ["p"])
    append = table.begin("insert_into", ["p"])
    append.commit()
    compaction.commit()
    snap = table.snapshot()
    assert snap.row_count("p") == 4
    files = {f.path.split("-")[0]: rows for f, rows in snap.files.items()}
    assert set(files) == {compaction.txn_id, append.txn_id}  # compacted file + the new append


def test_disjoint_partitions_do_not_conflict():
    table = ReferenceTable("maxcompute-standard", partitions=["p", "q"])
    table.run("insert_into", ["p"])
    table.run("insert_into", ["q"])
    a = table.begin("update", ["p"])
    b = table.begin("update", ["q"])
    a.commit()
    b.commit()
    whole = table.begin("update", None)
    table.run("insert_into", ["q"])
    with pytest.raises(CommitConflict) as err:
        whole.commit()
    assert err.value.kind is ConflictKind.OPERATION_CONFLICT


def test_many_threads_committing_never_lose_or_duplicate_a_version():
    table = ReferenceTable("maxcompute-standard", partitions=["p", "q"])
    barrier = threading.Barrier(16)
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        barrier.wait()
        try:
            for _ in range(50):
                table.run("insert_into", ["p" if i % 2 else "q"])
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert [c.version for c in table.history] == list(range(1, 801))
    assert len({c.txn_id for c in table.history}) == 800
    assert table.snapshot().row_count() == 800 * 2


def test_concurrent_conflicting_threads_first_committer_wins():
    table = ReferenceTable("maxcompute-transactional", partitions=["p"])
    table.run("insert_into", ["p"])
    txns = [table.begin("update", ["p"]) for _ in range(8)]
    barrier = threading.Barrier(len(txns))
    outcomes: dict[str, str] = {}

    def commit(t):
        barrier.wait()
        try:
            t.commit()
            outcomes[t.txn_id] = "ok"
        except CommitConflict as exc:
            outcomes[t.txn_id] = exc.kind.value

    threads = [threading.Thread(target=commit, args=(t,)) for t in txns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes.values()).count("ok") == 1
    assert [c.version for c in table.history] == [1, 2]
    assert table.snapshot().rows["p"] == {r: 1 for r in table.snapshot().rows["p"]}


def test_bad_input_is_rejected_with_a_clear_message():
    table = ReferenceTable("maxcompute-standard", partitions=["p"])
    with pytest.raises(InvalidFootprintError, match="not partitions of this table"):
        table.begin("insert_into", ["nope"])
    with pytest.raises(UnknownOperationError, match="known operations"):
        table.begin("upsert", ["p"])
    with pytest.raises(UnknownOperationError, match="not in profile"):
        table.begin("optimize", ["p"])
    with pytest.raises(InvalidFootprintError):
        ReferenceTable("maxcompute-standard", partitions=[])


def test_a_transaction_commits_once():
    table = ReferenceTable("maxcompute-standard", partitions=["p"])
    txn = table.begin("insert_into", ["p"])
    txn.commit()
    with pytest.raises(RuntimeError, match="already finished"):
        txn.commit()


class _PausingList(list):
    """A list whose ``append`` pauses once the element has landed."""

    def __init__(self, items, pause: float) -> None:
        super().__init__(items)
        self.pause = pause

    def append(self, item) -> None:
        super().append(item)
        time.sleep(self.pause)


def test_no_commit_skips_a_winner_that_is_half_published():
    """Issue 11, item 9: a commit that reads the newest version before that version's history entry
    is published must still validate against it. A pause after the snapshot is appended (and
    before the history entry is) widens that window; concurrent committers must not slip through.

    The expected losers come from a brute-force oracle over what each job declared (its operation
    and partitions) and the profile's matrix cells, not from the engine's own judge.
    """
    profile = PROFILES["maxcompute-transactional"]
    ops = [Op.INSERT_INTO, Op.UPDATE, Op.DELETE]
    table = ReferenceTable(profile, partitions=["p", "q"])
    table.run(Op.INSERT_INTO, ["p"])
    table.run(Op.INSERT_INTO, ["q"])
    table._snapshots = _PausingList(table._snapshots, pause=0.002)  # a new snapshot, then a pause
    declared: dict[str, tuple[Op, frozenset[str]]] = {}
    finished: list[tuple[str, int, CommitConflict | None]] = []  # txn, read version, conflict
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        barrier.wait()
        try:
            for _ in range(25):
                op, parts = rng.choice(ops), rng.choice([["p"], ["q"], ["p", "q"]])
                txn = table.begin(op, parts)
                declared[txn.txn_id] = (op, frozenset(parts))
                time.sleep(rng.uniform(0, 0.003))  # the job's work: others commit meanwhile
                try:
                    txn.commit()
                    finished.append((txn.txn_id, txn.snapshot.version, None))
                except CommitConflict as exc:
                    finished.append((txn.txn_id, txn.snapshot.version, exc))
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(finished) == 8 * 25

    version_of = {c.txn_id: c.version for c in table.history}

    def loses_to(txn_id: str, winner_id: str) -> bool:
        (mine, my_parts), (theirs, their_parts) = declared[txn_id], declared[winner_id]
        return bool(my_parts & their_parts) and profile.later_fails(theirs, mine)

    should_have_lost = []
    for txn_id, read, conflict in finished:
        if conflict is None:  # committed: no winner between its snapshot and its commit may beat it
            mine = version_of[txn_id]
            winners = [c.txn_id for c in table.history if read < c.version < mine and c.txn_id in declared]
            if any(loses_to(txn_id, w) for w in winners):
                should_have_lost.append(txn_id)
        else:  # lost: to a commit after its snapshot that the matrix says it loses to
            assert conflict.winner is not None and conflict.winner.version > read
            assert loses_to(txn_id, table.history[conflict.winner.version - 1].txn_id)
    losers = sum(1 for _, _, conflict in finished if conflict is not None)
    assert losers > 20, "the schedule must race: most jobs overlap a concurrent winner"
    assert should_have_lost == [], f"{len(should_have_lost)} of {len(finished)} commits should have lost"
    assert [c.version for c in table.history] == list(range(1, len(table.history) + 1))
