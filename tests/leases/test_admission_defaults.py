"""Admission that holds a lease only while the work runs (issue 25).

The admission trigger takes no lease: it resumes the task once the footprint is free in queue
order, and the resumed try takes the lease itself (``operators.admission.lease_from_event``),
waiting in its worker and deferring again if another writer took the footprint meanwhile. So no
lease is held through the resume guard and Airflow's resume latency.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import TaskDeferred

from occflow.core.declaration import WriteDeclaration
from occflow.leases import LeaseStore, TaskAdmission
from occflow.operators import admission as operator_admission
from occflow.triggers.lease import LeaseAdmissionTrigger

LOG = logging.getLogger("test")
SAFETY = 30.0  # safety poll: far beyond any bound below, so only a wake-up can meet them


def context(task: str, try_number: int = 1) -> dict:
    return {"ti": SimpleNamespace(dag_id="d", task_id=task, run_id="r", try_number=try_number, map_index=-1)}


def declaration() -> WriteDeclaration:
    return WriteDeclaration.create("db.t", "merge", profile="delta-rs", partitions={"ds": "1"})


def settings(url: str, wait: float, settle: float = 0.0) -> operator_admission.AdmissionSettings:
    return operator_admission.AdmissionSettings(store_url=url, lease_ttl=60.0, poll_interval=SAFETY,
                                                wait_seconds=wait, resume_settle_seconds=settle)


def defer(trigger, method_name):
    raise TaskDeferred(trigger=trigger, method_name=method_name)


def fired(trigger: LeaseAdmissionTrigger, timeout: float = 20.0) -> dict:
    async def first():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(asyncio.wait_for(first(), timeout))


def deferred_trigger(url: str, task: str) -> LeaseAdmissionTrigger:
    with pytest.raises(TaskDeferred) as deferred:
        operator_admission.admit(settings(url, 0.0), declaration(), context(task), LOG, defer)
    assert deferred.value.method_name == "execute_admitted"
    return deferred.value.trigger


def test_defaults_wait_in_the_worker_for_a_bounded_time_before_deferring():
    assert 30.0 <= operator_admission.DEFAULT_ADMISSION_WAIT_SECONDS <= 120.0
    assert operator_admission.AdmissionSettings().wait_seconds == operator_admission.DEFAULT_ADMISSION_WAIT_SECONDS


def test_the_trigger_holds_no_lease_while_the_task_waits_for_airflow_to_resume_it(store_url):
    """From the moment the footprint is free to the event (the resume guard here), the trigger
    holds neither a lease nor a queue place: another writer is granted at once, and the store's
    history has no grant for the deferred request."""
    store = LeaseStore.from_url(store_url, history=True)
    admission = TaskAdmission(store_url)
    first = admission.decide(admission.request(declaration(), context("a"))).lease
    trigger = deferred_trigger(store_url, "b")
    trigger.fire_not_before = time.time() + 3.0  # the guard: the event waits, nothing is held
    store.release(first)
    results: dict = {}
    thread = threading.Thread(target=lambda: results.update(event=fired(trigger)))
    thread.start()
    time.sleep(1.5)
    other = store.try_acquire(admission.request(declaration(), context("c")))
    assert other is not None, "the deferred request still held the footprint"
    thread.join(30)
    event = results["event"]
    assert event["status"] == "free" and event["request"]["request_id"] == trigger.request["request_id"]
    grants = [e for e in store.history_events("db.t") if e["kind"] == "grant"]
    assert trigger.request["request_id"] not in {e["request_id"] for e in grants}
    store.release(other)
    store.dispose()


def test_a_resumed_task_takes_the_lease_itself(store_url):
    admission = TaskAdmission(store_url)
    first = admission.decide(admission.request(declaration(), context("a"))).lease
    trigger = deferred_trigger(store_url, "b")
    admission.release(first)
    event = fired(trigger)
    lease = operator_admission.lease_from_event(settings(store_url, 5.0), event, LOG, defer)
    assert lease is not None and lease.request_id == trigger.request["request_id"]
    assert lease.holder.task_id == "b" and [x.lease_id for x in admission.store.leases("db.t")] == [lease.lease_id]
    admission.release(lease)


def test_a_resumed_task_whose_footprint_was_taken_meanwhile_defers_again_instead_of_failing(store_url):
    admission = TaskAdmission(store_url)
    first = admission.decide(admission.request(declaration(), context("a"))).lease
    trigger = deferred_trigger(store_url, "b")
    admission.release(first)
    event = fired(trigger)
    # Between the event and the resumed try, another writer took the footprint.
    taken = admission.decide(admission.request(declaration(), context("c"))).lease
    assert taken is not None
    started = time.monotonic()
    with pytest.raises(TaskDeferred) as again:
        operator_admission.lease_from_event(settings(store_url, 0.5), event, LOG, defer)
    assert time.monotonic() - started >= 0.5  # it waited in the worker first
    assert again.value.method_name == "execute_admitted"
    assert again.value.trigger.request["request_id"] == trigger.request["request_id"]
    assert [q["request_id"] for q in admission.store.waiting("db.t")] == [trigger.request["request_id"]]
    # Without a defer callable (the operator's execute_admitted), the same: TaskDeferred.
    with pytest.raises(TaskDeferred):
        operator_admission.lease_from_event(settings(store_url, 0.0), event)
    admission.release(taken)


def test_a_resumed_task_waits_in_its_worker_for_a_footprint_taken_meanwhile(store_url):
    admission = TaskAdmission(store_url)
    first = admission.decide(admission.request(declaration(), context("a"))).lease
    trigger = deferred_trigger(store_url, "b")
    admission.release(first)
    event = fired(trigger)
    taken = admission.decide(admission.request(declaration(), context("c"))).lease
    releaser = threading.Timer(1.0, admission.release, args=(taken,))
    releaser.start()
    lease = operator_admission.lease_from_event(settings(store_url, 20.0), event, LOG, defer)
    releaser.join()
    assert lease is not None and lease.holder.task_id == "b"
    admission.release(lease)


def test_an_event_of_a_trigger_that_took_the_lease_still_resumes_with_it(sqlite_url):
    """Triggers serialized by an earlier occflow took the lease themselves and fire ``admitted``."""
    admission = TaskAdmission(sqlite_url)
    lease = admission.decide(admission.request(declaration(), context("a"))).lease
    got = operator_admission.lease_from_event(settings(sqlite_url, 0.0), admission.admitted_event(lease), LOG, defer)
    assert got is not None and got.lease_id == lease.lease_id


def test_a_trigger_asked_again_after_an_earlier_occflow_granted_it_fires_with_that_lease(sqlite_url):
    admission = TaskAdmission(sqlite_url)
    request = admission.request(declaration(), context("a"))
    lease = admission.decide(request).lease
    trigger = LeaseAdmissionTrigger.for_request(request, sqlite_url, SAFETY)
    assert trigger.check(admission, request) == admission.admitted_event(lease)
