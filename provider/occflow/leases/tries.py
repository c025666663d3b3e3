"""Tries of one task instance: an earlier try's live lease holds its retry off; a stale try is refused.

Airflow runs try 2 of a task instance after try 1 failed. If try 1 still runs (a zombie the
scheduler gave up on, a stopped process, a worker cut off from Airflow), try 2 must not write
beside it. A retry may only go ahead once it is proven that the earlier try cannot write any
more, and the store holds only one such proof: the earlier try's lease is gone, because it was
released, or because its heartbeats stopped and it lapsed (the keeper of a lease that lapsed
refuses its commit: ``LeaseKeeper.ensure_live``). Nothing a retry can see of another process
proves it dead: workers in separate PID namespaces (containers, Kubernetes pods) may share a
host name, and a pid that does not exist here may be a live try there. So the rules, applied by
the store inside the decision for the newer try, are:

- an earlier try's live lease blocks the newer try whatever the matrix says, until it is
  released or lapses (a killed try's retry waits out at most the lease's TTL; the next decision
  reclaims it like any lapsed lease);
- an earlier try's place in the queue is dropped (that try is not waiting any more);
- a request from an earlier try than a live lease or a waiting request of a later try is
  refused with ``LeaseLostError``: a stale try must not write.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .model import LeaseLostError, LeaseRequest
from .rows import holder_of


@dataclass
class TryRuling:
    """What the other tries of the request's task instance mean for its decision."""

    blocking: list[Any] = field(default_factory=list)  # live lease rows of earlier tries
    dropped: list[Any] = field(default_factory=list)  # queue rows of earlier tries


def rule_on_tries(request: LeaseRequest, live: Sequence[Any], waiting: Sequence[Any]) -> TryRuling:
    """Sort the live leases and queue places of the request's other tries; refuse a stale try."""
    mine = request.holder
    ruling = TryRuling()
    for kind, rows in (("lease", live), ("waiting request", waiting)):
        for row in rows:
            theirs = holder_of(row)
            if row.request_id == request.request_id or not mine.same_task_instance(theirs):
                continue
            if theirs.try_number > mine.try_number:
                raise LeaseLostError(
                    f"try {mine.try_number} of {mine.describe()} is stale: try {theirs.try_number} "
                    f"({theirs.describe()}) already has a {kind} on {request.table}; a stale try "
                    "must not write"
                )
            if theirs.try_number == mine.try_number:
                continue  # the same try asking again with a new request: the usual rules
            if kind == "waiting request":
                ruling.dropped.append(row)
            else:
                # Live by its heartbeats: it may still write, wherever it runs.
                ruling.blocking.append(row)
    return ruling
