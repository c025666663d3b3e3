"""A holder killed with SIGKILL: its lease lapses within its TTL and nobody waits longer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from occflow.leases import LeaseRequest, LeaseStore
from occflow.leases.history import check_history

TTL = 2.0

HOLDER = textwrap.dedent(
    """
    import sys, time
    from occflow.leases import LeaseKeeper, LeaseRequest, LeaseStore
    store = LeaseStore.from_url(sys.argv[1], history=True, create=False)
    lease = store.try_acquire(LeaseRequest.create("db.t", "update", "maxcompute-standard",
                                                  whole_table=True, ttl=float(sys.argv[2])))
    assert lease is not None
    with LeaseKeeper(store, lease, interval=0.3):
        print("HELD", lease.lease_id, flush=True)
        time.sleep(600)
    """
)


def admit_polling(store: LeaseStore, request: LeaseRequest, limit: float) -> float | None:
    """Seconds until admitted, polling every 50 ms; None if not within ``limit``."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if store.try_acquire(request) is not None:
            return time.monotonic() - started
        time.sleep(0.05)
    return None


def test_killed_holder_lease_is_reclaimed_within_ttl_and_waiters_get_in(store_url):
    store = LeaseStore.from_url(store_url, history=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, store_url, str(TTL)], stdout=subprocess.PIPE, text=True
    )
    try:
        line = holder.stdout.readline().split()
        assert line[:1] == ["HELD"], line
        dead_lease = line[1]
        update = LeaseRequest.create("db.t", "update", "maxcompute-standard", ["ds=1"])
        delete = LeaseRequest.create("db.t", "delete", "maxcompute-standard", ["ds=2"])
        # Another table is never blocked by this holder, alive or dead.
        assert store.try_acquire(LeaseRequest.create("db.other", "update", "maxcompute-standard", ["ds=1"]))
        # While the holder lives, its heartbeats keep the lease past its TTL.
        assert admit_polling(store, update, limit=TTL * 1.5) is None
        assert store.try_acquire(delete) is None

        os.kill(holder.pid, signal.SIGKILL)
        killed = time.monotonic()
        holder.wait(timeout=10)
        waited = admit_polling(store, update, limit=TTL * 3)
        assert waited is not None, "the dead holder's lease was never reclaimed"
        # Reclaimed within the TTL after the last heartbeat (<= kill time), plus one poll.
        assert time.monotonic() - killed <= TTL + 0.3
        # The other waiter is not held up beyond that either.
        assert admit_polling(store, delete, limit=0.3) is not None
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    events = store.history_events()
    assert [e["kind"] for e in events if e["lease_id"] == dead_lease][0] == "grant"
    assert [e["kind"] for e in events if e["lease_id"] == dead_lease][-1] == "expire"
    assert "release" not in [e["kind"] for e in events if e["lease_id"] == dead_lease]
    assert check_history(events) == []
    store.dispose()
