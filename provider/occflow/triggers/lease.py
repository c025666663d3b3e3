"""Triggers on the lease store: admission of a waiting write, and a conflict-free footprint.

Both poll the store with the task's request (``LeaseRequest.to_dict``) through
``TaskAdmission``; they differ only in what they check on each poll and the event they fire.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ..leases import LeaseRequest, TaskAdmission


class LeaseStoreTrigger(BaseTrigger):
    """Polls the lease store every ``poll_interval`` seconds until ``check`` returns an event."""

    def __init__(self, request: Mapping[str, Any], store_url: str | None = None, poll_interval: float = 2.0) -> None:
        super().__init__()
        self.request = dict(request)
        self.store_url = store_url
        self.poll_interval = poll_interval

    @classmethod
    def for_request(cls, request: LeaseRequest, store_url: str | None, poll_interval: float) -> LeaseStoreTrigger:
        return cls(request.to_dict(), store_url, poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"request": self.request, "store_url": self.store_url, "poll_interval": self.poll_interval},
        )

    def check(self, admission: TaskAdmission, request: LeaseRequest) -> dict[str, Any] | None:
        """One poll (blocking; run in a thread): the event to fire, or ``None`` to poll again."""
        raise NotImplementedError

    async def run(self) -> AsyncIterator[TriggerEvent]:
        request = LeaseRequest.from_dict(self.request)
        admission = TaskAdmission(self.store_url)
        while True:
            event = await asyncio.to_thread(self.check, admission, request)
            if event is not None:
                yield TriggerEvent(event)
                return
            await asyncio.sleep(self.poll_interval)


class LeaseAdmissionTrigger(LeaseStoreTrigger):
    """Polls the lease store with the task's request (keeping its queue place) until admitted."""

    def check(self, admission: TaskAdmission, request: LeaseRequest) -> dict[str, Any] | None:
        decided = admission.decide(request)
        return None if decided.lease is None else admission.admitted_event(decided.lease)


class ConflictFreeTrigger(LeaseStoreTrigger):
    """Fires once no live lease on an overlapping footprint holds a conflicting operation.

    It only watches: it takes no lease and no queue place.
    """

    def check(self, admission: TaskAdmission, request: LeaseRequest) -> dict[str, Any] | None:
        if admission.blocking_leases(request):
            return None
        return {"status": "conflict_free", "table": request.table}
