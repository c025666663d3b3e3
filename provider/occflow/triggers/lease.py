"""Triggers on the lease store: admission of a waiting write, and a conflict-free footprint."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ..core.operations import Operation
from ..core.profiles import get_profile
from ..leases import Holder, LeaseRequest, footprints_overlap, operations_conflict


def request_to_dict(request: LeaseRequest) -> dict[str, Any]:
    h = request.holder
    return {
        "table": request.table,
        "profile": request.profile.name,
        "operation": request.operation.value,
        "partitions": None if request.partitions is None else sorted(request.partitions),
        "holder": [h.dag_id, h.task_id, h.run_id, h.try_number, h.host, h.pid],
        "ttl": request.ttl,
        "queue_ttl": request.queue_ttl,
        "request_id": request.request_id,
    }


def request_from_dict(data: Mapping[str, Any]) -> LeaseRequest:
    return LeaseRequest.create(
        data["table"],
        data["operation"],
        data["profile"],
        partitions=data["partitions"],
        whole_table=data["partitions"] is None,
        holder=Holder(*data["holder"]),
        ttl=float(data["ttl"]),
        queue_ttl=float(data["queue_ttl"]),
        request_id=data["request_id"],
    )


def _store(url: str | None) -> Any:
    from ..operators.admission import lease_store

    return lease_store(url)


class LeaseAdmissionTrigger(BaseTrigger):
    """Polls the lease store with the task's request (keeping its queue place) until admitted."""

    def __init__(self, request: Mapping[str, Any], store_url: str | None = None, poll_interval: float = 2.0) -> None:
        super().__init__()
        self.request = dict(request)
        self.store_url = store_url
        self.poll_interval = poll_interval

    @classmethod
    def for_request(cls, request: LeaseRequest, store_url: str | None, poll_interval: float) -> LeaseAdmissionTrigger:
        return cls(request_to_dict(request), store_url, poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"request": self.request, "store_url": self.store_url, "poll_interval": self.poll_interval},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        request = request_from_dict(self.request)
        store = _store(self.store_url)
        while True:
            decided = await asyncio.to_thread(store.decide, request)
            if decided.lease is not None:
                yield TriggerEvent(
                    {"status": "admitted", "lease_id": decided.lease.lease_id, "table": request.table}
                )
                return
            await asyncio.sleep(self.poll_interval)


def conflicting_leases(store: Any, request: LeaseRequest) -> list[Any]:
    """Live leases whose footprint overlaps ``request`` and whose operation conflicts with it."""
    found = []
    for lease in store.leases(request.table):
        if lease.request_id == request.request_id:
            continue
        if footprints_overlap(lease.partitions, request.partitions) and operations_conflict(
            get_profile(lease.profile), Operation(lease.operation), request.profile, request.operation
        ):
            found.append(lease)
    return found


class ConflictFreeTrigger(BaseTrigger):
    """Fires once no live lease on an overlapping footprint holds a conflicting operation.

    It only watches: it takes no lease and no queue place.
    """

    def __init__(self, request: Mapping[str, Any], store_url: str | None = None, poll_interval: float = 2.0) -> None:
        super().__init__()
        self.request = dict(request)
        self.store_url = store_url
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"request": self.request, "store_url": self.store_url, "poll_interval": self.poll_interval},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        request = request_from_dict(self.request)
        store = _store(self.store_url)
        while True:
            blocking = await asyncio.to_thread(conflicting_leases, store, request)
            if not blocking:
                yield TriggerEvent({"status": "conflict_free", "table": request.table})
                return
            await asyncio.sleep(self.poll_interval)
