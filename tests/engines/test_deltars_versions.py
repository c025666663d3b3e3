"""Versions come from the Delta log by number, whatever another writer commits meanwhile (issue 23).

delta-rs's ``history()`` labels the newest commits counting down from the handle's own version:
a handle loaded just before another writer commits labels that writer's commit with its own
version, and every older one a version too low. These tests land a real commit from another
writer right after occflow opens the table to look a version up (``RacedTable``: every ``load``
and every log read it makes first lets the other writer commit), and hold occflow's answer
against the oracle: the ``_delta_log/<version>.json`` file, read here with ``json``, whose
``commitInfo`` carries the write's own metadata. No mocks: real delta-rs tables and commits.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation
from occflow.engines.deltars import CommitOptions, DeltaRsLedger, DeltaRsTable, deltars_commit
from occflow.engines.deltars.compaction import duplicate_compaction
from occflow.engines.deltars.log import DeltaLog
from occflow.engines.deltars.observed import diff_snapshots, observe_deltars_commit
from occflow.engines.tags import WRITE_ID, CommitTag

pytest.importorskip("deltalake")


def _rows(part: str, ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "part": pa.array([part] * len(ids), pa.string())})


def _tag(task: str, op: Operation = Operation.INSERT_INTO) -> CommitTag:
    return CommitTag.create("etl", task, "scheduled__2024-01-01", op, try_number=1)


def _log(path: str | Path) -> dict[int, dict[str, Any]]:
    """Oracle: every commit file's commitInfo by the number in its file name (``json`` only)."""
    out = {}
    for entry in sorted((Path(path) / "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                out[int(entry.stem)] = action["commitInfo"]
    return out


def _carrying(path: str | Path, key: str, value: str) -> int:
    """Oracle: the one version whose commitInfo has ``key = value``."""
    found = [v for v, info in _log(path).items() if info.get(key) == value]
    assert len(found) == 1, found
    return found[0]


class RacedTable(DeltaRsTable):
    """A delta-rs table another writer commits to right after occflow opens it: while
    ``interlopers`` is above zero, every ``load()`` / ``log()`` lands one append to partition
    ``z`` (a real commit by a separate writer) after the table or log object is made."""

    def __init__(self, uri: str | Path) -> None:
        super().__init__(uri)
        self.interlopers = 0
        self.landed: list[str] = []

    def arm(self, commits: int) -> None:
        self.interlopers = commits

    def _interlope(self) -> None:
        if self.interlopers > 0:
            self.interlopers -= 1
            marker = f"interloper-{len(self.landed)}"
            other = DeltaRsTable(self.uri).append(_rows("z", [0]), commit=CommitOptions(metadata={"other": marker}))
            assert other.committed
            self.landed.append(marker)

    def load(self, version: int | None = None) -> Any:
        table = super().load(version)
        if version is None:
            self._interlope()  # the handle is stale the moment it is returned
        return table

    def log(self) -> DeltaLog:
        log = super().log()
        self._interlope()
        return log


@pytest.fixture
def raced(tmp_path: Path) -> RacedTable:
    table = RacedTable(tmp_path / "t")
    assert DeltaRsTable(table.uri).create(_rows("a", [1, 2]), partition_by=["part"]).committed
    return table


def test_a_stale_handles_history_labels_the_newest_commit_with_its_own_version(tmp_path: Path) -> None:
    """The delta-rs behaviour this file guards against (if it stops, delta-rs fixed it)."""
    from deltalake import DeltaTable

    table = DeltaRsTable(tmp_path / "t")
    assert table.create(_rows("a", [1])).committed
    assert table.append(_rows("a", [2])).committed
    stale = DeltaTable(table.uri)
    assert table.append(_rows("a", [3]), commit=CommitOptions(metadata={"mark": "v2"})).committed
    assert (stale.history(1)[0]["version"], stale.history(1)[0].get("mark")) == (1, "v2")  # v2's, labelled 1
    assert DeltaLog(table.uri).commit(2).info["mark"] == "v2"


def test_the_version_a_commit_reports_is_the_one_whose_commit_info_carries_it(raced: RacedTable) -> None:
    tag = _tag("writer")
    armed = CommitOptions(before_commit=lambda: raced.arm(3))  # after our commit, others land
    out = raced.append(_rows("a", [3]), commit=deltars_commit(tag, armed))
    assert out.committed and raced.landed  # another writer committed while we looked our version up
    assert out.version == _carrying(raced.uri, WRITE_ID, tag.write_id) == 1
    assert out.rows == 1


def test_a_write_on_a_stale_snapshot_reports_its_own_version_among_racing_writers(raced: RacedTable) -> None:
    snapshot = raced.load(0)
    for i in range(3):
        assert DeltaRsTable(raced.uri).append(_rows("b", [i])).committed
    tag = _tag("late")
    out = raced.append(_rows("a", [9]), snapshot=snapshot, commit=deltars_commit(tag, CommitOptions(
        before_commit=lambda: raced.arm(2))))
    assert out.committed and len(raced.landed) >= 1
    assert out.version == _carrying(raced.uri, WRITE_ID, tag.write_id) == 4
    assert out.tag["read_version"] == "0"


def test_the_winner_named_is_the_commit_the_log_records_for_the_winning_write(raced: RacedTable) -> None:
    snapshot = raced.load(0)
    winner_tag = _tag("deleter", Operation.DELETE)
    won = DeltaRsTable(raced.uri).delete(partition={"part": "a"}, commit=deltars_commit(winner_tag))
    assert won.committed
    lost = raced.update(set_values={"id": 7}, partition={"part": "a"}, snapshot=snapshot,
                        commit=CommitOptions(before_commit=lambda: raced.arm(2)))
    assert not lost.committed and raced.landed  # others committed while the winner was looked up
    assert lost.classification is not None and lost.classification.kind is ConflictKind.CONCURRENT_DELETE_READ
    winner = lost.classification.winning_commit
    assert winner is not None
    assert winner.version == _carrying(raced.uri, WRITE_ID, winner_tag.write_id) == won.version
    assert winner.task_id == "deleter" and winner.operation == "DELETE"


def test_the_ledger_finds_the_tagged_commit_at_the_version_the_log_records(raced: RacedTable) -> None:
    tag = _tag("loader")
    assert DeltaRsTable(raced.uri).append(_rows("a", [5]), commit=deltars_commit(tag)).committed
    raced.arm(4)  # each read the ledger makes lets another writer commit first
    found = DeltaRsLedger(raced).find_commit(tag)
    assert raced.landed
    assert found is not None and found.version == _carrying(raced.uri, WRITE_ID, tag.write_id) == 1
    tagged = list(DeltaRsLedger(raced).tagged_commits())
    assert [(c.version, c.tag.write_id) for c in tagged] == [(1, tag.write_id)]


def test_the_observed_commit_is_read_by_its_number_after_others_committed(raced: RacedTable) -> None:
    out = raced.delete(partition={"part": "a"}, commit=CommitOptions(metadata={"mine": "yes"}))
    assert out.committed
    for i in range(2):
        assert DeltaRsTable(raced.uri).append(_rows("b", [i])).committed
    observed = observe_deltars_commit(raced.uri, out.version)
    assert observed.operation == "DELETE" and observed.partitions_removed == frozenset({"part=a"})
    info = diff_snapshots(raced.uri, out.version, None, raced.load(out.version)).info
    assert info["mine"] == "yes" and _log(raced.uri)[out.version]["mine"] == "yes"


def test_the_log_reads_commits_by_number_past_the_version_a_load_reported(tmp_path: Path) -> None:
    table = DeltaRsTable(tmp_path / "t")
    assert table.create(_rows("a", [1])).committed
    log = DeltaLog(table.uri)
    assert log.latest_version() == 0
    for i in range(3):
        assert table.append(_rows("a", [i]), commit=CommitOptions(metadata={"n": str(i)})).committed
    assert [c.version for c in log.commits(1)] == [1, 2, 3]
    assert [c.info["n"] for c in log.newest_first(2)] == ["2", "1"]
    assert log.commit(9) is None


# ------------------------------------------------------------------ OPTIMIZE races


def _small_files(tmp_path: Path) -> DeltaRsTable:
    table = DeltaRsTable(tmp_path / "c")
    assert table.create(_rows("a", [1, 2]), partition_by=["part"]).committed
    assert table.append(_rows("a", [3, 4])).committed
    assert table.append(_rows("b", [5])).committed
    return table


def _ids(table: DeltaRsTable, part: str) -> list[int]:
    return sorted(table.load().to_pyarrow_table(filters=[("part", "=", part)]).column("id").to_pylist())


def test_two_optimizes_from_one_snapshot_both_commit_and_the_pair_is_named(tmp_path: Path) -> None:
    table = _small_files(tmp_path)
    first_snapshot, second_snapshot = table.load(), table.load()
    first = table.optimize(partition={"part": "a"}, snapshot=first_snapshot)
    second = table.optimize(partition={"part": "a"}, snapshot=second_snapshot)
    assert first.committed and second.committed  # delta-rs lets both commit: the corruption
    assert _ids(table, "a") == [1, 1, 2, 2, 3, 3, 4, 4]
    for version in (first.version, second.version):
        race = duplicate_compaction(table.uri, version)
        assert race is not None and race.versions == (first.version, second.version)
        assert race.operations == ("OPTIMIZE", "OPTIMIZE") and len(race.files) == 2
    assert first.damage is None  # the second had not committed yet
    assert f"versions {first.version} (OPTIMIZE) and {second.version} (OPTIMIZE)" in (second.damage or "")


def test_a_single_optimize_has_no_racing_compaction(tmp_path: Path) -> None:
    table = _small_files(tmp_path)
    out = table.optimize(partition={"part": "a"})
    assert out.committed and out.damage is None
    assert table.append(_rows("a", [6])).committed
    assert table.optimize(partition={"part": "a"}).committed  # a later compaction of the new files
    assert duplicate_compaction(table.uri, out.version) is None
    assert duplicate_compaction(table.uri, 0) is None  # a commit that removed nothing
    assert _ids(table, "a") == [1, 2, 3, 4, 6]
