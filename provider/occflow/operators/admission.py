"""Step 2 of the write flow: a lease on the task's footprint, or a deferral until there is one.

``occflow.leases.TaskAdmission`` owns every step (the store, the holder, the request, the
decision, the heartbeats); this module only wires it to an operator's arguments. A write that
is not admitted at once waits in its worker (woken the moment a lease on the table is let go)
for up to ``wait_seconds``, then defers on ``LeaseAdmissionTrigger`` so it holds no worker slot.
The trigger takes no lease: it resumes the task when its footprint looks free, and the resumed
try takes the lease itself (or waits again). So a lease is held only by a running try, never
across Airflow's resume latency.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from ..core.declaration import WriteDeclaration
from ..leases import (
    Lease,
    LeaseKeeper,
    LeaseLostError,
    LeaseRequest,
    LeaseStoreUnavailable,
    NotAdmittedError,
    TaskAdmission,
)
from ..leases.config import ADMISSION_ENV, admission_switched_off
from ..triggers.lease import LeaseAdmissionTrigger
from .exactly_once import MAX_GATE_TIMEOUT_SECONDS

#: Seconds a write that is not admitted at once waits in its worker for a lease before it
#: defers (``admission_wait_seconds`` on the operator). A lease let go meanwhile wakes it at once
#: (0.1 s on PostgreSQL, 0.3 s on SQLite), where a deferral costs Airflow's round trip (trigger,
#: re-queue, a new task process: 3-6 s) on every hand-off; a chain of short conflicting writes
#: pays that per write. It holds a worker (and pool) slot while it waits, so it is bounded: a
#: write blocked longer than this defers and frees the slot. 0 defers at once.
DEFAULT_ADMISSION_WAIT_SECONDS = 60.0
#: Seconds after a deferral before the admission trigger resumes the task: a task resumed sooner
#: can be killed by an Airflow 3.3 scheduler race (``LeaseStoreTrigger._settle``). The deferring
#: process's exit reaches the scheduler up to Airflow's ``[workers] min_heartbeat_interval`` (5 s)
#: after the deferral, plus the executor's and scheduler's loops. The trigger holds no lease
#: meanwhile (it takes none), so the guard delays only the deferred task itself, and only when
#: its footprint frees within this time of its deferral. ``admission_resume_settle_seconds`` on
#: the operator overrides it.
DEFAULT_RESUME_SETTLE_SECONDS = 10.0


@dataclass(frozen=True)
class AdmissionSettings:
    """The operator's admission parameters, checked once (each error names its parameter)."""

    enabled: bool = True
    store_url: str | None = None
    lease_ttl: float = 300.0
    poll_interval: float = 2.0
    wait_seconds: float = DEFAULT_ADMISSION_WAIT_SECONDS
    resume_settle_seconds: float = DEFAULT_RESUME_SETTLE_SECONDS

    def __post_init__(self) -> None:
        for name in ("lease_ttl", "poll_interval", "wait_seconds", "resume_settle_seconds"):
            object.__setattr__(self, name, _seconds(name, getattr(self, name)))
        if self.lease_ttl <= 0:
            raise AirflowException(f"lease_ttl must be a number of seconds > 0, got {self.lease_ttl!r}")

    @property
    def admission(self) -> TaskAdmission:
        return TaskAdmission(self.store_url, self.lease_ttl)


def _seconds(name: str, seconds: Any) -> float:
    """A number of seconds >= 0 (finite, not a bool), else an error naming the parameter."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < float("inf"):
        raise AirflowException(f"{name} must be a number of seconds >= 0, got {seconds!r}")
    return float(seconds)


def checked_gate_timeout(seconds: Any) -> float:
    """The operator's ``gate_timeout``: seconds >= 0, at most a week, else an error naming it."""
    checked = _seconds("gate_timeout", seconds)
    if checked > MAX_GATE_TIMEOUT_SECONDS:
        raise AirflowException(f"gate_timeout must be at most {MAX_GATE_TIMEOUT_SECONDS:g} seconds, got {seconds!r}")
    return checked


#: ``defer(trigger=..., method_name=...)``: the operator's own ``BaseOperator.defer``.
Defer = Callable[..., None]

_log = logging.getLogger(__name__)


def admit(
    settings: AdmissionSettings, declaration: WriteDeclaration, context: Mapping[str, Any],
    log: logging.Logger, defer: Defer,
) -> Lease | None:
    """The lease now (or within ``wait_seconds``, waiting in the worker), else defer the task on
    ``LeaseAdmissionTrigger`` (``defer`` never returns then)."""
    if not settings.enabled or not _admission_wanted(declaration, log):
        return None
    claimed = declaration.admission_claim()
    if claimed is not declaration:
        # The lease names physical columns; the line names what the user declared beside them.
        where = ", ".join("/".join(f"{c}={v}" for c, v in spec.items()) for spec in declaration.partitions or ())
        log.info("admission keys partitions %s by %s", where, ", ".join(sorted(claimed.partition_keys() or ())))
    # The flow holds the commit at the lease's gate (exactly_once.BeforeCommit): it may be gated.
    request = settings.admission.request(claimed, context, commit_gate=True)
    return _lease_or_defer(settings, request, log, defer)


def _admission_wanted(declaration: WriteDeclaration, log: logging.Logger) -> bool:
    """``OCCFLOW_ADMISSION=off`` (the deployment's switch, e.g. to measure racing against
    admission on the same DAGs) turns admission off, except for a write that can corrupt data
    beside a concurrent one on its engine: that one keeps its lease, and says so."""
    try:
        off = admission_switched_off()
    except ValueError as exc:
        raise AirflowFailException(f"{exc}; nothing was written") from exc
    if not off:
        return True
    cells = declaration.corrupting_cells()
    if not cells:
        log.info("admission is off (%s=off): racing; a conflict is retried by the policy", ADMISSION_ENV)
        return False
    pairs = ", ".join(f"{c.earlier.value} then {c.later.value}" for c in cells)
    log.warning("%s=off, but %s on %s can corrupt data beside a concurrent write on %s (%s): it keeps "
                "its lease", ADMISSION_ENV, declaration.operation.value, declaration.table,
                declaration.engine_matrix.name, pairs)
    return True


def lease_from_event(
    settings: AdmissionSettings, event: Mapping[str, Any] | None, log: logging.Logger | None = None,
    defer: Defer | None = None,
) -> Lease | None:
    """The lease of a task the admission trigger resumed: the trigger saw its footprint free, and
    this try takes the lease itself, with the same request (``decide``). If another writer took
    the footprint meanwhile, it waits in the worker again and then defers again (``defer``,
    default: raise ``TaskDeferred``), as ``admit`` does; it never fails for that.

    An ``admitted`` event comes from a trigger of an earlier occflow that took the lease itself:
    that lease is looked up; the task fails if it lapsed before the task resumed."""
    if not settings.enabled:
        return None
    log = log or _log
    if event and event.get("status") == "free" and isinstance(event.get("request"), Mapping):
        request = LeaseRequest.from_dict(event["request"])
        # The same request (its id, its try), held by this process now.
        request = dataclasses.replace(
            request, holder=dataclasses.replace(request.holder, host=socket.gethostname(), pid=os.getpid()))
        return _lease_or_defer(settings, request, log, defer or _raise_deferred)
    try:
        return settings.admission.lease_from_event(event)
    except (NotAdmittedError, LeaseLostError, LeaseStoreUnavailable) as exc:
        raise AirflowException(str(exc)) from exc


def _raise_deferred(**kwargs: Any) -> None:
    raise TaskDeferred(**kwargs)


def _lease_or_defer(settings: AdmissionSettings, request: LeaseRequest, log: logging.Logger, defer: Defer) -> Lease:
    admission = settings.admission
    try:
        if settings.wait_seconds > 0:
            decided = admission.wait_for_lease(request, settings.wait_seconds, safety_poll=settings.poll_interval)
        else:
            decided = admission.decide(request)
    except LeaseStoreUnavailable as exc:
        # The trigger rides out an outage (with backoff, for a bounded time); so does this task.
        log.warning("lease store unavailable, deferring until it answers: %s", exc)
    except LeaseLostError as exc:  # a later try of this task instance holds the footprint
        raise AirflowException(str(exc)) from exc
    else:
        if decided.lease is not None:
            log.info("admitted: %s (fence %d)", decided.lease.describe(), decided.lease.fence)
            return decided.lease
        log.info(
            "not admitted%s, deferring: %s waits for %s",
            f" within {settings.wait_seconds:g}s" if settings.wait_seconds > 0 else " yet",
            request.describe(),
            "; ".join(b.describe() for b in decided.blockers),
        )
    settle = settings.resume_settle_seconds
    defer(
        trigger=LeaseAdmissionTrigger.for_request(
            request, settings.store_url, settings.poll_interval,
            fire_not_before=time.time() + settle if settle else None,
        ),
        method_name="execute_admitted",
    )
    raise AssertionError("defer() returned")  # pragma: no cover - defer raises


def keep(
    settings: AdmissionSettings, lease: Lease | None, log: logging.Logger
) -> contextlib.AbstractContextManager[LeaseKeeper | None]:
    """Heartbeat the lease while the job runs. ``with keep(settings, lease, log) as keeper:``
    gives the ``LeaseKeeper`` (``None`` without admission): ``keeper.ensure_live()`` right before
    the engine commits, and ``keeper.fence`` stamped into the commit where the format allows."""
    return settings.admission.keep(lease, log)


def release(settings: AdmissionSettings, lease: Lease | None, log: logging.Logger) -> None:
    """Let the lease go (a store that cannot be reached lets it lapse after its TTL)."""
    settings.admission.release(lease, log)
