"""Every recorded event names the task instance it is about (issue 24, item 3), so the UI can
show a reader the history of the DAGs they may read; events recorded before the store kept
holders read back as ``None`` (cannot be attributed). Real stores, both backends."""

from __future__ import annotations

import time

import sqlalchemy as sa

from occflow.leases import Holder, LeaseRequest, LeaseStore


def req(task: str, op: str = "merge", ttl: float = 30.0, **kw) -> LeaseRequest:
    return LeaseRequest.create("db.t", op, "iceberg-serializable", ["ds=1"],
                               holder=Holder("sales", task, "run_1", 1), ttl=ttl, **kw)


def test_every_event_kind_records_its_holder(store_url):
    store = LeaseStore.from_url(store_url, history=True)
    first = store.try_acquire(req("a"))
    store.heartbeat(first)
    waiter = req("b")
    assert not store.decide(waiter).granted  # enqueue
    store.cancel(waiter)  # cancel
    late = req("c", queue_ttl=0.3)
    assert not store.decide(late).granted
    store.release(first)  # release
    time.sleep(0.5)
    short = store.try_acquire(req("d", ttl=0.3))  # drops the lapsed queue place: dequeue
    assert short is not None
    time.sleep(0.5)
    store.reclaim_expired()  # expire
    events = store.history_events()
    kinds = {e["kind"] for e in events}
    assert {"grant", "heartbeat", "enqueue", "cancel", "release", "expire", "dequeue"} <= kinds, kinds
    for e in events:
        assert e["dag_id"] == "sales" and e["run_id"] == "run_1" and e["task_id"] in "abcd", e
    by_lease = {e["lease_id"]: e["task_id"] for e in events if e["kind"] == "grant"}
    assert by_lease[first.lease_id] == "a" and by_lease[short.lease_id] == "d"
    store.dispose()


def test_events_of_an_anonymous_holder_and_of_an_older_store_are_not_attributed(store_url):
    store = LeaseStore.from_url(store_url, history=True)
    store.try_acquire(LeaseRequest.create("db.t", "merge", "iceberg-serializable", ["ds=1"]))
    with store.engine.begin() as conn:  # an event as an older occflow recorded it
        for column in ("dag_id", "task_id", "run_id", "try_number"):
            conn.execute(sa.text(f"ALTER TABLE occflow_lease_events DROP COLUMN {column}"))
        conn.execute(sa.text(
            "INSERT INTO occflow_lease_events (at, kind, table_name, operation, profile, pid) "
            "VALUES (1, 'release', 'db.t', 'merge', 'iceberg-serializable', 7)"))
    store.dispose()
    upgraded = LeaseStore.from_url(store_url, history=True)
    events = upgraded.history_events()
    assert [e["kind"] for e in events] == ["grant", "release"]
    for e in events:
        assert (e["dag_id"], e["task_id"], e["run_id"]) == (None, None, None), e
    upgraded.dispose()
