"""Discrete-event simulation of write jobs on worker slots, committed by the conflict matrices.

Each table is a ``TableLog`` (``engine.py``): an attempt begins on the table's current version
when it starts and, when its duration has passed, commits or fails by its profile's matrix at
partition granularity. The policy decides which waiting jobs may start and what follows a
failed attempt.

Time is simulated seconds. Events at the same instant run in a fixed order (commits, then
in-slot retries, then attempts starting after an admission wait, then jobs arriving in index
order, then jobs coming back from ``up_for_retry``) and the scheduler runs once after them, so
a run is a pure function of the workload, the policy and the seed.

Airflow's latencies: a job that had to wait for admission (scanned and refused at least once)
starts its attempt ``policy.wait_start_delay`` seconds after it is admitted, holding its slot
and its footprint meanwhile (release-to-grant latency and the re-queue after a deferral); a
rescheduled job is ready again after the policy's delay plus ``policy.requeue_delay``.

``record=False`` keeps no history: metrics are summed as the run goes, and memory follows the
jobs in flight (plus one latency per finished job), not the attempts made.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import random
from collections import Counter, OrderedDict
from collections.abc import Collection, Iterator, Mapping

from ..core.admission_rule import Claim, Running, rule
from ..core.kinds import Classification
from ..core.operations import Operation
from ..core.policy import Action
from ..core.profiles import Profile
from .engine import Footprint, Lost, TableLog, overlap, table_logs
from .metrics import LowerBound, Metrics
from .policies import (
    AGED,
    ORACLE,
    Admission,
    FootprintIndex,
    SimPolicy,
    admission_partitions,
    build_policy,
    commit_order,
)
from .runs import Attempt, JobOutcome, Peaks, Run, oracle_run, workload_bound
from .tally import Tally
from .workload import Job, Workload

# Like Airflow's scheduler, which examines a bounded batch of queued tasks per loop
# (``max_tis_per_query``): a scan never looks further than this into the waiting queue.
SCHEDULER_WINDOW = 512
#: Duration-aware: jobs arriving at one instant are put shortest first among those that exclude
#: each other only in groups up to this size (the pairwise check is quadratic; bigger groups keep
#: arrival order).
SAME_ARRIVAL_GROUP = 64

_FINISH, _RESUME, _BEGIN, _READY, _AGED = 0, 1, 2, 3, 4
_INF = float("inf")


def footprint(job: Job) -> Footprint:
    parts = admission_partitions(job)
    return None if parts is None else frozenset(parts)


# What admission looks at in a job: everything but its identity and its timing. Admission is
# monotone (every ``Admission`` here): a job refused stays refused when more jobs run or wait ahead
# of it, so a pass refuses a job without asking when one of the same shape was refused before it.
Shape = tuple[str, Operation, tuple[str, ...] | None, bool, bool]


def shape(job: Job) -> Shape:
    return job.table, job.operation, job.partitions, job.reads_whole_table, job.protocol_change


class _Live:
    """A job admitted at least once and not finished."""

    __slots__ = ("begin", "computed", "first_start", "footprint", "gates", "number", "start")

    def __init__(self, job: Job) -> None:
        self.footprint = footprint(job)
        self.number = 1  # the attempt running or next to run
        self.first_start = -1.0
        self.start = 0.0
        self.begin = 0
        # Order-aware admission: the running jobs (when it was admitted) that must commit or
        # release before this one commits; ``computed`` >= 0 while its finished attempt waits.
        self.gates: set[int] = set()
        self.computed = -1.0


class _Gates(Mapping[int, Collection[int]]):
    """The running jobs' commit gates as the rule reads them: job -> the jobs it awaits."""

    __slots__ = ("live",)

    def __init__(self, live: dict[int, _Live]) -> None:
        self.live = live

    def __getitem__(self, index: int) -> Collection[int]:
        return self.live[index].gates

    def __iter__(self) -> Iterator[int]:
        return iter(self.live)

    def __len__(self) -> int:
        return len(self.live)


class _Simulation:
    skip_same_shape = True  # the tests turn it off to check that it changes nothing

    def __init__(self, workload: Workload, policy: SimPolicy, jobs: tuple[Job, ...], seed: int,
                 record: bool) -> None:
        self.workload, self.policy, self.jobs, self.record = workload, policy, jobs, record
        self.now = 0.0
        self.rng = random.Random(f"policy:{policy.name}:{seed}")
        self.profiles: dict[str, Profile] = {t.name: t.profile for t in workload.tables}
        self.logs: dict[str, TableLog] = table_logs(self.profiles)
        self.events: list[tuple[float, int, int, int]] = []
        self.seq = itertools.count()
        # Per priority (lower first), insertion-ordered: FIFO by the time a job became ready.
        # OrderedDict, not dict: a dict keeps the slots of deleted keys and iterating walks them,
        # so a queue that loses its head would make every scan cost the queue's history.
        self.waiting: dict[int, OrderedDict[int, tuple[int, Shape]]] = {}  # priority -> {job: (ready number, shape)}
        self.priorities: list[int] = []
        self.ready_number = 0
        self.n_waiting = 0
        self.changed = False  # whether a job was released or became ready since the last pass
        # Whether admission can be full whatever the job (else ``full`` need not be asked).
        self.can_fill = type(policy.admission).full is not Admission.full
        self.refused: set[int] = set()  # waiting jobs a scan turned away
        self.full_mark = 0  # jobs ready up to this number were waiting while admission was full
        self.free = workload.slots
        self.running = FootprintIndex(self.profiles)
        self.blocked = FootprintIndex(self.profiles)
        self.footprints = policy.admission.reads_footprints  # else both indexes stay empty
        self.per_table: Counter[str] = Counter()
        self.live: dict[int, _Live] = {}
        # Order-aware admission: the jobs holding a lease per table, and who waits for whom.
        self.holds_commits = policy.admission.holds_commits
        self.commit_ahead = self.holds_commits and policy.admission.commit_ahead
        self.leases: dict[str, dict[int, None]] = {t: {} for t in self.profiles}
        self.waiters: dict[int, list[int]] = {}
        self.ready_at: dict[int, float] = {}  # maintenance with an age limit: when it became ready
        self.durations = policy.admission.durations if self.holds_commits else None
        self.admitted_now: list[tuple[int, int]] = []  # the jobs the running pass has admitted
        self.tally = Tally()
        self.attempts: list[Attempt] = []
        self.outcomes: dict[int, JobOutcome] = {}
        self.peak_waiting = self.peak_live = self.peak_retained = 0

    def push(self, time: float, order: int, job: int) -> None:
        heapq.heappush(self.events, (time, order, next(self.seq), job))

    def run(self) -> None:
        jobs, events, pop = self.jobs, self.events, heapq.heappop
        arrivals = sorted(range(len(jobs)), key=lambda i: jobs[i].arrival)  # stable: index order
        if self.durations is not None:
            arrivals = self.shortest_first(arrivals)
        times = [*(jobs[i].arrival for i in arrivals), _INF]  # times[k]: when arrivals[k] arrives
        n, nxt = len(arrivals), 0
        while events or nxt < n:
            now = events[0][0] if events and events[0][0] < times[nxt] else times[nxt]
            self.now = now
            while events and events[0][0] == now and events[0][1] < _READY:
                _, order, _, index = pop(events)
                if order == _FINISH:
                    self.finish(index)
                else:  # _RESUME and _BEGIN: the job's next attempt starts in its slot
                    self.start(index)
            while times[nxt] == now:
                self.enqueue(arrivals[nxt])
                nxt += 1
            while events and events[0][0] == now:
                _, order, _, index = pop(events)
                if order == _READY:
                    self.enqueue(index)
                else:
                    self.promote(index)
            self.schedule()

    def shortest_first(self, arrivals: list[int]) -> list[int]:
        """Arrival order, but of jobs that arrived together and exclude each other (``APART``),
        the shorter first (``Durations.goes_first``, as the store skips a longer request ahead
        that arrived together); others keep their order (running long non-conflicting jobs
        first is what keeps slots busy). Groups over ``SAME_ARRIVAL_GROUP`` keep arrival order."""
        assert self.durations is not None
        seconds, jobs, out = self.durations.seconds, self.jobs, []
        for _, group in itertools.groupby(arrivals, key=lambda i: jobs[i].arrival):
            members = list(group)
            if len(members) == 1 or len(members) > SAME_ARRIVAL_GROUP:
                out += members
                continue

            def before(a: int, b: int) -> bool:
                ja, jb = jobs[a], jobs[b]
                if ja.table != jb.table or not overlap(footprint(ja), footprint(jb)):
                    return False
                if jb.operation not in commit_order(self.profiles[ja.table]).exclusive[ja.operation]:
                    return False
                return (seconds(ja.estimate), a) < (seconds(jb.estimate), b)

            left = members
            while left:  # the first job in arrival order that no shorter excluding job must precede
                pick = next(m for m in left if not any(before(o, m) for o in left if o != m))
                out.append(pick)
                left = [m for m in left if m != pick]
        return out

    # -- waiting and admission
    def enqueue(self, index: int, priority: int | None = None) -> None:
        job = self.jobs[index]
        if priority is None:
            priority = self.policy.admission.priority(job)
            limit = self.policy.admission.age_limit(job)
            if limit is not None:
                self.ready_at[index] = self.now
                self.push(self.now + limit, _AGED, index)
        queue = self.waiting.get(priority)
        if queue is None:
            queue = self.waiting[priority] = OrderedDict()
            bisect.insort(self.priorities, priority)
        self.ready_number += 1
        queue[index] = (self.ready_number, shape(job))
        self.n_waiting += 1
        self.changed = True
        if self.n_waiting > self.peak_waiting:
            self.peak_waiting = self.n_waiting

    def promote(self, index: int) -> None:
        """A job waiting past its age limit goes ahead of every other waiting job (``AGED``)."""
        job = self.jobs[index]
        priority = self.policy.admission.priority(job)
        queue = self.waiting.get(priority)
        limit = self.policy.admission.age_limit(job)
        if queue is None or index not in queue or limit is None or self.ready_at.get(index, _INF) + limit > self.now:
            return  # admitted meanwhile (or waiting again since, with its own age event)
        del queue[index]
        self.n_waiting -= 1
        self.refused.discard(index)
        self.enqueue(index, AGED)

    def scan(self) -> Iterator[tuple[int, int, tuple[int, Shape]]]:
        """The waiting jobs one pass may look at: (priority, job, (ready number, shape)), in order.

        Lazy, so a pass that stops early costs what it looked at; nothing is added to or removed
        from the queues while it runs (``schedule`` deletes the admitted jobs afterwards)."""
        left = SCHEDULER_WINDOW
        for priority in self.priorities:
            for index, entry in self.waiting[priority].items():
                if not left:
                    return
                left -= 1
                yield priority, index, entry

    def schedule(self) -> None:
        # A pass is a function of the running jobs and the queues: if neither changed since the
        # last one (no job released, none ready), it would admit nothing and refuse the same jobs.
        if not self.free or not self.n_waiting or not self.changed:
            return
        self.changed = False
        admission, running, per_table, blocked = self.policy.admission, self.running, self.per_table, self.blocked
        tables = len(self.logs)
        if self.can_fill and admission.full(per_table, tables):  # only an admission changes it
            self.full_mark = self.ready_number  # every job waiting now waits on admission
            return
        admitted: list[tuple[int, int]] = []
        self.admitted_now = admitted
        turned_away: list[Job] = []
        refused_shapes: set[Shape] = set()
        jobs, refused, skip_same_shape, can_fill = self.jobs, self.refused, self.skip_same_shape, self.can_fill
        for priority, index, (ready, job_shape) in self.scan():
            if skip_same_shape and job_shape in refused_shapes:
                # Like a job refused earlier in this pass, with more running and waiting ahead of
                # it now: refused too, and adding it to ``blocked`` would change no answer.
                refused.add(index)
                continue
            job = jobs[index]
            edges: tuple[list[int], list[int]] | None = None  # set only where commits are held
            if admission.admits(job, running, per_table, blocked) and (
                    not self.holds_commits or (edges := self.commit_edges(index, job)) is not None):
                admitted.append((priority, index))
                self.admit(index, index in refused or ready <= self.full_mark)
                if edges is not None:
                    self.gate(index, job, *edges)
                if not self.free:
                    break
                if can_fill and admission.full(per_table, tables):
                    self.full_mark = self.ready_number
                    break
            else:
                if self.footprints and (priority == AGED or not admission.yields(job)):
                    turned_away.append(job)
                    blocked.add(job)
                refused.add(index)
                refused_shapes.add(job_shape)
        for priority, index in admitted:
            del self.waiting[priority][index]
            refused.discard(index)
        self.n_waiting -= len(admitted)
        if self.footprints:
            for job in turned_away:
                blocked.remove(job)

    def admit(self, index: int, waited: bool) -> None:
        job = self.jobs[index]
        self.free -= 1
        if self.footprints:
            self.running.add(job)
        self.per_table[job.table] += 1
        if index not in self.live:
            self.live[index] = _Live(job)
            self.peak_live = max(self.peak_live, len(self.live))
        delay = self.policy.wait_start_delay if waited else 0.0
        if delay > 0:
            self.live[index].start = self.now + delay  # when it will begin: its estimated end counts from there
            self.tally.held += delay  # the slot and the footprint are held, nothing runs yet
            self.push(self.now + delay, _BEGIN, index)
        else:
            self.start(index)

    def commit_edges(self, index: int, job: Job) -> tuple[list[int], list[int]] | None:
        """Order-aware admission by the one rule (``core.admission_rule.rule``): the leases
        ``job`` must commit after and those that must commit after it; None if the rule refuses
        (a lease it must commit ahead of already waits at its gate, or an earlier waiting job
        waits for that lease, or holding it would close a cycle of commit gates).

        ``admits`` has already refused a job that pairs ``APART`` with a running or an earlier
        waiting job (the footprint indexes read the same rule): only the running jobs it may be
        ordered with are handed to the rule, and the waiting queue is asked through its index."""
        profile = self.profiles[job.table]
        order = commit_order(profile)
        after, before = order.after[job.operation], order.before[job.operation]
        if not after and not before:
            return [], []
        jobs, live, mine, durations, now = self.jobs, self.live, footprint(job), self.durations, self.now

        def remaining(other: int) -> float | None:
            # Estimated, not its drawn duration: admission knows what past runs say, not the future.
            if durations is None or live[other].computed >= 0:
                return None
            return max(0.0, live[other].start + durations.seconds(jobs[other].estimate) - now)

        ordered = [
            Running(other, Claim(profile, jobs[other].operation, live[other].footprint), True,
                    live[other].computed >= 0, remaining(other), jobs[other].estimate)
            for other in self.leases[job.table]
            if (jobs[other].operation in after or jobs[other].operation in before)
            and overlap(mine, live[other].footprint)
        ]
        if not ordered:
            return [], []
        ruling = rule(
            Claim(profile, job.operation, mine), ordered, commit_gate=True, gates=_Gates(live),
            commit_ahead=self.commit_ahead, waited_for=lambda other: self.blocked.conflicts(jobs[other], "exclusive"),
            durations=durations, estimate=job.estimate, slot_wanted=self.slot_wanted(),
        )
        return (list(ruling.awaits), list(ruling.holds)) if ruling.granted else None

    def slot_wanted(self) -> bool:
        """Whether a job waits for a worker slot besides the one being admitted (``rule``'s
        ``slot_wanted``): while none does, holding a commit at a gate costs no one a slot."""
        return self.n_waiting - len(self.admitted_now) - 1 >= self.free

    def gate(self, index: int, job: Job, first: list[int], then: list[int]) -> None:
        """Hold ``job``'s commit until ``first`` have committed or released, and ``then``'s
        until ``job`` has. Edges are only added when they close no cycle (``commit_edges``)."""
        live = self.live[index]
        for other in first:
            live.gates.add(other)
            self.waiters.setdefault(other, []).append(index)
        for other in then:
            self.live[other].gates.add(index)
        if then:
            self.waiters.setdefault(index, []).extend(then)
        self.leases[job.table][index] = None

    def release(self, job: Job, index: int) -> None:
        self.changed = True
        self.free += 1
        if self.footprints:
            self.running.remove(job)
        self.per_table[job.table] -= 1
        if self.holds_commits:
            del self.leases[job.table][index]
            mine = self.live[index]
            for other in mine.gates:  # released before its gates opened (cannot happen today)
                self.waiters[other].remove(index)
            mine.gates.clear()
            for waiter in self.waiters.pop(index, ()):
                live = self.live[waiter]
                live.gates.discard(index)
                if not live.gates and live.computed >= 0:
                    self.commit(waiter)  # its attempt was done: it commits now, right after this one

    # -- attempts
    def start(self, index: int) -> None:
        job, live = self.jobs[index], self.live[index]
        if live.first_start < 0:
            live.first_start = self.now
        live.start = self.now
        live.begin = self.logs[job.table].begin()
        self.push(self.now + job.duration, _FINISH, index)

    def finish(self, index: int) -> None:
        live = self.live[index]
        if live.gates:
            live.computed = self.now  # the work is done; the commit waits at its gate
            return
        self.commit(index)

    def commit(self, index: int) -> None:
        job, live, tally = self.jobs[index], self.live[index], self.tally
        held = 0.0
        if live.computed >= 0:
            held, live.computed = self.now - live.computed, -1.0
            tally.held += held  # the slot and the lease are held, nothing runs
        log = self.logs[job.table]
        lost = log.commit(live.begin, job.operation, live.footprint, index)
        if log.retained > self.peak_retained:
            self.peak_retained = log.retained
        tally.attempts += 1
        if lost is None:
            tally.useful += self.now - live.start - held
            if self.record:
                self.attempts.append(Attempt(index, live.number, live.start, self.now, True, None, None, held))
            self.release(job, index)
            self.done(index, "committed")
            return
        tally.wasted += self.now - live.start - held
        tally.failed_attempts += 1
        tally.kinds[lost.kind.value] += 1
        self.react(index, job, live, lost, held)

    def react(self, index: int, job: Job, live: _Live, lost: Lost, held: float) -> None:
        classification = Classification(
            kind=lost.kind, engine="simulator",
            reason=f"lost to {self.jobs[lost.winner].name}, which committed version {lost.version} first",
        )
        decision = self.policy.reaction.decide(
            job, self.profiles[job.table], classification, live.number, self.now - live.first_start, self.rng
        )
        if self.record:
            self.attempts.append(Attempt(index, live.number, live.start, self.now, False, lost.kind.value,
                                         decision.action.value, held))
        live.number += 1
        if decision.action is Action.RETRY:
            # the operator's retry loop sleeps inside the task: the slot and the lease stay held.
            self.tally.held += decision.delay_seconds
            self.push(self.now + decision.delay_seconds, _RESUME, index)
            return
        self.release(job, index)
        if decision.action is Action.RESCHEDULE:
            self.push(self.now + decision.delay_seconds + self.policy.requeue_delay, _READY, index)
        else:
            self.done(index, "skipped" if decision.action is Action.SKIP else "failed")

    def done(self, index: int, status: str) -> None:
        tally = self.tally
        del self.live[index]
        tally.statuses[status] += 1
        tally.latencies.append(self.now - self.jobs[index].arrival)
        tally.makespan = max(tally.makespan, self.now)
        if self.record:
            self.outcomes[index] = JobOutcome(index, status, self.now)

    # -- results
    def metrics(self, bound: LowerBound) -> Metrics:
        return self.tally.metrics(self.policy, self.workload.slots, len(self.jobs), bound)

    def peaks(self) -> Peaks:
        return Peaks(self.peak_waiting, self.peak_live, self.peak_retained)


def simulate(workload: Workload, policy: str | SimPolicy, seed: int = 0, record: bool = True) -> Run:
    """One run of ``workload`` under ``policy``; ``oracle`` gives the lower bound as a row.

    ``record=False``: no per-attempt history (``Run.attempts`` and ``Run.outcomes`` are empty),
    the same metrics, for big runs."""
    jobs = workload.jobs(seed)
    bound = workload_bound(workload, jobs)
    if policy == ORACLE:
        return oracle_run(workload, jobs, bound, seed)
    sim_policy = policy if isinstance(policy, SimPolicy) else build_policy(policy, workload)
    sim = _Simulation(workload, sim_policy, jobs, seed, record)
    sim.run()
    outcomes = tuple(sim.outcomes[i] for i in sorted(sim.outcomes))
    return Run(workload.name, sim_policy.name, seed, workload.slots, jobs, tuple(sim.attempts), outcomes,
               bound, sim.metrics(bound), sim.peaks())
