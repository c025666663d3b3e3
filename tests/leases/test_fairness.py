"""A MERGE (or UPDATE) waiting behind a stream of appends gets in: waiting is first come, first served."""

from __future__ import annotations

import threading
import time

import pytest

from occflow.leases import AdmissionPriorities, Holder, LeaseRequest, LeaseStore

HOLD = 0.15


def append_stream(store, profile, stop, appenders=3):
    """Appenders that re-acquire as soon as they release, so some append is always live."""
    requests: list[tuple[float, LeaseRequest]] = []

    def appender(n):
        time.sleep(n * HOLD / appenders)  # staggered: the leases overlap in time
        while not stop.is_set():
            request = LeaseRequest.create("db.t", "insert_into", profile, ["ds=1"],
                                          holder=Holder("stream", f"append_{n}"))
            requests.append((time.monotonic(), request))
            while not stop.is_set():
                lease = store.try_acquire(request)
                if lease is not None:
                    time.sleep(HOLD)
                    store.release(lease)
                    break
                time.sleep(0.01)
            store.cancel(request)

    threads = [threading.Thread(target=appender, args=(n,), daemon=True) for n in range(appenders)]
    for t in threads:
        t.start()
    return threads, requests


def wait_for(store, request, limit):
    started = time.monotonic()
    while time.monotonic() - started < limit:
        lease = store.try_acquire(request)
        if lease is not None:
            return lease, time.monotonic() - started
        time.sleep(0.02)
    return None, None


@pytest.mark.parametrize(
    ("profile", "operation"),
    [("delta-serializable", "merge"), ("iceberg-serializable", "merge"), ("maxcompute-standard", "update")],
)
def test_merge_behind_a_stream_of_appends_gets_in_and_later_appends_wait(store_url, profile, operation):
    store = LeaseStore.from_url(store_url, history=True)
    stop = threading.Event()
    threads, appends = append_stream(store, profile, stop)
    try:
        time.sleep(1.0)
        # Arrive while an append is live (on a loaded machine the stream may have a gap): the
        # case is a merge that must wait, not one that walks into a free footprint.
        deadline = time.monotonic() + 10
        while not store.leases("db.t") and time.monotonic() < deadline:
            time.sleep(0.005)
        merge = LeaseRequest.create("db.t", operation, profile, ["ds=1"], holder=Holder("etl", operation))
        lease, waited = wait_for(store, merge, limit=20)
        assert lease is not None, f"{operation} starved behind the appends"
        time.sleep(0.5)  # appends keep coming while the merge holds its lease
        store.release(lease)
        time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join()
    events = store.history_events()
    merge_events = [e for e in events if e["request_id"] == merge.request_id]
    assert [e["kind"] for e in merge_events] == ["enqueue", "grant", "release"]
    enqueued, granted = merge_events[0]["seq"], merge_events[1]["seq"]
    first_seen = {}
    for e in events:
        first_seen.setdefault(e["request_id"], e["seq"])
    later_appends = [
        e for e in events
        if e["kind"] == "grant" and e["request_id"] != merge.request_id and first_seen[e["request_id"]] > enqueued
    ]
    # Appends kept arriving after the merge queued, and none of them was served before it.
    assert later_appends
    assert all(e["seq"] > granted for e in later_appends)
    # The merge waited only for the appends live when it arrived to finish (a few holds at most).
    assert waited < 10 * HOLD + 2.0
    store.dispose()


def test_without_a_fair_queue_the_same_stream_starves_the_update(sqlite_url):
    """Control: if appends may always go first (an unbounded head start), the update never gets in."""
    store = LeaseStore.from_url(sqlite_url, priorities=AdmissionPriorities(per_operation={"insert_into": 1e9}))
    stop = threading.Event()
    threads, _ = append_stream(store, "maxcompute-standard", stop, appenders=5)
    try:
        time.sleep(1.0)
        update = LeaseRequest.create("db.t", "update", "maxcompute-standard", ["ds=1"])
        lease, _ = wait_for(store, update, limit=3.0)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert lease is None
    store.dispose()
