"""The simulated policies do what their names promise, checked from the runs' own attempts.

Every property is checked by brute force over pairs of jobs or attempts with a footprint and
conflict rule written here from the job's fields and the profile's matrix, not through the
policies module's index: a partition lock never lets two overlapping footprints run at once and
never lets a later job overtake an earlier one on them; a table pool runs one job per table;
occflow never starts a compaction while a data write it would block is waiting, never wastes an
attempt on the shipped workloads, and never drops a retryable job.
"""

from __future__ import annotations

import importlib.util
import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from occflow.core.errors import InvalidDeclarationError
from occflow.core.operations import Operation
from occflow.sim import Run, Workload, build_policy, load_workload, parse_policies, parse_workload, simulate
from occflow.sim.policies import MatrixAdmission
from occflow.sim.workload import ADMISSION_LATENCY, REQUEUE_DELAY, Every, Job, NaiveSettings, Uniform

WORKLOADS = sorted((Path(__file__).resolve().parents[2] / "bench" / "workloads").glob("*.yaml"))
SMALL = [p for p in WORKLOADS if p.stem != "streaming_mix"]


def shipped(stem: str) -> Workload:
    return load_workload(next(p for p in WORKLOADS if p.stem == stem))


def footprint(job: Job) -> frozenset[str] | None:
    """The partitions a job holds; None: the whole table (no partitions, a read of the whole
    table, a protocol or schema change)."""
    whole = (job.partitions is None or job.reads_whole_table or job.protocol_change
             or job.operation in (Operation.ALTER_METADATA, Operation.UPGRADE_PROTOCOL))
    return None if whole else frozenset(job.partitions or ())


def overlap(a: Job, b: Job) -> bool:
    if a.table != b.table:
        return False
    fa, fb = footprint(a), footprint(b)
    return fa is None or fb is None or bool(fa & fb)


def first_starts(run: Run) -> dict[int, float]:
    starts: dict[int, float] = {}
    for a in run.attempts:
        starts.setdefault(a.job, a.start)
    return starts


def small(jobs: list[dict[str, Any]], profile: str = "delta-write-serializable", slots: int = 4,
          partitions: int = 4) -> Workload:
    return parse_workload(
        {"slots": slots, "tables": [{"name": "t", "profile": profile, "partitions": partitions}], "jobs": jobs,
         "policies": {"airflow": {"admission_latency": 0, "requeue_delay": 0}}},
        "test.yaml",
    )


# ----------------------------------------------------------------------------- partition-lock


@pytest.mark.parametrize("path", SMALL, ids=lambda p: p.stem)
def test_partition_lock_never_runs_two_overlapping_footprints_at_once(path: Path) -> None:
    run = simulate(load_workload(path), "partition-lock", seed=1)
    assert run.metrics.committed == run.metrics.jobs and run.metrics.failed_attempts == 0
    jobs = run.jobs
    together = [
        (jobs[a.job].name, jobs[b.job].name)
        for a, b in itertools.combinations(run.attempts, 2)
        if overlap(jobs[a.job], jobs[b.job]) and a.start < b.end and b.start < a.end
    ]
    assert together == []
    # The lock is what kept them apart: naive runs overlapping footprints together here.
    naive = simulate(load_workload(path), "naive", seed=1)
    assert any(overlap(naive.jobs[a.job], naive.jobs[b.job]) and a.start < b.end and b.start < a.end
               for a, b in itertools.combinations(naive.attempts, 2))


@pytest.mark.parametrize("path", SMALL, ids=lambda p: p.stem)
def test_partition_lock_is_fifo_fair_a_later_job_never_overtakes_an_earlier_one_on_its_partitions(
    path: Path,
) -> None:
    run = simulate(load_workload(path), "partition-lock", seed=2)
    starts, jobs = first_starts(run), run.jobs
    overtaken = [
        (early.name, late.name)
        for early, late in itertools.permutations(jobs, 2)
        if early.arrival < late.arrival and overlap(early, late) and starts[late.index] < starts[early.index]
    ]
    assert overtaken == []


def test_partition_lock_holds_back_small_jobs_behind_an_earlier_whole_table_job() -> None:
    w = small([
        {"name": "m0", "table": "t", "operation": "merge", "partitions": ["p000"], "duration": 100},
        {"name": "whole", "table": "t", "operation": "optimize", "duration": 50, "arrival": 10},
        {"name": "m1", "table": "t", "operation": "insert_into", "partitions": ["p001"], "duration": 30,
         "arrival": 20},
    ])
    run = simulate(w, "partition-lock")
    starts = {run.jobs[j].name: s for j, s in first_starts(run).items()}
    # The whole-table OPTIMIZE waits for m0; m1 touches another partition but must not overtake it.
    assert starts == {"m0": 0, "whole": 100, "m1": 150}
    # occflow admits the blind append at once: the matrix lets it run beside the MERGE and OPTIMIZE.
    occflow = simulate(w, "occflow")
    assert {occflow.jobs[j].name: s for j, s in first_starts(occflow).items()} == {"m0": 0, "whole": 100, "m1": 20}


# ----------------------------------------------------------------------------- table-pool


@pytest.mark.parametrize("path", SMALL, ids=lambda p: p.stem)
def test_table_pool_runs_one_job_per_table(path: Path) -> None:
    run = simulate(load_workload(path), "table-pool", seed=1)
    jobs = run.jobs
    together = [(a.job, b.job) for a, b in itertools.combinations(run.attempts, 2)
                if jobs[a.job].table == jobs[b.job].table and a.start < b.end and b.start < a.end]
    assert together == [] and run.metrics.committed == run.metrics.jobs


def test_pool_is_the_old_name_of_table_pool() -> None:
    w = shipped("merge_heavy")
    old, new = simulate(w, "pool", seed=3), simulate(w, "table-pool", seed=3)
    assert old.policy == "table-pool" and old.metrics == new.metrics and old.attempts == new.attempts
    assert parse_policies(["pool", "table-pool", "occflow"]) == ("table-pool", "occflow")


def test_an_unknown_policy_is_an_error_listing_the_policies() -> None:
    with pytest.raises(InvalidDeclarationError) as error:
        parse_policies(["partition_lock"])
    for name in ("naive", "table-pool", "partition-lock", "occflow-retry", "occflow", "oracle", "pool"):
        assert name in str(error.value)


# ----------------------------------------------------------------------------- occflow


def blocks(profile: Any, a: Operation, b: Operation) -> bool:
    """Whether ``a`` and ``b`` on one partition must not run together: either commit order fails
    the later job, read cell by cell from the profile's matrix."""
    return profile.cell(a, b).later_fails or profile.cell(b, a).later_fails


def age_limit(job: Job) -> float:
    """The documented default: maintenance goes first once it has waited 2x its duration or 1 h."""
    return min(2 * job.duration, 3600.0)


# merge-heavy seeds 1 and 6: first come first served would start a compaction there while a
# MERGE on its partition that arrived after it still waits.
@pytest.mark.parametrize("aware", [True, False], ids=["duration-aware", "duration-blind"])
@pytest.mark.parametrize(("stem", "seed"), [("merge_heavy", 1), ("merge_heavy", 6), ("streaming_mix", 0)])
def test_occflow_starts_a_compaction_ahead_of_a_waiting_data_write_only_past_its_age_limit(
        stem: str, seed: int, aware: bool) -> None:
    w = shipped(stem)
    # No admission latency: an attempt starts when it is admitted, so start times are admission times.
    policy = replace(build_policy("occflow", w), wait_start_delay=0.0)
    if not aware:
        policy = replace(policy, admission=MatrixAdmission(durations=None))
    run = simulate(w, policy, seed=seed)
    starts, jobs = first_starts(run), run.jobs
    profiles = {t.name: t.profile for t in w.tables}
    compactions = [j for j in jobs if j.operation.is_compaction]
    assert compactions
    jumped = [
        (c.name, d.name)
        for c in compactions
        for d in jobs
        if not d.operation.is_compaction and overlap(c, d) and blocks(profiles[c.table], c.operation, d.operation)
        # Duration-aware (issue 38): only a data write that arrived before it; blind: any waiting one.
        and (d.arrival < c.arrival if aware else d.arrival < starts[c.index])
        and starts[c.index] < starts[d.index] and starts[c.index] - c.arrival < age_limit(c)
    ]
    assert jumped == []


def test_a_compaction_is_not_starved_past_its_age_limit_by_a_stream_of_data_writes() -> None:
    # MERGEs on the compaction's partition every 50 s, each 60 s long: one always runs or waits.
    merges = [{"name": f"m{i}", "table": "t", "operation": "merge", "partitions": ["p000"], "duration": 60,
               "arrival": 50 * i} for i in range(200)]
    compact = {"name": "compact", "table": "t", "operation": "optimize", "partitions": ["p000"], "duration": 100,
               "arrival": 10}
    w = small([*merges, compact], slots=2)
    blind = replace(build_policy("occflow", w), admission=MatrixAdmission(durations=None))
    starts = {run_job.name: s for run_job, s in ((w.jobs(0)[j], s) for j, s in first_starts(simulate(w, blind)).items())}
    # Past 2 x 100 s it goes first: it waits at most for the MERGE running then (60 s).
    assert 10 + 200 <= starts["compact"] <= 10 + 200 + 60
    # Duration-aware, it arrived before the MERGE that waits when the first one ends: it goes then.
    aware = first_starts(simulate(w, "occflow"))
    assert aware[len(merges)] == 60
    no_limit = replace(build_policy("occflow", w), admission=MatrixAdmission(maintenance_age=None, durations=None))
    late = simulate(w, no_limit)
    assert first_starts(late)[len(merges)] > 200 * 50 - 100  # without the limit: after the stream


def test_a_waiting_compaction_lets_a_later_data_write_go_first_only_while_a_running_one_blocks_it() -> None:
    w = small([
        {"name": "m0", "table": "t", "operation": "merge", "partitions": ["p000"], "duration": 100},
        {"name": "compact", "table": "t", "operation": "optimize", "partitions": ["p000"], "duration": 50,
         "arrival": 10},
        {"name": "m1", "table": "t", "operation": "merge", "partitions": ["p000"], "duration": 100, "arrival": 20},
    ])
    run = simulate(w, replace(build_policy("occflow", w), admission=MatrixAdmission(durations=None)))
    starts = {run.jobs[j].name: s for j, s in first_starts(run).items()}
    assert starts == {"m0": 0, "compact": 200, "m1": 100}
    # A partition lock serves them in arrival order: the compaction goes first and m1 waits for it.
    lock = simulate(w, "partition-lock")
    assert {lock.jobs[j].name: s for j, s in first_starts(lock).items()} == {"m0": 0, "compact": 100, "m1": 150}
    # Duration-aware (issue 38): the compaction arrived first and nothing running excludes it when
    # m0 ends, so it goes then, as under the lock; a later data write passes it only while m0 runs.
    aware = simulate(w, "occflow")
    assert {aware.jobs[j].name: s for j, s in first_starts(aware).items()} == {"m0": 0, "compact": 100, "m1": 150}


@pytest.mark.parametrize("path", WORKLOADS, ids=lambda p: p.stem)
def test_occflow_wastes_nothing_on_the_shipped_workloads(path: Path) -> None:
    m = simulate(load_workload(path), "occflow", seed=0, record=False).metrics
    assert m.failed_attempts == 0 and m.wasted_seconds == 0 and m.committed == m.jobs


def scaled(workload: Workload, scale: int) -> Workload:
    """``scale`` times the jobs over ``scale`` times the hours: the same contention per hour."""
    specs = []
    for spec in workload.specs:
        arrival = spec.arrival
        if isinstance(arrival, Uniform):
            arrival = replace(arrival, high=arrival.low + (arrival.high - arrival.low) * scale)
        assert isinstance(arrival, Uniform | Every)
        specs.append(replace(spec, count=spec.count * scale, arrival=arrival))
    return replace(workload, specs=tuple(specs), name=f"{workload.name} x{scale}")


# What occflow's policy gives a write that lost to a writer before it gives up (core.policy.TIMING:
# 4 in-task retries then 8 reschedules, and no more than 4 hours after the first attempt).
MOST_ATTEMPTS, MOST_SECONDS = 4 + 8, 4 * 3600


def test_occflow_drops_no_retryable_job_and_occflow_retry_only_when_its_budget_is_spent() -> None:
    w = scaled(shipped("merge_heavy"), 40)  # 10,080 jobs over 40 hours
    occflow = simulate(w, "occflow", seed=0)
    assert occflow.metrics.failed == 0 and occflow.metrics.committed == occflow.metrics.jobs
    retry = simulate(w, "occflow-retry", seed=0)
    dropped = [o.job for o in retry.outcomes if o.status == "failed"]
    assert dropped  # without admission the queue grows for hours and some jobs do run out of budget
    for job in dropped:
        tries = [a for a in retry.attempts if a.job == job]
        assert tries[-1].action == "fail" and all(not a.committed for a in tries)
        assert len(tries) >= MOST_ATTEMPTS or tries[-1].end - tries[0].start >= MOST_SECONDS, (job, tries)


def test_occflow_retry_drops_a_long_update_that_keeps_losing_to_a_stream_of_appends() -> None:
    # MaxCompute: INSERT INTO fails a concurrent UPDATE; without admission a 5-minute UPDATE
    # under appends every 2 minutes loses every time, and the budget ends it. occflow queues it.
    w = shipped("streaming_mix")
    retry = simulate(w, "occflow-retry", seed=0)
    dropped = [o.job for o in retry.outcomes if o.status == "failed"]
    assert dropped and {(retry.jobs[j].table, retry.jobs[j].operation) for j in dropped} == {
        ("events", Operation.UPDATE)}
    for job in dropped:
        tries = [a for a in retry.attempts if a.job == job]
        assert len(tries) == MOST_ATTEMPTS and {a.kind for a in tries} == {"operation_conflict"}
    assert simulate(w, "occflow", seed=0, record=False).metrics.failed == 0


# ----------------------------------------------------------------------------- settings


def airflow_default(key: str) -> str:
    """The default in the installed Airflow's own configuration template."""
    spec = importlib.util.find_spec("airflow")
    assert spec is not None and spec.submodule_search_locations
    template = Path(next(iter(spec.submodule_search_locations))) / "config_templates" / "config.yml"
    return str(yaml.safe_load(template.read_text())["core"]["options"][key]["default"])


def test_naive_defaults_are_airflows_own() -> None:
    w = parse_workload({"slots": 1, "tables": [{"name": "t", "profile": "delta-serializable", "partitions": 1}],
                        "jobs": [{"table": "t", "operation": "merge", "duration": 5}]})
    assert w.naive == NaiveSettings()
    assert w.naive.retries == int(airflow_default("default_task_retries"))
    assert w.naive.retry_delay == float(airflow_default("default_task_retry_delay"))
    policy = build_policy("naive", w)
    assert (policy.wait_start_delay, policy.requeue_delay) == (ADMISSION_LATENCY, REQUEUE_DELAY)


def test_airflow_latencies_come_from_the_workload_and_apply_to_every_admission_policy() -> None:
    w = parse_workload({
        "slots": 2, "tables": [{"name": "t", "profile": "delta-serializable", "partitions": 1}],
        "jobs": [{"table": "t", "operation": "merge", "duration": 5, "count": 2}],
        "policies": {"airflow": {"admission_latency": 2.5, "requeue_delay": 12},
                     "naive": {"retries": 1, "retry_delay": 30}},
    })
    for name in ("naive", "table-pool", "partition-lock", "occflow-retry", "occflow"):
        policy = build_policy(name, w)
        assert (policy.wait_start_delay, policy.requeue_delay) == (2.5, 12.0), name
    # Two merges on one partition under a lock: the second waited, so it starts 2.5 s after the first ends.
    assert [a.start for a in simulate(w, "partition-lock").attempts] == [0, 5 + 2.5]
    # naive runs both, one loses and comes back after Airflow's retry delay plus the re-queue.
    assert [(a.start, a.committed) for a in simulate(w, "naive").attempts] == [
        (0, True), (0, False), (5 + 30 + 12, True)]
