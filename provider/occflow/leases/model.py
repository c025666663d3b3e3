"""What admission control talks about: a holder, a request for a lease, a granted lease.

A footprint is the table plus either a set of partition keys (``"ds=2024-01-01"``, made by
``occflow.core.declaration.partition_key``) or the whole table. Two footprints on the same table
overlap unless they disagree on a column both constrain (``occflow.core.footprint``:
``ds=1`` overlaps ``ds=1/country=NL``; ``ds=1`` and ``ds=2`` do not); a lease blocks a request
when their footprints overlap and the profiles' matrices say the operations conflict
(``Claim.blocks``).
"""

from __future__ import annotations

import math
import os
import re
import socket
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pendulum

from ..core.admission_rule import Claim
from ..core.declaration import WriteDeclaration, partition_key
from ..core.errors import InvalidDeclarationError, InvalidFootprintError, OccflowError
from ..core.footprint import parse_partition_key
from ..core.identifiers import canonical_table, is_canonical_location, shown
from ..core.operations import Operation
from ..core.profiles import Profile, get_profile

WHOLE_TABLE = "*"
#: Control characters (NUL above all, which PostgreSQL refuses) and lone surrogates (no
#: database driver can encode them): text a store would lose or reject.
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")
#: The longest a lease, a heartbeat's TTL or a queue place may live without a beat: a day. A
#: longer one is a typo (300 days for 300 s) that would hold a footprint long after its holder died.
MAX_TTL_SECONDS = 86400.0
#: The store's integer columns (try number, pid) are 32-bit.
MAX_INT32 = 2**31 - 1


class LeaseStoreError(OccflowError):
    """The lease store cannot be used as configured (bad URL, unreachable database)."""


class LeaseStoreUnavailable(LeaseStoreError):
    """A call to the store's database failed: unreachable, locked past its busy timeout, or
    not a database. It may pass (a restart, a lock let go), so waiters retry it for a while."""


class LeaseStoreRefused(LeaseStoreError):
    """The store's database refused a value or a change (a value that does not fit its column,
    a broken constraint). Not an outage: asking again gets the same answer, so nobody waits for
    it to pass."""


class LeaseLostError(OccflowError):
    """The lease is not (or may not be) live any more: it lapsed, its heartbeats failed past its
    validity, or a later try of the task took it over. A write holding it must not commit."""


class NotAdmittedError(OccflowError):
    """A task resumed from its admission trigger without a granted lease in the event."""


def refuse_control_characters(what: str, value: object) -> None:
    """Refuse text a database would lose or reject (PostgreSQL refuses NUL outright)."""
    if not isinstance(value, str) or _CONTROL_RE.search(value):
        raise InvalidDeclarationError(
            f"{what} {shown(value)} must be text without control characters (NUL, newline, ...) or lone surrogates"
        )


def checked_seconds(
    what: str, value: object, *, at_least: float = 0.0, zero_ok: bool = False, at_most: float = MAX_TTL_SECONDS
) -> float:
    """The one check for every duration the leases take (TTLs, polls, waits, head starts): a
    real number (not a bool), finite, above ``at_least`` (or equal, with ``zero_ok``) and at
    most ``at_most``; otherwise an error naming ``what``. NaN and infinity never reach a store."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidDeclarationError(f"{what} must be a number of seconds, got {shown(value)}")
    if isinstance(value, int) and value.bit_length() > 60:  # float() of a huge int overflows
        raise InvalidDeclarationError(f"{what} must be at most {at_most:g} seconds, got an integer of {value.bit_length()} bits")
    number = float(value)
    if math.isnan(number) or math.isinf(number):
        raise InvalidDeclarationError(f"{what} must be a finite number of seconds, got {shown(value)}")
    low_ok = number >= at_least if zero_ok else number > at_least
    if not low_ok or number > at_most:
        low = f"a number of seconds >= {at_least:g}" if zero_ok else f"a positive number of seconds (> {at_least:g})"
        raise InvalidDeclarationError(f"{what} must be {low}, at most {at_most:g}, got {shown(value)}")
    return number


def checked_int(what: str, value: object, *, at_least: int = 0, at_most: int = MAX_INT32) -> int:
    """An integer field the store keeps (try number, pid): an int, not a bool, within the column."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidDeclarationError(f"{what} must be an integer, got {shown(value)}")
    if not at_least <= value <= at_most:
        shown_value = shown(value) if value.bit_length() < 1000 else f"an integer of {value.bit_length()} bits"
        raise InvalidDeclarationError(f"{what} must be between {at_least} and {at_most}, got {shown_value}")
    return value


def normalise_partition_keys(partitions: Iterable[str | Mapping[str, Any]]) -> frozenset[str]:
    """Partition keys from keys or ``{column: value}`` mappings; validated and canonical."""
    if isinstance(partitions, (str, bytes, Mapping)):
        partitions = [partitions]
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

    def same_task_instance(self, other: Holder) -> bool:
        """Whether both are tries of one Airflow task instance (anonymous holders never are)."""
        mine = (self.dag_id, self.task_id, self.run_id)
        return all(mine) and mine == (other.dag_id, other.task_id, other.run_id)

    def validate(self) -> None:
        """Refuse text a database would lose or reject (PostgreSQL refuses NUL outright)."""
        for name in ("dag_id", "task_id", "run_id", "host"):
            refuse_control_characters(f"holder {name}", getattr(self, name))
        for name in ("try_number", "pid"):
            checked_int(f"holder {name}", getattr(self, name))


@dataclass(frozen=True)
class AdmissionPriorities:
    """How far ahead in the queue each kind of operation starts, in seconds of waiting.

    A waiting request's place is its arrival time minus its head start. Data writes start
    ahead of maintenance (compactions, OPTIMIZE, clustering: ``Operation.is_compaction``) by
    ``data_write_head_start``: a waiting compaction does not block data writes that arrive up
    to that long after it (they go first, and it waits behind them), and once it has waited
    longer, later data writes queue behind it: the bypass is bounded, a compaction is never
    starved. ``per_operation`` overrides a single operation.
    """

    #: 30 minutes: maintenance yields to the data writes of a busy half hour, then goes.
    data_write_head_start: float = 1800.0
    compaction_head_start: float = 0.0
    per_operation: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Finite: a queue place is arrival minus head start, and NaN would sort nowhere. A huge
        # head start is allowed (it means "always first").
        for name in ("data_write_head_start", "compaction_head_start"):
            checked_seconds(name, getattr(self, name), zero_ok=True, at_most=1e12)
        if not isinstance(self.per_operation, Mapping):
            raise InvalidDeclarationError(f"per_operation must map operations to seconds, got {shown(self.per_operation)}")
        for operation, head_start in self.per_operation.items():
            checked_seconds(f"per_operation[{shown(operation)}]", head_start, zero_ok=True, at_most=1e12)

    def head_start(self, operation: Operation) -> float:
        if operation.value in self.per_operation:
            return float(self.per_operation[operation.value])
        return self.compaction_head_start if operation.yields_to_data_writes else self.data_write_head_start


#: Seconds a granted lease lives until its holder's first heartbeat proves it alive: a holder
#: killed between the grant and its keeper's first beat (a worker, a scheduler, a triggerer
#: killed -9) blocks the footprint this long at most, not its whole TTL. The first heartbeat
#: extends the lease to its TTL.
GRANT_PROBATION = 30.0


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
    #: The writer holds its commit at the lease's gate (``LeaseStore.wait_gate``, right before
    #: it commits), so order-aware admission may grant it beside a live lease it must commit
    #: after. A writer that cannot promise that (a caller of the bare store) is never gated.
    commit_gate: bool = False
    #: Seconds the lease lives from its grant until the holder's first heartbeat.
    probation: float = GRANT_PROBATION

    @property
    def first_ttl(self) -> float:
        """How long the lease lives from its grant until the first heartbeat (``probation``)."""
        return min(self.ttl, self.probation)

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
        commit_gate: bool = False,
        probation: float = GRANT_PROBATION,
    ) -> LeaseRequest:
        """Validate table, profile, operation and footprint; errors say what would be right.
        The table is kept as its canonical identity: a location already made canonical by the
        declaration (``canonical_location``, delta-rs writes a path), else the canonical name."""
        table = table if is_canonical_location(table) else canonical_table(table)
        # Named before the profile reads them, so a hostile name gets a short error naming it.
        for what, value, kind in (("profile", profile, Profile), ("operation", operation, Operation)):
            if not isinstance(value, (str, kind)) or (isinstance(value, str) and not 0 < len(value) <= 64):
                raise InvalidDeclarationError(f"{what} must be a name of 1..64 characters, got {shown(value)}")
        prof = get_profile(profile)
        op = prof.operation(operation)
        if whole_table and partitions is not None:
            raise InvalidFootprintError("give partitions or whole_table=True, not both")
        if not whole_table and partitions is None:
            raise InvalidFootprintError(
                f"no footprint for {table}: name the partitions written, or whole_table=True"
            )
        keys = None if whole_table else normalise_partition_keys(partitions or [])
        if op.changes_table_metadata:
            # A schema, property or protocol change holds the whole table whatever partitions it names
            # (``footprint_reach``): its lease is kept as one, so every request on the table meets it.
            keys = None
        holder = holder or Holder()
        holder.validate()
        if request_id is not None:
            refuse_control_characters("request_id", request_id)
        if not isinstance(commit_gate, bool):
            raise InvalidDeclarationError(f"commit_gate must be True or False, got {shown(commit_gate)}")
        return cls(
            table=table,
            profile=prof,
            operation=op,
            partitions=keys,
            holder=holder,
            ttl=checked_seconds("ttl", ttl),
            queue_ttl=checked_seconds("queue_ttl", queue_ttl),
            request_id=request_id or uuid.uuid4().hex,
            commit_gate=commit_gate,
            probation=checked_seconds("probation", probation),
        )

    @classmethod
    def from_declaration(
        cls, declaration: WriteDeclaration, holder: Holder | None = None, **kwargs: Any
    ) -> LeaseRequest:
        """The lease a declared write asks for. Admission keeps apart what the engine really
        does: the engine's own profile (``engine_profile``, e.g. ``delta-rs`` under a
        ``DeltaWriteOperator`` that declares the Databricks matrix) when the declaration names
        one, so a pair that corrupts data on that engine is refused whatever profile the DAG
        chose; the declared profile still drives the retry policy. The table is its canonical
        identity, so every spelling of one table meets the same leases."""
        keys = declaration.partition_keys()
        return cls.create(
            declaration.table_key,
            declaration.operation,
            declaration.engine_profile or declaration.profile,
            partitions=keys,
            whole_table=keys is None,
            holder=holder,
            **kwargs,
        )

    @property
    def claim(self) -> Claim:
        return Claim(self.profile, self.operation, self.partitions)

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
            "commit_gate": self.commit_gate,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LeaseRequest:
        """The request ``to_dict`` wrote, validated again; anything else (a list, text, a
        document nested ten thousand deep) is an ``InvalidDeclarationError``."""
        if not isinstance(data, Mapping):
            raise InvalidDeclarationError(f"not a serialized lease request (a mapping): {shown(data)}")
        try:
            holder = data["holder"]
            # A list is the positional form triggers deferred by earlier releases serialized.
            holder = Holder(*holder) if isinstance(holder, (list, tuple)) else Holder(**holder)
            return cls.create(
                data["table"], data["operation"], data["profile"], data["partitions"],
                whole_table=data["partitions"] is None, holder=holder,
                ttl=data["ttl"], queue_ttl=data["queue_ttl"], request_id=data["request_id"],
                commit_gate=data.get("commit_gate", False),
            )
        except (KeyError, TypeError, RecursionError) as exc:
            raise InvalidDeclarationError(
                f"not a serialized lease request ({type(exc).__name__}: {shown(str(exc))}): {shown(dict(data))}"
            ) from None


@dataclass(frozen=True)
class Lease:
    """A granted lease. Times are the store's clock (the database's on PostgreSQL).

    ``fence`` is the lease's fencing token: grants on one table get strictly increasing fences,
    so a commit stamped with it tells a later holder's commit from a stale one. ``valid_until``
    is this process's ``time.monotonic()`` before which the store cannot have let the lease go
    (the send time of the call that granted, extended or confirmed it, plus what was left of
    its TTL); ``None`` on a lease read from elsewhere (a trigger's event, a listing).
    """

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
    fence: int = 0
    valid_until: float | None = field(default=None, compare=False, repr=False)
    #: The leases this one's commit waits for (order-aware admission, ``LeaseStore.wait_gate``),
    #: as granted; empty on a lease read from elsewhere (ask ``LeaseStore.gate``).
    awaits: frozenset[str] = field(default=frozenset(), compare=False)

    @property
    def claim(self) -> Claim:
        return Claim.of(self.profile, self.operation, self.partitions)

    def describe(self) -> str:
        where = "whole table" if self.partitions is None else ", ".join(sorted(self.partitions))
        return f"{self.operation.value} on {self.table} [{where}] held by {self.holder.describe()}"

    def name(self) -> str:
        """How an error names the lease: id, fence and what it covers."""
        return f"lease {self.lease_id[:8]} (fence {self.fence}; {self.describe()})"


def from_epoch(seconds: float) -> pendulum.DateTime:
    return pendulum.from_timestamp(seconds, tz="UTC")


class AdmissionTimeout(OccflowError, TimeoutError):
    """``acquire`` gave up waiting for a lease."""


class GateTimeout(OccflowError, TimeoutError):
    """``wait_gate`` gave up waiting for the leases a commit must follow to end: nothing was
    committed. Names the waiting lease, the table, the leases still awaited and how long."""

    def __init__(self, lease: Lease, awaited: Sequence[Lease], waited: float, timeout: float) -> None:
        self.lease_id = lease.lease_id
        self.table = lease.table
        self.awaited = tuple(other.lease_id for other in awaited)
        self.waited = waited
        self.timeout = timeout
        super().__init__(
            f"the commit of {lease.name()} waited {waited:.1f}s at its gate on {lease.table} (gate timeout "
            f"{timeout:.1f}s) for {'; '.join(other.name() for other in awaited)}, still live: it must commit "
            "after them (order-aware admission), so it did not commit"
        )


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
