"""What a simulated run sums as it goes: the slot seconds spent usefully, wasted and held, the
attempts and their conflict kinds, and each job's status and latency; read as ``Metrics`` at the
end. Summed in the order attempts end, so the figures are the same with or without a history
(``simulate(record=False)``)."""

from __future__ import annotations

from collections import Counter

from .metrics import LowerBound, Metrics, percentile
from .policies import SimPolicy


class Tally:
    """The metrics, summed in the order attempts end (the same with or without a history)."""

    __slots__ = ("attempts", "failed_attempts", "held", "kinds", "latencies", "makespan", "statuses",
                 "useful", "wasted")

    def __init__(self) -> None:
        self.useful = self.wasted = self.held = self.makespan = 0.0
        self.attempts = self.failed_attempts = 0
        self.kinds: Counter[str] = Counter()
        self.statuses: Counter[str] = Counter()
        self.latencies: list[float] = []

    def metrics(self, policy: SimPolicy, slots: int, jobs: int, bound: LowerBound) -> Metrics:
        """The run's ``Metrics`` under ``policy`` on ``slots`` worker slots for ``jobs`` jobs."""
        useful, wasted, makespan = self.useful, self.wasted, self.makespan
        slot_seconds = slots * makespan
        return Metrics(
            policy=policy.name,
            makespan=makespan,
            lower_bound=bound.value,
            makespan_over_bound=(makespan / bound.value if bound.value else 0.0)
            if self.statuses["committed"] == jobs else None,
            useful_seconds=useful,
            wasted_seconds=wasted,
            busy_slot_seconds=useful + wasted,
            held_waiting_seconds=self.held,
            slot_seconds=slot_seconds,
            useful_fraction=useful / slot_seconds if slot_seconds else 0.0,
            wasted_fraction=wasted / (useful + wasted) if useful + wasted else 0.0,
            attempts=self.attempts,
            failed_attempts=self.failed_attempts,
            jobs=jobs,
            committed=self.statuses["committed"],
            skipped=self.statuses["skipped"],
            failed=self.statuses["failed"],
            latency_p50=percentile(self.latencies, 0.5),
            latency_p95=percentile(self.latencies, 0.95),
            failures_by_kind=dict(sorted(self.kinds.items())),
            description=policy.describe(),
            admission_latency=policy.wait_start_delay,
        )
