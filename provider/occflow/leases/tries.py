"""Tries of one task instance: a retry takes over its own dead try's lease, a stale try is refused.

Airflow runs try 2 of a task instance after try 1 failed. If try 1 died holding a lease (the
worker was killed), try 2 would otherwise wait out the dead lease's TTL; if try 1 still runs
(a zombie the scheduler gave up on), try 2 must not write beside it. The rules, applied by the
store inside the decision for the newer try:

- an earlier try's live lease whose process is gone (same host, no such pid) is taken over at
  once: deleted, and the newer try is decided as if it had never existed;
- an earlier try's live lease held by a running process, or on another host (where we cannot
  tell), blocks the newer try whatever the matrix says, until it is released or lapses;
- an earlier try's place in the queue is dropped (that try is not waiting any more);
- a request from an earlier try than a live lease or a waiting request of a later try is
  refused with ``LeaseLostError``: a stale try must not write.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .model import LeaseLostError, LeaseRequest
from .rows import holder_of


def process_gone(host: str, pid: int) -> bool:
    """Whether ``pid`` on ``host`` has certainly exited: only knowable on this host."""
    if host != socket.gethostname() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # it exists, under another user
    return False


@dataclass
class TryRuling:
    """What the other tries of the request's task instance mean for its decision."""

    taken_over: list[Any] = field(default_factory=list)  # lease rows of dead earlier tries
    blocking: list[Any] = field(default_factory=list)  # lease rows of running earlier tries
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
            elif process_gone(theirs.host, theirs.pid):
                ruling.taken_over.append(row)
            else:
                ruling.blocking.append(row)
    return ruling
