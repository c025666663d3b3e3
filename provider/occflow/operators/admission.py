"""Step 2 of the write flow: a lease on the task's footprint, or a deferral until there is one.

``occflow.leases.TaskAdmission`` owns every step (the store, the holder, the request, the
decision, the heartbeats); this module only wires it to an operator's arguments and makes a
waiting write defer on ``LeaseAdmissionTrigger``, so it holds no worker slot while it waits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from airflow.sdk.exceptions import AirflowException

from ..core.declaration import WriteDeclaration
from ..leases import (
    Lease,
    LeaseKeeper,
    LeaseLostError,
    LeaseStoreUnavailable,
    NotAdmittedError,
    TaskAdmission,
)
from ..triggers.lease import LeaseAdmissionTrigger


def admission_of(operator: Any) -> TaskAdmission:
    return TaskAdmission(operator.lease_store_url, operator.lease_ttl)


def admit(operator: Any, declaration: WriteDeclaration, context: Mapping[str, Any]) -> Lease | None:
    """The lease now, or defer the task on ``LeaseAdmissionTrigger`` (never returns then)."""
    if not operator.admission:
        return None
    admission = admission_of(operator)
    request = admission.request(declaration, context)
    try:
        decided = admission.decide(request)
    except LeaseStoreUnavailable as exc:
        # The trigger rides out an outage (with backoff, for a bounded time); so does this task.
        operator.log.warning("lease store unavailable, deferring until it answers: %s", exc)
    except LeaseLostError as exc:  # a later try of this task instance holds the footprint
        raise AirflowException(str(exc)) from exc
    else:
        if decided.lease is not None:
            operator.log.info("admitted: %s (fence %d)", decided.lease.describe(), decided.lease.fence)
            return decided.lease
        operator.log.info(
            "not admitted yet, deferring: %s waits for %s",
            request.describe(),
            "; ".join(b.describe() for b in decided.blockers),
        )
    operator.defer(
        trigger=LeaseAdmissionTrigger.for_request(request, operator.lease_store_url, operator.admission_poll_interval),
        method_name="execute_admitted",
    )
    return None  # pragma: no cover - defer raises


def lease_from_event(operator: Any, event: Mapping[str, Any] | None) -> Lease | None:
    """The lease the admission trigger was granted; the task fails if it has none any more."""
    if not operator.admission:
        return None
    try:
        return admission_of(operator).lease_from_event(event)
    except (NotAdmittedError, LeaseLostError, LeaseStoreUnavailable) as exc:
        raise AirflowException(str(exc)) from exc


def keep(operator: Any, lease: Lease | None) -> contextlib.AbstractContextManager[LeaseKeeper | None]:
    """Heartbeat the lease while the job runs. ``with keep(op, lease) as keeper:`` gives the
    ``LeaseKeeper`` (``None`` without admission): call ``keeper.ensure_live()`` right before the
    engine commits (``LeaseLostError`` = abort, do not commit) and stamp ``keeper.fence`` into
    the commit's metadata where the table format allows."""
    return admission_of(operator).keep(lease, operator.log)


def release(operator: Any, lease: Lease | None) -> None:
    """Let the lease go (a store that cannot be reached lets it lapse after its TTL)."""
    admission_of(operator).release(lease, operator.log)
