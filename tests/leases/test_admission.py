"""``TaskAdmission``: a task's way into the lease store, as operators, sensors and triggers use it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from occflow.core.declaration import WriteDeclaration
from occflow.leases import Holder, LeaseLostError, LeaseRequest, NotAdmittedError, TaskAdmission


def context(task_id="merge", map_index=-1, try_number=2):
    ti = SimpleNamespace(dag_id="sales", task_id=task_id, run_id="r1", try_number=try_number, map_index=map_index)
    return {"ti": ti}


def test_request_holds_the_task_instance_and_a_mapped_instance_by_index(sqlite_url):
    admission = TaskAdmission(sqlite_url, lease_ttl=42.0)
    declaration = WriteDeclaration.create("db.t", "merge", profile="iceberg-serializable", partitions={"ds": "1"})
    request = admission.request(declaration, context(map_index=3))
    assert (request.holder.dag_id, request.holder.task_id, request.holder.run_id, request.holder.try_number) == (
        "sales", "merge[3]", "r1", 2)
    assert request.ttl == 42.0 and request.partitions == frozenset({"ds=1"})
    assert admission.holder({}) == Holder(host=request.holder.host, pid=request.holder.pid)


def test_a_granted_lease_travels_through_the_trigger_event_and_is_released(sqlite_url):
    admission = TaskAdmission(sqlite_url)
    assert admission.store is TaskAdmission(sqlite_url).store  # one store per URL per process
    declaration = WriteDeclaration.create("db.t", "merge", profile="iceberg-serializable", partitions={"ds": "1"})
    first = admission.decide(admission.request(declaration, context("a")))
    second = admission.request(declaration, context("b"))
    assert not admission.decide(second).granted
    assert [lease.lease_id for lease in admission.blocking_leases(second)] == [first.lease.lease_id]
    event = admission.admitted_event(first.lease)
    assert admission.lease_from_event(event) == first.lease
    with admission.keep(first.lease):
        pass
    admission.release(first.lease)
    assert admission.blocking_leases(second) == []
    with pytest.raises(LeaseLostError, match="expired before the task resumed"):
        admission.lease_from_event(event)
    with pytest.raises(NotAdmittedError, match="did not grant a lease"):
        admission.lease_from_event({"status": "timeout"})


def test_a_request_serialized_with_a_positional_holder_still_reads_back():
    request = LeaseRequest.create("db.t", "merge", "iceberg-serializable", ["ds=1"], holder=Holder("d", "t", "r", 1))
    data = request.to_dict()
    assert LeaseRequest.from_dict(data) == request
    h = request.holder
    older = {**data, "holder": [h.dag_id, h.task_id, h.run_id, h.try_number, h.host, h.pid]}
    assert LeaseRequest.from_dict(older) == request
