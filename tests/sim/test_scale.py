"""Big runs: memory follows the work in flight, and record=False changes no metric.

Not timed (the figures are bench/sim_bench.py's): these check the structures, not the clock.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from occflow.sim import Workload, build_policy, load_workload, parse_workload, simulate
from occflow.sim import simulator as sim_module
from occflow.sim.workload import Uniform

WORKLOADS = Path(__file__).resolve().parents[2] / "bench" / "workloads"


def scaled(name: str, scale: int) -> Workload:
    """``scale`` times the jobs over ``scale`` times the hours: the same contention per hour."""
    workload = load_workload(WORKLOADS / f"{name}.yaml")
    specs = []
    for spec in workload.specs:
        arrival = spec.arrival
        if isinstance(arrival, Uniform):
            arrival = replace(arrival, high=arrival.low + (arrival.high - arrival.low) * scale)
        specs.append(replace(spec, count=spec.count * scale, arrival=arrival))
    return replace(workload, specs=tuple(specs), name=f"{workload.name} x{scale}")


def test_a_20000_job_run_keeps_only_live_work() -> None:
    workload = scaled("merge_heavy", 80)
    jobs = workload.jobs(0)
    assert len(jobs) >= 20_000
    sim = sim_module._Simulation(workload, build_policy("occflow", workload), jobs, 0, record=False)
    sim.run()
    metrics = sim.metrics(sim_module.workload_bound(workload, jobs))
    assert metrics.committed == metrics.jobs == len(jobs)
    assert sim.attempts == [] and sim.outcomes == {}  # no history
    # At most: the commits made during the longest overlap of attempts, the jobs that wait at
    # once, the jobs in flight. None grows with the number of jobs.
    assert 0 < sim.peak_retained < 100
    assert 0 < sim.peak_waiting < 100
    assert sim.peak_live <= workload.slots
    # And at the end nothing is left over.
    assert all(log.retained == 0 and log.live == 0 for log in sim.logs.values())
    assert sim.live == {} and sim.n_waiting == 0 and not sim.refused
    assert all(not queue for queue in sim.waiting.values())


@pytest.mark.parametrize("policy", ["naive", "table-pool", "partition-lock", "occflow-retry", "occflow"])
def test_record_false_gives_the_same_metrics_as_record_true(policy: str) -> None:
    workload = scaled("merge_heavy", 4)
    recorded = simulate(workload, policy, seed=7, record=True)
    bare = simulate(workload, policy, seed=7, record=False)
    assert bare.attempts == () and bare.outcomes == ()
    assert recorded.attempts and recorded.outcomes
    assert bare.metrics == recorded.metrics
    assert bare.peaks == recorded.peaks
    # The recorded history agrees with the metrics summed on the fly.
    assert len(recorded.attempts) == bare.metrics.attempts
    assert sum(not a.committed for a in recorded.attempts) == bare.metrics.failed_attempts
    assert sum(a.end - a.start for a in recorded.attempts if a.committed) == pytest.approx(bare.metrics.useful_seconds)


@pytest.mark.parametrize("policy", ["table-pool", "partition-lock", "occflow"])
def test_skipping_jobs_shaped_like_a_refused_one_changes_nothing(policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # More MERGEs on two partitions than they can take, beside appends and compactions: long
    # queues of jobs of one shape, where the shortcut does most of the refusing.
    workload = parse_workload({
        "slots": 4,
        "tables": [{"name": "t", "profile": "delta-serializable", "partitions": 3},
                   {"name": "u", "profile": "maxcompute-transactional", "partitions": 2}],
        "jobs": [
            {"table": "t", "operation": "merge", "partitions": {"random": 1, "from": ["p000", "p001"]},
             "duration": {"uniform": [40, 80]}, "arrival": {"uniform": [0, 3000]}, "count": 150},
            {"table": "t", "operation": "insert_into", "partitions": ["p002"], "duration": 30,
             "arrival": {"every": 20}, "count": 100},
            {"table": "t", "operation": "optimize", "partitions": ["p000"], "duration": 50,
             "arrival": {"every": 500}, "count": 6},
            {"table": "u", "operation": "update", "partitions": {"random": 1}, "duration": 90,
             "arrival": {"uniform": [0, 3000]}, "count": 60},
        ],
    }, "queues.yaml")
    fast = simulate(workload, policy, seed=3)
    monkeypatch.setattr(sim_module._Simulation, "skip_same_shape", False)
    slow = simulate(workload, policy, seed=3)
    assert fast.attempts == slow.attempts
    assert fast.metrics == slow.metrics
    assert fast.peaks.waiting > 50  # the queues were long: the shortcut was exercised
