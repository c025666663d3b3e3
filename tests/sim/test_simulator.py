"""The simulator: deterministic, self-consistent metrics, and each policy behaving as designed.

Commits are decided by the simulator's matrix engine (tests/sim/test_engine.py checks it against
the matrices and a brute-force oracle), so these tests check the simulator's bookkeeping and the
policies, on small workloads where the right answer can be worked out.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from occflow.core.profiles import get_profile
from occflow.sim import POLICY_NAMES, load_workload, parse_workload, simulate
from occflow.sim.policies import admission_partitions

WORKLOADS = sorted((Path(__file__).resolve().parents[2] / "bench" / "workloads").glob("*.yaml"))
SIMULATED = [p for p in POLICY_NAMES if p != "oracle"]


def workload(jobs: list[dict[str, Any]], slots: int = 4, profile: str = "delta-serializable",
             partitions: int = 4, **extra: Any) -> Any:
    return parse_workload(
        {"slots": slots, "tables": [{"name": "t", "profile": profile, "partitions": partitions}],
         "jobs": jobs, **extra},
        "test.yaml",
    )


def test_shipped_workloads_exist() -> None:
    assert {p.stem for p in WORKLOADS} >= {"merge_heavy", "backfill_burst", "mixed_schema"}


@pytest.mark.parametrize("policy", SIMULATED)
def test_same_seed_gives_the_same_run_and_another_seed_another(policy: str) -> None:
    w = load_workload(WORKLOADS[0])
    first, again, other = simulate(w, policy, seed=3), simulate(w, policy, seed=3), simulate(w, policy, seed=4)
    assert first.attempts == again.attempts
    assert first.metrics == again.metrics
    assert first.jobs != other.jobs


@pytest.mark.parametrize("path", WORKLOADS, ids=lambda p: p.stem)
def test_metrics_add_up_and_no_complete_run_beats_the_lower_bound(path: Path) -> None:
    w = load_workload(path)
    for policy in SIMULATED:
        run = simulate(w, policy, seed=1)
        m = run.metrics
        # An attempt's commit may wait at its gate (order-aware admission): that is held, not work.
        durations = {a: a.end - a.start - a.held for a in run.attempts}
        assert m.useful_seconds == pytest.approx(sum(d for a, d in durations.items() if a.committed))
        assert m.wasted_seconds == pytest.approx(sum(d for a, d in durations.items() if not a.committed))
        assert m.busy_slot_seconds == pytest.approx(m.useful_seconds + m.wasted_seconds)
        assert m.busy_slot_seconds + m.held_waiting_seconds <= m.slot_seconds + 1e-6
        assert all(a.held >= 0 for a in run.attempts) and (policy == "occflow" or not any(a.held for a in run.attempts))
        assert m.failed_attempts == sum(not a.committed for a in run.attempts)
        assert m.committed + m.skipped + m.failed == m.jobs == len(run.jobs)
        # Every committed job committed exactly once, after its arrival.
        committed = [a.job for a in run.attempts if a.committed]
        assert sorted(committed) == sorted(o.job for o in run.outcomes if o.status == "committed")
        assert all(a.start >= run.jobs[a.job].arrival for a in run.attempts)
        if m.committed == m.jobs:
            assert m.makespan >= m.lower_bound - 1e-6, policy
        # Never more attempts running than slots.
        edges = sorted([(a.start, 1) for a in run.attempts] + [(a.end, -1) for a in run.attempts],
                       key=lambda e: (e[0], e[1]))
        level = 0
        for _, step in edges:
            level += step
            assert level <= w.slots


@pytest.mark.parametrize("path", WORKLOADS, ids=lambda p: p.stem)
def test_occflow_runs_two_conflicting_jobs_on_one_footprint_at_once_only_in_their_clean_commit_order(
        path: Path) -> None:
    w = load_workload(path)
    run = simulate(w, "occflow", seed=2)
    # ``attempts`` are in the order they ended: a committed attempt's place is its commit order.
    for a, b in itertools.combinations(run.attempts, 2):
        if b.start >= a.end:  # b began after a ended: b was never validated against a
            continue
        ja, jb = run.jobs[a.job], run.jobs[b.job]
        if ja.table != jb.table:
            continue
        pa, pb = admission_partitions(ja), admission_partitions(jb)
        if pa is None or pb is None or set(pa) & set(pb):
            cell = w.table(ja.table).profile.cell(ja.operation, jb.operation)  # a committed first
            assert a.committed and b.committed and not cell.later_fails and not cell.effect.corrupts_data, (ja, jb)


def test_occflow_admits_conflicting_jobs_first_come_first_served() -> None:
    # Three merges on one partition arrive 1s apart; an append to another partition never waits.
    # A merge that had to wait for its lease starts admission_latency after the grant.
    w = workload([
        {"name": "m", "table": "t", "operation": "merge", "partitions": ["p000"], "duration": 100,
         "arrival": {"every": 1}, "count": 3},
        {"name": "a", "table": "t", "operation": "insert_into", "partitions": ["p001"], "duration": 10,
         "arrival": 5},
    ], policies={"airflow": {"admission_latency": 2, "requeue_delay": 7}})
    run = simulate(w, "occflow")
    starts = {run.jobs[a.job].name: a.start for a in run.attempts}
    assert starts == {"m-0": 0, "m-1": 100 + 2, "m-2": 102 + 100 + 2, "a": 5}
    assert run.metrics.held_waiting_seconds == pytest.approx(2 * 2)  # slot held, nothing running yet
    assert run.metrics.failed_attempts == 0


def test_naive_retries_every_failure_even_one_that_is_not_retry_safe() -> None:
    # A protocol upgrade (REORG ... APPLY UPGRADE) commits while a MERGE runs: the matrix's
    # upgrade_protocol row fails the MERGE with protocol_changed, which is not retry-safe.
    jobs = [
        {"table": "t", "operation": "merge", "partitions": ["p000"], "duration": 100},
        {"table": "t", "operation": "upgrade_protocol", "duration": 10},
    ]
    w = workload(jobs, policies={"naive": {"retries": 2, "retry_delay": 30}, "airflow": {"requeue_delay": 4}})
    naive = simulate(w, "naive")
    merge = [a for a in naive.attempts if a.job == 0]
    assert [(a.kind, a.action) for a in merge] == [("protocol_changed", "reschedule"), (None, None)]
    assert merge[1].start == pytest.approx(100 + 30 + 4)  # the fixed retry delay, then the re-queue
    classified = simulate(w, "occflow-retry")
    assert [(a.kind, a.action) for a in classified.attempts if a.job == 0] == [("protocol_changed", "fail")]
    assert classified.outcomes[0].status == "failed"


def test_naive_gives_up_when_the_retry_budget_is_spent() -> None:
    jobs = [{"name": "m", "table": "t", "operation": "merge", "partitions": ["p000"], "duration": 50,
             "count": 3}]
    run = simulate(workload(jobs, policies={"naive": {"retries": 0, "retry_delay": 1}}), "naive")
    # Three merges on one partition start together: one commits, the two others lose once and stop.
    assert sorted(o.status for o in run.outcomes) == ["committed", "failed", "failed"]
    assert run.metrics.wasted_seconds == pytest.approx(100)


def test_occflow_retry_skips_a_compaction_that_lost_to_a_writer() -> None:
    # An append leaves files; the compaction rewrites them while a MERGE rewrites them first.
    jobs = [
        {"table": "t", "operation": "insert_into", "partitions": ["p001"], "duration": 1},
        {"table": "t", "operation": "optimize", "partitions": ["p001"], "duration": 100, "arrival": 2},
        {"table": "t", "operation": "merge", "partitions": ["p001"], "duration": 20, "arrival": 3},
    ]
    w = workload(jobs, policies={"naive": {"retries": 3, "retry_delay": 60}})
    classified = simulate(w, "occflow-retry")
    assert classified.outcomes[1].status == "skipped"
    assert [a.action for a in classified.attempts if a.job == 1] == ["skip"]
    naive = simulate(w, "naive")
    assert [a.committed for a in naive.attempts if a.job == 1] == [False, True]  # re-ran the compaction


def test_occflow_retry_backs_off_inside_the_slot() -> None:
    # Four merges on one partition at once: the losers retry in the task after a short backoff,
    # holding their slot meanwhile (the retry loop sleeps in the worker).
    jobs = [{"name": "m", "table": "t", "operation": "merge", "partitions": ["p000"], "duration": 30,
             "count": 4}]
    run = simulate(workload(jobs), "occflow-retry", seed=5)
    retried = [a for a in run.attempts if a.action == "retry"]
    assert retried
    assert run.metrics.held_waiting_seconds > 0
    policy_bounds = (2.0, 4.0)  # WRITER_WON: 2s * 2^0 + jitter 0-2s after the first loss
    first_retry = {a.job: a for a in run.attempts if a.number == 2}
    for job, attempt in first_retry.items():
        lost = next(a for a in run.attempts if a.job == job and a.number == 1)
        assert policy_bounds[0] <= attempt.start - lost.end <= policy_bounds[1]


def test_pool_runs_one_job_per_table_and_is_slower_where_partitions_allow_parallel_work() -> None:
    w = parse_workload(  # one merge per partition, eight partitions
        {"slots": 4, "tables": [{"name": "t", "profile": "delta-serializable", "partitions": 8}],
         "jobs": [{"table": "t", "operation": "merge", "partitions": [f"p{i:03d}"], "duration": 60}
                  for i in range(8)],
         "policies": {"airflow": {"admission_latency": 1.5}}},
        "pool.yaml",
    )
    pool, occflow = simulate(w, "table-pool"), simulate(w, "occflow")
    # Seven merges wait for the pool's slot, each then starts admission_latency after the grant;
    # under occflow the last four wait for a worker slot only, not for admission: no latency.
    assert pool.metrics.makespan == pytest.approx(8 * 60 + 7 * 1.5)
    assert occflow.metrics.makespan == pytest.approx(2 * 60)
    assert occflow.metrics.makespan == pytest.approx(occflow.metrics.lower_bound)
    intervals = sorted((a.start, a.end) for a in pool.attempts)
    assert all(prev[1] <= nxt[0] for prev, nxt in itertools.pairwise(intervals))


def test_lower_bound_serialises_mutually_conflicting_jobs_on_one_partition() -> None:
    # delta-serializable: merge and delete fail each other; appends conflict with neither order.
    w = workload([
        {"table": "t", "operation": "merge", "partitions": ["p000"], "duration": 100, "arrival": 50},
        {"table": "t", "operation": "delete", "partitions": ["p000", "p001"], "duration": 40},
        {"table": "t", "operation": "insert_into", "partitions": ["p000"], "duration": 500},
    ], slots=8)
    bound = simulate(w, "oracle").bound
    assert get_profile("delta-serializable").later_fails("merge", "delete")
    assert bound.chain == pytest.approx(50 + 100)  # delete 0-40, merge from its arrival at 50
    assert bound.longest == pytest.approx(500)
    assert bound.work == pytest.approx(640 / 8)
    assert bound.value == pytest.approx(500)


def test_oracle_row_is_the_bound_with_nothing_wasted() -> None:
    w = load_workload(WORKLOADS[0])
    oracle = simulate(w, "oracle", seed=1)
    assert oracle.metrics.makespan == oracle.bound.value
    assert oracle.metrics.wasted_seconds == 0
    assert oracle.metrics.useful_seconds == pytest.approx(sum(j.duration for j in oracle.jobs))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_merge_heavy_goals_occflow_wastes_under_2_percent_near_the_bound_and_beats_naive_and_pool(seed: int) -> None:
    w = load_workload(next(p for p in WORKLOADS if p.stem == "merge_heavy"))
    runs = {p: simulate(w, p, seed=seed).metrics for p in SIMULATED}
    occflow, naive, pool = runs["occflow"], runs["naive"], runs["table-pool"]
    assert occflow.committed == occflow.jobs
    assert occflow.wasted_fraction < 0.02
    assert occflow.makespan_over_bound <= 1.15
    assert naive.wasted_fraction > max(3 * occflow.wasted_fraction, 0.05)
    assert pool.makespan > 2 * occflow.makespan
