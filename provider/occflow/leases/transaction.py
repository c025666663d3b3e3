"""Inside one decision: the transaction that holds a table's lock, and what it reads and writes.

``LeaseStore`` opens a ``TableTransaction`` (``LeaseStore._locked``) for every call that
changes a table's leases or queue; this module is what happens inside it: reclaiming lapsed
leases, finding the leases that can overlap a request, applying the rules for other tries of
one task instance (``tries``), queueing, granting with the next fencing token, and recording
each event when the store keeps a history.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..core.admission_rule import Blocked, Claim, Durations, Running, Waiting, closes_cycle, rule
from . import schema
from .history import PastDurations
from .model import Blocker, Lease, LeaseRequest
from .rows import claim_of, columns_of, dump_keys, granted_lease, holder_of, lease_rows, load_keys, queue_row
from .tries import rule_on_tries

#: The holder's fields every event records (``schema.events``), copied from the row it is about.
HOLDER_FIELDS = ("dag_id", "task_id", "run_id", "try_number")

#: A place in a table's queue: (queue key = arrival minus head start, arrival, request id).
Place = tuple[float, float, str]


@dataclass
class LeaseRuling:
    """The core ruling (``core.admission_rule.rule``) in the store's terms: the ``Blocker``\\ s
    that keep the request waiting (a list: the store adds the task's earlier tries to it), the
    live leases its commit must follow (``awaits``) and those whose commits must follow its own
    (``holds``)."""

    blockers: list[Blocker]
    awaits: list[str]
    holds: list[str]


@dataclass(frozen=True)
class Estimates:
    """The duration-aware rule's inputs in the store: the rule's ``Durations``, the store's
    clock, and an estimate in seconds per lease id and request id (``TableTransaction.estimates``;
    a missing id is unknown)."""

    durations: Durations
    now: float
    seconds: Mapping[str, float]


def blockers_of(
    request: LeaseRequest, live: Sequence[Any], waiting: Sequence[Any], place: Place, *, order_aware: bool = False,
    estimates: Estimates | None = None,
) -> LeaseRuling:
    """The live leases and the waiting requests ahead of ``place`` that block ``request``, by
    the one admission rule (``core.admission_rule.rule``; its cycle check is ``without_cycles``,
    which reads the table's gates). Order-aware only for a request that holds its commit at the
    gate. ``estimates``: the rule's duration-aware choices (None: duration-blind); then the
    requests queued behind ``place`` are handed to the rule too, as its skip of a longer request
    that arrived together runs both ways only if it sees every request that arrived together."""
    if estimates is None:
        ahead = [row for row in waiting
                 if row.request_id != request.request_id and (row.queue_key, row.enqueued_at, row.request_id) < place]
        ruling = rule(
            claim_of_request(request),
            [Running(row.lease_id, claim_of(row), bool(row.commit_gate), row.gate_reached_at is not None)
             for row in live],
            [Waiting(row.request_id, claim_of(row), bool(row.commit_gate)) for row in ahead],
            commit_gate=order_aware and request.commit_gate,
        )
        return LeaseRuling(_blockers(ruling.blocked_by, live, ahead), list(ruling.awaits), list(ruling.holds))
    seconds, durations = estimates.seconds, estimates.durations
    mine = seconds.get(request.request_id)
    # Ahead: before its place, or behind it but arrived together and estimated shorter.
    ahead = [row for row in waiting if row.request_id != request.request_id and (
        (row.queue_key, row.enqueued_at, row.request_id) < place
        or durations.goes_first(row.enqueued_at, seconds.get(row.request_id), place[1], mine))]
    ruling = rule(
        claim_of_request(request),
        [Running(row.lease_id, claim_of(row), bool(row.commit_gate), row.gate_reached_at is not None,
                 None if (length := seconds.get(row.lease_id)) is None
                 else max(0.0, row.acquired_at + length - estimates.now), length)
         for row in live],
        [Waiting(row.request_id, claim_of(row), bool(row.commit_gate), row.enqueued_at, seconds.get(row.request_id))
         for row in ahead],
        commit_gate=order_aware and request.commit_gate,
        durations=durations, estimate=mine, arrival=place[1],
    )
    return LeaseRuling(_blockers(ruling.blocked_by, live, ahead), list(ruling.awaits), list(ruling.holds))


def claim_of_request(request: LeaseRequest) -> Claim:
    return Claim(request.profile, request.operation, request.partitions)


def _blockers(blocked: Sequence[Blocked[str]], live: Sequence[Any], ahead: Sequence[Any]) -> list[Blocker]:
    """The rule's blocked-by keys as the store's ``Blocker``\\ s, naming each row's holder."""
    leases = {row.lease_id: row for row in live}
    requests = {row.request_id: row for row in ahead}
    found = []
    for b in blocked:
        row = requests[b.key] if b.waiting else leases[b.key]
        kind = "waiting" if b.waiting else "lease"
        found.append(Blocker(kind, b.key, row.operation, load_keys(row.partitions), holder_of(row)))
    return found


@dataclass
class TableTransaction:
    """An open transaction holding ``table``'s decision lock; ``now`` is the store's clock."""

    conn: Connection
    table: str
    now: float
    history: bool
    #: Whether this transaction let go of part of the footprint (a lease or a queue place):
    #: the store then wakes the table's waiters as it commits (``wakeup.announce``).
    freed: bool = False

    def event(self, kind: str, row: Any, **fields: Any) -> None:
        """Record ``kind`` for a lease or queue row (or a request: anything with the fields),
        with the holder it is about: every event is attributed to its task instance."""
        if not self.history:
            return
        self.conn.execute(
            schema.events.insert().values(
                at=self.now, kind=kind, table_name=self.table,
                operation=row.operation, profile=row.profile, partitions=row.partitions,
                **{name: getattr(row, name, None) for name in HOLDER_FIELDS}, **fields,
            )
        )

    def request_event(self, kind: str, request: LeaseRequest, **fields: Any) -> None:
        self.event(kind, RowLike.of(request), request_id=request.request_id, pid=request.holder.pid, **fields)

    def reclaim(self) -> int:
        """Drop expired leases and queue places of the table; their holders stopped beating."""
        L, K, Q = schema.leases, schema.lease_keys, schema.queue
        expired = self.conn.execute(
            L.delete()
            .where(L.c.table_name == self.table, L.c.expires_at <= self.now)
            .returning(L.c.lease_id, L.c.request_id, L.c.operation, L.c.profile, L.c.partitions, L.c.pid,
                       L.c.fence, *(L.c[name] for name in HOLDER_FIELDS))
        ).all()
        if expired:
            self.freed = True
            ended = [r.lease_id for r in expired]
            self.conn.execute(K.delete().where(K.c.lease_id.in_(ended)))
            self.conn.execute(schema.gates.delete().where(schema.gates.c.lease_id.in_(ended)))
            # Its holder may be stalled, not dead: the writes that take its footprint fence it out.
            self.conn.execute(schema.lapsed.insert(), [
                {"lease_id": r.lease_id, "table_name": self.table, "partitions": r.partitions,
                 "operation": r.operation, "profile": r.profile, "fence": r.fence or 0, "lapsed_at": self.now}
                for r in expired
            ])
            for r in expired:
                self.event("expire", r, lease_id=r.lease_id, request_id=r.request_id, pid=r.pid)
        gone = self.conn.execute(
            Q.delete()
            .where(Q.c.table_name == self.table, Q.c.expires_at <= self.now)
            .returning(Q.c.request_id, Q.c.operation, Q.c.profile, Q.c.partitions, Q.c.pid,
                       *(Q.c[name] for name in HOLDER_FIELDS))
        ).all()
        for place in gone:
            self.freed = True
            self.event("dequeue", place, request_id=place.request_id, pid=place.pid)
        return len(expired)

    def lapsed_conflicting(self, claim: Claim, memory: float) -> list[Any]:
        """The lapsed leases of the table, remembered for ``memory`` seconds, whose claims
        conflict with ``claim`` either way (their stalled holders must not commit beside it);
        older memories are forgotten here."""
        Z = schema.lapsed
        self.conn.execute(Z.delete().where(Z.c.table_name == self.table, Z.c.lapsed_at < self.now - memory))
        rows = self.conn.execute(sa.select(Z).where(Z.c.table_name == self.table).order_by(Z.c.fence)).all()
        found = []
        for row in rows:
            if claim.blocks(claim_of(row)):  # the rule's ``blocks`` is symmetric
                found.append(row)
        return found

    def candidate_leases(self, request: LeaseRequest) -> Sequence[Any]:
        """Leases on the table (live or lapsed) that can overlap the request's footprint, and
        those of the request's own task instance (its other tries; ``tries``).

        Plain index lookups (key rows, then leases by id) rather than one join: the plan
        stays an index scan whatever the planner's statistics say about a freshly filled table.
        """
        L, K = schema.leases, schema.lease_keys
        if request.partitions is None or request.profile.reads_whole_table:
            # On a profile where some operations' commits read every file (delta-rs appends),
            # a lease on any partition may block or be blocked (``Claim.blocks``).
            return self.conn.execute(sa.select(L).where(L.c.table_name == self.table)).all()
        on_table = K.c.table_name == self.table
        sigs = sorted({columns_of(k) for k in request.partitions})
        if len(sigs) > 1 or "~" in sigs[0]:
            # A key over one of the request's column sets may overlap a request key over
            # another (ds=1 and country=NL/ds=1), and a range overlaps keys other than itself
            # over its own columns: every key of the table can overlap.
            lookups = [sa.select(K.c.lease_id).where(on_table)]
        else:
            # One column set of plain values: a key over it overlaps only if it is one of the
            # request's keys; whole-table leases ("*") and keys over other column sets (ranges
            # over these columns among them: "ds~") may overlap too.
            lookups = [
                sa.select(K.c.lease_id).where(on_table, K.c.partition_key.in_(sorted(request.partitions))),
                sa.select(K.c.lease_id).where(on_table, K.c.columns < sigs[0]),
                sa.select(K.c.lease_id).where(on_table, K.c.columns > sigs[0]),
            ]
        holder = request.holder
        if holder.dag_id and holder.task_id and holder.run_id:
            lookups.append(sa.select(L.c.lease_id).where(
                L.c.table_name == self.table, L.c.dag_id == holder.dag_id,
                L.c.task_id == holder.task_id, L.c.run_id == holder.run_id,
            ))
        query = lookups[0] if len(lookups) == 1 else sa.union_all(*lookups)
        ids = sorted(set(self.conn.execute(query).scalars()))
        if not ids:
            return []
        return self.conn.execute(sa.select(L).where(L.c.lease_id.in_(ids))).all()

    def live_and_waiting(self, request: LeaseRequest) -> tuple[list[Any], list[Any]]:
        """The live leases that can overlap the request, and every live place in its table's queue."""
        Q = schema.queue
        candidates = self.candidate_leases(request)
        # Every place in this table's queue, ours included.
        queued = self.conn.execute(sa.select(Q).where(Q.c.table_name == self.table)).all()
        # Lapsed leases and queue places are dead holders and waiters: reclaim them when a
        # decision meets them (``reclaim_expired`` sweeps the rest).
        if any(r.expires_at <= self.now for r in candidates) or any(r.expires_at <= self.now for r in queued):
            self.reclaim()
        return ([r for r in candidates if r.expires_at > self.now],
                [r for r in queued if r.expires_at > self.now])

    def settle_tries(
        self, request: LeaseRequest, live: list[Any], waiting: list[Any]
    ) -> tuple[list[Any], list[Any], list[Blocker]]:
        """Apply ``tries``' rules: drop earlier tries' queue places; the waiting rows left, and
        the earlier tries' live leases as blockers (lapsed ones were reclaimed already)."""
        ruling = rule_on_tries(request, live, waiting)
        for row in ruling.dropped:
            self.freed = True
            self.conn.execute(schema.queue.delete().where(schema.queue.c.request_id == row.request_id))
            self.event("dequeue", row, request_id=row.request_id, pid=row.pid)
        dropped = {r.request_id for r in ruling.dropped}
        blockers = [
            Blocker("lease", r.lease_id, r.operation, load_keys(r.partitions), holder_of(r)) for r in ruling.blocking
        ]
        return live, [r for r in waiting if r.request_id not in dropped], blockers

    def delete_lease(self, lease_id: str) -> Any:
        """Delete a lease and its key rows; the deleted lease row, or ``None``."""
        L, K = schema.leases, schema.lease_keys
        row = self.conn.execute(
            L.delete()
            .where(L.c.lease_id == lease_id)
            .returning(L.c.request_id, L.c.operation, L.c.profile, L.c.partitions, L.c.pid,
                       *(L.c[name] for name in HOLDER_FIELDS))
        ).first()
        if row is not None:
            self.freed = True
            self.conn.execute(K.delete().where(K.c.lease_id == lease_id))
            self.conn.execute(schema.gates.delete().where(schema.gates.c.lease_id == lease_id))
        return row

    def wait(self, request: LeaseRequest, queue_key: float, *, queued: bool) -> None:
        """Give the request its place in the queue, or keep the place it has."""
        Q = schema.queue
        if queued:
            self.conn.execute(
                Q.update()
                .where(Q.c.request_id == request.request_id)
                .values(seen_at=self.now, expires_at=self.now + request.queue_ttl)
            )
            return
        self.conn.execute(Q.insert().values(**queue_row(request, queue_key, self.now)))
        self.request_event("enqueue", request)

    def next_fence(self) -> int:
        """The table's next fencing token; only decisions on the table (under its lock) bump it."""
        F = schema.fences
        fence = self.conn.execute(
            F.update().where(F.c.table_name == self.table).values(last_fence=F.c.last_fence + 1)
            .returning(F.c.last_fence)
        ).scalar()
        if fence is None:
            fence = 1
            self.conn.execute(F.insert().values(table_name=self.table, last_fence=fence))
        return int(fence)

    def grant(
        self, request: LeaseRequest, *, queued: bool, sent: float, awaits: Sequence[str] = (), holds: Sequence[str] = ()
    ) -> Lease:
        """Write the lease (and leave the queue), and the gates: the leases its commit waits
        for, and the leases whose commits now wait for it. It exists once the transaction
        commits."""
        L, K, Q = schema.leases, schema.lease_keys, schema.queue
        lease_id = uuid.uuid4().hex
        fence = self.next_fence()
        lease_row, key_rows = lease_rows(request, lease_id, self.now, fence)
        self.conn.execute(L.insert().values(**lease_row))
        self.conn.execute(K.insert(), key_rows)
        edges = [(lease_id, other) for other in sorted(awaits)] + [(other, lease_id) for other in sorted(holds)]
        if edges:
            self.conn.execute(schema.gates.insert(), [
                {"lease_id": waiter, "awaits_lease_id": awaited, "table_name": self.table} for waiter, awaited in edges
            ])
        if queued:
            self.conn.execute(Q.delete().where(Q.c.request_id == request.request_id))
        self.request_event("grant", request, lease_id=lease_id, expires_at=self.now + request.first_ttl, fence=fence,
                           awaits=json.dumps(sorted(awaits)) if awaits else None,
                           holds=json.dumps(sorted(holds)) if holds else None)
        return granted_lease(request, lease_id, self.now, fence, sent, frozenset(awaits))

    def estimates(self, request: LeaseRequest, live: Sequence[Any], waiting: Sequence[Any],
                  durations: Durations) -> Estimates:
        """Each write's estimate from the table's recorded history (``history.PastDurations``:
        the same task's past leases, else the operation's); without a history every estimate is
        unknown and the rule uses its default (which holds no gate back: see ``rule``)."""
        seconds: dict[str, float] = {}
        if self.history:
            E = schema.events
            rows = self.conn.execute(
                sa.select(E.c.seq, E.c.at, E.c.kind, E.c.lease_id, E.c.operation, E.c.dag_id, E.c.task_id)
                .where(E.c.table_name == self.table, E.c.kind.in_(("grant", "release")))
                .order_by(E.c.seq.desc()).limit(2000)
            ).mappings().all()
            past = PastDurations.of([dict(r) for r in rows])
            for row in live:
                if (found := past.estimate(row.dag_id, row.task_id, row.operation)) is not None:
                    seconds[row.lease_id] = found
            for row in [*waiting, request]:
                holder = getattr(row, "holder", row)
                operation = row.operation if isinstance(row.operation, str) else row.operation.value
                if (found := past.estimate(holder.dag_id, holder.task_id, operation)) is not None:
                    seconds[row.request_id] = found
        return Estimates(durations, self.now, seconds)

    def gate_edges(self) -> dict[str, set[str]]:
        """The table's gates: waiter -> the leases it awaits."""
        G = schema.gates
        edges: dict[str, set[str]] = {}
        for waiter, awaited in self.conn.execute(
            sa.select(G.c.lease_id, G.c.awaits_lease_id).where(G.c.table_name == self.table)
        ):
            edges.setdefault(waiter, set()).add(awaited)
        return edges

    def without_cycles(self, ruling: LeaseRuling, live: Sequence[Any]) -> LeaseRuling:
        """``ruling``, unless holding its ``holds`` would close a cycle of commits waiting for
        each other (``core.admission_rule.closes_cycle`` over the table's gates): then those
        block instead. Gates then stay acyclic, so some writer always commits."""
        if not (ruling.awaits and ruling.holds) or not closes_cycle(self.gate_edges(), ruling.awaits, ruling.holds):
            return ruling
        held = set(ruling.holds)
        blockers = _blockers([Blocked(r.lease_id, False, "cycle") for r in live if r.lease_id in held], live, [])
        return LeaseRuling(ruling.blockers + blockers, ruling.awaits, [])

    def pass_gate(self, lease_id: str) -> list[Any]:
        """The live leases ``lease_id``'s commit still waits for. The first call marks the
        writer as at its gate (no newcomer may hold it back from then on); none left: its gate
        opens for good (its rows go, and the history records ``pass``)."""
        G, L = schema.gates, schema.leases
        self.conn.execute(
            L.update().where(L.c.lease_id == lease_id, L.c.gate_reached_at.is_(None)).values(gate_reached_at=self.now)
        )
        awaited = list(self.conn.execute(sa.select(G.c.awaits_lease_id).where(G.c.lease_id == lease_id)).scalars())
        if not awaited:
            return []
        live = self.conn.execute(
            sa.select(L).where(L.c.lease_id.in_(awaited), L.c.expires_at > self.now).order_by(L.c.fence)
        ).all()
        if not live:
            self.conn.execute(G.delete().where(G.c.lease_id == lease_id))
            mine = self.conn.execute(sa.select(L).where(L.c.lease_id == lease_id)).first()
            if mine is not None:
                self.event("pass", mine, lease_id=lease_id, request_id=mine.request_id, pid=mine.pid,
                           awaits=json.dumps(sorted(awaited)))
        return list(live)


@dataclass(frozen=True)
class RowLike:
    """The fields an event copies from a lease or queue row, for a request not yet stored."""

    operation: str
    profile: str
    partitions: str | None
    dag_id: str | None = None
    task_id: str | None = None
    run_id: str | None = None
    try_number: int | None = None

    @classmethod
    def of(cls, request: LeaseRequest | Lease) -> RowLike:
        profile = request.profile if isinstance(request.profile, str) else request.profile.name
        h = request.holder
        return cls(request.operation.value, profile, dump_keys(request.partitions),
                   h.dag_id, h.task_id, h.run_id, h.try_number)
