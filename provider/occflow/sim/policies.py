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
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache

from ..core.errors import InvalidDeclarationError
from ..core.kinds import Classification
from ..core.operations import Operation
from ..core.policy import Action, Decision, WritePolicy, derive_policy
from ..core.profiles import Profile
from .workload import Job, NaiveSettings, Workload

# ----------------------------------------------------------------------------- footprints


def admission_partitions(job: Job) -> tuple[str, ...] | None:
    """The partitions a job holds while it runs; None: the whole table.

    A schema or protocol change touches the table's metadata, which every job on the table
    reads, so it holds the whole table; so does a job whose read names no partition.
    """
    if job.partitions is None or job.reads_whole_table or job.protocol_change:
        return None
    if job.operation is Operation.ALTER_METADATA:
        return None
    return job.partitions


def _conflicting(profile: Profile) -> Mapping[Operation, frozenset[Operation]]:
    """For each operation: the operations that make it, or that it makes, fail (either order)."""
    # Keyed by name: hashing a Profile hashes its whole matrix, on every admission check.
    found = _CONFLICTING.get(profile.name)
    if found is None:
        ops = profile.operations
        found = _CONFLICTING[profile.name] = {a: frozenset(b for b in ops if profile.conflicts(a, b)) for a in ops}
    return found


_CONFLICTING: dict[str, Mapping[Operation, frozenset[Operation]]] = {}


class FootprintIndex:
    """The operations held on each partition of each table, for quick conflict checks."""

    def __init__(self, profiles: Mapping[str, Profile]) -> None:
        self._profiles = profiles
        self._any: dict[str, Counter[Operation]] = {t: Counter() for t in profiles}
        self._whole: dict[str, Counter[Operation]] = {t: Counter() for t in profiles}
        self._parts: dict[str, dict[str, Counter[Operation]]] = {t: {} for t in profiles}

    def add(self, job: Job, sign: int = 1) -> None:
        parts = admission_partitions(job)
        self._any[job.table][job.operation] += sign
        if parts is None:
            self._whole[job.table][job.operation] += sign
        else:
            table = self._parts[job.table]
            for p in parts:
                table.setdefault(p, Counter())[job.operation] += sign

    def remove(self, job: Job) -> None:
        self.add(job, -1)

    def conflicts(self, job: Job) -> bool:
        """Whether a held operation on an overlapping footprint conflicts with ``job``'s."""
        bad = _conflicting(self._profiles[job.table])[job.operation]
        parts = admission_partitions(job)
        held = [self._any[job.table]] if parts is None else [
            self._whole[job.table],
            *(self._parts[job.table].get(p, _EMPTY) for p in parts),
        ]
        return any(count > 0 and op in bad for counter in held for op, count in counter.items())


_EMPTY: Counter[Operation] = Counter()


# ----------------------------------------------------------------------------- admission


class Admission:
    name = "none"

    def admits(self, job: Job, running: FootprintIndex, per_table: Mapping[str, int], blocked: FootprintIndex) -> bool:
        """``running``: jobs holding a slot; ``blocked``: earlier jobs that are still waiting."""
        raise NotImplementedError

    def full(self, per_table: Mapping[str, int], tables: int) -> bool:
        """Whether no waiting job can be admitted now, whatever it is (ends a scan early)."""
        return False


@dataclass(frozen=True)
class AdmitAll(Admission):
    """Airflow without pools: any job starts when a worker slot is free."""

    name = "any free slot"

    def admits(self, job: Job, running: FootprintIndex, per_table: Mapping[str, int], blocked: FootprintIndex) -> bool:
        return True


@dataclass(frozen=True)
class OnePerTable(Admission):
    """An Airflow pool of one slot per table: jobs on one table never overlap."""

    name = "one slot per table"

    def admits(self, job: Job, running: FootprintIndex, per_table: Mapping[str, int], blocked: FootprintIndex) -> bool:
        return per_table.get(job.table, 0) == 0

    def full(self, per_table: Mapping[str, int], tables: int) -> bool:
        return sum(1 for n in per_table.values() if n) >= tables


@dataclass(frozen=True)
class MatrixAdmission(Admission):
    """occflow's lease store: start only if no running job on an overlapping footprint would make
    either fail (``profile.conflicts``), and never ahead of an earlier waiting job it conflicts
    with (FIFO-fair per footprint, so a stream of short jobs cannot starve a long one)."""

    name = "matrix lease"

    def admits(self, job: Job, running: FootprintIndex, per_table: Mapping[str, int], blocked: FootprintIndex) -> bool:
        return not running.conflicts(job) and not blocked.conflicts(job)


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

    def describe(self) -> str:
        return f"{self.name}: admission {self.admission.name}, on failure {self.reaction.name} ({self.summary})"


ORACLE = "oracle"
POLICY_NAMES = ("naive", "pool", "occflow-retry", "occflow", ORACLE)


def build_policy(name: str, workload: Workload) -> SimPolicy:
    """The simulated policy called ``name`` with the workload's baseline settings."""
    airflow = AirflowRetries(workload.naive)
    if name == "naive":
        return SimPolicy(name, AdmitAll(), airflow, "Airflow retries: fixed delay, every failure retried")
    if name == "pool":
        return SimPolicy(name, OnePerTable(), airflow, "an Airflow pool with one slot per table")
    if name == "occflow-retry":
        return SimPolicy(name, AdmitAll(), ClassifiedRetries(airflow), "classified retry, no admission")
    if name == "occflow":
        return SimPolicy(name, MatrixAdmission(), ClassifiedRetries(airflow), "matrix admission + classified retry")
    raise InvalidDeclarationError(
        f"unknown policy {name!r}; policies: {', '.join(POLICY_NAMES)}"
    )


def parse_policies(names: Iterable[str] | None) -> tuple[str, ...]:
    wanted = tuple(dict.fromkeys(names or POLICY_NAMES))
    for name in wanted:
        if name not in POLICY_NAMES:
            raise InvalidDeclarationError(f"unknown policy {name!r}; policies: {', '.join(POLICY_NAMES)}")
    return wanted
