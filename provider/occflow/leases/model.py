"""What admission control talks about: a holder, a request for a lease, a granted lease.

A footprint is the table plus either a set of partition keys (``"ds=2024-01-01"``, made by
``occflow.core.declaration.partition_key``) or the whole table. Two footprints on the same table
overlap when either is the whole table or when two of their partition specs agree on every
column they both name (``ds=1`` overlaps ``ds=1/country=NL``; ``ds=1`` and ``ds=2`` do not).
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pendulum

from ..core.declaration import WriteDeclaration, partition_key, validate_table_identifier
from ..core.errors import InvalidDeclarationError, InvalidFootprintError, OccflowError
from ..core.operations import Operation
from ..core.profiles import Profile, get_profile

WHOLE_TABLE = "*"
_COLUMN_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class LeaseStoreError(OccflowError):
    """The lease store cannot be used as configured (bad URL, unreachable database)."""


class LeaseLostError(OccflowError):
    """A heartbeat came too late: the lease expired and may have been granted to someone else."""


def parse_partition_key(key: str) -> dict[str, str]:
    """``"ds=2024-01-01/country=NL"`` -> ``{"ds": "2024-01-01", "country": "NL"}``."""
    if not isinstance(key, str) or not key.strip():
        raise InvalidFootprintError(f"a partition key is a non-empty string like 'ds=2024-01-01', got {key!r}")
    spec: dict[str, str] = {}
    for part in key.split("/"):
        column, sep, value = part.partition("=")
        if not sep or not _COLUMN_RE.match(column) or value == "":
            raise InvalidFootprintError(
                f"malformed partition key {key!r}: expected column=value pairs joined by '/', "
                "like 'ds=2024-01-01/country=NL'"
            )
        if column in spec:
            raise InvalidFootprintError(f"malformed partition key {key!r}: column {column!r} twice")
        spec[column] = value
    return spec


def normalise_partition_keys(partitions: Iterable[str | Mapping[str, Any]]) -> frozenset[str]:
    """Partition keys from keys or ``{column: value}`` mappings; validated and canonical."""
    if isinstance(partitions, (str, bytes, Mapping)):
        partitions = [partitions]  # type: ignore[list-item]
    keys: set[str] = set()
    for item in partitions:
        if isinstance(item, Mapping):
            keys.add(partition_key(item))
        else:
            keys.add(partition_key(parse_partition_key(item)))  # canonical column order
    if not keys:
        raise InvalidFootprintError(
            "empty footprint: name at least one partition, or ask for the whole table (whole_table=True)"
        )
    return frozenset(keys)


def specs_overlap(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    """Two partition specs may hold the same rows unless they disagree on a shared column."""
    return all(a[c] == b[c] for c in a.keys() & b.keys())


def footprints_overlap(a: frozenset[str] | None, b: frozenset[str] | None) -> bool:
    """``None`` is the whole table."""
    if a is None or b is None:
        return True
    if a & b:
        return True
    specs_a = [parse_partition_key(k) for k in a]
    specs_b = [parse_partition_key(k) for k in b]
    return any(specs_overlap(x, y) for x in specs_a for y in specs_b)


def operations_conflict(
    profile_a: Profile, op_a: Operation, profile_b: Profile, op_b: Operation
) -> bool:
    """Whether two writes on one footprint can make either fail.

    One table should have one profile; if two declarations disagree, either matrix saying
    "conflict" (or not knowing the other's operation) is enough to keep them apart.
    """
    for profile in {profile_a, profile_b}:
        if op_a not in profile.operations or op_b not in profile.operations:
            return True
        if profile.conflicts(op_a, op_b):
            return True
    return False


@dataclass(frozen=True)
class Holder:
    """Who holds (or waits for) a lease: the Airflow task instance and the process running it."""

    dag_id: str = ""
    task_id: str = ""
    run_id: str = ""
    try_number: int = 0
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)

    def describe(self) -> str:
        task = f"{self.dag_id}.{self.task_id}" if self.dag_id or self.task_id else "(no task)"
        run = f" run={self.run_id} try={self.try_number}" if self.run_id else ""
        return f"{task}{run} on {self.host} pid {self.pid}"


@dataclass(frozen=True)
class AdmissionPriorities:
    """How far ahead in the queue each kind of operation starts, in seconds of waiting.

    A waiting request's place is its arrival time minus its head start. Data writes start
    ahead of compactions (by ``data_write_head_start``), so a compaction lets data writes
    that arrive up to that long after it go first, and no longer: the bypass is bounded, a
    compaction is never starved. ``per_operation`` overrides a single operation.
    """

    data_write_head_start: float = 60.0
    compaction_head_start: float = 0.0
    per_operation: Mapping[str, float] = field(default_factory=dict)

    def head_start(self, operation: Operation) -> float:
        if operation.value in self.per_operation:
            return float(self.per_operation[operation.value])
        return self.compaction_head_start if operation.is_compaction else self.data_write_head_start


@dataclass(frozen=True)
class LeaseRequest:
    """A request to write ``operation`` on a footprint of ``table`` under ``profile``.

    ``request_id`` keeps the request's place in the queue: poll with the same request object.
    Build one with ``LeaseRequest.create`` (validates) or ``from_declaration``.
    """

    table: str
    profile: Profile
    operation: Operation
    partitions: frozenset[str] | None  # None = the whole table
    holder: Holder = field(default_factory=Holder)
    ttl: float = 300.0  # seconds a lease lives without a heartbeat
    queue_ttl: float = 120.0  # seconds a queue place lives without a poll
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @classmethod
    def create(
        cls,
        table: str,
        operation: str | Operation,
        profile: str | Profile,
        partitions: Iterable[str | Mapping[str, Any]] | None = None,
        *,
        whole_table: bool = False,
        holder: Holder | None = None,
        ttl: float = 300.0,
        queue_ttl: float = 120.0,
        request_id: str | None = None,
    ) -> LeaseRequest:
        """Validate table, profile, operation and footprint; errors say what would be right."""
        validate_table_identifier(table)
        prof = get_profile(profile)
        op = prof.operation(operation)
        if whole_table and partitions is not None:
            raise InvalidFootprintError("give partitions or whole_table=True, not both")
        if not whole_table and partitions is None:
            raise InvalidFootprintError(
                f"no footprint for {table}: name the partitions written, or whole_table=True"
            )
        keys = None if whole_table else normalise_partition_keys(partitions or [])
        for name, value in (("ttl", ttl), ("queue_ttl", queue_ttl)):
            if not isinstance(value, (int, float)) or value <= 0:
                raise InvalidDeclarationError(f"{name} must be a positive number of seconds, got {value!r}")
        return cls(
            table=table,
            profile=prof,
            operation=op,
            partitions=keys,
            holder=holder or Holder(),
            ttl=float(ttl),
            queue_ttl=float(queue_ttl),
            request_id=request_id or uuid.uuid4().hex,
        )

    @classmethod
    def from_declaration(
        cls, declaration: WriteDeclaration, holder: Holder | None = None, **kwargs: Any
    ) -> LeaseRequest:
        keys = declaration.partition_keys()
        return cls.create(
            declaration.table,
            declaration.operation,
            declaration.profile,
            partitions=keys,
            whole_table=keys is None,
            holder=holder,
            **kwargs,
        )

    def describe(self) -> str:
        where = "whole table" if self.partitions is None else ", ".join(sorted(self.partitions))
        return f"{self.operation.value} on {self.table} [{where}] ({self.profile.name})"

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-safe), e.g. for a deferred task's trigger to poll with the same place."""
        return {
            "table": self.table,
            "profile": self.profile.name,
            "operation": self.operation.value,
            "partitions": None if self.partitions is None else sorted(self.partitions),
            "holder": dict(vars(self.holder)),
            "ttl": self.ttl,
            "queue_ttl": self.queue_ttl,
            "request_id": self.request_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LeaseRequest:
        """The request ``to_dict`` wrote, validated again."""
        try:
            return cls.create(
                data["table"], data["operation"], data["profile"], data["partitions"],
                whole_table=data["partitions"] is None, holder=Holder(**data["holder"]),
                ttl=data["ttl"], queue_ttl=data["queue_ttl"], request_id=data["request_id"],
            )
        except (KeyError, TypeError) as exc:
            raise InvalidDeclarationError(f"not a serialized lease request ({exc}): {dict(data)!r}") from None


@dataclass(frozen=True)
class Lease:
    """A granted lease. Times are the store's clock (the database's on PostgreSQL)."""

    lease_id: str
    request_id: str
    table: str
    partitions: frozenset[str] | None
    operation: Operation
    profile: str
    holder: Holder
    acquired: pendulum.DateTime
    heartbeat: pendulum.DateTime
    expires: pendulum.DateTime
    ttl: float

    def describe(self) -> str:
        where = "whole table" if self.partitions is None else ", ".join(sorted(self.partitions))
        return f"{self.operation.value} on {self.table} [{where}] held by {self.holder.describe()}"


def from_epoch(seconds: float) -> pendulum.DateTime:
    return pendulum.from_timestamp(seconds, tz="UTC")
