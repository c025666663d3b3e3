"""Triggers on the lease store: admission of a waiting write, and a conflict-free footprint.

Both poll the store with the task's request (``LeaseRequest.to_dict``) through
``TaskAdmission``; they differ only in what they check on each poll and the event they fire.
A poll that fails because the store's database is unavailable (``LeaseStoreUnavailable``: a
restart, a network blip, a locked file) is retried with exponential backoff for up to
``outage_budget`` seconds before the trigger fails, so a blip does not fail every deferred task.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    RetryError,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
)

from ..leases import LeaseRequest, LeaseStoreError, LeaseStoreUnavailable, TaskAdmission

#: Seconds a trigger keeps retrying an unavailable store before it fails (a PostgreSQL restart
#: or failover takes well under this).
DEFAULT_OUTAGE_BUDGET = 300.0


class LeaseStoreTrigger(BaseTrigger):
    """Polls the lease store every ``poll_interval`` seconds until ``check`` returns an event."""

    def __init__(
        self,
        request: Mapping[str, Any],
        store_url: str | None = None,
        poll_interval: float = 2.0,
        outage_budget: float = DEFAULT_OUTAGE_BUDGET,
    ) -> None:
        super().__init__()
        self.request = dict(request)
        self.store_url = store_url
        self.poll_interval = poll_interval
        self.outage_budget = outage_budget

    @classmethod
    def for_request(
        cls, request: LeaseRequest, store_url: str | None, poll_interval: float,
        outage_budget: float = DEFAULT_OUTAGE_BUDGET,
    ) -> LeaseStoreTrigger:
        return cls(request.to_dict(), store_url, poll_interval, outage_budget)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "request": self.request,
                "store_url": self.store_url,
                "poll_interval": self.poll_interval,
                "outage_budget": self.outage_budget,
            },
        )

    def check(self, admission: TaskAdmission, request: LeaseRequest) -> dict[str, Any] | None:
        """One poll (blocking; run in a thread): the event to fire, or ``None`` to poll again."""
        raise NotImplementedError

    async def run(self) -> AsyncIterator[TriggerEvent]:
        request = LeaseRequest.from_dict(self.request)
        admission = TaskAdmission(self.store_url)
        while True:
            event = await self._poll(admission, request)
            if event is not None:
                yield TriggerEvent(event)
                return
            await asyncio.sleep(self.poll_interval)

    async def _poll(self, admission: TaskAdmission, request: LeaseRequest) -> dict[str, Any] | None:
        """One poll, riding out an unavailable store for up to ``outage_budget`` seconds."""
        started = time.monotonic()
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(LeaseStoreUnavailable),
            wait=wait_exponential(multiplier=0.5, max=30.0),
            stop=stop_after_delay(self.outage_budget),
            before_sleep=self._log_retry,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await asyncio.to_thread(self.check, admission, request)
        except RetryError as gave_up:
            last = gave_up.last_attempt.exception()
            raise LeaseStoreError(
                f"the lease store was unavailable for {time.monotonic() - started:.0f}s "
                f"(outage budget {self.outage_budget:g}s) while waiting for {request.describe()}; "
                f"last error: {last}"
            ) from last
        return None  # pragma: no cover - AsyncRetrying either returns an attempt's result or raises

    def _log_retry(self, state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        delay = state.next_action.sleep if state.next_action is not None else 0.0
        self.log.warning(
            "lease store unavailable for %.0fs (retry %d in %.1fs, gives up after %gs): %s",
            state.seconds_since_start, state.attempt_number, delay, self.outage_budget, error,
        )


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

