"""What a run measured, and the lower bound on the makespan that no schedule can beat."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..core.operations import Operation
from ..core.profiles import Profile
from .workload import Job


@dataclass(frozen=True)
class LowerBound:
    """The largest of three bounds; each holds for any schedule that commits every job.

    - ``work``: the earliest arrival plus all the work spread over every slot;
    - ``chain``: on one partition, jobs whose operations fail each other in either commit order
      (both matrix cells fail) can never run at the same time, so they run one after another,
      each not before it arrives (the best such sequence: earliest arrival first);
    - ``longest``: a job cannot finish before its arrival plus its duration.
    """

    work: float
    chain: float
    longest: float
    chain_footprint: str

    @property
    def value(self) -> float:
        return max(self.work, self.chain, self.longest)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "value": self.value}


def _mutual(profile: Profile, a: Operation, b: Operation) -> bool:
    return profile.later_fails(a, b) and profile.later_fails(b, a)


def _maximal_cliques(profile: Profile, present: tuple[Operation, ...]) -> list[tuple[Operation, ...]]:
    """Sets of operations that pairwise (and each with itself) fail each other, maximal ones only:
    adding jobs to a chain never shortens it."""
    ops = [op for op in present if _mutual(profile, op, op)]
    cliques = [
        set(combo)
        for size in range(len(ops), 0, -1)
        for combo in itertools.combinations(ops, size)
        if all(_mutual(profile, a, b) for a, b in itertools.combinations(combo, 2))
    ]
    maximal = [c for i, c in enumerate(cliques) if not any(c < other for other in cliques[:i])]
    return [tuple(op for op in ops if op in c) for c in maximal]


def _single_machine_makespan(jobs: list[tuple[float, float]]) -> float:
    """Jobs that must run one at a time, each not before its arrival: earliest arrival first
    without idling is optimal for the makespan (1|r_j|C_max)."""
    end = 0.0
    for arrival, duration in sorted(jobs):
        end = max(end, arrival) + duration
    return end


def lower_bound(jobs: Sequence[Job], slots: int, profiles: Mapping[str, Profile],
                partitions: Mapping[str, Sequence[str]]) -> LowerBound:
    if not jobs:
        return LowerBound(0.0, 0.0, 0.0, "")
    work = min(j.arrival for j in jobs) + sum(j.duration for j in jobs) / slots
    longest = max(j.arrival + j.duration for j in jobs)
    best, where = 0.0, ""
    for table, profile in profiles.items():
        # Per partition and operation: the (arrival, duration) of the jobs there.
        load: dict[str, dict[Operation, list[tuple[float, float]]]] = {}
        for job in jobs:
            if job.table != table:
                continue
            whole = job.partitions is None or job.operation is Operation.ALTER_METADATA
            for p in partitions[table] if whole else job.partitions or ():
                load.setdefault(p, {}).setdefault(job.operation, []).append((job.arrival, job.duration))
        for p, per_op in load.items():
            for clique in _maximal_cliques(profile, tuple(per_op)):
                value = _single_machine_makespan([j for op in clique for j in per_op[op]])
                if value > best:
                    best = value
                    where = f"{table}/{p or '(unpartitioned)'}: {', '.join(op.value for op in clique)}"
    return LowerBound(work, best, longest, where)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass(frozen=True)
class Metrics:
    policy: str
    makespan: float
    lower_bound: float
    makespan_over_bound: float
    useful_seconds: float
    wasted_seconds: float
    busy_slot_seconds: float  # slot time spent running attempts: useful + wasted
    held_waiting_seconds: float  # slot time held while sleeping between in-task retries
    slot_seconds: float  # slots x makespan
    useful_fraction: float  # useful / slot_seconds
    wasted_fraction: float  # wasted / busy_slot_seconds
    attempts: int
    failed_attempts: int
    jobs: int
    committed: int
    skipped: int
    failed: int
    latency_p50: float | None
    latency_p95: float | None
    failures_by_kind: dict[str, int]
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(self).items()}
