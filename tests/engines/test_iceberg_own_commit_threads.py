"""Iceberg's own-commit lookup with two threads of one Spark application (issue 33, item 6).

Two Python threads share the run's one SparkSession (PySpark pins each to its own JVM thread) and
append to one Iceberg table: A commits, then B commits, then A asks which snapshot it made. Both
snapshots carry the same ``spark.app.id``, so "the newest snapshot of this application" is B's.
The lookup must name A's by occflow's write id, which Iceberg's ``CommitMetadata`` puts in the
summary of each commit the tagged thread makes (``iceberg_commit_properties``), and with no write id
it must name none rather than guess. The oracle is the table's data as Iceberg records it, read
apart from the summaries: the rows a snapshot holds that its parent does not.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from occflow.engines.spark.iceberg import iceberg_commit_properties
from occflow.engines.spark.jobs import CallableJob, JobContext
from occflow.engines.spark.winner import OwnSnapshot, own_snapshot, snapshots_since
from occflow.engines.tags import CommitTag

pytestmark = pytest.mark.spark

WAIT = 120  # seconds a thread waits for the other: a loaded machine, never a sleep in the happy path


def _rows_added(spark: Any, table: str, snapshot_id: int, parent_id: int) -> set[int]:
    """The ids a snapshot holds that its parent does not: what that commit wrote, from the data."""
    rows = spark.sql(
        f"SELECT id FROM {table} VERSION AS OF {int(snapshot_id)} "
        f"EXCEPT SELECT id FROM {table} VERSION AS OF {int(parent_id)}"
    ).collect()
    return {int(r["id"]) for r in rows}


def _written_by(spark: Any, table: str, start: int) -> dict[int, set[int]]:
    """Each snapshot since ``start`` with the ids it added (its parent is the one before it)."""
    out, parent = {}, start
    for snapshot in snapshots_since(spark, table, start):
        sid = int(snapshot["snapshot_id"])
        out[sid] = _rows_added(spark, table, sid, parent)
        parent = sid
    return out


ThreadBody = Callable[[Callable[[], None], Callable[[], None]], None]


def _race(spark: Any, table: str, body_a: ThreadBody) -> None:
    """Thread A runs ``body_a(committed, wait_for_b)``: it commits, calls ``committed()``, and
    ``wait_for_b()`` returns once thread B has appended id 20 under B's own tag. Both threads use
    ``spark``; an error in either fails the test."""
    a_committed, b_committed = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def wait_for_b() -> None:
        assert b_committed.wait(WAIT), "B never committed"

    def thread_a() -> None:
        try:
            body_a(a_committed.set, wait_for_b)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)
        finally:
            a_committed.set()

    def thread_b() -> None:
        try:
            assert a_committed.wait(WAIT), "A never committed"
            with iceberg_commit_properties(spark, TAG_B):
                spark.sql(f"INSERT INTO {table} VALUES (20, 'b', 20)")
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)
        finally:
            b_committed.set()

    threads = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(2 * WAIT)
    assert not errors, errors


TAG_A = CommitTag.create("dag", "writer_a", "run1", "insert_into")
TAG_B = CommitTag.create("dag", "writer_b", "run1", "insert_into")


def test_a_thread_finds_its_own_snapshot_when_another_thread_of_the_application_committed_after_it(
    iceberg_engine: Any, iceberg_table: str
) -> None:
    spark, table = iceberg_engine.session(), iceberg_table
    start = int(snapshots_since(spark, table, None)[-1]["snapshot_id"])
    app_id = str(spark.sparkContext.applicationId)
    seen: dict[str, Any] = {}

    def body_a(committed: Callable[[], None], wait_for_b: Callable[[], None]) -> None:
        with iceberg_commit_properties(spark, TAG_A):
            spark.sql(f"INSERT INTO {table} VALUES (10, 'a', 10)")
        committed()
        wait_for_b()
        since = snapshots_since(spark, table, start)
        seen.update(since=since, tagged=own_snapshot(since, TAG_A.write_id, app_id))
        seen["untagged"] = own_snapshot(since, None, app_id)

    _race(spark, table, body_a)

    written = _written_by(spark, table, start)
    a_snapshot = next(sid for sid, ids in written.items() if ids == {10})
    b_snapshot = next(sid for sid, ids in written.items() if ids == {20})
    since: list[dict[str, Any]] = seen["since"]
    assert [int(s["snapshot_id"]) for s in since] == [a_snapshot, b_snapshot]
    # The hazard is real: both carry this application's id, and the newest of them is B's.
    assert {s["summary"].get("spark.app.id") for s in since} == {app_id}

    tagged: OwnSnapshot = seen["tagged"]
    assert tagged.snapshot is not None and int(tagged.snapshot["snapshot_id"]) == a_snapshot, tagged.basis
    untagged: OwnSnapshot = seen["untagged"]
    assert untagged.snapshot is None and "ambiguous" in untagged.basis, untagged.basis
    b_found = own_snapshot(since, TAG_B.write_id, app_id)  # B's lookup, from the same chain
    assert b_found.snapshot is not None and int(b_found.snapshot["snapshot_id"]) == b_snapshot


def test_the_engine_reports_the_snapshot_its_job_committed_not_a_later_one_of_another_thread(
    iceberg_engine: Any, iceberg_table: str
) -> None:
    spark, table = iceberg_engine.session(), iceberg_table
    start = int(snapshots_since(spark, table, None)[-1]["snapshot_id"])
    seen: dict[str, Any] = {}

    # A's whole attempt (before, job, after) runs in thread A under A's tag, as ExactlyOnce runs it;
    # B commits after A's INSERT, while A's job is still running, so before the engine looks.
    def body_a(committed: Callable[[], None], wait_for_b: Callable[[], None]) -> None:
        def job(session: Any, context: JobContext) -> None:
            session.sql(f"INSERT INTO {table} VALUES (10, 'a', 10)")
            committed()
            wait_for_b()

        with iceberg_commit_properties(spark, TAG_A):
            seen["outcome"] = iceberg_engine.run(CallableJob(job), table, "insert_into")

    _race(spark, table, body_a)

    written = _written_by(spark, table, start)
    a_snapshot = next(sid for sid, ids in written.items() if ids == {10})
    outcome = seen["outcome"]
    assert outcome.committed, outcome
    assert outcome.snapshot_id == a_snapshot, (outcome.snapshot_id, written, dict(outcome.tag))
