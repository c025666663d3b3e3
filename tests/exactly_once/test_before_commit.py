"""The check right before a commit, on real delta-rs tables and a real SQLite lease store.

One write, one commit: a snapshot that already holds the write's ``txn`` is not committed on
again; a ``concurrent_transaction`` caused by another try of the same write settles as
committed; the before-commit hook runs inside the engine call and what it refuses never
commits. Fenced leases: the lease's fence is stamped into the commit, and a lease that is not
live at the commit aborts the attempt uncommitted (reschedule), reported in the write's report.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest
from airflow.sdk.exceptions import AirflowRescheduleException
from fault_injection import create_deltars_table, deltars_rows, tag_of

from occflow.engines.deltars import CommitOptions, DeltaRsLedger, DeltaRsTable
from occflow.engines.ledger import AlreadyCommitted, CommitRefused
from occflow.engines.tags import FENCE, CommitTag
from occflow.leases import TaskAdmission
from occflow.operators.base import MAX_LEASE_LOSSES, LeaseLostFailure
from occflow.operators.delta import DeltaWriteOperator
from occflow.operators.exactly_once import ExactlyOnce, LeaseLapsed


@pytest.fixture
def table_path(tmp_path: Path) -> str:
    path = str(tmp_path / "events")
    create_deltars_table(path)
    return path


def _rows(write_no: int) -> Any:
    return pa.table({"id": pa.array([write_no * 100], pa.int64()), "w": pa.array([write_no], pa.int64())})


def test_the_fence_and_the_try_are_stamped_into_the_commit_info(table_path: str) -> None:
    table = DeltaRsTable(table_path)
    tag = CommitTag.create("d", "t", "r1", "insert_into", try_number=2, fence=41)
    assert ExactlyOnce(DeltaRsLedger(table), tag).run(lambda: table.append(_rows(1)), verify_first=False).committed
    info = table.load().history(1)[0]
    assert info[FENCE] == "41" and info["occflow.try-number"] == "2"
    found = DeltaRsLedger(table).find_commit(tag)
    assert found is not None and found.tag.fence == 41 and found.by == "try 2" and found.tag == tag
    # Without a tag, the commit options stamp it too (admission without exactly-once).
    assert table.append(_rows(2), commit=CommitOptions(fence=42)).committed
    assert table.load().history(1)[0][FENCE] == "42"


def test_a_snapshot_that_holds_the_writes_txn_is_not_committed_on_again(table_path: str) -> None:
    table = DeltaRsTable(table_path)
    tag = tag_of(1)
    ledger = DeltaRsLedger(table)
    assert ExactlyOnce(ledger, tag).run(lambda: table.append(_rows(1)), verify_first=False).committed
    # A try that never verified (try 1's first attempt) plans on a snapshot holding the commit.
    with ledger.tagging(tag), pytest.raises(AlreadyCommitted, match="already holds app transaction"):
        table.append(_rows(1), snapshot=table.load())
    settled = ExactlyOnce(ledger, tag).run(lambda: table.append(_rows(1)), verify_first=False)
    assert settled.committed and settled.version == 1
    assert settled.found is not None and settled.found.by == "another try", settled  # the tag names no try
    assert "found right before this attempt's commit" in settled.found.reason
    assert deltars_rows(table_path) == [1] and table.version() == 1


def test_a_concurrent_transaction_of_the_same_write_settles_as_committed(table_path: str) -> None:
    table = DeltaRsTable(table_path)
    first, second = tag_of(1), replace(tag_of(1), try_number=2)
    stale = table.load()  # both tries plan on this snapshot
    assert ExactlyOnce(DeltaRsLedger(table), second).run(lambda: table.append(_rows(1)), verify_first=True).committed
    settled = ExactlyOnce(DeltaRsLedger(table), first).run(lambda: table.append(_rows(1), snapshot=stale),
                                                           verify_first=False)
    assert settled.committed and settled.version == 1
    assert settled.found is not None and settled.found.by == "try 2", settled
    assert settled.found.reason.startswith("already committed by try 2: the table refused a second commit")
    assert deltars_rows(table_path) == [1]


def test_another_writers_txn_conflict_is_not_settled(table_path: str) -> None:
    table = DeltaRsTable(table_path)
    stale = table.load()
    assert table.append(_rows(9), commit=CommitOptions(app_id="stream", app_version=1)).committed
    job = CommitOptions(app_id="stream", app_version=2)
    outcome = ExactlyOnce(DeltaRsLedger(table), tag_of(1)).run(
        lambda: table.append(_rows(1), snapshot=stale, commit=job), verify_first=False)
    assert not outcome.committed and outcome.classification is not None
    assert outcome.classification.kind.value == "concurrent_transaction"


def test_a_before_commit_refusal_passes_through_the_engine_and_nothing_commits(table_path: str) -> None:
    table = DeltaRsTable(table_path)
    calls: list[int] = []

    def refuse() -> None:
        calls.append(table.version())  # the hook runs once the snapshot is read, before the commit
        raise LeaseLapsed("lease 1234 lapsed", fence=3)

    for write in (lambda c: table.append(_rows(1), commit=c), lambda c: table.delete(commit=c),
                  lambda c: table.merge(_rows(1), ["id"], commit=c), lambda c: table.optimize(commit=c)):
        with pytest.raises(CommitRefused, match="lapsed"):
            write(CommitOptions(before_commit=refuse))
    assert calls == [0, 0, 0, 0] and table.version() == 0


def _context(try_number: int, store: dict[str, Any]) -> dict[str, Any]:
    state = SimpleNamespace(get=store.get, set=store.__setitem__)
    ti = SimpleNamespace(dag_id="d", task_id="append", run_id="r1", map_index=-1, try_number=try_number)
    return {"ti": ti, "logical_date": "2024-01-01T00:00:00+00:00", "task_state_store": state}


def _operator(path: str, url: str, data: Any) -> DeltaWriteOperator:
    return DeltaWriteOperator(task_id="append", table="events", path=path, operation="insert_into",
                              data=data, lease_store_url=url, lease_ttl=30)


def test_a_lease_lost_before_the_commit_aborts_the_attempt_and_the_task_is_admitted_again(
    table_path: str, tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'leases.db'}"
    state: dict[str, Any] = {}
    fences: list[int] = []

    def lose_the_lease(context: Any, snapshot: Any) -> Any:
        for lease in TaskAdmission(url).store.leases():
            fences.append(lease.fence)
            TaskAdmission(url).store.release(lease)  # released under the write: someone else may hold it
        return _rows(1)

    with pytest.raises(AirflowRescheduleException):
        _operator(table_path, url, lose_the_lease).execute(_context(1, state))
    assert table_path and DeltaRsTable(table_path).version() == 0  # nothing committed
    report = _operator(table_path, url, _rows(1)).execute(_context(1, state))  # the rescheduled run
    assert report["committed"] and report["version"] == 1 and report["attempts"] == 2
    assert [e["fence"] for e in report["lease_lost"]] == fences and "not live" in report["lease_lost"][0]["reason"]
    assert report["conflicts"] == [] and report["fence"] > fences[0]
    assert DeltaRsTable(table_path).load().history(1)[0][FENCE] == str(report["fence"])
    assert deltars_rows(table_path) == [1]


def test_a_lease_lost_again_and_again_fails_for_airflows_retries(table_path: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'leases.db'}"
    state: dict[str, Any] = {}

    def lose_the_lease(context: Any, snapshot: Any) -> Any:
        for lease in TaskAdmission(url).store.leases():
            TaskAdmission(url).store.release(lease)
        return _rows(1)

    for _ in range(MAX_LEASE_LOSSES - 1):
        with pytest.raises(AirflowRescheduleException):
            _operator(table_path, url, lose_the_lease).execute(_context(1, state))
    with pytest.raises(LeaseLostFailure, match="aborted before its commit"):
        _operator(table_path, url, lose_the_lease).execute(_context(1, state))
    assert DeltaRsTable(table_path).version() == 0
