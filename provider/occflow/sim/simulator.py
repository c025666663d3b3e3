"""Discrete-event simulation of write jobs on worker slots, committed by the core's engine.

Each table is a ``ReferenceTable`` with its profile: an attempt begins a transaction on the
latest snapshot when it starts and commits when its duration has passed, so every conflict is
decided by the same validation code that the engine's tests check against the specs. The
policy only decides when a job may start and what follows a failed attempt.

Time is simulated seconds. Events at the same instant run in a fixed order (commits, then
in-slot retries, then jobs becoming ready) and the scheduler runs once after them, so a run is
a pure function of the workload, the policy and the seed.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from dataclasses import dataclass

from ..core.errors import CommitConflict
from ..core.kinds import Classification
from ..core.policy import Action
from ..core.profiles import Profile
from ..core.reference import ReferenceTable, Transaction
from .metrics import LowerBound, Metrics, lower_bound, percentile
from .policies import ORACLE, FootprintIndex, SimPolicy, build_policy
from .workload import Job, Workload

# Like Airflow's scheduler, which examines a bounded batch of queued tasks per loop
# (``max_tis_per_query``): a scan never looks further than this into the waiting queue.
SCHEDULER_WINDOW = 512

_FINISH, _RESUME, _READY = 0, 1, 2


@dataclass(frozen=True)
class Attempt:
    job: int
    number: int  # 1 = the job's first attempt
    start: float
    end: float
    committed: bool
    kind: str | None  # the conflict kind of a failed attempt
    action: str | None  # what the policy decided after a failed attempt


@dataclass(frozen=True)
class JobOutcome:
    job: int
    status: str  # committed | skipped | failed
    finished: float


@dataclass(frozen=True)
class Run:
    workload: str
    policy: str
    seed: int
    slots: int
    jobs: tuple[Job, ...]
    attempts: tuple[Attempt, ...]
    outcomes: tuple[JobOutcome, ...]
    bound: LowerBound
    metrics: Metrics


def workload_bound(workload: Workload, jobs: tuple[Job, ...]) -> LowerBound:
    return lower_bound(
        jobs,
        workload.slots,
        {t.name: t.profile for t in workload.tables},
        {t.name: t.partitions for t in workload.tables},
    )


class _Simulation:
    def __init__(self, workload: Workload, policy: SimPolicy, jobs: tuple[Job, ...], seed: int) -> None:
        self.workload, self.policy, self.jobs = workload, policy, jobs
        self.now = 0.0
        self.rng = random.Random(f"policy:{policy.name}:{seed}")
        self.profiles: dict[str, Profile] = {t.name: t.profile for t in workload.tables}
        self.tables = {
            t.name: ReferenceTable(t.profile, partitions=t.partitions, clock=lambda: self.now)
            for t in workload.tables
        }
        self.events: list[tuple[float, int, int, int]] = []
        self.seq = itertools.count()
        self.waiting: dict[int, None] = {}  # insertion-ordered: FIFO by the time a job became ready
        self.free = workload.slots
        self.running = FootprintIndex(self.profiles)
        self.per_table: Counter[str] = Counter()
        self.txns: dict[int, Transaction] = {}
        self.started_at: dict[int, float] = {}
        self.first_start: dict[int, float] = {}
        self.failures: Counter[int] = Counter()
        self.attempts: list[Attempt] = []
        self.outcomes: dict[int, JobOutcome] = {}
        self.held = 0.0

    def push(self, time: float, order: int, job: int) -> None:
        heapq.heappush(self.events, (time, order, next(self.seq), job))

    def run(self) -> None:
        for job in self.jobs:
            self.push(job.arrival, _READY, job.index)
        while self.events:
            self.now = self.events[0][0]
            while self.events and self.events[0][0] == self.now:
                _, order, _, index = heapq.heappop(self.events)
                if order == _FINISH:
                    self.finish(index)
                elif order == _RESUME:
                    self.start(index)
                else:
                    self.waiting[index] = None
            self.schedule()

    # -- slots and admission
    def schedule(self) -> None:
        if not self.free or not self.waiting:
            return
        blocked = FootprintIndex(self.profiles)
        started = []
        admission, tables = self.policy.admission, len(self.tables)
        for index in itertools.islice(self.waiting, SCHEDULER_WINDOW):
            if not self.free or admission.full(self.per_table, tables):
                break
            job = self.jobs[index]
            if admission.admits(job, self.running, self.per_table, blocked):
                started.append(index)
                self.free -= 1
                self.running.add(job)
                self.per_table[job.table] += 1
                self.start(index)
            else:
                blocked.add(job)
        for index in started:
            del self.waiting[index]

    def release(self, job: Job) -> None:
        self.free += 1
        self.running.remove(job)
        self.per_table[job.table] -= 1

    # -- attempts
    def start(self, index: int) -> None:
        job = self.jobs[index]
        self.first_start.setdefault(index, self.now)
        number = self.failures[index] + 1
        self.txns[index] = self.tables[job.table].begin(
            job.operation,
            job.partitions,
            reads_whole_table=job.reads_whole_table,
            protocol_change=job.protocol_change,
            txn_id=f"{job.name}#{number}",
        )
        self.started_at[index] = self.now
        self.push(self.now + job.duration, _FINISH, index)

    def finish(self, index: int) -> None:
        job = self.jobs[index]
        txn = self.txns.pop(index)
        start = self.started_at[index]
        number = self.failures[index] + 1
        try:
            txn.commit()
        except CommitConflict as conflict:
            self.failures[index] += 1
            classification = Classification(
                kind=conflict.kind, engine="reference", reason=str(conflict), winning_commit=conflict.winner
            )
            decision = self.policy.reaction.decide(
                job,
                self.profiles[job.table],
                classification,
                self.failures[index],
                self.now - self.first_start[index],
                self.rng,
            )
            self.attempts.append(
                Attempt(index, number, start, self.now, False, conflict.kind.value, decision.action.value)
            )
            if decision.action is Action.RETRY:
                # the operator's retry loop sleeps inside the task: the slot and the lease stay held.
                self.held += decision.delay_seconds
                self.push(self.now + decision.delay_seconds, _RESUME, index)
                return
            self.release(job)
            if decision.action is Action.RESCHEDULE:
                self.push(self.now + decision.delay_seconds, _READY, index)
            else:
                status = "skipped" if decision.action is Action.SKIP else "failed"
                self.outcomes[index] = JobOutcome(index, status, self.now)
            return
        self.attempts.append(Attempt(index, number, start, self.now, True, None, None))
        self.release(job)
        self.outcomes[index] = JobOutcome(index, "committed", self.now)

    # -- results
    def metrics(self, bound: LowerBound) -> Metrics:
        useful = sum(a.end - a.start for a in self.attempts if a.committed)
        wasted = sum(a.end - a.start for a in self.attempts if not a.committed)
        makespan = max((o.finished for o in self.outcomes.values()), default=0.0)
        slot_seconds = self.workload.slots * makespan
        statuses = Counter(o.status for o in self.outcomes.values())
        latencies = [o.finished - self.jobs[o.job].arrival for o in self.outcomes.values()]
        return Metrics(
            policy=self.policy.name,
            makespan=makespan,
            lower_bound=bound.value,
            makespan_over_bound=makespan / bound.value if bound.value else 0.0,
            useful_seconds=useful,
            wasted_seconds=wasted,
            busy_slot_seconds=useful + wasted,
            held_waiting_seconds=self.held,
            slot_seconds=slot_seconds,
            useful_fraction=useful / slot_seconds if slot_seconds else 0.0,
            wasted_fraction=wasted / (useful + wasted) if useful + wasted else 0.0,
            attempts=len(self.attempts),
            failed_attempts=sum(not a.committed for a in self.attempts),
            jobs=len(self.jobs),
            committed=statuses["committed"],
            skipped=statuses["skipped"],
            failed=statuses["failed"],
            latency_p50=percentile(latencies, 0.5),
            latency_p95=percentile(latencies, 0.95),
            failures_by_kind=dict(sorted(Counter(a.kind for a in self.attempts if a.kind).items())),
            description=self.policy.describe(),
        )


def simulate(workload: Workload, policy: str | SimPolicy, seed: int = 0) -> Run:
    """One run of ``workload`` under ``policy``; ``oracle`` gives the lower bound as a row."""
    jobs = workload.jobs(seed)
    bound = workload_bound(workload, jobs)
    if policy == ORACLE:
        return _oracle(workload, jobs, bound, seed)
    sim_policy = policy if isinstance(policy, SimPolicy) else build_policy(policy, workload)
    sim = _Simulation(workload, sim_policy, jobs, seed)
    sim.run()
    outcomes = tuple(sim.outcomes[i] for i in sorted(sim.outcomes))
    return Run(workload.name, sim_policy.name, seed, workload.slots, jobs, tuple(sim.attempts), outcomes,
               bound, sim.metrics(bound))


def _oracle(workload: Workload, jobs: tuple[Job, ...], bound: LowerBound, seed: int) -> Run:
    """Not a schedule: the lower bound, with every job's work done once and nothing wasted."""
    work = sum(j.duration for j in jobs)
    slot_seconds = workload.slots * bound.value
    metrics = Metrics(
        policy=ORACLE,
        makespan=bound.value,
        lower_bound=bound.value,
        makespan_over_bound=1.0,
        useful_seconds=work,
        wasted_seconds=0.0,
        busy_slot_seconds=work,
        held_waiting_seconds=0.0,
        slot_seconds=slot_seconds,
        useful_fraction=work / slot_seconds if slot_seconds else 0.0,
        wasted_fraction=0.0,
        attempts=len(jobs),
        failed_attempts=0,
        jobs=len(jobs),
        committed=len(jobs),
        skipped=0,
        failed=0,
        latency_p50=None,
        latency_p95=None,
        failures_by_kind={},
        description=f"oracle: the lower bound on the makespan ({_bound_text(bound)}), not a schedule",
    )
    return Run(workload.name, ORACLE, seed, workload.slots, jobs, (), (), bound, metrics)


def _bound_text(bound: LowerBound) -> str:
    return f"work/slots {bound.work:.0f}s, conflict chain {bound.chain:.0f}s, longest job {bound.longest:.0f}s"
