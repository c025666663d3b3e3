"""delta-rs names the commit a lost write lost to, and reports the version it recorded for ours.

Real races on real delta-rs tables: the conformance runner's jobs (every ordered pair of the
profile's operations on one partition), the later job planned on the snapshot the earlier one
read. The oracle is independent of the winner finder: the version the winning writer itself
reported (found by its own commit id) and the commit info the log holds for that version.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from occflow.core.operations import Operation
from occflow.core.profiles.deltars import DELTA_RS_MATRIX
from occflow.engines.deltars import CommitOptions, DeltaRsTable, ambient_commit, deltars_commit
from occflow.engines.deltars.conformance import DeltaRsPairRunner, PairJobs
from occflow.engines.tags import WRITE_ID, CommitTag

PAIR_OPERATIONS = [
    Operation.INSERT_INTO,
    Operation.INSERT_OVERWRITE,
    Operation.TRUNCATE,
    Operation.UPDATE,
    Operation.DELETE,
    Operation.MERGE,
    Operation.OPTIMIZE,
    Operation.ALTER_METADATA,
]


def _tag(task: str, op: Operation, try_number: int = 3) -> CommitTag:
    return CommitTag.create("etl", task, "scheduled__2024-01-01", op, try_number=try_number)


def _rows(part: str, ids: list[int]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "part": pa.array([part] * len(ids), pa.string()),
            "value": pa.array([0] * len(ids), pa.int64()),
        }
    )


def _log_entry(path: Path, version: int) -> dict:
    """The commit info the log holds for ``version``: its commit file, read by number with ``json``
    (never ``history()``, whose labels a concurrent commit can shift)."""
    lines = (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    return next(json.loads(line)["commitInfo"] for line in lines if '"commitInfo"' in line)


@pytest.mark.parametrize("isolation", ["WriteSerializable", "Serializable"])
def test_every_conflicting_pair_names_the_commit_the_winner_made(tmp_path: Path, isolation: str) -> None:
    runner = DeltaRsPairRunner(tmp_path, isolation)
    conflicts = 0
    for n, (earlier, later) in enumerate(itertools.product(PAIR_OPERATIONS, PAIR_OPERATIONS)):
        table = runner.prepare(f"t{n}")
        read = table.version()
        earlier_snapshot, later_snapshot = table.load(read), table.load(read)
        jobs = PairJobs(table)
        tag = _tag("earlier", earlier)
        # The earlier job commits as an occflow task would: its tag in the commit info.
        with ambient_commit(deltars_commit(tag)):
            first = jobs.run(earlier, earlier_snapshot, "earlier")
        assert first.committed and first.version == read + 1, (earlier, first.error)
        second = jobs.run(later, later_snapshot, "later")
        if second.committed or second.classification is None or not second.classification.is_conflict:
            continue
        conflicts += 1
        winner = second.classification.winning_commit
        cell = f"{earlier.value} then {later.value} ({second.classification.kind.value})"
        assert winner is not None, cell
        assert winner.version == first.version, cell
        logged = _log_entry(Path(table.uri), first.version)
        assert logged[WRITE_ID] == tag.write_id, cell
        assert winner.operation == logged["operation"], cell
        assert (winner.dag_id, winner.task_id, winner.run_id, winner.try_number, winner.tagged) == (
            "etl", "earlier", "scheduled__2024-01-01", 3, True
        ), cell
        assert winner.others == (), cell
        assert f"version {first.version}" in winner.describe()
        assert "by etl.earlier run scheduled__2024-01-01 try 3" in winner.describe()
    # every cell the delta-rs profile says the later job loses was a real conflict here
    assert conflicts == sum(1 for _, _, (kind, _), *_ in DELTA_RS_MATRIX if kind is not None)


def test_the_winner_is_the_commit_the_conflict_is_with_not_the_first_after_the_read(tmp_path: Path) -> None:
    """An append into another partition lands first; the UPDATE of the loser's partition after it
    is what the DELETE conflicts with, and the append is listed as another commit since the read."""
    table = DeltaRsTable(tmp_path / "t")
    assert table.create(_rows("a", [1, 2]), partition_by=["part"]).committed
    assert table.append(_rows("b", [3])).committed
    read = table.version()
    loser_snapshot = table.load(read)
    other = table.append(_rows("b", [4]), commit=deltars_commit(_tag("other", Operation.INSERT_INTO)))
    winning = table.update(
        set_values={"value": 7}, partition={"part": "a"}, commit=deltars_commit(_tag("fix", Operation.UPDATE, 1))
    )
    lost = table.delete(partition={"part": "a"}, snapshot=loser_snapshot)
    assert other.committed and winning.committed and not lost.committed
    assert lost.classification is not None and lost.classification.is_conflict
    winner = lost.classification.winning_commit
    assert winner is not None
    assert winner.version == winning.version == read + 2
    assert winner.others == (other.version,)
    assert (winner.task_id, winner.try_number) == ("fix", 1)
    assert winner.operation == _log_entry(tmp_path / "t", winning.version)["operation"] == "UPDATE"


def test_a_metadata_change_after_an_append_is_named_for_metadata_changed(tmp_path: Path) -> None:
    table = DeltaRsTable(tmp_path / "t")
    assert table.create(_rows("a", [1]), partition_by=["part"]).committed
    read = table.version()
    loser_snapshot = table.load(read)
    appended = table.append(_rows("a", [2]))
    altered = table.set_properties({"delta.appendOnly": "false"})
    lost = table.append(_rows("a", [3]), snapshot=loser_snapshot)
    assert appended.committed and altered.committed and not lost.committed
    assert lost.classification is not None and lost.classification.kind.value == "metadata_changed"
    winner = lost.classification.winning_commit
    assert winner is not None and winner.version == altered.version and winner.others == (appended.version,)
    assert winner.tagged is False and winner.dag_id is None  # an untagged commit names no task


def test_reported_version_is_the_one_the_log_recorded_for_our_commit(tmp_path: Path) -> None:
    """A loads, B commits, A commits: both blind appends succeed; A reports the version whose
    commit info carries A's tag, not the loaded version + 1 (that one is B's)."""
    path = tmp_path / "t"
    table = DeltaRsTable(path)
    assert table.create(_rows("a", [1]), partition_by=["part"]).committed
    snapshot_a = table.load()
    tag_a, tag_b = _tag("writer_a", Operation.INSERT_INTO), _tag("writer_b", Operation.INSERT_INTO)
    b = table.append(_rows("a", [2]), commit=deltars_commit(tag_b))
    a = table.append(_rows("a", [3]), snapshot=snapshot_a, commit=deltars_commit(tag_a))
    assert a.committed and b.committed
    infos = {v: _log_entry(path, v) for v in range(DeltaTable(str(path)).version() + 1)}
    carrying = {e[WRITE_ID]: v for v, e in infos.items() if WRITE_ID in e}
    assert a.version == carrying[tag_a.write_id] == 2
    assert b.version == carrying[tag_b.write_id] == 1
    assert a.version != snapshot_a.version() + 1
    assert a.tag["read_version"] == "0"


def test_many_commits_between_read_and_commit_still_find_our_version(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = DeltaRsTable(path)
    assert table.create(_rows("a", [0]), partition_by=["part"]).committed
    snapshot = table.load()
    for i in range(1, 56):  # more commits than one page of history (50)
        assert table.append(_rows("b", [i]), commit=CommitOptions(metadata={"n": str(i)})).committed
    tag = _tag("late", Operation.INSERT_INTO)
    mine = table.append(_rows("a", [99]), snapshot=snapshot, commit=deltars_commit(tag))
    assert mine.committed and mine.version == 56
    assert _log_entry(path, 56)[WRITE_ID] == tag.write_id
