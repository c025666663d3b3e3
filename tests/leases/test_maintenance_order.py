"""Waiting maintenance (a compaction, OPTIMIZE, clustering) does not hold up later data writes,
until it has waited longer than the bound (``data_write_head_start``, 30 min by default), so it
cannot starve. The real store, on both backends; a compaction's age is set by moving its queue
place back in the database, as if it had arrived that long ago."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from occflow.leases import AdmissionPriorities, Holder, LeaseRequest, LeaseStore, LeaseStoreError, schema
from occflow.leases.config import store_options


def req(task, operation, table="db.t"):
    return LeaseRequest.create(table, operation, "delta-rs", ["ds=1"], holder=Holder("order", task))


def age(store, request, seconds):
    """Move the request's queue place ``seconds`` back: as if it had waited that long."""
    Q = schema.queue
    with store.engine.begin() as conn:
        conn.execute(
            Q.update().where(Q.c.request_id == request.request_id)
            .values(queue_key=Q.c.queue_key - seconds, enqueued_at=Q.c.enqueued_at - seconds)
        )


def kinds(admission):
    return sorted((b.kind, b.ident) for b in admission.blockers)


def test_a_waiting_compaction_lets_later_data_writes_go_first_until_its_bound(store_url):
    store = LeaseStore.from_url(store_url)
    assert store.priorities.data_write_head_start == 1800.0
    live = store.try_acquire(req("live", "insert_overwrite"))
    compaction = req("compact", "optimize")
    assert kinds(store.decide(compaction)) == [("lease", live.lease_id)]
    age(store, compaction, 600)  # it has waited 10 minutes: longer than the old 60 s head start
    write = req("update", "update")
    # The waiting compaction does not block the later data write: only the live lease does...
    assert kinds(store.decide(write)) == [("lease", live.lease_id)]
    store.release(live)
    # ...and the data write is ahead of the compaction, whoever asks first once the lease is gone.
    assert kinds(store.decide(compaction)) == [("waiting", write.request_id)]
    granted = store.try_acquire(write)
    assert granted is not None
    store.release(granted)
    compacting = store.try_acquire(compaction)
    assert compacting is not None
    store.release(compacting)

    # A compaction that has waited past the bound (30 min) holds later data writes back.
    blocker = store.try_acquire(req("live2", "insert_overwrite"))
    starving = req("compact2", "optimize")
    assert not store.decide(starving).granted
    age(store, starving, 1900)
    late = req("late", "merge")
    assert kinds(store.decide(late)) == sorted([("lease", blocker.lease_id), ("waiting", starving.request_id)])
    store.release(blocker)
    assert store.try_acquire(late) is None
    assert store.try_acquire(starving) is not None
    store.dispose()


def test_woken_together_the_data_write_is_granted_before_the_compaction(store_url):
    """Both wait on the live lease; its release wakes both at once: the data write gets the
    lease first, the compaction only after the data write let go."""
    store = LeaseStore.from_url(store_url, history=True)
    live = store.try_acquire(req("live", "insert_overwrite"))
    compaction, write = req("compact", "optimize"), req("write", "update")
    assert not store.decide(compaction).granted
    time.sleep(0.2)  # the compaction queued first
    done: dict[str, float] = {}

    def wait(request, hold):
        lease = store.wait_for_lease(request, 20.0, 30.0).lease
        assert lease is not None
        done[request.request_id] = time.monotonic()
        time.sleep(hold)
        store.release(lease)

    threads = [threading.Thread(target=wait, args=(compaction, 0.0)), threading.Thread(target=wait, args=(write, 0.3))]
    for t in threads:
        t.start()
    time.sleep(0.8)
    released = time.monotonic()
    store.release(live)
    for t in threads:
        t.join(20)
    grants = [e["request_id"] for e in store.history_events("db.t") if e["kind"] == "grant"]
    assert grants == [live.request_id, write.request_id, compaction.request_id]
    assert done[write.request_id] - released < 1.0  # woken, not polled
    assert done[compaction.request_id] - done[write.request_id] >= 0.3  # after the write let go
    store.dispose()


def test_the_bound_comes_from_the_environment_and_bad_values_are_named():
    assert store_options({})["history"] is False
    options = store_options({"OCCFLOW_LEASE_DATA_WRITE_HEAD_START": "120", "OCCFLOW_LEASE_HISTORY": "1"})
    assert options == {"history": True, "order_aware": True, "priorities": AdmissionPriorities(data_write_head_start=120.0)}
    for bad in ("soon", "-5", "inf"):
        with pytest.raises(LeaseStoreError, match=f"OCCFLOW_LEASE_DATA_WRITE_HEAD_START={bad!r} must be"):
            store_options({"OCCFLOW_LEASE_DATA_WRITE_HEAD_START": bad})


def test_the_wakeups_table_counts_what_was_freed(sqlite_url):
    """SQLite's wake-up signal: a release bumps the table's counter, a grant or a refusal does not."""
    store = LeaseStore.from_url(sqlite_url)
    W = schema.wakeups

    def generation():
        with store.engine.connect() as conn:
            return conn.execute(sa.select(W.c.generation).where(W.c.table_name == "db.t")).scalar()

    lease = store.try_acquire(req("a", "insert_overwrite"))
    waiting = req("b", "insert_overwrite")
    assert not store.decide(waiting).granted
    assert generation() is None
    store.release(lease)
    assert generation() == 1
    store.cancel(waiting)
    assert generation() == 2
    store.dispose()
