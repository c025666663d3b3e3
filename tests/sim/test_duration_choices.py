"""The duration-aware choices of the one admission rule (issue 38), in the simulator, against the
exact optimum of small concrete instances found by brute force.

Each instance is one the duration-blind rule schedules worse than the optimum, for the reason
the issue traced: a short job held at its commit gate keeps a slot a waiting job needs; a short
whole-table job that arrived with longer ones starts last; a compaction that arrived first waits
behind data writes while a slot is free. The oracle shares no code with occflow's admission: it
tries every integer start time of every job and keeps the schedules in which at most ``slots``
run at once and every pair that overlaps in time and footprint commits in an order the
profile's raw matrix cells call clean (the later commits, the data is right).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from occflow.core.operations import Operation
from occflow.core.profiles import PROFILES, Profile
from occflow.sim import simulate
from occflow.sim.policies import MatrixAdmission, build_policy
from occflow.sim.workload import Workload, parse_workload

UNIT = 60.0
Job = tuple[str, str | None, int, int]  # operation, partition (None: the whole table), arrival, duration


def _whole(profile: Profile, op: Operation, partition: str | None) -> bool:
    return partition is None or op in (Operation.ALTER_METADATA, Operation.UPGRADE_PROTOCOL) \
        or op in profile.reads_whole_table


def _clean(profile: Profile, earlier: Operation, later: Operation) -> bool:
    cell = profile.cell(earlier, later)
    return not cell.later_fails and not cell.effect.corrupts_data


def brute_force_optimum(profile: Profile, slots: int, jobs: list[Job]) -> int:
    """The least makespan (units) over every assignment of integer start times."""
    ops = [Operation(op) for op, _, _, _ in jobs]
    n = len(jobs)

    def meet(i: int, j: int) -> bool:
        pi, pj = jobs[i][1], jobs[j][1]
        return _whole(profile, ops[i], pi) or _whole(profile, ops[j], pj) or pi == pj

    def fits(i: int, si: int, j: int, sj: int) -> bool:
        ei, ej = si + jobs[i][3], sj + jobs[j][3]
        if ei <= sj or ej <= si or not meet(i, j):
            return True  # apart in time (a start at another's commit begins after it) or in footprint
        if ei < ej:
            return _clean(profile, ops[i], ops[j])
        if ej < ei:
            return _clean(profile, ops[j], ops[i])
        return _clean(profile, ops[i], ops[j]) or _clean(profile, ops[j], ops[i])

    horizon = max(a for _, _, a, _ in jobs) + sum(d for _, _, _, d in jobs)
    best = horizon
    starts: list[int] = []

    def place(k: int) -> None:
        nonlocal best
        if k == n:
            best = min(best, max(s + jobs[i][3] for i, s in enumerate(starts)))
            return
        for s in range(jobs[k][2], best - jobs[k][3] + 1):
            if not all(fits(i, si, k, s) for i, si in enumerate(starts)):
                continue
            # Slots: at any instant in [s, s + d) at most ``slots`` jobs run (check at each start).
            placed = [*starts, s]
            if any(sum(1 for i, si in enumerate(placed) if si <= t < si + jobs[i][3]) > slots
                   for t in {si for si in placed}):
                continue
            starts.append(s)
            place(k + 1)
            starts.pop()

    place(0)
    return best


def _workload(profile: Profile, slots: int, jobs: list[Job]) -> Workload:
    return parse_workload({
        "slots": slots,
        "tables": [{"name": "t", "profile": profile.name, "partitions": ["p0", "p1"]}],
        "jobs": [{"name": f"j{k}", "table": "t", "operation": op, "partitions": "all" if part is None else [part],
                  "duration": d * UNIT, "arrival": a * UNIT} for k, (op, part, a, d) in enumerate(jobs)],
        "policies": {"airflow": {"admission_latency": 0, "requeue_delay": 0}},
    }, "durations.yaml")


def _makespan(workload: Workload, **admission: Any) -> float:
    policy = build_policy("occflow", workload)
    run = simulate(workload, dataclasses.replace(policy, admission=MatrixAdmission(**admission)))
    assert run.metrics.failed_attempts == 0 and run.metrics.committed == len(workload.jobs(0))
    return run.metrics.makespan / UNIT


CASES = {
    # A short INSERT held at its gate beside a whole-table MERGE kept the slot the schema change needed.
    "short job not held at a long gate": ("delta-serializable-rlc", 2, [
        ("insert_into", "p0", 0, 3), ("merge", None, 1, 6), ("alter_metadata", "p0", 1, 6)]),
    # A 2-unit protocol upgrade that arrived with a 4-unit MERGE on its partition went after it.
    "same arrival shortest first": ("delta-write-serializable", 3, [
        ("delete", "p0", 2, 1), ("insert_into", "p1", 0, 7), ("merge", "p0", 0, 4), ("upgrade_protocol", "p0", 0, 2)]),
    # A whole-table OPTIMIZE that arrived first waited behind later data writes while it could run.
    "compaction that arrived first runs": ("delta-serializable", 2, [
        ("upgrade_protocol", None, 2, 6), ("optimize", None, 0, 8), ("merge", "p1", 0, 6), ("insert_into", "p1", 0, 8)]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_duration_aware_admission_reaches_the_brute_force_optimum_where_the_blind_rule_does_not(case: str) -> None:
    name, slots, jobs = CASES[case]
    profile = PROFILES[name]
    best = brute_force_optimum(profile, slots, jobs)
    workload = _workload(profile, slots, jobs)
    assert _makespan(workload) == pytest.approx(best)
    assert _makespan(workload, durations=None) > best + 0.5  # the choice is what gets there


def test_the_brute_force_oracle_reads_the_cells_by_hand() -> None:
    # Its own check: two MERGEs of one partition never overlap (both orders fail), so on one slot
    # or two they take their sum; on two partitions they run side by side.
    delta = PROFILES["delta-write-serializable"]
    assert brute_force_optimum(delta, 2, [("merge", "p0", 0, 3), ("merge", "p0", 0, 2)]) == 5
    assert brute_force_optimum(delta, 2, [("merge", "p0", 0, 3), ("merge", "p1", 0, 2)]) == 3
    assert brute_force_optimum(delta, 1, [("merge", "p0", 0, 3), ("merge", "p1", 0, 2)]) == 5
