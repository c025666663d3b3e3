"""The lease store: admission decided and recorded in one atomic step, on SQLite or PostgreSQL.

One decision for table T runs in one database transaction that first takes T's lock:
``pg_advisory_xact_lock`` on PostgreSQL (held until commit, so decisions on T are serial and
decisions on other tables run in parallel), ``BEGIN IMMEDIATE`` on SQLite (the database's
single writer lock). Inside it: reclaim expired leases and queue places of T, read the live
leases and the waiting requests that overlap the request, decide, and write the lease (or the
queue place) and the event. A ``Lease`` is returned only after the commit succeeded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ..core.errors import OccflowError
from ..core.operations import Operation
from ..core.profiles import get_profile
from . import schema
from .config import make_engine
from .model import (
    WHOLE_TABLE,
    AdmissionPriorities,
    Holder,
    Lease,
    LeaseLostError,
    LeaseRequest,
    footprints_overlap,
    from_epoch,
    operations_conflict,
    parse_partition_key,
)


class AdmissionTimeout(OccflowError, TimeoutError):
    """``acquire`` gave up waiting for a lease."""


@dataclass(frozen=True)
class Blocker:
    """Why a request was not admitted: a live lease or an earlier waiting request."""

    kind: str  # "lease" or "waiting"
    ident: str
    operation: str
    partitions: frozenset[str] | None
    holder: Holder

    def describe(self) -> str:
        where = "whole table" if self.partitions is None else ", ".join(sorted(self.partitions))
        what = "live lease" if self.kind == "lease" else "earlier waiting request"
        return f"{what} {self.ident[:8]}: {self.operation} [{where}] by {self.holder.describe()}"


@dataclass(frozen=True)
class Admission:
    """The outcome of one decision: the lease, or what the request waits behind."""

    lease: Lease | None
    blockers: tuple[Blocker, ...] = ()

    @property
    def granted(self) -> bool:
        return self.lease is not None


def _dump_keys(keys: frozenset[str] | None) -> str | None:
    return None if keys is None else json.dumps(sorted(keys))


def _load_keys(text: str | None) -> frozenset[str] | None:
    return None if text is None else frozenset(json.loads(text))


def _columns_of(key: str) -> str:
    return ",".join(sorted(parse_partition_key(key)))


def _holder_values(holder: Holder) -> dict[str, Any]:
    return {
        "dag_id": holder.dag_id,
        "task_id": holder.task_id,
        "run_id": holder.run_id,
        "try_number": holder.try_number,
        "host": holder.host,
        "pid": holder.pid,
    }


def _holder_of(row: Any) -> Holder:
    return Holder(row.dag_id, row.task_id, row.run_id, row.try_number, row.host, row.pid)


def _lock_key(table: str) -> int:
    """A stable signed 64-bit advisory lock key per table (a collision only serialises more)."""
    return int.from_bytes(hashlib.blake2b(table.encode(), digest_size=8).digest(), "big", signed=True)


def lease_rows(request: LeaseRequest, lease_id: str, now: float) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The rows a grant writes: the lease, and one key row per partition ("*" = whole table)."""
    lease_row = {
        "lease_id": lease_id,
        "request_id": request.request_id,
        "table_name": request.table,
        "partitions": _dump_keys(request.partitions),
        "operation": request.operation.value,
        "profile": request.profile.name,
        **_holder_values(request.holder),
        "acquired_at": now,
        "heartbeat_at": now,
        "expires_at": now + request.ttl,
        "ttl": request.ttl,
    }
    keys = (
        [(WHOLE_TABLE, WHOLE_TABLE)]
        if request.partitions is None
        else [(k, _columns_of(k)) for k in sorted(request.partitions)]
    )
    key_rows = [
        {"lease_id": lease_id, "table_name": request.table, "partition_key": k, "columns": c} for k, c in keys
    ]
    return lease_row, key_rows


def _lease_of(row: Any) -> Lease:
    return Lease(
        lease_id=row.lease_id,
        request_id=row.request_id,
        table=row.table_name,
        partitions=_load_keys(row.partitions),
        operation=Operation(row.operation),
        profile=row.profile,
        holder=_holder_of(row),
        acquired=from_epoch(row.acquired_at),
        heartbeat=from_epoch(row.heartbeat_at),
        expires=from_epoch(row.expires_at),
        ttl=row.ttl,
    )


class LeaseStore:
    """Leases on table footprints, admitted by the tables' conflict matrices.

    ``history=True`` records every event (grant, release, heartbeat, expiry, queue changes) in
    ``occflow_lease_events`` for audits and the invariant checker; it grows without bound, so
    it is off by default.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        priorities: AdmissionPriorities | None = None,
        history: bool = False,
        create: bool = True,
    ) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self.priorities = priorities or AdmissionPriorities()
        self.history = history
        if create:
            self.create_schema()

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> LeaseStore:
        """A store on a SQLAlchemy URL (``sqlite:///path``, ``postgresql://...``)."""
        return cls(make_engine(url), **kwargs)

    def create_schema(self) -> None:
        if self.dialect == "postgresql":
            # Workers starting together must not race on CREATE TABLE.
            with self.engine.begin() as conn:
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_lock_key("occflow:schema"))))
                schema.metadata.create_all(conn, checkfirst=True)
        else:
            schema.metadata.create_all(self.engine, checkfirst=True)

    def dispose(self) -> None:
        self.engine.dispose()

    # -- the atomic step -------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, table: str) -> Iterator[tuple[Connection, float]]:
        """A transaction holding ``table``'s decision lock, and the store clock's now."""
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
            yield conn, now

    def _event(
        self,
        conn: Connection,
        now: float,
        kind: str,
        table: str,
        operation: str,
        profile: str,
        partitions: str | None,
        lease_id: str | None = None,
        request_id: str | None = None,
        expires_at: float | None = None,
        pid: int = 0,
    ) -> None:
        if not self.history:
            return
        conn.execute(
            schema.events.insert().values(
                at=now,
                kind=kind,
                table_name=table,
                lease_id=lease_id,
                request_id=request_id,
                partitions=partitions,
                operation=operation,
                profile=profile,
                expires_at=expires_at,
                pid=pid,
            )
        )

    def _reclaim(self, conn: Connection, table: str, now: float) -> int:
        """Drop expired leases and queue places of ``table``; their holders stopped beating."""
        L, K, Q = schema.leases, schema.lease_keys, schema.queue
        expired = conn.execute(
            L.delete()
            .where(L.c.table_name == table, L.c.expires_at <= now)
            .returning(L.c.lease_id, L.c.request_id, L.c.operation, L.c.profile, L.c.partitions, L.c.pid)
        ).all()
        if expired:
            conn.execute(K.delete().where(K.c.lease_id.in_([r.lease_id for r in expired])))
            for r in expired:
                self._event(conn, now, "expire", table, r.operation, r.profile, r.partitions,
                            lease_id=r.lease_id, request_id=r.request_id, pid=r.pid)
        gone = conn.execute(
            Q.delete()
            .where(Q.c.table_name == table, Q.c.expires_at <= now)
            .returning(Q.c.request_id, Q.c.operation, Q.c.profile, Q.c.partitions, Q.c.pid)
        ).all()
        for r in gone:
            self._event(conn, now, "dequeue", table, r.operation, r.profile, r.partitions,
                        request_id=r.request_id, pid=r.pid)
        return len(expired)

    def _candidate_leases(self, conn: Connection, request: LeaseRequest, now: float) -> Sequence[Any]:
        """Leases on the table (live or lapsed) that can overlap the request's footprint.

        Two plain index lookups (key rows, then leases by id) rather than one join: the plan
        stays an index scan whatever the planner's statistics say about a freshly filled table.
        """
        L, K = schema.leases, schema.lease_keys
        if request.partitions is None:
            return conn.execute(sa.select(L).where(L.c.table_name == request.table)).all()
        sigs = sorted({_columns_of(k) for k in request.partitions})
        on_table = K.c.table_name == request.table
        # The same keys; whole-table leases ("*") and keys over other column sets may overlap too.
        lookups = [
            sa.select(K.c.lease_id).where(on_table, K.c.partition_key.in_(sorted(request.partitions))),
            sa.select(K.c.lease_id).where(on_table, K.c.columns < sigs[0]),
            sa.select(K.c.lease_id).where(on_table, K.c.columns > sigs[-1]),
        ]
        if len(sigs) > 1:
            lookups.append(sa.select(K.c.lease_id).where(on_table, K.c.columns > sigs[0], K.c.columns < sigs[-1]))
        ids = sorted(set(conn.execute(sa.union_all(*lookups)).scalars()))
        if not ids:
            return []
        return conn.execute(sa.select(L).where(L.c.lease_id.in_(ids))).all()

    def decide(self, request: LeaseRequest) -> Admission:
        """Admit ``request`` or give it (or keep) its place in the queue, atomically."""
        L, K, Q = schema.leases, schema.lease_keys, schema.queue
        profile = request.profile
        with self._locked(request.table) as (conn, now):
            candidates = self._candidate_leases(conn, request, now)
            # Every place in this table's queue, ours included.
            queued = conn.execute(sa.select(Q).where(Q.c.table_name == request.table)).all()
            # Lapsed leases and queue places are dead holders and waiters: reclaim them when a
            # decision meets them (``reclaim_expired`` sweeps the rest).
            if any(r.expires_at <= now for r in candidates) or any(r.expires_at <= now for r in queued):
                self._reclaim(conn, request.table, now)
            live = [r for r in candidates if r.expires_at > now]
            waiting = [r for r in queued if r.expires_at > now]
            # Asking again with a granted request (a poll whose answer was lost) returns its lease;
            # it overlaps its own footprint, so it is among the candidates.
            held = next((r for r in live if r.request_id == request.request_id), None)
            if held is not None:
                return Admission(_lease_of(held))
            blockers: list[Blocker] = []
            for row in live:
                keys = _load_keys(row.partitions)
                if footprints_overlap(keys, request.partitions) and operations_conflict(
                    get_profile(row.profile), Operation(row.operation), profile, request.operation
                ):
                    blockers.append(Blocker("lease", row.lease_id, row.operation, keys, _holder_of(row)))

            own = next((row for row in waiting if row.request_id == request.request_id), None)
            if own is not None:
                place = (own.queue_key, own.enqueued_at, own.request_id)
            else:
                place = (now - self.priorities.head_start(request.operation), now, request.request_id)
            for row in waiting:
                if row is own or (row.queue_key, row.enqueued_at, row.request_id) >= place:
                    continue
                keys = _load_keys(row.partitions)
                if footprints_overlap(keys, request.partitions) and operations_conflict(
                    get_profile(row.profile), Operation(row.operation), profile, request.operation
                ):
                    blockers.append(Blocker("waiting", row.request_id, row.operation, keys, _holder_of(row)))

            parts = _dump_keys(request.partitions)
            if blockers:
                if own is None:
                    conn.execute(
                        Q.insert().values(
                            request_id=request.request_id,
                            table_name=request.table,
                            partitions=parts,
                            operation=request.operation.value,
                            profile=profile.name,
                            **_holder_values(request.holder),
                            queue_key=place[0],
                            enqueued_at=now,
                            seen_at=now,
                            expires_at=now + request.queue_ttl,
                        )
                    )
                    self._event(conn, now, "enqueue", request.table, request.operation.value, profile.name,
                                parts, request_id=request.request_id, pid=request.holder.pid)
                else:
                    conn.execute(
                        Q.update()
                        .where(Q.c.request_id == request.request_id)
                        .values(seen_at=now, expires_at=now + request.queue_ttl)
                    )
                return Admission(None, tuple(blockers))

            lease_id = uuid.uuid4().hex
            expires = now + request.ttl
            lease_row, key_rows = lease_rows(request, lease_id, now)
            conn.execute(L.insert().values(**lease_row))
            conn.execute(K.insert(), key_rows)
            if own is not None:
                conn.execute(Q.delete().where(Q.c.request_id == request.request_id))
            self._event(conn, now, "grant", request.table, request.operation.value, profile.name, parts,
                        lease_id=lease_id, request_id=request.request_id, expires_at=expires,
                        pid=request.holder.pid)
        # Committed: only now does the lease exist for the caller.
        return Admission(
            Lease(
                lease_id=lease_id,
                request_id=request.request_id,
                table=request.table,
                partitions=request.partitions,
                operation=request.operation,
                profile=profile.name,
                holder=request.holder,
                acquired=from_epoch(now),
                heartbeat=from_epoch(now),
                expires=from_epoch(expires),
                ttl=request.ttl,
            )
        )

    def try_acquire(self, request: LeaseRequest) -> Lease | None:
        """The lease if admitted now; otherwise ``None`` and the request keeps its queue place."""
        return self.decide(request).lease

    def acquire(
        self, request: LeaseRequest, timeout: float | None = None, poll: float = 1.0
    ) -> Lease:
        """Wait (polling every ``poll`` seconds) until admitted; gives up after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            admission = self.decide(request)
            if admission.lease is not None:
                return admission.lease
            if deadline is not None and time.monotonic() >= deadline:
                self.cancel(request)
                waits = "; ".join(b.describe() for b in admission.blockers)
                raise AdmissionTimeout(f"not admitted within {timeout}s: {request.describe()} waits for {waits}")
            time.sleep(poll)

    # -- holding and letting go ------------------------------------------------------------

    def _table_of(self, lease: Lease | str) -> tuple[str, str | None]:
        if isinstance(lease, Lease):
            return lease.lease_id, lease.table
        L = schema.leases
        with self.engine.connect() as conn:
            table = conn.execute(sa.select(L.c.table_name).where(L.c.lease_id == lease)).scalar()
        return lease, table

    def release(self, lease: Lease | str) -> bool:
        """Let go of a lease. Idempotent: ``False`` if it was already released or reclaimed."""
        lease_id, table = self._table_of(lease)
        if table is None:
            return False
        L, K = schema.leases, schema.lease_keys
        with self._locked(table) as (conn, now):
            row = conn.execute(
                L.delete()
                .where(L.c.lease_id == lease_id)
                .returning(L.c.request_id, L.c.operation, L.c.profile, L.c.partitions, L.c.pid)
            ).first()
            if row is None:
                return False
            conn.execute(K.delete().where(K.c.lease_id == lease_id))
            self._event(conn, now, "release", table, row.operation, row.profile, row.partitions,
                        lease_id=lease_id, request_id=row.request_id, pid=row.pid)
        return True

    def heartbeat(self, lease: Lease, ttl: float | None = None) -> Lease:
        """Extend a live lease by its TTL from now; ``LeaseLostError`` if it already expired."""
        L = schema.leases
        ttl = lease.ttl if ttl is None else ttl
        with self._locked(lease.table) as (conn, now):
            updated = conn.execute(
                L.update()
                .where(L.c.lease_id == lease.lease_id, L.c.expires_at > now)
                .values(heartbeat_at=now, expires_at=now + ttl, ttl=ttl)
            ).rowcount
            if not updated:
                raise LeaseLostError(
                    f"lease {lease.lease_id} ({lease.describe()}) expired or was released before this "
                    "heartbeat; another writer may hold the footprint now"
                )
            self._event(conn, now, "heartbeat", lease.table, lease.operation.value, lease.profile,
                        _dump_keys(lease.partitions), lease_id=lease.lease_id,
                        request_id=lease.request_id, expires_at=now + ttl, pid=lease.holder.pid)
        return dataclasses.replace(lease, heartbeat=from_epoch(now), expires=from_epoch(now + ttl), ttl=ttl)

    def cancel(self, request: LeaseRequest) -> bool:
        """Give up a queue place (a task that stops waiting). Idempotent."""
        Q = schema.queue
        with self._locked(request.table) as (conn, now):
            gone = conn.execute(Q.delete().where(Q.c.request_id == request.request_id)).rowcount
            if gone:
                self._event(conn, now, "cancel", request.table, request.operation.value, request.profile.name,
                            _dump_keys(request.partitions), request_id=request.request_id,
                            pid=request.holder.pid)
        return bool(gone)

    def reclaim_expired(self) -> int:
        """Reclaim expired leases and queue places on every table; the number of leases."""
        L, Q = schema.leases, schema.queue
        with self.engine.connect() as conn:
            now = time.time()
            tables = set(conn.execute(sa.select(L.c.table_name).where(L.c.expires_at <= now)).scalars())
            tables |= set(conn.execute(sa.select(Q.c.table_name).where(Q.c.expires_at <= now)).scalars())
        total = 0
        for table in sorted(tables):
            with self._locked(table) as (conn, now):
                total += self._reclaim(conn, table, now)
        return total

    # -- reading ---------------------------------------------------------------------------

    def now(self) -> float:
        with self._locked("occflow:clock") as (_conn, now):
            return now

    def leases(self, table: str | None = None, include_expired: bool = False) -> list[Lease]:
        L = schema.leases
        query = sa.select(L).order_by(L.c.table_name, L.c.acquired_at)
        if table is not None:
            query = query.where(L.c.table_name == table)
        if not include_expired:
            query = query.where(L.c.expires_at > self.now())
        with self.engine.connect() as conn:
            return [_lease_of(r) for r in conn.execute(query)]

    def waiting(self, table: str | None = None) -> list[dict[str, Any]]:
        """Queue places in serving order."""
        Q = schema.queue
        query = sa.select(Q).order_by(Q.c.table_name, Q.c.queue_key, Q.c.enqueued_at)
        if table is not None:
            query = query.where(Q.c.table_name == table)
        with self.engine.connect() as conn:
            return [
                {
                    "request_id": r.request_id,
                    "table": r.table_name,
                    "partitions": _load_keys(r.partitions),
                    "operation": r.operation,
                    "profile": r.profile,
                    "holder": _holder_of(r),
                    "enqueued": from_epoch(r.enqueued_at),
                    "expires": from_epoch(r.expires_at),
                }
                for r in conn.execute(query)
            ]

    def history_events(self, table: str | None = None) -> list[Mapping[str, Any]]:
        E = schema.events
        query = sa.select(E).order_by(E.c.seq)
        if table is not None:
            query = query.where(E.c.table_name == table)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]


class LeaseKeeper:
    """Heartbeats a lease from a background thread while a job runs.

    ``with LeaseKeeper(store, lease): run()``; ``lost`` is set if a heartbeat came too late.
    """

    def __init__(self, store: LeaseStore, lease: Lease, interval: float | None = None) -> None:
        self.store = store
        self.lease = lease
        # A third of the TTL: two heartbeats may fail (a slow database) before the lease lapses.
        self.interval = interval if interval is not None else max(lease.ttl / 3.0, 0.05)
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"occflow-lease-{lease.lease_id[:8]}", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.lease = self.store.heartbeat(self.lease)
            except LeaseLostError:
                self.lost.set()
                return
            except sa.exc.OperationalError:
                continue  # the database blinked; the next beat may still be in time

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
