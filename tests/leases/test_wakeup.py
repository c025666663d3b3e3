"""Wake-ups: a lease let go wakes its table's waiters at once (PostgreSQL LISTEN/NOTIFY, a short
backoff poll on SQLite), so release -> grant is well under a second, not a poll interval.

Every latency test sets the safety poll to 30 s: with the polling admission had before (every
2 s) or a lost wake-up, the waiter would not be granted within the bound asserted here.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from types import SimpleNamespace

import psycopg2
import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from occflow.core.profiles import get_profile
from occflow.leases import Holder, LeaseRequest, LeaseStore, TaskAdmission, store
from occflow.operators import admission as operator_admission
from occflow.triggers.lease import ConflictFreeTrigger, LeaseAdmissionTrigger

SAFETY = 30.0  # the safety poll in the latency tests: far beyond the bound they assert
# release -> grant, generous for a busy 2-core machine (measured: ~0.05 s PG, ~0.3 s SQLite, up to
# 1.05 s on SQLite under a full CI run); a waiter that is not woken waits for the 30-s safety poll.
BOUND = 3.0


def req(task, operation="insert_overwrite", partitions=("ds=1",), table="db.t", profile="delta-rs"):
    return LeaseRequest.create(table, operation, profile, list(partitions) if partitions else None,
                               whole_table=partitions is None, holder=Holder("wake", task))


def waiter_thread(target, *args):
    """Run ``target(*args)`` in a thread; the dict gets its result and when it returned."""
    out: dict = {}

    def run():
        out["result"] = target(*args)
        out["at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def release_later(store_, lease, delay):
    """Release ``lease`` after ``delay`` s in a thread; the dict gets when the release started."""
    out: dict = {}

    def run():
        time.sleep(delay)
        out["at"] = time.monotonic()
        store_.release(lease)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_a_waiter_is_woken_by_the_release_not_by_its_safety_poll(store_url):
    lease_store = LeaseStore.from_url(store_url)
    first = lease_store.try_acquire(req("a"))
    second = req("b")
    thread, got = waiter_thread(lease_store.wait_for_lease, second, 20.0, SAFETY)
    time.sleep(1.2)  # the waiter has queued and (on SQLite) backed off
    assert "result" not in got
    released = time.monotonic()
    lease_store.release(first)
    thread.join(10)
    assert got["result"].lease is not None and got["result"].lease.request_id == second.request_id
    assert got["at"] - released < BOUND, f"release -> grant took {got['at'] - released:.2f}s"
    lease_store.dispose()


def test_a_lost_wake_up_is_covered_by_the_safety_poll(store_url, monkeypatch):
    """With the announcement dropped (a lost NOTIFY), only the safety poll grants: a waiter with
    a 30 s safety poll is still waiting 2 s after the release, one with 1.5 s gets in."""
    monkeypatch.setattr(store, "announce", lambda *args: None)
    lease_store = LeaseStore.from_url(store_url)
    first = lease_store.try_acquire(req("a"))
    slow, fast = req("slow", partitions=("ds=1",)), req("fast", partitions=("ds=1",), table="db.u")
    lease_u = lease_store.try_acquire(req("u", table="db.u"))
    slow_thread, slow_got = waiter_thread(lease_store.wait_for_lease, slow, 4.0, SAFETY)
    fast_thread, fast_got = waiter_thread(lease_store.wait_for_lease, fast, 10.0, 1.5)
    time.sleep(0.8)
    released = time.monotonic()
    lease_store.release(first)
    lease_store.release(lease_u)
    time.sleep(2.0)
    assert "result" not in slow_got  # nobody woke it: its next ask is 30 s away
    fast_thread.join(10)
    assert fast_got["result"].lease is not None and fast_got["at"] - released < 1.5 + BOUND
    slow_thread.join(10)  # its 4 s wait ends with one more decision, which grants
    assert slow_got["result"].lease is not None and slow_got["at"] - released > 2.0
    lease_store.dispose()


@pytest.mark.postgres
def test_a_listener_whose_connection_dies_reconnects_and_still_wakes(pg_url):
    lease_store = LeaseStore.from_url(pg_url)
    first = lease_store.try_acquire(req("a"))
    thread, got = waiter_thread(lease_store.wait_for_lease, req("b"), 20.0, SAFETY)
    time.sleep(0.8)
    admin = psycopg2.connect(pg_url)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN%%'")
        assert cur.rowcount >= 1  # the hub's listening connection
    admin.close()
    time.sleep(2.0)  # it reconnects (backoff 0.5 s) and listens again
    released = time.monotonic()
    lease_store.release(first)
    thread.join(10)
    assert got["result"].lease is not None and got["at"] - released < BOUND
    lease_store.dispose()


def first_event_after_release(trigger, lease_store, lease):
    """Run ``trigger`` while another thread releases ``lease`` 1.2 s later: its first event's
    payload, when it fired, and when the release happened."""

    async def first_event():
        async for event in trigger.run():
            return event.payload, time.monotonic()

    releaser, released = release_later(lease_store, lease, 1.2)
    payload, fired = asyncio.run(asyncio.wait_for(first_event(), 20))
    releaser.join()
    return payload, fired, released


def test_the_admission_trigger_resumes_the_task_when_woken_without_taking_the_lease(store_url):
    lease_store = LeaseStore.from_url(store_url)
    first = lease_store.try_acquire(req("a"))
    waiting = req("b")
    trigger = LeaseAdmissionTrigger.for_request(waiting, store_url, poll_interval=SAFETY)
    payload, fired, released = first_event_after_release(trigger, lease_store, first)
    assert payload == TaskAdmission.free_event(waiting)
    assert fired - released["at"] < BOUND, f"release -> event took {fired - released['at']:.2f}s"
    assert lease_store.leases("db.t") == [] and lease_store.waiting("db.t") == []  # no lease, left the queue
    lease_store.dispose()


def test_the_conflict_free_trigger_fires_when_woken(store_url):
    lease_store = LeaseStore.from_url(store_url)
    first = lease_store.try_acquire(req("a"))
    trigger = ConflictFreeTrigger.for_request(req("watcher"), store_url, poll_interval=SAFETY)
    payload, fired, released = first_event_after_release(trigger, lease_store, first)
    assert payload == {"status": "conflict_free", "table": "db.t"}
    assert fired - released["at"] < BOUND
    assert lease_store.leases("db.t") == []  # it only watched: no lease taken
    lease_store.dispose()


def test_trigger_serialization_round_trips_the_new_fields():
    request = req("a")
    for wakeup, not_before in ((True, 1234.5), (False, None)):
        trigger = LeaseAdmissionTrigger.for_request(request, "sqlite:////x.db", 7.0, outage_budget=9.0,
                                                    wakeup=wakeup, fire_not_before=not_before)
        path, kwargs = trigger.serialize()
        assert path == "occflow.triggers.lease.LeaseAdmissionTrigger"
        again = LeaseAdmissionTrigger(**kwargs)
        assert again.serialize() == (path, kwargs)
        assert (again.wakeup, again.fire_not_before, again.poll_interval, again.outage_budget, again.request) == (
            wakeup, not_before, 7.0, 9.0, request.to_dict())
    # A trigger serialized before these fields existed wakes up and fires at once.
    _, kwargs = LeaseAdmissionTrigger.for_request(request, None, 2.0).serialize()
    del kwargs["wakeup"], kwargs["fire_not_before"]
    old = LeaseAdmissionTrigger(**kwargs)
    assert (old.wakeup, old.fire_not_before) == (True, None)


def test_the_trigger_resumes_the_task_not_before_its_settle_time_and_holds_nothing_meanwhile(sqlite_url):
    """The resume guard against Airflow's defer/resume race: the footprint is free at once, the
    event waits until ``fire_not_before``, and meanwhile the trigger holds no lease and no queue
    place, so another writer takes the footprint at once."""
    lease_store = LeaseStore.from_url(sqlite_url)
    waiting = req("b")
    trigger = LeaseAdmissionTrigger.for_request(waiting, sqlite_url, SAFETY, fire_not_before=time.time() + 2.0)

    async def first_event():
        started = time.monotonic()
        async for event in trigger.run():
            return event.payload, time.monotonic() - started

    async def main():
        task = asyncio.ensure_future(first_event())
        await asyncio.sleep(1.0)
        other = await asyncio.to_thread(lease_store.try_acquire, req("c"))
        return other, await task

    other, (payload, fired_after) = asyncio.run(asyncio.wait_for(main(), 20))
    assert other is not None  # nothing held the footprint while the trigger settled
    assert payload["status"] == "free" and payload["request"]["request_id"] == waiting.request_id
    assert 1.9 <= fired_after < 2.0 + BOUND
    lease_store.dispose()


def test_concurrent_waiters_never_hold_conflicting_leases_together(store_url):
    """Eight waiters on one table, woken by each other's releases. Replayed from the history
    against the profile's matrix on concrete partitions (brute force over pairs of leases):
    two leases live together never overlap on a partition with conflicting operations; some
    compatible ones did run together; every request was served."""
    lease_store = LeaseStore.from_url(store_url, history=True)
    profile = get_profile("maxcompute-standard")
    choices = ["insert_into", "insert_into", "insert_into", "update", "insert_overwrite", "small_file_merge"]
    requests: list[LeaseRequest] = []

    def worker(n: int) -> None:
        rnd = random.Random(n)
        for cycle in range(5):
            parts = rnd.choice([("ds=1",), ("ds=2",), ("ds=1", "ds=2"), None])
            request = req(f"w{n}.{cycle}", rnd.choice(choices), parts, table="db.c", profile="maxcompute-standard")
            requests.append(request)
            lease = lease_store.wait_for_lease(request, 60.0, 5.0).lease
            assert lease is not None
            time.sleep(rnd.uniform(0.02, 0.12))
            lease_store.release(lease)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    events = lease_store.history_events("db.c")
    live: dict[str, dict] = {}
    together = 0
    for e in events:  # decision order
        if e["kind"] == "grant":
            mine = {"1", "2"} if e["partitions"] is None else {k.split("=")[1] for k in json.loads(e["partitions"])}
            for other in live.values():
                if mine & other["ds"]:
                    assert not profile.conflicts(e["operation"], other["operation"]), (e, other)
                    together += 1
            live[e["lease_id"]] = {"operation": e["operation"], "ds": mine}
        elif e["kind"] == "release":
            del live[e["lease_id"]]
    assert together > 0
    assert {e["request_id"] for e in events if e["kind"] == "grant"} == {r.request_id for r in requests}
    lease_store.dispose()


def defer(trigger, method_name):
    raise TaskDeferred(trigger=trigger, method_name=method_name)


def admit(url, wait, task, settle=None):
    import logging

    settings = operator_admission.AdmissionSettings(
        enabled=True, store_url=url, lease_ttl=60.0, poll_interval=SAFETY, wait_seconds=wait,
        resume_settle_seconds=operator_admission.DEFAULT_RESUME_SETTLE_SECONDS if settle is None else settle)
    return operator_admission.admit(settings, declaration(), context(task), logging.getLogger("test"), defer)


def context(task):
    return {"ti": SimpleNamespace(dag_id="wake", task_id=task, run_id="r", try_number=1, map_index=-1)}


def declaration():
    from occflow.core.declaration import WriteDeclaration

    return WriteDeclaration.create("db.t", "insert_overwrite", profile="delta-rs", partitions={"ds": "1"})


def test_in_task_wait_is_admitted_at_the_release_without_deferring(sqlite_url):
    admission = TaskAdmission(sqlite_url)
    first = admission.decide(admission.request(declaration(), context("a"))).lease
    releaser, released = release_later(admission.store, first, 1.2)
    lease = admit(sqlite_url, 20.0, "b")
    admitted = time.monotonic()
    releaser.join()
    assert lease is not None and lease.holder.task_id == "b"
    assert admitted - released["at"] < BOUND


def test_in_task_wait_that_runs_out_defers_with_the_same_queue_place(sqlite_url):
    admission = TaskAdmission(sqlite_url)
    admission.decide(admission.request(declaration(), context("a")))
    started = time.monotonic()
    with pytest.raises(TaskDeferred) as deferred:
        admit(sqlite_url, 0.6, "b")
    assert 0.6 <= time.monotonic() - started < 0.6 + BOUND
    trigger = deferred.value.trigger
    queued = admission.store.waiting("db.t")
    assert [q["request_id"] for q in queued] == [trigger.request["request_id"]]
    assert trigger.poll_interval == SAFETY and trigger.wakeup is True
    settle = operator_admission.DEFAULT_RESUME_SETTLE_SECONDS
    assert time.time() + settle - 1.0 < trigger.fire_not_before <= time.time() + settle
    with pytest.raises(TaskDeferred) as deferred:
        admit(sqlite_url, 0.0, "c", settle=0)
    assert deferred.value.trigger.fire_not_before is None


@pytest.mark.parametrize("bad", [-1, "5", float("nan"), True])
def test_bad_admission_waits_are_refused_by_name(sqlite_url, bad):
    with pytest.raises(AirflowException, match="wait_seconds must be a number of seconds >= 0"):
        admit(sqlite_url, bad, "b")
    with pytest.raises(AirflowException, match="resume_settle_seconds must be a number of seconds >= 0"):
        admit(sqlite_url, 0.0, "b", settle=bad)
