"""The policies the simulator compares, each built from two small pieces.

- **Admission**: may a waiting job start now, given the jobs running on worker slots and the
  earlier jobs still waiting? (nothing / one job per table / the profile's matrix)
- **Reaction**: what follows a failed attempt? (Airflow's fixed-delay retries / occflow's
  classified policy from ``occflow.core.policy``)

``POLICIES`` lists them by the names the CLI takes; ``oracle`` is not a schedule but the lower
bound on the makespan (``metrics.lower_bound``).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import ClassVar, TypeVar

from ..core.admission_rule import Durations, Pairing, operation_pairings
from ..core.errors import InvalidDeclarationError
from ..core.kinds import Classification
from ..core.operations import Operation
from ..core.policy import Action, Decision, WritePolicy, derive_policy
from ..core.profiles import Profile
from .workload import Job, NaiveSettings, Workload

# ----------------------------------------------------------------------------- footprints

_K = TypeVar("_K")


def admission_partitions(job: Job) -> tuple[str, ...] | None:
    """The partitions a job holds while it runs; None: the whole table.

    A schema or protocol change touches the table's metadata, which every job on the table
    reads, so it holds the whole table; so does a job whose read names no partition.
    """
    parts = job.partitions
    if parts is None or job.reads_whole_table or job.protocol_change or job.operation.changes_table_metadata:
        return None
    return parts


def _conflicting(profile: Profile) -> Mapping[Operation, frozenset[Operation]]:
    """For each operation: the operations it may not run beside unordered (the one admission
    rule, ``core.admission_rule``: every pairing but ``TOGETHER``)."""
    # Keyed by name: hashing a Profile hashes its whole matrix, on every admission check.
    found = _CONFLICTING.get(profile.name)
    if found is None:
        pairings = operation_pairings(profile)
        found = _CONFLICTING[profile.name] = {
            n: frozenset(h for h, p in row.items() if p is not Pairing.TOGETHER) for n, row in pairings.items()
        }
    return found


_CONFLICTING: dict[str, Mapping[Operation, frozenset[Operation]]] = {}


@dataclass(frozen=True)
class CommitOrder:
    """The one admission rule's pairings (``core.admission_rule.operation_pairings``) as sets of
    operations, for the simulator's footprint index: for a newcomer's operation ``n`` and a
    running operation ``h`` on an overlapping footprint,

    - ``exclusive[n]``: ``APART``, neither order is clean: they never run together;
    - ``after[n]``: ``AFTER``, only ``h`` then ``n`` is clean: ``n`` may run, its commit held
      until ``h``'s lease ends (``h`` committed or released);
    - ``before[n]``: ``BEFORE``, only ``n`` then ``h`` is clean: ``n`` may run, and ``h``'s
      commit is held until ``n``'s lease ends.
    ``TOGETHER`` (both orders clean): they run together, nothing is held.
    """

    exclusive: Mapping[Operation, frozenset[Operation]]
    after: Mapping[Operation, frozenset[Operation]]
    before: Mapping[Operation, frozenset[Operation]]


def commit_order(profile: Profile) -> CommitOrder:
    found = _ORDER.get(profile.name)
    if found is None:
        pairings = operation_pairings(profile)

        def having(pairing: Pairing) -> dict[Operation, frozenset[Operation]]:
            return {n: frozenset(h for h, p in row.items() if p is pairing) for n, row in pairings.items()}

        found = _ORDER[profile.name] = CommitOrder(
            exclusive=having(Pairing.APART), after=having(Pairing.AFTER), before=having(Pairing.BEFORE)
        )
    return found


_ORDER: dict[str, CommitOrder] = {}


class _Held:
    """What one table holds. Every count is positive: a key whose count drops to 0 is deleted,
    so a dict's keys are exactly what is held and a check is a C-level ``isdisjoint``."""

    __slots__ = ("conflicting", "exclusive", "ops", "part_jobs", "part_ops", "whole_jobs", "whole_ops")

    def __init__(self, profile: Profile) -> None:
        self.conflicting = _conflicting(profile)
        self.exclusive = commit_order(profile).exclusive
        self.ops: dict[Operation, int] = {}  # every job's operation
        self.whole_ops: dict[Operation, int] = {}  # the operations of whole-table jobs
        self.whole_jobs = 0
        self.part_ops: dict[str, dict[Operation, int]] = {}  # per partition (empty dicts stay)
        self.part_jobs: dict[str, int] = {}  # jobs per partition


def _bump(counts: dict[_K, int], key: _K, sign: int) -> None:
    n = counts.get(key, 0) + sign
    if n:
        counts[key] = n
    else:
        del counts[key]


class FootprintIndex:
    """The operations held on each partition of each table, for quick conflict checks."""

    def __init__(self, profiles: Mapping[str, Profile]) -> None:
        self._held = {t: _Held(profile) for t, profile in profiles.items()}

    def add(self, job: Job, sign: int = 1) -> None:
        # Called for every job a scan turns away (and again to take it out): kept lean.
        parts, held, op = admission_partitions(job), self._held[job.table], job.operation
        _bump(held.ops, op, sign)
        if parts is None:
            _bump(held.whole_ops, op, sign)
            held.whole_jobs += sign
            return
        part_ops, part_jobs = held.part_ops, held.part_jobs
        for p in parts:  # ``_bump`` twice, inlined: this loop runs for every job a scan turns away
            ops = part_ops.get(p)
            if ops is None:
                ops = part_ops[p] = {}
            n = ops.get(op, 0) + sign
            if n:
                ops[op] = n
            else:
                del ops[op]
            n = part_jobs.get(p, 0) + sign
            if n:
                part_jobs[p] = n
            else:
                del part_jobs[p]

    def remove(self, job: Job) -> None:
        self.add(job, -1)

    def conflicts(self, job: Job, rule: str = "conflicting") -> bool:
        """Whether a held operation on an overlapping footprint conflicts with ``job``'s.

        ``rule`` names the table of operations that count: ``conflicting`` (a failing cell in
        either order) or ``exclusive`` (in both orders, ``CommitOrder``)."""
        parts, held = admission_partitions(job), self._held[job.table]
        bad = getattr(held, rule)[job.operation]
        if parts is None:
            return not bad.isdisjoint(held.ops)
        if not bad.isdisjoint(held.whole_ops):
            return True
        part_ops = held.part_ops
        for p in parts:
            ops = part_ops.get(p)
            if ops and not bad.isdisjoint(ops):
                return True
        return False

    def overlaps(self, job: Job) -> bool:
        """Whether a held job's footprint overlaps ``job``'s, whatever the two operations."""
        parts, held = admission_partitions(job), self._held[job.table]
        if parts is None:
            return bool(held.ops)
        return held.whole_jobs > 0 or not held.part_jobs.keys().isdisjoint(parts)


# ----------------------------------------------------------------------------- admission


class Admission:
    name = "none"
    #: Order-aware only: whether a newcomer that must commit first may join a running job, whose
    #: commit is then held until the newcomer's lease ends (``Pairing.BEFORE``, ``core.admission_rule``).
    commit_ahead = False
    #: Whether ``admits`` looks at the two ``FootprintIndex``es (else the simulator need not fill them).
    reads_footprints: ClassVar[bool] = True
    #: Duration-aware choices of the one rule (``core.admission_rule.Durations``); None: blind.
    durations: Durations | None = None

    def admits(self, job: Job, running: FootprintIndex, per_table: Mapping[str, int], blocked: FootprintIndex) -> bool:
        """``running``: jobs holding a slot; ``blocked``: earlier jobs that are still waiting."""
        raise NotImplementedError

    def full(self, per_table: Mapping[str, int], tables: int) -> bool:
        """Whether no waiting job can be admitted now, whatever it is (ends a scan early)."""
        return False

    def priority(self, job: Job) -> int:
        """Where ``job`` waits: the simulator scans waiting jobs by (priority, arrival), lower first."""
        return 0

    def yields(self, job: Job) -> bool:
        """Whether ``job``, refused, lets later waiting jobs pass it (it does not enter the
        ``blocked`` index); its age limit (``AGED``) ends that."""
        return False

    def age_limit(self, job: Job) -> float | None:
        """Seconds after which a waiting ``job`` is promoted ahead of every other waiting job
        (``AGED``, first come first served among the promoted); None: never."""
        return None

    @property
    def holds_commits(self) -> bool:
        """Whether jobs that are clean in one commit order only run together, the commit of the
        one that must go second held until the other's lease ends (``CommitOrder``)."""
        return False


@dataclass(frozen=True)
class AdmitAll(Admission):
    """Airflow without pools: any job starts when a worker slot is free."""

    name = "any free slot"
    reads_footprints: ClassVar[bool] = False

    def admits(self, job: Job, running: FootprintIndex, per_table: Mapping[str, int], blocked: FootprintIndex) -> bool:
        return True


@dataclass(frozen=True)
class OnePerTable(Admission):
    """An Airflow pool of one slot per table: jobs on one table never overlap."""

    name = "one slot per table"
    reads_footprints: ClassVar[bool] = False

    def admits(self, job: Job, running: FootprintIndex, per_table: Mapping[str, int], blocked: FootprintIndex) -> bool:
        return per_table.get(job.table, 0) == 0

    def full(self, per_table: Mapping[str, int], tables: int) -> bool:
        return sum(1 for n in per_table.values() if n) >= tables


# Scan order of occflow's admission: maintenance after data writes, unless it has waited past its
# age limit (then ahead of both).
AGED, DATA_WRITE, MAINTENANCE = -1, 0, 1


@dataclass(frozen=True)
class AgeLimit:
    """How long waiting maintenance may be passed over by data writes: once it has waited
    ``factor`` times its own duration or ``seconds``, whichever comes first, it goes first."""

    factor: float | None = 2.0
    seconds: float | None = 3600.0

    def limit(self, duration: float) -> float | None:
        limits = [x for x in (None if self.factor is None else self.factor * duration, self.seconds) if x is not None]
        return min(limits) if limits else None

    def describe(self) -> str:
        parts = ([] if self.factor is None else [f"{self.factor:g}x its duration"]) + (
            [] if self.seconds is None else [f"{self.seconds:g} s"])
        return "maintenance goes first after waiting " + (" or ".join(parts) if parts else "never")


@dataclass(frozen=True)
class PartitionLock(Admission):
    """What a careful user builds by hand: one lock per (table, partition), a whole-table job
    takes every lock of its table. A job starts only if no running job holds a partition it
    needs, whatever the two operations, and never ahead of an earlier waiting job that needs one
    of the same partitions (FIFO-fair, so a stream of small jobs cannot starve a big one)."""

    name = "lock per partition"

    def admits(self, job: Job, running: FootprintIndex, per_table: Mapping[str, int], blocked: FootprintIndex) -> bool:
        return not running.overlaps(job) and not blocked.overlaps(job)


@dataclass(frozen=True)
class MatrixAdmission(Admission):
    """occflow's lease store: start only if no running job on an overlapping footprint would make
    either fail (``profile.conflicts``), and never ahead of an earlier waiting job it conflicts
    with (FIFO-fair per footprint, so a stream of short jobs cannot starve a long one).

    Jobs the matrix lets run together share a partition (blind appends beside a MERGE under
    WriteSerializable, a MaxCompute minor compaction beside INSERT INTO, appends under Iceberg
    snapshot isolation). Maintenance (``Operation.is_compaction``: OPTIMIZE, compactions,
    clustering) waits behind data writes: it is looked at after every waiting data write, so a
    compaction never takes a partition ahead of a data write it would block."""

    name = "matrix lease"
    #: Order-aware: a job joins running jobs it may commit after, its commit held until theirs
    #: (``CommitOrder``); False: it joins only jobs that fail in neither order (order-blind).
    order_aware: bool = True
    maintenance_age: AgeLimit | None = field(default_factory=AgeLimit)
    #: Ablations (``bench/sim_exact.py --ablation``), both on in occflow: a newcomer may commit
    #: ahead of a running job, holding that job's commit; maintenance is looked at after data writes.
    commit_ahead: bool = True
    maintenance_last: bool = True
    #: Duration-aware (issue 38): gates bounded by k times a writer's length, a compaction that
    #: arrived first and can run goes, same-arrival jobs shortest first; None: duration-blind. The
    #: simulator models the duration-aware rule; the lease store applies it only when asked
    #: (``LeaseStore(durations=Durations())``, off by default: see docs/admission.md "Durations").
    durations: Durations | None = field(default_factory=Durations)

    def admits(self, job: Job, running: FootprintIndex, per_table: Mapping[str, int], blocked: FootprintIndex) -> bool:
        if not self.order_aware:
            return not running.conflicts(job) and not blocked.conflicts(job)
        return not running.conflicts(job, "exclusive") and not blocked.conflicts(job, "exclusive")

    def priority(self, job: Job) -> int:
        # Duration-aware, a compaction is looked at in arrival order with the data writes and,
        # refused, does not hold back later ones (``yields``): the store's head start, which lets
        # later data writes pass a compaction only while a running write blocks it.
        if self.maintenance_last and job.operation.yields_to_data_writes and self.durations is None:
            return MAINTENANCE
        return DATA_WRITE

    def yields(self, job: Job) -> bool:
        return self.maintenance_last and self.durations is not None and job.operation.yields_to_data_writes

    def age_limit(self, job: Job) -> float | None:
        if self.maintenance_age is None or not self.maintenance_last or not job.operation.yields_to_data_writes:
            return None
        return self.maintenance_age.limit(job.duration)

    @property
    def holds_commits(self) -> bool:
        return self.order_aware



# ----------------------------------------------------------------------------- reactions


class Reaction:
    name = "none"

    def decide(
        self, job: Job, profile: Profile, classification: Classification, failures: int, elapsed: float,
        rng: random.Random,
    ) -> Decision:
        raise NotImplementedError


@dataclass(frozen=True)
class AirflowRetries(Reaction):
    """Airflow's ``retries`` / ``retry_delay``: every failure is retried alike, the task frees its
    worker slot while it waits (``up_for_retry``), and it fails once the budget is spent."""

    settings: NaiveSettings = field(default_factory=NaiveSettings)
    name = "airflow retries"

    def decide(
        self, job: Job, profile: Profile, classification: Classification, failures: int, elapsed: float,
        rng: random.Random,
    ) -> Decision:
        if failures > self.settings.retries:
            return Decision(Action.FAIL, 0.0, "retries exhausted", classification.kind, failures)
        return Decision(
            Action.RESCHEDULE, self.settings.retry_delay, "airflow retry", classification.kind, failures
        )


@dataclass(frozen=True)
class ClassifiedRetries(Reaction):
    """occflow's policy for the job's profile and operation (``derive_policy(...).decide``):
    retry in the task with backoff and jitter, reschedule, skip a compaction that lost to a
    writer, fail fast on what is not retry-safe; what is not a conflict gets Airflow's retries."""

    fallback: AirflowRetries = field(default_factory=AirflowRetries)
    name = "classified retry"

    def decide(
        self, job: Job, profile: Profile, classification: Classification, failures: int, elapsed: float,
        rng: random.Random,
    ) -> Decision:
        decision = _policy(profile.name, job.operation).decide(classification, failures, elapsed, rng)
        if decision.action is Action.DEFAULT:
            return self.fallback.decide(job, profile, classification, failures, elapsed, rng)
        return decision


@cache
def _policy(profile: str, operation: Operation) -> WritePolicy:
    return derive_policy(profile, operation)


# ----------------------------------------------------------------------------- policies


@dataclass(frozen=True)
class SimPolicy:
    name: str
    admission: Admission
    reaction: Reaction
    summary: str
    # A job that had to wait for admission (refused at least once) starts its attempt this long
    # after it is admitted, holding its slot and footprint meanwhile: the release-to-grant
    # latency and Airflow's re-queue after a deferral.
    wait_start_delay: float = 0.0
    # Added to every reschedule's delay: Airflow's scheduler re-queues an up_for_retry task late.
    requeue_delay: float = 0.0

    def describe(self) -> str:
        return f"{self.name}: admission {self.admission.name}, on failure {self.reaction.name} ({self.summary})"


ORACLE = "oracle"
POLICY_NAMES = ("naive", "table-pool", "partition-lock", "occflow-retry", "occflow", ORACLE)
#: Old names still accepted; a run shows the current name.
POLICY_ALIASES = {"pool": "table-pool"}

_POLICIES: dict[str, tuple[type[Admission], bool, str]] = {  # admission, classified reaction, summary
    "naive": (AdmitAll, False, "Airflow retries: fixed delay, every failure retried"),
    "table-pool": (OnePerTable, False, "an Airflow pool with one slot per table, Airflow retries"),
    "partition-lock": (PartitionLock, False, "a FIFO-fair lock per table partition, Airflow retries"),
    "occflow-retry": (AdmitAll, True, "classified retry, no admission"),
    "occflow": (MatrixAdmission, True, "matrix admission + classified retry"),
}


def policy_name(name: str) -> str:
    """The current name of policy ``name`` (an alias resolved); unknown names are an error."""
    found = POLICY_ALIASES.get(name, name)
    if found not in POLICY_NAMES:
        aliases = ", ".join(f"{old} (= {new})" for old, new in POLICY_ALIASES.items())
        raise InvalidDeclarationError(
            f"unknown policy {name!r}; policies: {', '.join(POLICY_NAMES)}; old names: {aliases}"
        )
    return found


def build_policy(name: str, workload: Workload) -> SimPolicy:
    """The simulated policy called ``name`` with the workload's baseline and Airflow settings."""
    name = policy_name(name)
    if name == ORACLE:
        raise InvalidDeclarationError("oracle is the lower bound, not a schedule: simulate() reports it as a row")
    admission, classified, summary = _POLICIES[name]
    airflow = AirflowRetries(workload.naive)
    reaction: Reaction = ClassifiedRetries(airflow) if classified else airflow
    return SimPolicy(
        name, admission(), reaction, summary,
        wait_start_delay=workload.airflow.admission_latency,
        requeue_delay=workload.airflow.requeue_delay,
    )


def parse_policies(names: Iterable[str] | None) -> tuple[str, ...]:
    """The current names of ``names`` (all policies when None), each once, in order."""
    return tuple(dict.fromkeys(policy_name(name) for name in (names or POLICY_NAMES)))
