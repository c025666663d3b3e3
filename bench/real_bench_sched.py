"""The scheduler of bench/real_bench.py: jobs, the three policies' admission, and the records.

K worker threads (Airflow's parallelism) take jobs from one FIFO queue. A policy decides two
things: when a queued job may start (admission), and what follows a failed attempt.

- ``naive``: every job starts as soon as a slot is free; a failure goes back to the queue after
  a fixed ``retry_delay`` (the slot is freed meanwhile), up to ``retries`` times (Airflow retries).
- ``partition-lock``: what a user builds by hand: one exclusive lock per (table, partition), a
  whole-table job locks the table; a job starts only once its lock is free (the slot stays free
  for another job meanwhile, like an Airflow pool of one slot per partition key). FIFO-fair:
  a job never overtakes an earlier ready job that waits for an overlapping lock. Every kind of
  write takes the same lock (the user does not know which writes commute). Failures: as naive.
- ``occflow``: a job starts only once the lease store (``occflow.leases``, SQLite) admits it by
  the profile's matrix; a failure is classified (``WriteOutcome.classification``) and handled by
  ``derive_policy(profile, operation).decide`` (retry in the slot, reschedule, skip, fail).
"""

from __future__ import annotations

import random
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from occflow.core.kinds import Classification, ConflictKind
from occflow.core.policy import Action, derive_policy
from occflow.engines.outcome import WriteOutcome
from occflow.leases import LeaseStore
from occflow.leases.model import LeaseRequest

POLICIES = ("naive", "partition-lock", "occflow")
APPEND_ID_BASE = 1_000_000_000  # appended ids start here: never touched by a merge
KINDS = {"merge": "merge", "append": "insert_into"}  # job kind -> occflow operation


@dataclass(frozen=True)
class BenchJob:
    """A MERGE (upsert ids ``first_id``.. into ``partition``) or a blind append of new ids.

    ``partition`` None is a whole-table job (no workload of the bench has one; the lock handles it).
    """

    index: int
    kind: str
    partition: str | None
    first_id: int
    rows: int
    value: int

    @property
    def operation(self) -> str:
        return KINDS[self.kind]

    @property
    def ids(self) -> range:
        return range(self.first_id, self.first_id + self.rows)


def make_jobs(
    count: int, partitions: int, rows: int, seed_rows: int, seed: int, append_share: float = 0.5
) -> list[BenchJob]:
    """``count`` jobs on ``partitions`` partitions drawn from ``seed``.

    A merge upserts ``rows`` ids from a random start below ``seed_rows`` (updates and inserts); an
    append (share ``append_share``) inserts ``rows`` new ids of its own.
    """
    if count < 1 or partitions < 1 or rows < 1 or seed_rows < 1 or not 0 <= append_share <= 1:
        raise ValueError(
            f"jobs, partitions, rows and seed rows must be >= 1 and append share in [0, 1]; got "
            f"{count}, {partitions}, {rows}, {seed_rows}, {append_share}"
        )
    rng = random.Random(seed)
    parts = [f"p{i}" for i in range(partitions)]
    jobs = []
    for i in range(count):
        part = rng.choice(parts)
        if rng.random() < append_share:
            jobs.append(BenchJob(i, "append", part, APPEND_ID_BASE + i * rows, rows, i + 1))
        else:
            jobs.append(BenchJob(i, "merge", part, rng.randrange(0, seed_rows), rows, i + 1))
    return jobs


@dataclass
class AttemptRecord:
    job: int
    number: int
    start: float
    end: float
    committed: bool
    executor_seconds: float
    kind: str | None = None
    action: str | None = None
    # A lost attempt's evidence: the engine's error text and the commit it lost to, so a loss
    # under admission (which should not happen) can be explained from the results file.
    error: str | None = None
    winner: dict[str, Any] | None = None


@dataclass
class PolicyResult:
    policy: str
    attempts: list[AttemptRecord] = field(default_factory=list)
    status: dict[int, str] = field(default_factory=dict)
    wall_seconds: float = 0.0
    table_check: str = ""

    def committed(self, jobs: Sequence[BenchJob]) -> list[BenchJob]:
        return [j for j in jobs if self.status.get(j.index) == "committed"]

    def summary(self) -> dict[str, Any]:
        failed = [a for a in self.attempts if not a.committed]
        ok = [a for a in self.attempts if a.committed]
        kinds: dict[str, int] = {}
        for a in failed:
            kinds[a.kind or "unclassified"] = kinds.get(a.kind or "unclassified", 0) + 1
        statuses = list(self.status.values())
        return {
            "policy": self.policy,
            "wall_seconds": round(self.wall_seconds, 2),
            "jobs_committed": statuses.count("committed"),
            "jobs_skipped": statuses.count("skipped"),
            "jobs_failed": statuses.count("failed"),
            "attempts": len(self.attempts),
            "failed_attempts": len(failed),
            "failures_by_kind": kinds,
            "wasted_executor_seconds": round(sum(a.executor_seconds for a in failed), 2),
            "useful_executor_seconds": round(sum(a.executor_seconds for a in ok), 2),
            "wasted_attempt_wall_seconds": round(sum(a.end - a.start for a in failed), 2),
            "lost_attempts": [
                {"job": a.job, "attempt": a.number, "kind": a.kind, "action": a.action, "error": a.error,
                 "winner": a.winner}
                for a in failed
            ],
            "table_check": self.table_check,
            # every attempt: [job, attempt, start s, end s, committed], seconds from the policy's start
            "attempt_log": [[a.job, a.number, round(a.start, 3), round(a.end, 3), a.committed]
                            for a in sorted(self.attempts, key=lambda a: a.start)],
        }


# --------------------------------------------------------------------------- admission


class Admission(Protocol):
    def pick(self, ready: Sequence[BenchJob]) -> tuple[BenchJob, Any] | None:
        """The first of ``ready`` (queue order) that may start now, with its token."""

    def release(self, token: Any) -> None: ...


class AdmitAll:
    """naive: no admission."""

    def pick(self, ready: Sequence[BenchJob]) -> tuple[BenchJob, Any] | None:
        return (ready[0], None) if ready else None

    def release(self, token: Any) -> None:
        return None


LockKey = tuple[str, "str | None"]  # (table, partition); partition None = the whole table


def keys_overlap(a: LockKey, b: LockKey) -> bool:
    return a[0] == b[0] and (a[1] is None or b[1] is None or a[1] == b[1])


class PartitionLocks:
    """partition-lock: one exclusive lock per (table, partition); a whole-table job locks the table.

    Only the scheduler thread that holds the queue's condition calls it, so a set of held keys
    is the whole lock table. ``pick`` is FIFO-fair: a ready job that cannot get its lock reserves
    it against the jobs behind it, so a stream of partition jobs cannot starve a whole-table job.
    """

    def __init__(self, table: str) -> None:
        self.table = table
        self.held: list[LockKey] = []

    def pick(self, ready: Sequence[BenchJob]) -> tuple[BenchJob, Any] | None:
        waiting: list[LockKey] = []
        for job in ready:
            key: LockKey = (self.table, job.partition)
            if any(keys_overlap(key, other) for other in self.held + waiting):
                waiting.append(key)
                continue
            self.held.append(key)
            return job, key
        return None

    def release(self, token: Any) -> None:
        self.held.remove(token)


class LeaseAdmission:
    """occflow: the real lease store admits a job by the profile's matrix (a waiting request
    keeps its queue place in the store until it is granted)."""

    def __init__(self, store: LeaseStore, table: str, profile: str) -> None:
        self.store, self.table, self.profile = store, table, profile
        self.requests: dict[int, LeaseRequest] = {}

    def pick(self, ready: Sequence[BenchJob]) -> tuple[BenchJob, Any] | None:
        for job in ready:
            request = self.requests.get(job.index)
            if request is None:
                footprint: dict[str, Any] = (
                    {"whole_table": True} if job.partition is None else {"partitions": [f"part={job.partition}"]}
                )
                request = LeaseRequest.create(self.table, job.operation, self.profile, ttl=3600, **footprint)
                self.requests[job.index] = request
            lease = self.store.try_acquire(request)
            if lease is not None:
                del self.requests[job.index]  # a rescheduled job asks again, at the back
                return job, lease
        return None

    def release(self, token: Any) -> None:
        self.store.release(token)


def admission_for(policy: str, table: str, profile: str, store: LeaseStore | None) -> Admission:
    if policy == "naive":
        return AdmitAll()
    if policy == "partition-lock":
        return PartitionLocks(table)
    if policy == "occflow":
        if store is None:
            raise ValueError("the occflow policy needs a lease store")
        return LeaseAdmission(store, table, profile)
    raise ValueError(f"unknown policy {policy!r}; policies: {', '.join(POLICIES)}")


# --------------------------------------------------------------------------- the scheduler

Attempt = Callable[[BenchJob, str], tuple[WriteOutcome, float]]


@dataclass
class Settings:
    profile: str
    table: str
    slots: int
    retries: int
    retry_delay: float
    seed: int


class Scheduler:
    """Runs ``jobs`` on ``settings.slots`` threads under one policy."""

    def __init__(self, policy: str, jobs: list[BenchJob], attempt: Attempt, settings: Settings,
                 store: LeaseStore | None) -> None:
        self.policy, self.jobs, self.attempt, self.settings = policy, jobs, attempt, settings
        self.admission = admission_for(policy, settings.table, settings.profile, store)
        self.result = PolicyResult(policy)
        self.rng = random.Random(settings.seed)
        self.cond = threading.Condition()
        self.queue: list[tuple[BenchJob, float]] = [(job, 0.0) for job in jobs]  # (job, ready at)
        self.failures: dict[int, int] = {}
        self.first_start: dict[int, float] = {}
        self.t0 = time.monotonic()

    def run(self) -> PolicyResult:
        self.t0 = time.monotonic()
        threads = [threading.Thread(target=self.worker, name=f"slot-{i}") for i in range(self.settings.slots)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.result.wall_seconds = time.monotonic() - self.t0
        return self.result

    def take(self) -> tuple[BenchJob, Any] | None:
        with self.cond:
            while len(self.result.status) < len(self.jobs):
                now = time.monotonic()
                picked = self.admission.pick([job for job, ready in self.queue if ready <= now])
                if picked is not None:
                    self.queue = [(j, r) for j, r in self.queue if j is not picked[0]]
                    return picked
                # Deferred: the slot stays free. Admission changes only when a job leaves its
                # slot (which notifies) or a rescheduled job becomes ready, so wait for either
                # (at most 1 s) rather than polling: the policies differ in what they admit,
                # not in how often they ask.
                later = [ready - now for _, ready in self.queue if ready > now]
                self.cond.wait(max(0.01, min([1.0, *later])))
            return None

    def leave(self, job: BenchJob, token: Any, status: str | None, delay: float = 0.0) -> None:
        """The job leaves its slot: committed/skipped/failed (``status``) or back to the queue."""
        with self.cond:
            self.admission.release(token)
            if status is None:
                self.queue.append((job, time.monotonic() + delay))
            else:
                self.result.status[job.index] = status
            self.cond.notify_all()

    def decide(self, job: BenchJob, outcome: WriteOutcome, number: int, now: float) -> tuple[Action, float]:
        s = self.settings
        airflow = (Action.RESCHEDULE if number <= s.retries else Action.FAIL), s.retry_delay
        if self.policy != "occflow":
            return airflow
        classification = outcome.classification or _unclassified(outcome)
        decision = derive_policy(s.profile, job.operation).decide(
            classification, number, now - self.first_start[job.index], self.rng
        )
        if decision.action is Action.DEFAULT:  # not a conflict: Airflow's own retries
            return airflow
        return decision.action, decision.delay_seconds

    def worker(self) -> None:
        while (taken := self.take()) is not None:
            job, token = taken
            while True:  # in-slot retries loop here; everything else leaves the slot
                number = self.failures.get(job.index, 0) + 1
                start = time.monotonic() - self.t0
                self.first_start.setdefault(job.index, start)
                group = f"{self.policy}-j{job.index}-a{number}-{uuid.uuid4().hex[:6]}"
                outcome, executor = self.attempt(job, group)
                end = time.monotonic() - self.t0
                if outcome.committed:
                    self.result.attempts.append(AttemptRecord(job.index, number, start, end, True, executor))
                    self.leave(job, token, "committed")
                    break
                self.failures[job.index] = number
                action, delay = self.decide(job, outcome, number, end)
                self.result.attempts.append(_lost(job, number, start, end, executor, outcome, action))
                if action is Action.RETRY:
                    time.sleep(delay)  # the retry loop sleeps in the task: slot and lease stay held
                    continue
                status = None if action is Action.RESCHEDULE else "skipped" if action is Action.SKIP else "failed"
                self.leave(job, token, status, delay)
                break


def _unclassified(outcome: WriteOutcome) -> Classification:
    return Classification(ConflictKind.NOT_A_CONFLICT, outcome.engine, "unrecognised error")


def _lost(job: BenchJob, number: int, start: float, end: float, executor: float, outcome: WriteOutcome,
          action: Action) -> AttemptRecord:
    classification = outcome.classification or _unclassified(outcome)
    winner = classification.winning_commit
    return AttemptRecord(
        job.index, number, start, end, False, executor, classification.kind.value, action.value,
        None if outcome.error is None else outcome.error.text[:500], None if winner is None else winner.to_dict(),
    )


def run_policy(policy: str, jobs: list[BenchJob], attempt: Attempt, settings: Settings,
               store: LeaseStore | None = None) -> PolicyResult:
    """Run ``jobs`` under ``policy`` (one of ``POLICIES``)."""
    return Scheduler(policy, jobs, attempt, settings, store).run()


# --------------------------------------------------------------------------- figures


def spread(values: Sequence[float]) -> dict[str, Any]:
    """Median and min-max of ``values`` (and the values themselves, in run order)."""
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "runs": [round(v, 3) for v in values]}


def policy_order(repeat: int) -> list[str]:
    """The policies in the order repeat ``repeat`` runs them: rotated, so none always runs first."""
    shift = repeat % len(POLICIES)
    return list(POLICIES[shift:] + POLICIES[:shift])
