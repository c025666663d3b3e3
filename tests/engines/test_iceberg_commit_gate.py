"""Order-aware admission on real Spark + Iceberg: an append admitted beside a running MERGE of
the same partition holds its commit at its gate until the MERGE's lease ends.

Under serializable isolation (Iceberg's default for MERGE) the pair commits cleanly in one
order only: MERGE then append. An append that lands between the MERGE's snapshot and its commit
fails the MERGE ("Found conflicting files"), Iceberg's validation against new data. The MERGE
plans on a snapshot its session caches (``pinned_session``), so the order of the commits, not
timing luck, decides. What is checked is the engine's record: the table's ``snapshots`` metadata
table (which operation committed after which, from which parent) and Iceberg's own exception in
the control run. The lease store is the real one (SQLite).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from occflow.engines.spark.iceberg import current_snapshot, pinned_session
from occflow.leases import LeaseKeeper, LeaseRequest, LeaseStore

pytestmark = pytest.mark.spark

PROFILE = "iceberg-serializable"


def _snapshots(spark: Any, table: str) -> list[tuple[int, int | None, str]]:
    """(snapshot id, parent id, operation) in commit order, from Iceberg's metadata table."""
    rows = spark.sql(f"SELECT snapshot_id, parent_id, operation FROM {table}.snapshots ORDER BY committed_at").collect()
    return [(int(r["snapshot_id"]), None if r["parent_id"] is None else int(r["parent_id"]), r["operation"])
            for r in rows]


def _merge(table: str) -> str:
    return (f"MERGE INTO {table} t USING (SELECT 1 AS id, 'a' AS ds, 100 AS v) s "
            "ON t.id = s.id AND t.ds = 'a' WHEN MATCHED THEN UPDATE SET v = s.v")


def test_a_gated_append_commits_after_the_merge_it_runs_beside(
    iceberg_engine: Any, iceberg_table: str, tmp_path: Path
) -> None:
    engine, table = iceberg_engine, iceberg_table
    spark = engine.session()
    store = LeaseStore.from_url(f"sqlite:///{tmp_path / 'leases.db'}", history=True)
    merge = store.decide(LeaseRequest.create(table, "merge", PROFILE, [{"ds": "a"}], commit_gate=True))
    assert merge.lease is not None
    append = store.decide(LeaseRequest.create(table, "insert_into", PROFILE, [{"ds": "a"}], commit_gate=True))
    # Admitted beside the running MERGE (an order-blind admission would make it wait).
    assert append.lease is not None and append.lease.awaits == {merge.lease.lease_id}

    merging = pinned_session(spark, "lake")
    merging.sql(f"SELECT count(*) FROM {table}").collect()  # the MERGE plans on this snapshot
    start = current_snapshot(spark, table)
    outcome: dict[str, Any] = {}
    with LeaseKeeper(store, append.lease) as keeper:

        def appender() -> None:
            result = engine.run(f"INSERT INTO {table} VALUES (7, 'a', 7)", table, session=spark.newSession(),
                                before_commit=keeper.wait_gate)
            outcome.update(result=result, held=keeper.gate_seconds)

        worker = threading.Thread(target=appender)
        worker.start()
        time.sleep(2.0)
        assert worker.is_alive(), "the append did not wait at its gate"
        assert current_snapshot(spark, table) == start  # nothing committed while it waits
        merged = engine.run(_merge(table), table, session=merging)
        assert merged.committed, merged.error
        store.release(merge.lease)  # the MERGE's lease ends: the gate opens
        worker.join(timeout=120)
    assert not worker.is_alive()
    result = outcome["result"]
    assert result.committed, result.error
    assert outcome["held"] >= 2.0
    # Iceberg's record: the MERGE's snapshot (on the one both started from), then the append on it.
    (merge_id, merge_parent, merge_op), (append_id, append_parent, append_op) = _snapshots(spark, table)[-2:]
    assert start is not None and merge_parent == start.snapshot_id and merge_op == "overwrite"
    assert append_parent == merge_id and append_op == "append"
    rows = {r["id"]: r["v"] for r in spark.sql(f"SELECT id, v FROM {table}").collect()}
    assert rows == {1: 100, 2: 2, 3: 3, 4: 4, 7: 7}


def test_the_other_commit_order_fails_the_merge(iceberg_engine: Any, iceberg_table: str) -> None:
    """Control: with no gate the append commits while the MERGE runs, and Iceberg's serializable
    validation fails the MERGE, which is why the gate holds the append."""
    engine, table = iceberg_engine, iceberg_table
    spark = engine.session()
    merging = pinned_session(spark, "lake")
    merging.sql(f"SELECT count(*) FROM {table}").collect()
    appended = engine.run(f"INSERT INTO {table} VALUES (7, 'a', 7)", table, session=spark.newSession())
    assert appended.committed, appended.error
    lost = engine.run(_merge(table), table, session=merging)
    assert not lost.committed
    assert "Found conflicting files" in str(lost.error), lost.error
    assert lost.classification is not None and lost.classification.is_conflict
    rows = {r["id"]: r["v"] for r in spark.sql(f"SELECT id, v FROM {table}").collect()}
    assert rows[1] == 1  # the MERGE's update was lost
