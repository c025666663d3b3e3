"""Step 2 of the write flow: a lease on the task's footprint, or a deferral until there is one.

The lease store (``occflow.leases``) owns the decision; this module only wires it to a task:
who holds the lease (the task instance), where the store is, and how the task waits (a
trigger, so a waiting write holds no worker slot).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

from airflow.sdk.exceptions import AirflowException

from ..core.declaration import WriteDeclaration
from ..leases import Holder, Lease, LeaseKeeper, LeaseRequest, LeaseStore, store_url


@lru_cache(maxsize=8)
def lease_store(url: str | None = None) -> LeaseStore:
    """One store per URL per process (an engine with its connection pool)."""
    return LeaseStore.from_url(store_url(url))


def holder_of(context: Mapping[str, Any]) -> Holder:
    ti = context.get("ti")
    if ti is None:
        return Holder()
    return Holder(
        dag_id=str(ti.dag_id),
        task_id=str(ti.task_id) + ("" if getattr(ti, "map_index", -1) in (-1, None) else f"[{ti.map_index}]"),
        run_id=str(ti.run_id),
        try_number=int(getattr(ti, "try_number", 0) or 0),
    )


def request_for(operator: Any, declaration: WriteDeclaration, context: Mapping[str, Any]) -> LeaseRequest:
    return LeaseRequest.from_declaration(declaration, holder=holder_of(context), ttl=operator.lease_ttl)


def admit(operator: Any, declaration: WriteDeclaration, context: Mapping[str, Any]) -> Lease | None:
    """The lease now, or defer the task on ``LeaseAdmissionTrigger`` (never returns then)."""
    if not operator.admission:
        return None
    store = lease_store(operator.lease_store_url)
    request = request_for(operator, declaration, context)
    decided = store.decide(request)
    if decided.lease is not None:
        operator.log.info("admitted: %s", decided.lease.describe())
        return decided.lease
    operator.log.info(
        "not admitted yet, deferring: %s waits for %s",
        request.describe(),
        "; ".join(b.describe() for b in decided.blockers),
    )
    from ..triggers.lease import LeaseAdmissionTrigger

    operator.defer(
        trigger=LeaseAdmissionTrigger.for_request(request, operator.lease_store_url, operator.admission_poll_interval),
        method_name="execute_admitted",
    )
    return None  # pragma: no cover - defer raises


def lease_from_event(operator: Any, event: Mapping[str, Any] | None) -> Lease | None:
    """The lease the admission trigger was granted, looked up in the store by id."""
    if not operator.admission:
        return None
    if not event or event.get("status") != "admitted":
        raise AirflowException(f"admission did not grant a lease: {event!r}")
    store = lease_store(operator.lease_store_url)
    for lease in store.leases(event["table"]):
        if lease.lease_id == event["lease_id"]:
            return lease
    raise AirflowException(
        f"lease {event['lease_id']} granted while deferred has expired before the task resumed; "
        "raise lease_ttl or the triggerer's capacity"
    )


@contextlib.contextmanager
def keep(operator: Any, lease: Lease | None) -> Iterator[None]:
    """Heartbeat the lease while the job runs."""
    if lease is None:
        yield
        return
    keeper = LeaseKeeper(lease_store(operator.lease_store_url), lease)
    with keeper:
        yield
    if keeper.lost.is_set():
        operator.log.warning("lease %s lapsed during the write: admission did not cover all of it", lease.lease_id)


def release(operator: Any, lease: Lease | None) -> None:
    if lease is not None:
        lease_store(operator.lease_store_url).release(lease)
