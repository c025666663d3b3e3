"""Admission for one task: the lease store it talks to and the steps of the write flow that
touch it — who holds the lease, what is requested, the decision, keeping the lease alive while
the job runs, letting it go.

Operators, the conflict-free sensor and the lease triggers all use this object, importing it
from below, so the Airflow face holds no admission logic of its own. A context is read
duck-typed (a mapping with the task instance under ``"ti"``): no Airflow import here.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..core.declaration import WriteDeclaration
from .config import CONN_ID_ENV, URL_ENV, resolve_store_url, store_options
from .keeper import LeaseKeeper
from .model import (
    Admission,
    Holder,
    Lease,
    LeaseLostError,
    LeaseRequest,
    LeaseStoreUnavailable,
    NotAdmittedError,
    checked_seconds,
)
from .store import LeaseStore
from .wakeup import Watch

_log = logging.getLogger(__name__)


def cached_store(url: str | None = None) -> LeaseStore:
    """The store writes, triggers and sensors use, resolved as every other component resolves it
    (``config.resolve_store_url``: an explicit URL, ``OCCFLOW_LEASE_STORE_URL``, the connection
    ``OCCFLOW_LEASE_STORE_CONN_ID``, else the SQLite file in ``$AIRFLOW_HOME``): a worker must not
    admit against a file of its own while the view and its peers use a shared store."""
    env = os.environ
    return _store_at(_resolved(url, env.get(URL_ENV), env.get(CONN_ID_ENV), env.get("AIRFLOW_HOME")))


@lru_cache(maxsize=8)
def _resolved(url: str | None, url_env: str | None, conn_id: str | None, home: str | None) -> str:
    # Once per process and setting: reading the connection goes through Airflow's secrets backends.
    return resolve_store_url(url)


@lru_cache(maxsize=8)
def _store_at(url: str) -> LeaseStore:
    """One store per URL per process (an engine with its connection pool); history and
    priorities from the environment (``config.store_options``)."""
    return LeaseStore.from_url(url, **store_options())


def holder_of(context: Mapping[str, Any]) -> Holder:
    """The task instance in an Airflow(-like) context as a holder; a mapped instance by index."""
    ti = context.get("ti")
    if ti is None:
        return Holder()
    return Holder(
        dag_id=str(ti.dag_id),
        task_id=str(ti.task_id) + ("" if getattr(ti, "map_index", -1) in (-1, None) else f"[{ti.map_index}]"),
        run_id=str(ti.run_id),
        try_number=int(getattr(ti, "try_number", 0) or 0),
    )


@dataclass(frozen=True)
class TaskAdmission:
    """A task's way into the lease store at ``store_url`` (``None``: env, else embedded SQLite)."""

    store_url: str | None = None
    lease_ttl: float = 300.0  # seconds a lease lives without a heartbeat

    def __post_init__(self) -> None:
        object.__setattr__(self, "lease_ttl", checked_seconds("lease_ttl", self.lease_ttl))

    @property
    def store(self) -> LeaseStore:
        return cached_store(self.store_url)

    def holder(self, context: Mapping[str, Any]) -> Holder:
        return holder_of(context)

    def request(
        self, declaration: WriteDeclaration, context: Mapping[str, Any], *, commit_gate: bool = False
    ) -> LeaseRequest:
        """The lease the task asks for; ``commit_gate``: the write holds its commit at the
        lease's gate (``LeaseKeeper.wait_gate``), so order-aware admission may grant it beside a
        lease it must commit after. Operators' writes do; a sensor only looks."""
        return LeaseRequest.from_declaration(
            declaration, holder=self.holder(context), ttl=self.lease_ttl, commit_gate=commit_gate
        )

    def decide(self, request: LeaseRequest) -> Admission:
        """The lease now, or the request's place in the queue and what it waits behind."""
        return self.store.decide(request)

    def wait_for_lease(self, request: LeaseRequest, seconds: float, safety_poll: float = 5.0) -> Admission:
        """Decide, waiting in this process up to ``seconds`` for a lease on the table to be let
        go (woken at once: ``LeaseStore.wait_for_lease``); the last decision."""
        return self.store.wait_for_lease(request, seconds, safety_poll)

    def admissible(self, request: LeaseRequest) -> Admission:
        """Whether ``request`` would be granted now (in queue order), without taking the lease;
        if so it leaves the queue (``LeaseStore.admissible``)."""
        return self.store.admissible(request)

    def watch(self, table: str) -> Watch:
        """Woken when part of ``table``'s footprint is let go (``occflow.leases.wakeup``)."""
        return self.store.watch(table)

    def blocking_leases(self, request: LeaseRequest) -> list[Lease]:
        """Live leases that block ``request``, without taking a lease or a queue place."""
        return self.store.blocking_leases(request)

    @staticmethod
    def admitted_event(lease: Lease) -> dict[str, Any]:
        """What a trigger that was granted ``lease`` hands the resumed task (``lease_from_event``):
        the event of triggers from before the admission trigger stopped taking leases."""
        return {"status": "admitted", "lease_id": lease.lease_id, "table": lease.table}

    @staticmethod
    def free_event(request: LeaseRequest) -> dict[str, Any]:
        """What the admission trigger hands the task it resumes because ``request``'s footprint
        looks free: the request itself, so the resumed try decides with the same one."""
        return {"status": "free", "table": request.table, "request": request.to_dict()}

    def lease_from_event(self, event: Mapping[str, Any] | None) -> Lease:
        """The lease the admission trigger was granted, looked up in the store by id and
        confirmed there (so this process knows how long it is certainly live)."""
        if not event or event.get("status") != "admitted":
            raise NotAdmittedError(f"admission did not grant a lease: {event!r}")
        for lease in self.store.leases(event["table"]):
            if lease.lease_id == event["lease_id"]:
                return self.store.confirm(lease)
        raise LeaseLostError(
            f"lease {event['lease_id']} granted while deferred has expired before the task resumed; "
            "raise lease_ttl or the triggerer's capacity"
        )

    @contextlib.contextmanager
    def keep(self, lease: Lease | None, log: logging.Logger | None = None) -> Iterator[LeaseKeeper | None]:
        """Heartbeat the lease while the job runs; yields the ``LeaseKeeper`` (``None`` without
        a lease) whose ``ensure_live()`` the write calls right before it commits, and whose
        ``fence`` it stamps into the commit. Warns on ``log`` if the lease was lost meanwhile."""
        if lease is None:
            yield None
            return
        keeper = LeaseKeeper(self.store, lease)
        with keeper:
            yield keeper
        if keeper.lost.is_set():
            (log or _log).warning("%s was lost during the write: %s", lease.name(), keeper.why)

    def release(self, lease: Lease | None, log: logging.Logger | None = None) -> None:
        """Let the lease go; if the store is unreachable, it lapses after its TTL instead (a
        finished write must not fail for that)."""
        if lease is None:
            return
        try:
            self.store.release(lease)
        except LeaseStoreUnavailable as exc:
            (log or _log).warning("could not release %s (it lapses after its TTL): %s", lease.name(), exc)
