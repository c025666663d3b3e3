"""Fenced leases on both backends: tokens, the keeper's local deadline, ``ensure_live``, and the
tries of one task instance (an earlier try's live lease blocks its retry until it lapses)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time

import pytest
import sqlalchemy as sa

from occflow.leases import Holder, LeaseKeeper, LeaseLostError, LeaseRequest, LeaseStore
from occflow.leases.history import check_history


def req(table, op="update", parts=("ds=1",), profile="maxcompute-standard", **kw):
    return LeaseRequest.create(table, op, profile, None if parts is None else list(parts),
                               whole_table=parts is None, **kw)


def task_try(try_number, pid, task="load"):
    return Holder("sales", task, "run_1", try_number, pid=pid)


def dead_pid() -> int:
    """The pid of a process of this host that has exited."""
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


@pytest.fixture
def store(store_url):
    s = LeaseStore.from_url(store_url, history=True)
    yield s
    s.dispose()


def test_fences_strictly_increase_per_table_across_release_and_reclaim(store):
    first = store.try_acquire(req("db.t"))
    assert first.fence == 1
    store.release(first)
    second = store.try_acquire(req("db.t"))
    short = store.try_acquire(req("db.t", parts=["ds=2"], ttl=0.2))
    time.sleep(0.3)
    reclaimed_over = store.try_acquire(req("db.t", parts=["ds=2"]))  # reclaims the lapsed lease
    assert [first.fence, second.fence, short.fence, reclaimed_over.fence] == [1, 2, 3, 4]
    assert store.try_acquire(req("db.other")).fence == 1  # each table counts on its own
    assert {lease.lease_id: lease.fence for lease in store.leases("db.t")} == {
        second.lease_id: 2, reclaimed_over.lease_id: 4}
    grants = [e for e in store.history_events() if e["kind"] == "grant"]
    assert [e["fence"] for e in grants] == [1, 2, 3, 4, 1]
    assert check_history(store.history_events()) == []


def test_a_store_made_before_fences_gains_them_and_keeps_its_leases(store_url):
    store = LeaseStore.from_url(store_url)
    old = store.try_acquire(req("db.t"))
    with store.engine.begin() as conn:  # back to the schema of a store made before fences
        conn.execute(sa.text("DROP TABLE occflow_lease_fences"))
        conn.execute(sa.text("ALTER TABLE occflow_leases DROP COLUMN fence"))
        conn.execute(sa.text("ALTER TABLE occflow_lease_events DROP COLUMN fence"))
    store.dispose()
    upgraded = LeaseStore.from_url(store_url, history=True)
    assert [(lease.lease_id, lease.fence) for lease in upgraded.leases()] == [(old.lease_id, 0)]
    assert not upgraded.decide(req("db.t")).granted  # the old lease still counts
    assert upgraded.try_acquire(req("db.t", parts=["ds=2"])).fence == 1
    upgraded.dispose()


def test_ensure_live_confirms_a_live_lease_and_refuses_a_released_one(store):
    lease = store.try_acquire(req("db.t", ttl=30))
    with LeaseKeeper(store, lease) as keeper:
        keeper.ensure_live()
        assert keeper.fence == lease.fence == 1
        assert keeper.deadline is not None and keeper.deadline > time.monotonic() + 25
        store.release(lease)
        with pytest.raises(LeaseLostError, match=r"fence 1.*gone: released"):
            keeper.ensure_live()
    assert keeper.lost.is_set()


def test_ensure_live_refuses_once_heartbeats_stopped_past_the_ttl_while_a_rival_got_in(store):
    # A holder whose heartbeats do not run (a stopped process): its lease lapses, a rival is
    # granted the footprint, and the holder must not commit when it wakes.
    lease = store.try_acquire(req("db.t", ttl=0.6))
    keeper = LeaseKeeper(store, lease, interval=3600)
    with keeper:
        keeper.ensure_live()
        time.sleep(0.7)
        rival = store.try_acquire(req("db.t"))
        assert rival is not None and rival.fence > lease.fence
        with pytest.raises(LeaseLostError, match="lapsed: its validity ran out"):
            keeper.ensure_live()
    # Lost for good, even though nothing about the store changes any more.
    with pytest.raises(LeaseLostError):
        keeper.ensure_live()


def test_ensure_live_refuses_past_the_local_deadline_even_if_the_store_would_still_say_live(store):
    lease = store.try_acquire(req("db.t", ttl=2.0))
    keeper = LeaseKeeper(store, lease, interval=3600, margin=1.8)  # deadline 0.2 s after the grant
    with keeper:
        time.sleep(0.3)
        with pytest.raises(LeaseLostError, match="lapsed"):
            keeper.ensure_live()
    assert store.leases("db.t")  # the store had not let it go: the keeper errs on the safe side


def test_a_retry_waits_for_its_earlier_try_lease_to_lapse_even_when_its_pid_is_gone_here(store):
    # A pid that does not exist on this host proves nothing (another PID namespace with the same
    # host name may run it): only the lease's lapse lets the retry in, with a higher fence.
    first_try = store.try_acquire(req("db.t", "merge", profile="iceberg-serializable",
                                      holder=task_try(1, dead_pid()), ttl=1.0))
    keeper = LeaseKeeper(store, first_try, interval=3600)  # the dead try's keeper, as it was
    retry = req("db.t", "merge", profile="iceberg-serializable", holder=task_try(2, 0))
    blocked = store.decide(retry)
    assert not blocked.granted and [b.ident for b in blocked.blockers] == [first_try.lease_id]
    time.sleep(1.1)
    granted = store.decide(retry)
    assert granted.granted and granted.lease.fence > first_try.fence
    with pytest.raises(LeaseLostError, match="lapsed"):
        keeper.ensure_live()
    kinds = [e["kind"] for e in store.history_events() if e["lease_id"] == first_try.lease_id]
    assert kinds == ["grant", "expire"]
    assert check_history(store.history_events()) == []


def test_a_running_earlier_try_blocks_its_retry_even_where_the_matrix_would_not(store):
    # Two INSERT INTOs on one partition run side by side on MaxCompute standard tables, but two
    # tries of one task instance must not write beside each other.
    running = store.try_acquire(req("db.t", "insert_into", holder=task_try(1, 1)))  # pid 1 lives
    retry = req("db.t", "insert_into", holder=task_try(2, 0))
    blocked = store.decide(retry)
    assert not blocked.granted and [b.ident for b in blocked.blockers] == [running.lease_id]
    assert store.try_acquire(req("db.t", "insert_into", holder=task_try(1, 1, task="other")))
    store.release(running)
    assert store.try_acquire(retry) is not None


def test_a_stale_try_is_refused_and_an_earlier_try_loses_its_queue_place(store):
    holder = store.try_acquire(req("db.t", holder=Holder("etl", "wipe", "r", 1)))
    waiting_first_try = req("db.t", holder=task_try(1, 1))
    assert store.try_acquire(waiting_first_try) is None
    assert [w["request_id"] for w in store.waiting()] == [waiting_first_try.request_id]
    retry = req("db.t", holder=task_try(2, 1))
    assert store.try_acquire(retry) is None
    # The earlier try's place is gone; the retry waits in its own.
    assert [w["request_id"] for w in store.waiting()] == [retry.request_id]
    with pytest.raises(LeaseLostError, match="try 1 .* is stale: try 2"):
        store.decide(waiting_first_try)
    store.release(holder)
    granted = store.try_acquire(retry)
    with pytest.raises(LeaseLostError, match="stale"):
        store.decide(req("db.t", parts=["ds=9"], holder=task_try(1, 1)))
    assert granted is not None


def test_the_keeper_is_lost_when_heartbeats_fail_until_the_deadline(store):
    # A store that breaks under a running job (here its tables vanish): every heartbeat fails
    # with a database error; the keeper retries until the lease's validity runs out.
    lease = store.try_acquire(req("db.t", ttl=1.0))
    with LeaseKeeper(store, lease, interval=0.1) as keeper:
        with store.engine.begin() as conn:
            conn.execute(sa.text("DROP TABLE occflow_lease_keys"))
            conn.execute(sa.text("DROP TABLE occflow_leases"))
        assert keeper.lost.wait(3.0)
    assert keeper.why.startswith("heartbeats failed until its validity ran out")
    assert "failed in heartbeat" in keeper.why
    with pytest.raises(LeaseLostError, match="heartbeats failed"):
        keeper.ensure_live()


class BrokenHeartbeats(LeaseStore):
    """A store whose heartbeat fails with an error that is not a database's (a bug)."""

    def heartbeat(self, lease, ttl=None):
        raise KeyError("no such column in the row mapping")


def test_the_keeper_is_lost_at_once_when_its_heartbeat_thread_dies(sqlite_url):
    store = BrokenHeartbeats.from_url(sqlite_url)
    lease = store.try_acquire(req("db.t", ttl=60))
    with LeaseKeeper(store, lease, interval=0.05) as keeper:
        assert keeper.lost.wait(2.0)
    assert keeper.why.startswith("the heartbeat thread died: KeyError")
    with pytest.raises(LeaseLostError, match="heartbeat thread died"):
        keeper.ensure_live()


def test_a_sqlite_file_locked_past_the_ttl_lets_a_rival_in_and_the_holder_aborts(sqlite_url):
    store = LeaseStore.from_url(sqlite_url)
    lease = store.try_acquire(req("db.t", ttl=0.6))
    path = sqlite_url.removeprefix("sqlite:///")
    locked, unlock = threading.Event(), threading.Event()

    def hold_the_file_lock():
        other = sqlite3.connect(path, timeout=30, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")
        locked.set()
        unlock.wait(10)
        other.execute("COMMIT")
        other.close()

    locker = threading.Thread(target=hold_the_file_lock)
    with LeaseKeeper(store, lease, interval=0.1) as keeper:
        locker.start()
        assert locked.wait(5)
        time.sleep(0.9)  # heartbeats wait on the lock; the lease lapses
        unlock.set()
        locker.join()
        rival = store.try_acquire(req("db.t"))
        assert rival is not None and rival.fence == 2
        with pytest.raises(LeaseLostError):
            keeper.ensure_live()
    store.dispose()
