"""What a run measured, and the lower bound on the makespan that no schedule can beat."""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..core.operations import Operation
from ..core.profiles import Profile
from .policies import admission_partitions
from .workload import Job


@dataclass(frozen=True)
class LowerBound:
    """The largest of three bounds on a run's makespan (docs/simulator.md has the proofs).

    - ``work``: for any arrival time t, the jobs arriving at or after t run at least one full
      attempt each after t, at most ``slots`` at a time;
    - ``chain``: committed jobs on one partition whose operations fail each other in both commit
      orders never commit from overlapping attempts, so their committing attempts run one after
      another, each not before its job arrives;
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


def lower_bound(
    jobs: Sequence[Job],
    slots: int,
    profiles: Mapping[str, Profile],
    partitions: Mapping[str, Sequence[str]],
    committed: Collection[int] | None = None,
) -> LowerBound:
    """The bound for a run of ``jobs`` on ``slots`` worker slots.

    ``committed``: the positions in ``jobs`` of the jobs that run committed (None: every job),
    for the chain term only; ``work`` and ``longest`` count every job, committed or not.
    ``partitions`` only names the chain's footprint: a whole-table job overlaps every job of
    its table, whatever partitions the table lists.
    """
    if slots < 1:
        raise ValueError(f"slots must be at least 1, got {slots}")
    if not jobs:
        if committed:
            raise ValueError("committed names jobs, but there are none")
        return LowerBound(0.0, 0.0, 0.0, "")
    # Sorted once: every list below keeps this order, so none is sorted again.
    arrivals = [j.arrival for j in jobs]
    durations = [j.duration for j in jobs]
    ordered = sorted(range(len(jobs)), key=arrivals.__getitem__)
    work = _release_bound([arrivals[i] for i in ordered], [durations[i] for i in ordered], slots)
    longest = max(map(operator.add, arrivals, durations))
    if committed is not None:
        kept = set(committed)
        strays = sorted(i for i in kept if not 0 <= i < len(jobs))
        if strays:
            raise ValueError(f"committed names job {strays[0]}, but there are only {len(jobs)} jobs (0-{len(jobs) - 1})")
        ordered = [i for i in ordered if i in kept]
    chosen = [jobs[i] for i in ordered]
    best, where = 0.0, ""
    for table, profile in profiles.items():
        value, place = _table_chain(profile, [j for j in chosen if j.table == table])
        if value > best:
            best, where = value, f"{table}/{place}"
    return LowerBound(work, best, longest, where)


def _release_bound(arrivals: list[float], durations: list[float], machines: int = 1) -> float:
    """max over arrival times t of t + (work of the jobs arriving at or after t) / machines.

    On one machine this is the makespan of earliest-arrival-first, the optimum of 1|r_j|C_max.
    The jobs' ``arrivals`` ascending, ``durations`` in the same order."""
    if not arrivals:
        return 0.0
    tails = [*itertools.accumulate(reversed(durations))][::-1]
    if machines != 1:
        tails = [t / machines for t in tails]
    return float(max(map(operator.add, arrivals, tails)))


class _Release:
    """Jobs with arrival times, prepared for ``t + work arriving at or after t``.

    ``arrivals`` ascending, ``tails[i]`` the work from position i on (with a final 0), and the
    ``records``: the positions whose ``arrivals[i] + tails[i]`` beats every earlier one. With
    other jobs added, only records can still give the maximum: an earlier position with a
    value as high also counts at least as many of the added jobs."""

    __slots__ = ("arrivals", "record_arrivals", "records", "tails", "value")

    def __init__(self, arrivals: list[float], durations: list[float]) -> None:  # in arrival order
        self.arrivals = arrivals
        self.tails = [*itertools.accumulate(reversed(durations))][::-1] + [0.0]
        values = list(map(operator.add, self.arrivals, self.tails))
        peaks = [-math.inf, *itertools.accumulate(values, max)]
        keep = [*itertools.compress(range(len(values)), map(operator.gt, values, peaks))]
        self.record_arrivals = [self.arrivals[i] for i in keep]
        self.records = [values[i] for i in keep]
        self.value = self.records[-1] if keep else 0.0

    def share(self, t: float) -> float:
        """The work arriving at or after ``t``."""
        return self.tails[bisect.bisect_left(self.arrivals, t)]


def _joined(whole: _Release, own: _Release) -> float:
    """The release bound over a table's whole-table jobs and one partition's own jobs."""
    best = max(whole.value, own.value)
    for r, value in zip(own.record_arrivals, own.records, strict=True):
        best = max(best, value + whole.share(r))
    if len(whole.records) <= len(own.arrivals):
        for r, value in zip(whole.record_arrivals, whole.records, strict=True):
            best = max(best, value + own.share(r))
        return best
    # Many whole-table records (a table with many partitions): between two of the partition's
    # arrivals its share is constant, so the last whole-table record up to each is the best there.
    for cut in (*own.arrivals, math.inf):
        k = bisect.bisect_right(whole.record_arrivals, cut) - 1
        if k >= 0:
            best = max(best, whole.records[k] + own.share(whole.record_arrivals[k]))
    return best


def _table_chain(profile: Profile, jobs: Sequence[Job]) -> tuple[float, str]:
    """The longest chain on one table (``jobs`` in arrival order): (length, "partition: operations")."""
    if not jobs:
        return 0.0, ""
    present = frozenset(job.operation for job in jobs)
    cliques = _maximal_cliques(profile, present)
    whole, per_part = _by_footprint(jobs)
    best, where = 0.0, ""
    for clique in cliques:
        ops, name = frozenset(clique), ", ".join(op.value for op in clique)
        keep = None if present <= ops else ops  # None: every job's operation is in the clique
        spread = _Release(*_times(whole, keep))
        if spread.value > best:
            best, where = spread.value, f"(whole table): {name}"
        for p, entries in per_part.items():
            arrivals, durations = _times(entries, keep)
            if spread.records:
                value = _joined(spread, _Release(arrivals, durations))
            else:
                value = _release_bound(arrivals, durations)
            if value > best:
                best, where = value, f"{p or '(unpartitioned)'}: {name}"
    return best, where


def _by_footprint(jobs: Sequence[Job]) -> tuple[list[Job], dict[str, list[Job]]]:
    """The whole-table jobs, and the jobs on each partition (a job on many is in each), in order."""
    whole: list[Job] = []
    per_part: defaultdict[str, list[Job]] = defaultdict(list)
    for job in jobs:
        parts = admission_partitions(job)
        if parts is None:
            whole.append(job)
        elif len(parts) == 1:
            per_part[parts[0]].append(job)
        else:
            for p in set(parts):
                per_part[p].append(job)
    return whole, per_part


def _times(jobs: list[Job], ops: frozenset[Operation] | None) -> tuple[list[float], list[float]]:
    """The arrivals and the durations of ``jobs`` whose operation is in ``ops`` (None: all)."""
    if ops is not None:
        jobs = [job for job in jobs if job.operation in ops]
    return [job.arrival for job in jobs], [job.duration for job in jobs]


def _mutual(profile: Profile, a: Operation, b: Operation) -> bool:
    """Either order fails: the engine commits at most one of two overlapping attempts."""
    return profile.later_fails(a, b) and profile.later_fails(b, a)


def _maximal_cliques(profile: Profile, present: frozenset[Operation]) -> tuple[tuple[Operation, ...], ...]:
    """The maximal sets of ``present`` operations that pairwise, and each with itself, fail
    each other in both orders (Bron-Kerbosch; a matrix has at most a dozen operations)."""
    key = (profile.name, present)
    found = _CLIQUES.get(key)
    if found is None:
        ops = [op for op in profile.operations if op in present and _mutual(profile, op, op)]
        near = {a: {b for b in ops if b is not a and _mutual(profile, a, b)} for a in ops}
        cliques: list[tuple[Operation, ...]] = []

        def extend(chosen: list[Operation], candidates: set[Operation], excluded: set[Operation]) -> None:
            if not candidates and not excluded:
                cliques.append(tuple(op for op in ops if op in chosen))
            for op in [o for o in ops if o in candidates]:
                extend([*chosen, op], candidates & near[op], excluded & near[op])
                candidates = candidates - {op}
                excluded = excluded | {op}

        extend([], set(ops), set())
        found = _CLIQUES[key] = tuple(cliques)
    return found


# Keyed by name: hashing a Profile hashes its whole matrix.
_CLIQUES: dict[tuple[str, frozenset[Operation]], tuple[tuple[Operation, ...], ...]] = {}


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
    # The makespan over the lower bound, only for a run that committed every job: a run that
    # dropped jobs (failed or skipped) did less work than the bound assumes, so its ratio would
    # flatter it. None otherwise; ``dropped`` says how many.
    makespan_over_bound: float | None
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
    admission_latency: float = 0.0  # seconds from a release to the start of a job that waited

    @property
    def dropped(self) -> int:
        """Jobs that did not commit (failed or skipped)."""
        return self.jobs - self.committed

    def to_dict(self) -> dict[str, Any]:
        out = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(self).items()}
        out["dropped"] = self.dropped
        return out
