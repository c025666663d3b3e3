"""Triggers on the lease store: admission of a waiting write, and a conflict-free footprint.

Both ask the store with the task's request (``LeaseRequest.to_dict``) through
``TaskAdmission``; they differ only in what they check and the event they fire. They ask again
the moment a lease (or queue place) on the table is let go: the store announces it as it
commits (``occflow.leases.wakeup``: PostgreSQL LISTEN/NOTIFY, a short backoff poll on SQLite),
and ``poll_interval`` is only the safety poll in case a wake-up is lost. The admission trigger
takes no lease: it resumes the task once its footprint is free in queue order, and the resumed
try takes the lease itself, so no lease is held while Airflow resumes the task.
A poll that fails because the store's database is unavailable (``LeaseStoreUnavailable``: a
restart, a network blip, a locked file) is retried with exponential backoff for up to
``outage_budget`` seconds before the trigger fails, so a blip does not fail every deferred task.
A request the store refuses (``LeaseStoreRefused``, an invalid value) fails at once: asking
again would get the same answer.
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

from ..leases import LeaseRequest, LeaseStoreError, LeaseStoreUnavailable, TaskAdmission, Watch
from ..leases.model import checked_seconds

#: Seconds a trigger keeps retrying an unavailable store before it fails (a PostgreSQL restart
#: or failover takes well under this).
DEFAULT_OUTAGE_BUDGET = 300.0


class LeaseStoreTrigger(BaseTrigger):
    """Asks the lease store until ``check`` returns an event: when woken by a lease let go on
    the table (``wakeup``), and every ``poll_interval`` seconds in any case."""

    def __init__(
        self,
        request: Mapping[str, Any],
        store_url: str | None = None,
        poll_interval: float = 2.0,
        outage_budget: float = DEFAULT_OUTAGE_BUDGET,
        wakeup: bool = True,
        fire_not_before: float | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow's BaseTrigger.__init__ is not annotated
        self.request = dict(request)
        self.store_url = store_url
        # NaN or infinity here would poll in a busy loop or never give up on an outage.
        self.poll_interval = checked_seconds("poll_interval", poll_interval)
        self.outage_budget = checked_seconds("outage_budget", outage_budget, zero_ok=True)
        self.wakeup = wakeup
        self.fire_not_before = fire_not_before

    @classmethod
    def for_request(
        cls, request: LeaseRequest, store_url: str | None, poll_interval: float,
        outage_budget: float = DEFAULT_OUTAGE_BUDGET, wakeup: bool = True, fire_not_before: float | None = None,
    ) -> LeaseStoreTrigger:
        return cls(request.to_dict(), store_url, poll_interval, outage_budget, wakeup, fire_not_before)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "request": self.request,
                "store_url": self.store_url,
                "poll_interval": self.poll_interval,
                "outage_budget": self.outage_budget,
                "wakeup": self.wakeup,
                "fire_not_before": self.fire_not_before,
            },
        )

    def check(self, admission: TaskAdmission, request: LeaseRequest) -> dict[str, Any] | None:
        """One poll (blocking; run in a thread): the event to fire, or ``None`` to poll again."""
        raise NotImplementedError

    async def run(self) -> AsyncIterator[TriggerEvent]:
        request = LeaseRequest.from_dict(self.request)
        admission = TaskAdmission(self.store_url)
        watch = await self._watch(admission, request) if self.wakeup else None
        try:
            while True:
                if watch is not None:
                    watch.clear()  # before asking: a release committed after this wakes us
                event = await self._poll(admission, request)
                if event is not None:
                    await self._settle()
                    yield TriggerEvent(event)
                    return
                if watch is None:
                    await asyncio.sleep(self.poll_interval)
                else:
                    await watch.wait_async(self.poll_interval)
        finally:
            if watch is not None:
                watch.close()

    async def _settle(self) -> None:
        """Hold the event until ``fire_not_before`` (wall clock, epoch seconds), if set.

        Airflow 3.3 may kill a task resumed very soon after it deferred: when the scheduler
        handles the executor's report that the deferring process exited only after the resumed
        try is running (a busy machine), it takes the report for the resumed try and fails it
        ("finished with state success, but the task instance's state attribute is running").
        The operators set this a few seconds after the deferral. The admission trigger takes
        no lease and has left the queue by then (``LeaseStore.admissible``), so the wait holds
        nothing back but the deferred task itself."""
        delay = 0.0 if self.fire_not_before is None else self.fire_not_before - time.time()
        if delay > 0:
            self.log.info("admitted; resuming the task in %.1fs (settling after its deferral)", delay)
            await asyncio.sleep(delay)

    async def _watch(self, admission: TaskAdmission, request: LeaseRequest) -> Watch | None:
        """A watch on the request's table, or ``None`` (plain polling) if the store cannot be
        reached now: the polls ride the outage out as before."""
        try:
            return await asyncio.to_thread(admission.watch, request.table)
        except LeaseStoreError as exc:
            self.log.warning("no lease wake-ups (polling every %gs instead): %s", self.poll_interval, exc)
            return None

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
    """Polls the lease store with the task's request (keeping its queue place) until the store
    would grant it, then resumes the task, which takes the lease itself.

    It never takes the lease: a lease taken here would be held, unused, through the settle time
    and Airflow's resume (the scheduler, the executor, a new task process: seconds), and every
    conflicting writer would queue behind that. Once admissible the request leaves the queue,
    so its place does not hold back the writers that run while the task resumes; the resumed
    try asks again (``operators.admission.lease_from_event``) and waits, in its worker and then
    deferred, if someone took the footprint meanwhile."""

    def check(self, admission: TaskAdmission, request: LeaseRequest) -> dict[str, Any] | None:
        decided = admission.admissible(request)
        if decided.lease is not None:  # granted by a trigger of an earlier occflow (a lost answer)
            return admission.admitted_event(decided.lease)
        return None if decided.blockers else admission.free_event(request)


class ConflictFreeTrigger(LeaseStoreTrigger):
    """Fires once no live lease on an overlapping footprint holds a conflicting operation.

    It only watches: it takes no lease and no queue place.
    """

    def check(self, admission: TaskAdmission, request: LeaseRequest) -> dict[str, Any] | None:
        if admission.blocking_leases(request):
            return None
        return {"status": "conflict_free", "table": request.table}

