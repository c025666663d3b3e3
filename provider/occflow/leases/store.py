"""The lease store: admission decided and recorded in one atomic step, on SQLite or PostgreSQL.

One decision for table T runs in one database transaction that first takes T's lock:
``pg_advisory_xact_lock`` on PostgreSQL (held until commit, so decisions on T are serial and
decisions on other tables run in parallel), ``BEGIN IMMEDIATE`` on SQLite (the database's
single writer lock). Inside it: reclaim expired leases and queue places of T, read the live
leases and the waiting requests that overlap the request, decide, and write the lease (or the
queue place) and the event. A ``Lease`` is returned only after the commit succeeded.

Every grant carries a fencing token from ``occflow_lease_fences`` (per table, strictly
increasing), and every call that proves a lease live (grant, heartbeat, ``confirm``) returns it
with ``valid_until``: the caller's monotonic send time plus what was left of the TTL. Since the
store reckons expiry from its own clock read after that send, no conflicting grant can exist
before ``valid_until`` even if the database is unreachable meanwhile (``LeaseKeeper`` relies on
it). A database failure in any public method is a ``LeaseStoreUnavailable`` naming the store.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..core.admission_rule import Durations
from ..core.fencing import CommitFence
from . import schema
from .config import make_engine
from .model import (
    Admission,
    AdmissionPriorities,
    AdmissionTimeout,
    GateTimeout,
    Lease,
    LeaseLostError,
    LeaseRequest,
    LeaseStoreRefused,
    LeaseStoreUnavailable,
    checked_seconds,
    from_epoch,
    refuse_control_characters,
)
from .rows import check_request_fits, holder_of, lease_of, load_keys
from .transaction import Place, RowLike, TableTransaction, blockers_of
from .wakeup import Watch, announce, hub_for

T = TypeVar("T")
_DATABASE_ERRORS = (sa.exc.StatementError, sa.exc.TimeoutError)
#: What the database says about a value or a change rather than about itself: the same call
#: fails the same way again, so it is ``LeaseStoreRefused``, never an outage to wait out.
#: (A missing table, a ProgrammingError on PostgreSQL and an OperationalError on SQLite, is a
#: broken store: it stays ``LeaseStoreUnavailable`` on both.)
_REFUSALS = (sa.exc.DataError, sa.exc.IntegrityError)


def _translated(method: Callable[..., T]) -> Callable[..., T]:
    """A public store method whose database failures are ``LeaseStoreUnavailable`` (an
    outage: unreachable, locked, not a database) or ``LeaseStoreRefused`` (a value or change
    the database refused), naming the store (password masked) and the database's own words,
    instead of a driver traceback."""

    @functools.wraps(method)
    def call(self: LeaseStore, *args: Any, **kwargs: Any) -> T:
        try:
            return method(self, *args, **kwargs)
        except _DATABASE_ERRORS as exc:
            cause = getattr(exc, "orig", None) or exc
            words = " ".join(str(cause).split())[:2000] or type(cause).__name__
            # A statement error that is no DBAPI error is a value the driver could not send.
            refused = isinstance(exc, _REFUSALS) or (
                isinstance(exc, sa.exc.StatementError) and not isinstance(exc, sa.exc.DBAPIError)
            )
            error = LeaseStoreRefused if refused else LeaseStoreUnavailable
            raise error(
                f"lease store {self.engine.url.render_as_string(hide_password=True)} failed in "
                f"{method.__name__}{' (it refused a value: not an outage)' if refused else ''}: "
                f"{type(cause).__name__}: {words}"
            ) from exc

    return call


#: How long a lapsed lease is remembered (seconds): a writer stalled for longer than this (a VM
#: frozen for a week) is no longer fenced out by the writes admitted after it.
LAPSED_MEMORY = 7 * 86400.0


def _lock_key(table: str) -> int:
    """A stable signed 64-bit advisory lock key per table (a collision only serialises more)."""
    return int.from_bytes(hashlib.blake2b(table.encode(), digest_size=8).digest(), "big", signed=True)


class LeaseStore:
    """Leases on table footprints, admitted by the tables' conflict matrices.

    ``order_aware`` (the default): a request that holds its commit at the gate
    (``LeaseRequest.commit_gate``) is granted beside a live lease it blocks when only that
    lease-then-this commit order is clean (``Claim.may_follow``); its commit then waits until
    that lease ends (``wait_gate``). ``False``: every blocking pair this store grants waits, in
    either order; a gate an order-aware store recorded is still held (``wait_gate`` asks anyway).

    ``history=True`` records every event (grant, release, heartbeat, expiry, queue changes),
    each with the task instance it is about, in ``occflow_lease_events`` for audits and the
    invariant checker; it grows without bound, so it is off by default.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        priorities: AdmissionPriorities | None = None,
        history: bool = False,
        create: bool = True,
        order_aware: bool = True,
        durations: Durations | None = None,
    ) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self.priorities = priorities or AdmissionPriorities()
        self.history = history
        self.order_aware = order_aware
        # The rule's duration-aware choices (issue 38), from this table's recorded lease history.
        # None (the default): duration-blind. Opt-in until they pass the fairness tests (shortest
        # first lets appends arriving with a queued MERGE go ahead of it) and reach the issue's
        # targets; the simulator's default is the same, so the two agree.
        self.durations = durations
        if create:
            self.create_schema()

    @classmethod
    def from_url(cls, url: str, *, existing: bool = False, **kwargs: Any) -> LeaseStore:
        """A store on a SQLAlchemy URL (``sqlite:///path``, ``postgresql://...``).
        ``existing``: a SQLite file that does not exist is an error, not a new empty store
        (what a command that only reads or cleans up wants)."""
        return cls(make_engine(url, existing=existing), **kwargs)

    @_translated
    def create_schema(self) -> None:
        """Create the tables, and add the columns a store made by an older occflow lacks."""
        with self.engine.begin() as conn:
            if self.dialect == "postgresql":
                # Workers starting together must not race on CREATE TABLE.
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_lock_key("occflow:schema"))))
            # On SQLite the transaction's BEGIN IMMEDIATE serialises them the same way.
            schema.metadata.create_all(conn, checkfirst=True)
            schema.upgrade(conn)

    def dispose(self) -> None:
        self.engine.dispose()

    # -- the atomic step -------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, table: str) -> Iterator[TableTransaction]:
        """A transaction holding ``table``'s decision lock, with the store clock's now."""
        with self.engine.begin() as conn:
            if self.dialect == "postgresql":
                # One round trip: the clock is read after the lock is granted (the subquery
                # that takes it is evaluated first), so times are in decision order per table.
                now = float(
                    conn.execute(
                        sa.text(
                            "SELECT extract(epoch FROM clock_timestamp()) "
                            "FROM (SELECT pg_advisory_xact_lock(:key)) AS locked"
                        ),
                        {"key": _lock_key(table)},
                    ).scalar_one()
                )
            else:
                # BEGIN IMMEDIATE was issued by the engine (config.make_engine): we are the writer.
                now = float(
                    conn.execute(sa.text("SELECT (julianday('now') - 2440587.5) * 86400.0")).scalar_one()
                )
            tx = TableTransaction(conn, table, now, self.history)
            yield tx
            if tx.freed:
                # Part of the footprint was let go: wake the table's waiters as this commits.
                announce(conn, self.dialect, table)

    @_translated
    def decide(self, request: LeaseRequest) -> Admission:
        """Admit ``request`` or give it (or keep) its place in the queue, atomically.

        ``LeaseLostError`` if a later try of the request's task instance holds or waits for a
        lease on the table (``tries``).
        """
        return self._decide(request, take=True)

    @_translated
    def admissible(self, request: LeaseRequest) -> Admission:
        """Whether ``request`` would be granted now, in queue order, without granting it.

        Not admissible: it keeps (or takes) its queue place, as ``decide``, and the blockers
        say why. Admissible: ``Admission(None, ())``, and it gives up its queue place (waking
        the table's waiters): a deferred task is then resumed to ``decide`` itself, and its
        place must not hold back writers that run meanwhile (the lease admission trigger)."""
        return self._decide(request, take=False)

    def _decide(self, request: LeaseRequest, *, take: bool) -> Admission:
        check_request_fits(request)  # before any SQL: a value the store cannot hold is the caller's error
        sent = time.monotonic()
        with self._locked(request.table) as tx:
            live, waiting = tx.live_and_waiting(request)
            # Asking again with a granted request (a poll whose answer was lost) returns its lease;
            # it overlaps its own footprint, so it is among the candidates.
            held = next((r for r in live if r.request_id == request.request_id), None)
            if held is not None:
                return Admission(lease_of(held, valid_until=sent + held.expires_at - tx.now))
            live, waiting, earlier_try = tx.settle_tries(request, live, waiting)
            own = next((r for r in waiting if r.request_id == request.request_id), None)
            place: Place = (
                (own.queue_key, own.enqueued_at, own.request_id) if own is not None
                else (tx.now - self.priorities.head_start(request.operation), tx.now, request.request_id)
            )
            estimates = None if self.durations is None else tx.estimates(request, live, waiting, self.durations)
            ruling = tx.without_cycles(
                blockers_of(request, live, waiting, place, order_aware=self.order_aware, estimates=estimates), live
            )
            blockers = ruling.blockers
            blockers += [b for b in earlier_try if b.ident not in {x.ident for x in blockers}]
            if blockers:
                tx.wait(request, place[0], queued=own is not None)
                return Admission(None, tuple(blockers))
            if not take:
                if own is not None:  # leave the queue: the writers behind it may go now
                    tx.conn.execute(schema.queue.delete().where(schema.queue.c.request_id == own.request_id))
                    tx.event("dequeue", own, request_id=own.request_id, pid=own.pid)
                    tx.freed = True
                return Admission(None)
            lease = tx.grant(request, queued=own is not None, sent=sent, awaits=ruling.awaits, holds=ruling.holds)
        # Committed: only now does the lease exist for the caller.
        return Admission(lease)

    def try_acquire(self, request: LeaseRequest) -> Lease | None:
        """The lease if admitted now; otherwise ``None`` and the request keeps its queue place."""
        return self.decide(request).lease

    def acquire(
        self, request: LeaseRequest, timeout: float | None = None, poll: float = 1.0
    ) -> Lease:
        """Wait until admitted (woken when a lease on the table is let go, and asking every
        ``poll`` seconds in any case); gives up after ``timeout``."""
        if timeout is not None:
            timeout = checked_seconds("timeout", timeout, zero_ok=True, at_most=7 * 86400.0)
        poll = checked_seconds("poll", poll)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.watch(request.table) as watch:  # woken at once when a lease is let go
            while True:
                watch.clear()
                admission = self.decide(request)
                if admission.lease is not None:
                    return admission.lease
                if deadline is not None and time.monotonic() >= deadline:
                    self.cancel(request)
                    waits = "; ".join(b.describe() for b in admission.blockers)
                    raise AdmissionTimeout(f"not admitted within {timeout}s: {request.describe()} waits for {waits}")
                watch.wait(poll if deadline is None else min(poll, max(deadline - time.monotonic(), 0.0)))

    def watch(self, table: str) -> Watch:
        """A ``Watch`` woken when a decision frees part of ``table``'s footprint (``wakeup``);
        close it when done waiting (it is a context manager)."""
        return hub_for(self.engine).watch(table)

    def wait_for_lease(self, request: LeaseRequest, seconds: float, safety_poll: float = 5.0) -> Admission:
        """Decide, and while not admitted, wait up to ``seconds`` for a wake-up and decide again
        (every ``safety_poll`` seconds as well, in case a wake-up is lost); the last decision."""
        seconds = checked_seconds("seconds", seconds, zero_ok=True)
        safety_poll = checked_seconds("safety_poll", safety_poll)
        deadline = time.monotonic() + seconds
        with self.watch(request.table) as watch:
            while True:
                watch.clear()  # before deciding: a release committed after this wakes us
                admission = self.decide(request)
                remaining = deadline - time.monotonic()
                if admission.lease is not None or remaining <= 0:
                    return admission
                watch.wait(min(remaining, safety_poll))

    # -- the commit gate (order-aware admission) ---------------------------------------------

    @_translated
    def gate(self, lease: Lease) -> list[Lease]:
        """The live leases ``lease``'s commit still waits for, earliest grant first; ``[]``: its
        gate is open (every lease it awaited was released or lapsed), for good."""
        with self._locked(lease.table) as tx:
            return [lease_of(row) for row in tx.pass_gate(lease.lease_id)]

    def wait_gate(self, lease: Lease, timeout: float | None = None, safety_poll: float = 5.0) -> float:
        """Hold ``lease``'s commit until its gate opens; the seconds it waited. Woken when a
        lease on the table is let go, and at the earliest expiry of what it waits for (a holder
        that died lets its lease lapse: the gate opens then). ``GateTimeout`` after ``timeout``."""
        if timeout is not None:
            timeout = checked_seconds("gate timeout", timeout, zero_ok=True, at_most=7 * 86400.0)
        safety_poll = checked_seconds("safety_poll", safety_poll)
        started = time.monotonic()
        with self.watch(lease.table) as watch:
            while True:
                watch.clear()  # before asking: a release committed after this wakes us
                awaited = self.gate(lease)
                waited = time.monotonic() - started
                if not awaited:
                    return waited
                if timeout is not None and waited >= timeout:
                    raise GateTimeout(lease, awaited, waited, timeout)
                lapse = min(other.expires.timestamp() for other in awaited) - time.time() + 0.05
                pause = min(safety_poll, max(lapse, 0.25))  # clocks may differ: never spin
                if timeout is not None:
                    pause = min(pause, max(timeout - waited, 0.0))
                watch.wait(pause)

    # -- the fence a commit carries ---------------------------------------------------------

    @_translated
    def commit_fence(self, lease: Lease) -> CommitFence:
        """What ``lease``'s write must fence out (``core.fencing``): the lapsed leases of the
        table (remembered for ``LAPSED_MEMORY``) whose claims conflict with it, and the highest
        of their fencing tokens. Asked before the write reads the table, and after its gate."""
        with self._locked(lease.table) as tx:
            rows = tx.lapsed_conflicting(lease.claim, LAPSED_MEMORY)
        fences = tuple(int(r.fence or 0) for r in rows)
        return CommitFence(lease.lease_id, lease.fence, tuple(r.lease_id for r in rows), fences)

    # -- holding and letting go ------------------------------------------------------------

    def _table_of(self, lease: Lease | str) -> tuple[str, str | None]:
        if isinstance(lease, Lease):
            return lease.lease_id, lease.table
        refuse_control_characters("lease id", lease)
        L = schema.leases
        with self.engine.connect() as conn:
            table = conn.execute(sa.select(L.c.table_name).where(L.c.lease_id == lease)).scalar()
        return lease, table

    @_translated
    def release(self, lease: Lease | str) -> bool:
        """Let go of a lease. Idempotent: ``False`` if it was already released or reclaimed."""
        lease_id, table = self._table_of(lease)
        if table is None:
            return False
        with self._locked(table) as tx:
            row = tx.delete_lease(lease_id)
            if row is None:
                return False
            tx.event("release", row, lease_id=lease_id, request_id=row.request_id, pid=row.pid)
        return True

    @_translated
    def heartbeat(self, lease: Lease, ttl: float | None = None) -> Lease:
        """Extend a live lease by its TTL from now; ``LeaseLostError`` if it is gone or expired."""
        L = schema.leases
        ttl = checked_seconds("heartbeat ttl", lease.ttl if ttl is None else ttl)
        sent = time.monotonic()
        with self._locked(lease.table) as tx:
            now = tx.now
            updated = tx.conn.execute(
                L.update()
                .where(L.c.lease_id == lease.lease_id, L.c.expires_at > now)
                .values(heartbeat_at=now, expires_at=now + ttl, ttl=ttl)
            ).rowcount
            if not updated:
                raise LeaseLostError(
                    f"{lease.name()} expired or was released before "
                    "this heartbeat; another writer may hold the footprint now"
                )
            tx.event("heartbeat", RowLike.of(lease), lease_id=lease.lease_id, request_id=lease.request_id,
                     expires_at=now + ttl, pid=lease.holder.pid)
        return dataclasses.replace(
            lease, heartbeat=from_epoch(now), expires=from_epoch(now + ttl), ttl=ttl, valid_until=sent + ttl
        )

    @_translated
    def confirm(self, lease: Lease) -> Lease:
        """The lease as the store holds it now, anchored (``valid_until``) by this round trip;
        ``LeaseLostError`` saying why if it is gone, lapsed, or holds another fence."""
        L = schema.leases
        sent = time.monotonic()
        with self._locked(lease.table) as tx:
            row = tx.conn.execute(sa.select(L).where(L.c.lease_id == lease.lease_id)).first()
            now = tx.now
        if row is None:
            raise LeaseLostError(
                f"{lease.name()} is gone: released, or reclaimed after it lapsed"
            )
        if int(row.fence or 0) != lease.fence:
            raise LeaseLostError(f"{lease.name()} was superseded: the store holds fence {row.fence}")
        if row.expires_at <= now:
            raise LeaseLostError(f"{lease.name()} lapsed at {from_epoch(row.expires_at)} (store clock)")
        return lease_of(row, valid_until=sent + row.expires_at - now)

    @_translated
    def cancel(self, request: LeaseRequest) -> bool:
        """Give up a queue place (a task that stops waiting). Idempotent."""
        Q = schema.queue
        with self._locked(request.table) as tx:
            gone = tx.conn.execute(Q.delete().where(Q.c.request_id == request.request_id)).rowcount
            if gone:
                tx.freed = True  # a later request may have waited behind this one
                tx.request_event("cancel", request)
        return bool(gone)

    @_translated
    def reclaim_expired(self) -> int:
        """Reclaim expired leases and queue places on every table; the number of leases."""
        L, Q = schema.leases, schema.queue
        with self.engine.connect() as conn:
            now = time.time()
            tables = set(conn.execute(sa.select(L.c.table_name).where(L.c.expires_at <= now)).scalars())
            tables |= set(conn.execute(sa.select(Q.c.table_name).where(Q.c.expires_at <= now)).scalars())
        total = 0
        for table in sorted(tables):
            with self._locked(table) as tx:
                total += tx.reclaim()
        return total

    # -- reading ---------------------------------------------------------------------------

    @_translated
    def now(self) -> float:
        with self._locked("occflow:clock") as tx:
            return tx.now

    @_translated
    def leases(self, table: str | None = None, include_expired: bool = False) -> list[Lease]:
        L = schema.leases
        query = sa.select(L).order_by(L.c.table_name, L.c.acquired_at)
        if table is not None:
            refuse_control_characters("table", table)
            query = query.where(L.c.table_name == table)
        if not include_expired:
            query = query.where(L.c.expires_at > self.now())
        with self.engine.connect() as conn:
            return [lease_of(r) for r in conn.execute(query)]

    def blocking_leases(self, request: LeaseRequest) -> list[Lease]:
        """Live leases (other than the request's own) that block ``request``; only reads."""
        mine = request.claim
        return [
            lease for lease in self.leases(request.table)
            if lease.request_id != request.request_id and lease.claim.blocks(mine)
        ]

    @_translated
    def waiting(self, table: str | None = None) -> list[dict[str, Any]]:
        """Queue places in serving order."""
        Q = schema.queue
        query = sa.select(Q).order_by(Q.c.table_name, Q.c.queue_key, Q.c.enqueued_at)
        if table is not None:
            refuse_control_characters("table", table)
            query = query.where(Q.c.table_name == table)
        with self.engine.connect() as conn:
            return [
                {
                    "request_id": r.request_id,
                    "table": r.table_name,
                    "partitions": load_keys(r.partitions),
                    "operation": r.operation,
                    "profile": r.profile,
                    "holder": holder_of(r),
                    "enqueued": from_epoch(r.enqueued_at),
                    "expires": from_epoch(r.expires_at),
                }
                for r in conn.execute(query)
            ]

    @_translated
    def history_events(self, table: str | None = None) -> list[Mapping[str, Any]]:
        """The recorded events in decision order. Each names the task instance it is about
        (``dag_id``, ``task_id``, ``run_id``, ``try_number``), ``None`` where that is unknown:
        an anonymous holder, or an event recorded before the store kept holders (such an
        event cannot be attributed to a DAG; show it to admins only)."""
        E = schema.events
        query = sa.select(E).order_by(E.c.seq)
        if table is not None:
            refuse_control_characters("table", table)
            query = query.where(E.c.table_name == table)
        with self.engine.connect() as conn:
            return [_attributed(dict(r._mapping)) for r in conn.execute(query)]


def _attributed(event: dict[str, Any]) -> dict[str, Any]:
    """An event with ``None`` for a holder field it does not know ("" is an anonymous holder)."""
    for name in ("dag_id", "task_id", "run_id"):
        event[name] = event.get(name) or None
    if not event.get("dag_id"):
        event["try_number"] = None
    return event
