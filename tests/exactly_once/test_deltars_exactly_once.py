"""Exactly-once writes on real delta-rs tables: tags, verify-before-retry, injected faults.

Every fault is injected around the real delta-rs call (``fault_injection.with_fault``); the
``kill`` fault SIGKILLs a real subprocess right after its commit returned.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
import pytest
from fault_injection import (
    KILLED,
    ROWS_PER_WRITE,
    count,
    create_deltars_table,
    deltars_rows,
    deltars_try,
    tag_of,
)

from occflow.core.errors import InvalidDeclarationError
from occflow.core.kinds import ConflictKind
from occflow.engines.deltars import CommitOptions, DeltaRsLedger, DeltaRsTable, ambient_commit, deltars_commit
from occflow.engines.ledger import StaleOverwriteError
from occflow.engines.tags import CommitTag
from occflow.operators.exactly_once import ExactlyOnce

SCRIPT = Path(__file__).with_name("fault_injection.py")


@pytest.fixture
def table_path(tmp_path: Path) -> str:
    path = str(tmp_path / "events")
    create_deltars_table(path)
    return path


def _subprocess_try(path: str, write_no: int, try_no: int, fault: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "deltars", path, str(write_no), str(try_no), fault],
        capture_output=True, text=True, timeout=120,
    )


def test_a_tagged_commit_carries_the_txn_action_and_the_tag_in_its_commit_info(table_path: str) -> None:
    tag = tag_of(1)
    table = DeltaRsTable(table_path)
    ledger = DeltaRsLedger(table)
    assert ledger.find_commit(tag) is None
    outcome = ExactlyOnce(ledger, tag).run(lambda: table.append(pa.table({"id": [1], "w": [1]})), verify_first=False)
    assert outcome.committed and outcome.version == 1
    assert table.app_version(tag.app_id) == 1
    found = ledger.find_commit(tag)
    assert found is not None and found.version == 1 and found.tag == tag
    assert ledger.find_commit(tag_of(2)) is None


def test_explicit_app_transaction_of_a_job_wins_over_the_ambient_tag(table_path: str) -> None:
    table = DeltaRsTable(table_path)
    with ambient_commit(deltars_commit(tag_of(1))):
        table.append(pa.table({"id": [1], "w": [1]}), commit=CommitOptions(app_id="stream-7", app_version=42))
    assert table.app_version("stream-7") == 42
    assert table.app_version(tag_of(1).app_id) is None


def test_ambient_commit_options_without_an_app_transaction_are_refused() -> None:
    with pytest.raises(InvalidDeclarationError, match="app transaction"), ambient_commit(CommitOptions(metadata={"a": "b"})):
        pass


def test_a_try_killed_right_after_the_commit_is_not_written_again_by_the_next_try(table_path: str) -> None:
    killed = _subprocess_try(table_path, 1, 1, "kill")
    assert killed.returncode == KILLED, killed.stderr[-2000:]
    assert deltars_rows(table_path) == [1] * ROWS_PER_WRITE  # the commit landed before the kill
    second = _subprocess_try(table_path, 1, 2, "none")
    assert second.returncode == 0, second.stderr[-2000:]
    assert '"verified": true' in second.stdout
    assert deltars_rows(table_path) == [1] * ROWS_PER_WRITE
    assert DeltaRsTable(table_path).version() == 1  # no second commit, not even an empty one


def test_a_commit_that_landed_but_timed_out_is_found_by_the_next_try(table_path: str) -> None:
    first = deltars_try(table_path, 1, 1, "timeout_after")
    assert not first.committed and "not a conflict" in first.reason
    second = deltars_try(table_path, 1, 2, None)
    assert second.committed and second.verified and second.version == 1
    assert deltars_rows(table_path) == [1] * ROWS_PER_WRITE


def test_commit_state_unknown_after_the_commit_landed_is_verified_not_retried(table_path: str) -> None:
    result = deltars_try(table_path, 1, 1, "unknown_after")
    assert result.committed and result.verified and result.attempts == 1
    assert deltars_rows(table_path) == [1] * ROWS_PER_WRITE


def test_commit_state_unknown_for_a_commit_that_never_landed_is_retried_once_verified(table_path: str) -> None:
    result = deltars_try(table_path, 1, 1, "unknown_before")
    assert result.committed and not result.verified and result.attempts == 2
    assert deltars_rows(table_path) == [1] * ROWS_PER_WRITE


def test_unverified_commit_state_unknown_becomes_a_retry_safe_commit_failure(table_path: str) -> None:
    from fault_injection import UNKNOWN_TEXT, InjectedCommitStateUnknown

    def never_commits() -> None:
        raise InjectedCommitStateUnknown(UNKNOWN_TEXT)

    outcome = ExactlyOnce(DeltaRsLedger(DeltaRsTable(table_path)), tag_of(3)).run(never_commits, verify_first=False)  # type: ignore[arg-type]
    assert not outcome.committed
    assert outcome.classification is not None and outcome.classification.kind is ConflictKind.COMMIT_FAILED
    assert "did not land" in outcome.classification.reason and ConflictKind.COMMIT_FAILED.retry_safe


def test_other_engine_errors_are_not_swallowed_by_verification(table_path: str) -> None:
    def broken() -> None:
        raise ValueError("schema mismatch")

    with pytest.raises(ValueError, match="schema mismatch"):
        ExactlyOnce(DeltaRsLedger(DeltaRsTable(table_path)), tag_of(4)).run(broken, verify_first=False)  # type: ignore[arg-type]


def _overwrite(path: str, day: str, value: int, action: str = "report") -> object:
    tag = CommitTag.create("daily", "snapshot", f"scheduled__{day}", "insert_overwrite",
                           logical_date=f"{day}T00:00:00+00:00", partitions={"region": "eu"})
    table = DeltaRsTable(path)
    data = pa.table({"region": ["eu"], "v": [value]})
    return ExactlyOnce(DeltaRsLedger(table), tag, action).run(
        lambda: table.overwrite(data, partition={"region": "eu"}), verify_first=True
    )


def test_a_slow_backfill_overwrite_does_not_clobber_a_newer_logical_dates_overwrite(tmp_path: Path) -> None:
    path = str(tmp_path / "snap")
    DeltaRsTable(path).create(pa.table({"region": ["eu", "us"], "v": [0, 0]}), partition_by=["region"])
    assert _overwrite(path, "2024-01-02", 2).committed  # type: ignore[attr-defined]
    with pytest.raises(StaleOverwriteError, match="later logical date") as raised:
        _overwrite(path, "2024-01-01", 1)
    assert raised.value.newer.tag.logical_date == "2024-01-02T00:00:00+00:00"
    rows = sorted((r["region"], r["v"]) for r in DeltaRsTable(path).load().to_pyarrow_table().to_pylist())
    assert rows == [("eu", 2), ("us", 0)]
    # Older overwrites of another partition, and 'apply', still go through.
    assert _overwrite(path, "2024-01-01", 1, action="apply").committed  # type: ignore[attr-defined]
    rows = sorted((r["region"], r["v"]) for r in DeltaRsTable(path).load().to_pyarrow_table().to_pylist())
    assert rows == [("eu", 1), ("us", 0)]


def test_a_newer_overwrite_of_another_partition_does_not_block_an_older_one(tmp_path: Path) -> None:
    path = str(tmp_path / "snap")
    table = DeltaRsTable(path)
    table.create(pa.table({"region": ["eu", "us"], "v": [0, 0]}), partition_by=["region"])
    newer = CommitTag.create("daily", "snapshot_us", "scheduled__2024-01-09", "insert_overwrite",
                             logical_date="2024-01-09T00:00:00+00:00", partitions={"region": "us"})
    ExactlyOnce(DeltaRsLedger(table), newer).run(
        lambda: table.overwrite(pa.table({"region": ["us"], "v": [9]}), partition={"region": "us"}), verify_first=False
    )
    assert _overwrite(path, "2024-01-01", 1).committed  # type: ignore[attr-defined]


def test_five_faults_in_a_row_leave_no_duplicate_and_no_lost_write(table_path: str) -> None:
    faults = ["kill", "unknown_after", "unknown_before", "timeout_after", "crash_after"]
    from fault_injection import InjectedCrash

    for write_no, fault in enumerate(faults, start=1):
        if fault == "kill":
            assert _subprocess_try(table_path, write_no, 1, "kill").returncode == KILLED
        else:
            try:
                first = deltars_try(table_path, write_no, 1, fault)
            except InjectedCrash:
                first = None
            if first is not None and first.committed:
                continue
        assert deltars_try(table_path, write_no, 2, None).committed
    counted = count(deltars_rows(table_path), range(1, len(faults) + 1))
    assert counted["duplicated_writes"] == [] and counted["lost_writes"] == [], counted
    assert counted["partial_writes"] == [] and counted["rows"] == len(faults) * ROWS_PER_WRITE


def test_only_the_tasks_own_commits_are_tagged_not_another_writer_during_the_attempt(table_path: str) -> None:
    tag = tag_of(7)
    own = {"occflow.task-id-of-operator": "append"}
    table = DeltaRsTable(table_path)
    with DeltaRsLedger(table, only_if=own).tagging(tag):
        table.append(pa.table({"id": [1], "w": [0]}))  # someone else's write: not this task's commit
        assert table.app_version(tag.app_id) is None
        table.append(pa.table({"id": [2], "w": [7]}), commit=CommitOptions(metadata=own))
    found = DeltaRsLedger(table).find_commit(tag)
    assert found is not None and found.version == 2
