"""Workers in separate PID namespaces (containers, pods) may share a host name: a pid that does
not exist here may be a live try there. A retry must not take over such a try's live lease; it
waits until the lease is released or lapses (issue 24, item 4). Real stores, both backends."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from occflow.leases import Holder, LeaseKeeper, LeaseRequest, LeaseStore
from occflow.leases.history import check_history


def pid_missing_here() -> int:
    """A pid no process of this namespace has (one that just exited)."""
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


def request(try_number: int, pid: int, ttl: float = 30.0) -> LeaseRequest:
    holder = Holder("sales", "load", "run_1", try_number, host=socket.gethostname(), pid=pid)
    return LeaseRequest.create("db.t", "insert_into", "maxcompute-standard", ["ds=2024-01-01"], holder=holder, ttl=ttl)


@pytest.fixture
def store(store_url):
    s = LeaseStore.from_url(store_url, history=True)
    yield s
    s.dispose()


def test_a_live_try_in_another_pid_namespace_with_the_same_host_name_is_not_taken_over(store):
    # Try 1 runs in another container: same host name, a pid that does not exist here, and it
    # keeps its lease live by heartbeats.
    first = store.try_acquire(request(1, pid_missing_here(), ttl=2.0))
    assert first is not None
    with LeaseKeeper(store, first, interval=0.3) as keeper:
        retry = request(2, 0)
        deadline = time.monotonic() + 3.0  # past the TTL: only the heartbeats keep it live
        while time.monotonic() < deadline:
            decided = store.decide(retry)
            assert not decided.granted, "the retry took over a try that is still alive"
            assert [b.ident for b in decided.blockers] == [first.lease_id]
            time.sleep(0.2)
        keeper.ensure_live()  # try 1 still holds its lease and may commit
    store.release(first)
    lease = store.try_acquire(retry)
    assert lease is not None and lease.fence > first.fence
    kinds = [e["kind"] for e in store.history_events() if e["lease_id"] == first.lease_id]
    assert "takeover" not in kinds and kinds[0] == "grant" and kinds[-1] == "release"
    assert check_history(store.history_events()) == []


def test_a_try_that_stopped_beating_lets_its_retry_in_once_its_lease_lapses(store):
    first = store.try_acquire(request(1, pid_missing_here(), ttl=0.8))
    retry = request(2, 0)
    assert not store.decide(retry).granted
    time.sleep(1.0)
    lease = store.try_acquire(retry)
    assert lease is not None and lease.fence > first.fence
    kinds = [e["kind"] for e in store.history_events() if e["lease_id"] == first.lease_id]
    assert kinds == ["grant", "expire"]
