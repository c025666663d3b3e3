"""The lease store's rows and the model's objects, one into the other."""

from __future__ import annotations

import json
from typing import Any

from ..core.admission_rule import Claim
from ..core.footprint import parse_partition_key
from ..core.operations import Operation
from ..core.ranges import ValueRange
from . import schema
from .model import (
    WHOLE_TABLE,
    Holder,
    Lease,
    LeaseRequest,
    checked_seconds,
    from_epoch,
    refuse_control_characters,
)


def dump_keys(keys: frozenset[str] | None) -> str | None:
    return None if keys is None else json.dumps(sorted(keys))


def load_keys(text: str | None) -> frozenset[str] | None:
    return None if text is None else frozenset(json.loads(text))


def columns_of(key: str) -> str:
    """A key's column signature (``"country,ds"``): the key rows are looked up by it. A column
    the key bounds by a range is marked (``"ds~"``): such a key overlaps keys other than itself
    over the same columns, so it must never be mistaken for a plain value's signature."""
    return ",".join(sorted(c + ("~" if isinstance(v, ValueRange) else "") for c, v in parse_partition_key(key).items()))


def holder_values(holder: Holder) -> dict[str, Any]:
    return {
        "dag_id": holder.dag_id,
        "task_id": holder.task_id,
        "run_id": holder.run_id,
        "try_number": holder.try_number,
        "host": holder.host,
        "pid": holder.pid,
    }


def holder_of(row: Any) -> Holder:
    return Holder(row.dag_id, row.task_id, row.run_id, row.try_number, row.host, row.pid)


def claim_of(row: Any) -> Claim:
    """What a lease row or a queue row claims."""
    return Claim.of(row.profile, row.operation, load_keys(row.partitions))


def lease_rows(
    request: LeaseRequest, lease_id: str, now: float, fence: int = 0
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The rows a grant writes: the lease, and one key row per partition ("*" = whole table)."""
    lease_row = {
        "lease_id": lease_id,
        "request_id": request.request_id,
        "table_name": request.table,
        "partitions": dump_keys(request.partitions),
        "operation": request.operation.value,
        "profile": request.profile.name,
        **holder_values(request.holder),
        "acquired_at": now,
        "heartbeat_at": now,
        "expires_at": now + request.first_ttl,  # on probation until the first heartbeat
        "ttl": request.ttl,
        "fence": fence,
        "commit_gate": int(request.commit_gate),
    }
    keys = (
        [(WHOLE_TABLE, WHOLE_TABLE)]
        if request.partitions is None
        else [(k, columns_of(k)) for k in sorted(request.partitions)]
    )
    key_rows = [
        {"lease_id": lease_id, "table_name": request.table, "partition_key": k, "columns": c} for k, c in keys
    ]
    return lease_row, key_rows


def queue_row(request: LeaseRequest, queue_key: float, now: float) -> dict[str, Any]:
    """The row of a request that waits: its place is ``queue_key`` (arrival minus head start)."""
    return {
        "request_id": request.request_id,
        "table_name": request.table,
        "partitions": dump_keys(request.partitions),
        "operation": request.operation.value,
        "profile": request.profile.name,
        **holder_values(request.holder),
        "commit_gate": int(request.commit_gate),
        "queue_key": queue_key,
        "enqueued_at": now,
        "seen_at": now,
        "expires_at": now + request.queue_ttl,
    }


def check_request_fits(request: LeaseRequest) -> None:
    """Refuse a request whose rows the store's columns cannot hold (``schema.check_fits``),
    before any SQL runs: the same error on SQLite and PostgreSQL, and nothing written. A request
    built without ``LeaseRequest.create`` is checked here as well (a NaN TTL would make a lease
    that never lapses on PostgreSQL, and a NULL that SQLite refuses)."""
    request.holder.validate()
    checked_seconds("ttl", request.ttl)
    checked_seconds("queue_ttl", request.queue_ttl)
    refuse_control_characters("table", request.table)
    refuse_control_characters("request_id", request.request_id)
    for key in request.partitions or ():
        refuse_control_characters("partition key", key)
    lease_row, key_rows = lease_rows(request, "0" * 32, 0.0)
    schema.check_fits(schema.leases, lease_row)
    for key_row in key_rows:
        schema.check_fits(schema.lease_keys, key_row)
    schema.check_fits(schema.queue, queue_row(request, 0.0, 0.0))


def lease_of(row: Any, valid_until: float | None = None) -> Lease:
    """The lease a row holds; ``valid_until`` when the caller anchored it (``Lease``)."""
    return Lease(
        lease_id=row.lease_id,
        request_id=row.request_id,
        table=row.table_name,
        partitions=load_keys(row.partitions),
        operation=Operation(row.operation),
        profile=row.profile,
        holder=holder_of(row),
        acquired=from_epoch(row.acquired_at),
        heartbeat=from_epoch(row.heartbeat_at),
        expires=from_epoch(row.expires_at),
        ttl=row.ttl,
        fence=int(row.fence or 0),
        valid_until=valid_until,
    )


def granted_lease(
    request: LeaseRequest, lease_id: str, now: float, fence: int, sent: float, awaits: frozenset[str] = frozenset()
) -> Lease:
    """The lease a grant at ``now`` wrote for ``request``, asked for at monotonic ``sent``."""
    return Lease(
        lease_id=lease_id,
        request_id=request.request_id,
        table=request.table,
        partitions=request.partitions,
        operation=request.operation,
        profile=request.profile.name,
        holder=request.holder,
        acquired=from_epoch(now),
        heartbeat=from_epoch(now),
        expires=from_epoch(now + request.first_ttl),
        ttl=request.ttl,
        fence=fence,
        valid_until=sent + request.first_ttl,
        awaits=awaits,
    )
