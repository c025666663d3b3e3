"""Step 2 of the write flow: a lease on the task's footprint, or a deferral until there is one.

``occflow.leases.TaskAdmission`` owns every step (the store, the holder, the request, the
decision, the heartbeats); this module only wires it to an operator's arguments and makes a
waiting write defer on ``LeaseAdmissionTrigger``, so it holds no worker slot while it waits.
"""

from __future__ import annotations

import contextlib
import time
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

#: Seconds a write that is not admitted at once waits in its worker for a lease before it
#: defers (``admission_wait_seconds`` on the operator). A lease let go meanwhile wakes it at once,
#: so a short wait saves Airflow's deferral round trip (trigger, re-queue, a new task process:
#: seconds) at the price of a worker slot held that long. 0 defers at once.
DEFAULT_ADMISSION_WAIT_SECONDS = 0.0
#: Seconds after a deferral before the admission trigger resumes the task (it takes the lease
#: when woken, and holds it that long at most): a task resumed sooner can be killed by an
#: Airflow 3.3 scheduler race (``LeaseStoreTrigger._settle``). The deferring process's exit
#: reaches the scheduler up to Airflow's ``[workers] min_heartbeat_interval`` (5 s) after the
#: deferral, plus the executor's and scheduler's loops: twice that. ``admission_resume_settle_seconds``
#: on the operator overrides it.
DEFAULT_RESUME_SETTLE_SECONDS = 10.0


def admission_of(operator: Any) -> TaskAdmission:
    return TaskAdmission(operator.lease_store_url, operator.lease_ttl)


def seconds_of(operator: Any, name: str, default: float) -> float:
    """The operator's ``name`` (``default`` if unset), checked: a number of seconds >= 0."""
    seconds = getattr(operator, name, None)
    seconds = default if seconds is None else seconds
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < float("inf"):
        raise AirflowException(f"{name} must be a number of seconds >= 0, got {seconds!r}")
    return float(seconds)


def admit(operator: Any, declaration: WriteDeclaration, context: Mapping[str, Any]) -> Lease | None:
    """The lease now (or within ``admission_wait_seconds``, waiting in the worker), else defer
    the task on ``LeaseAdmissionTrigger`` (never returns then)."""
    if not operator.admission:
        return None
    admission = admission_of(operator)
    request = admission.request(declaration, context)
    wait = seconds_of(operator, "admission_wait_seconds", DEFAULT_ADMISSION_WAIT_SECONDS)
    settle = seconds_of(operator, "admission_resume_settle_seconds", DEFAULT_RESUME_SETTLE_SECONDS)
    try:
        if wait > 0:
            decided = admission.wait_for_lease(request, wait, safety_poll=operator.admission_poll_interval)
        else:
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
        trigger=LeaseAdmissionTrigger.for_request(
            request, operator.lease_store_url, operator.admission_poll_interval,
            fire_not_before=time.time() + settle if settle else None,
        ),
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
