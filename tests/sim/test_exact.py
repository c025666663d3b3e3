"""The simulator's occflow policy against an exact optimum that shares no code with admission.

bench/sim_exact.py holds the exact scheduler: a branch and bound over integer start times of
3-6 jobs on one table, deciding which pairs lose work from the profile's matrix cells read
directly. Here, on seeded tiny instances of every profile: occflow never loses work by that
rule, never beats the optimum, and stays near it; and the optimum itself is checked against a
plain enumeration on the smallest instances.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from occflow.sim import simulate

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def exact() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # as when it runs as a script: benchlib is importable
    spec = importlib.util.spec_from_file_location("sim_exact", BENCH / "sim_exact.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sim_exact"] = module
    spec.loader.exec_module(module)
    return module


def enumerate_optimum(exact: ModuleType, inst: object) -> int:
    """Every start time in 0..horizon for every job: the least makespan with no lost work."""
    jobs, slots = inst.jobs, inst.slots  # type: ignore[attr-defined]
    ok = exact.allowed(inst)
    horizon = max(j.arrival for j in jobs) + sum(j.duration for j in jobs)
    best = horizon
    ranges = [range(j.arrival, horizon - j.duration + 1) for j in jobs]
    for starts in itertools.product(*ranges):
        ends = [s + j.duration for s, j in zip(starts, jobs, strict=True)]
        if max(ends) >= best:
            continue
        if any(sum(1 for s, e in zip(starts, ends, strict=True) if s <= t < e) > slots for t in starts):
            continue
        fine = True
        for i, k in itertools.permutations(range(len(jobs)), 2):
            # i commits first (ties: some order must work for the pair), k began before it
            first = ends[i] < ends[k] or (ends[i] == ends[k] and i < k)
            tie_saves = ends[i] == ends[k] and ok[k][i]
            if starts[k] < ends[i] and first and not ok[i][k] and not tie_saves:
                fine = False
                break
        if fine:
            best = max(ends)
    return best


def test_the_branch_and_bound_agrees_with_plain_enumeration_on_three_job_instances(exact: ModuleType) -> None:
    checked = 0
    for index in range(400):
        inst = exact.instance(7, index)
        if len(inst.jobs) != 3 or sum(j.duration for j in inst.jobs) > 12:
            continue
        assert exact.optimum(inst) == enumerate_optimum(exact, inst), inst.describe()
        checked += 1
        if checked == 25:
            break
    assert checked == 25


def test_occflow_never_loses_work_never_beats_the_optimum_and_stays_near_it(exact: ModuleType) -> None:
    seed, count = 2025, 150
    ratios = []
    for index in range(count):
        inst = exact.instance(seed, index)
        best = exact.optimum(inst) * exact.UNIT
        assert exact.optimum(inst, order_blind=True) * exact.UNIT >= best
        for latency in exact.LATENCIES:
            run = simulate(inst.workload(latency), "occflow")
            assert exact.lost_work(inst, run) == [], (seed, index, inst.describe())
            assert run.metrics.makespan >= best - 1e-6, (seed, index, inst.describe())
            if latency == exact.LATENCIES[0]:
                ratios.append(run.metrics.makespan / best)
    assert sum(ratios) / len(ratios) <= 1.06
    # 1.73 on this seed since a protocol upgrade holds the whole table (the optimum may then
    # order it by duration, which admission cannot); bench/sim_exact.py reports the full figures.
    assert max(ratios) <= 1.75


def test_gating_lets_an_insert_overwrite_run_beside_a_minor_compaction_and_commit_after_it(exact: ModuleType) -> None:
    # MaxCompute transactional: minor_compact then insert_overwrite commits; the other order fails.
    inst = exact.Instance(0, 0, exact.get_profile("maxcompute-transactional"), ("p0",), 2, (
        exact.TinyJob(exact.Operation.MINOR_COMPACT, "p0", 0, 4),
        exact.TinyJob(exact.Operation.INSERT_OVERWRITE, "p0", 0, 2),
    ))
    assert exact.optimum(inst) == 4 and exact.optimum(inst, order_blind=True) == 6
    run = simulate(inst.workload(0.1), "occflow")
    by_job = {a.job: a for a in run.attempts}
    assert by_job[1].start == 0 and by_job[1].end == by_job[0].end == 240 and by_job[1].held == 120
    assert [a.job for a in run.attempts] == [0, 1]  # the compaction commits first
    assert exact.lost_work(inst, run) == []


def _variant(workload: object, **fields: Any) -> object:
    import dataclasses

    from occflow.sim.policies import MatrixAdmission, build_policy

    policy = build_policy("occflow", workload)  # type: ignore[arg-type]
    return dataclasses.replace(policy, admission=MatrixAdmission(**fields))


def _held_by_a_later_start(run: object) -> list[tuple[int, int]]:
    """(held job, job started after it whose commit opened the gate): a held attempt's commit
    follows the commit of a job it waited for, at the same instant. Jobs admitted in one pass
    may start up to the admission latency apart (0.1 s here), in either order: "after" means
    more than a second later (tiny instances start on whole minutes)."""
    wins = [a for a in run.attempts if a.committed]  # type: ignore[attr-defined]
    out = []
    for held in (a for a in wins if a.held > 0):
        openers = [a for a in wins if a.job != held.job and a.end == held.end and a.start < held.end - held.held]
        if openers and all(a.start > held.start + 1.0 for a in openers):
            out.append((held.job, openers[0].job))
    return out


def test_the_ablations_lose_no_work_and_turning_commit_ahead_off_holds_no_running_job(exact: ModuleType) -> None:
    # bench/sim_exact.py --ablation: occflow with its two worst-case-for-average choices off. Every
    # variant must still lose no work by the exact rule; without commit-ahead no job's commit is
    # held for a job that started after it, which the default does on some instances.
    seed, count = 77, 120
    held_later = {True: 0, False: 0}
    for index in range(count):
        inst = exact.instance(seed, index)
        workload = inst.workload(0.1)
        for ahead in (True, False):
            for last in (True, False):
                run = simulate(workload, _variant(workload, commit_ahead=ahead, maintenance_last=last))
                assert exact.lost_work(inst, run) == [], (index, ahead, last, inst.describe())
                held_later[ahead] += len(_held_by_a_later_start(run))
    assert held_later[False] == 0
    assert held_later[True] > 0  # the knob changes something: the default does hold running jobs


def test_maintenance_not_last_takes_slots_in_arrival_order(exact: ModuleType) -> None:
    # MaxCompute standard, 2 slots: a clustering of the table runs first; then a small-file merge
    # of p0 (ready since 1) and two data writes of other partitions (ready at 2) want both slots.
    # Maintenance last gives the slots to the data writes; without it the merge, ready first, goes.
    inst = exact.Instance(0, 0, exact.get_profile("maxcompute-standard"), ("p0", "p1", "p2"), 2, (
        exact.TinyJob(exact.Operation.INSERT_OVERWRITE, "p2", 2, 2),
        exact.TinyJob(exact.Operation.CLUSTERING, None, 1, 1),
        exact.TinyJob(exact.Operation.INSERT_INTO, "p1", 2, 4),
        exact.TinyJob(exact.Operation.SMALL_FILE_MERGE, "p0", 1, 7),
    ))
    workload = inst.workload(0.1)
    starts = {}
    for last in (True, False):
        run = simulate(workload, _variant(workload, maintenance_last=last, durations=None))
        assert exact.lost_work(inst, run) == []
        starts[last] = {a.job: a.start for a in run.attempts}
    assert starts[True][3] > max(starts[True][0], starts[True][2])  # the merge waited for both
    assert starts[False][3] < starts[False][2]  # the merge before the later insert
    # Duration-aware (issue 38), maintenance last lets later data writes pass a compaction only
    # while a running write blocks it: the merge, ready first and blocked by nothing, goes first.
    run = simulate(workload, _variant(workload))
    assert exact.lost_work(inst, run) == []
    aware = {a.job: a.start for a in run.attempts}
    assert aware[3] < aware[2]
