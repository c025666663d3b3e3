"""What one simulated run produced: its attempts, each job's outcome, the peaks it held, and the
proven lower bound it is measured against (``metrics.lower_bound``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .metrics import LowerBound, Metrics, lower_bound
from .policies import ORACLE
from .workload import Job, Workload


@dataclass(frozen=True, slots=True)
class Attempt:
    job: int
    number: int  # 1 = the job's first attempt
    start: float
    end: float  # when it committed or failed (after its commit gate opened, if it was held)
    committed: bool
    kind: str | None  # the conflict kind of a failed attempt
    action: str | None  # what the policy decided after a failed attempt
    held: float = 0.0  # seconds its commit waited at its gate (order-aware admission)


@dataclass(frozen=True, slots=True)
class JobOutcome:
    job: int
    status: str  # committed | skipped | failed
    finished: float


@dataclass(frozen=True)
class Peaks:
    """The most the run held at once: what memory follows with ``record=False``."""

    waiting: int = 0  # jobs ready and not admitted
    live: int = 0  # jobs admitted at least once and not finished (running or rescheduled)
    retained_commits: int = 0  # commits kept by the largest table log


@dataclass(frozen=True)
class Run:
    workload: str
    policy: str
    seed: int
    slots: int
    jobs: tuple[Job, ...]
    attempts: tuple[Attempt, ...]  # () with record=False
    outcomes: tuple[JobOutcome, ...]  # () with record=False
    bound: LowerBound
    metrics: Metrics
    peaks: Peaks = field(default_factory=Peaks)


def workload_bound(workload: Workload, jobs: tuple[Job, ...]) -> LowerBound:
    return lower_bound(
        jobs,
        workload.slots,
        {t.name: t.profile for t in workload.tables},
        {t.name: t.partitions for t in workload.tables},
    )


def oracle_run(workload: Workload, jobs: tuple[Job, ...], bound: LowerBound, seed: int) -> Run:
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


__all__ = ["Attempt", "JobOutcome", "Peaks", "Run", "oracle_run", "workload_bound"]
