"""The simulator's lower bound is a bound: no run of any policy ends before it.

Oracles the code does not share: random workloads of every profile run through every policy;
a brute-force optimum over every list schedule of tiny workloads; a plain per-partition
earliest-arrival-first chain (whole-table jobs copied onto every partition, cliques found by
trying every subset of operations); and examples computed by hand.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Collection, Sequence
from typing import Any

import pytest

from occflow.core.operations import Operation
from occflow.core.profiles import PROFILES, Profile, get_profile
from occflow.sim.metrics import LowerBound, lower_bound
from occflow.sim.policies import ORACLE, POLICY_NAMES
from occflow.sim.simulator import Run, simulate
from occflow.sim.workload import Job, Workload, parse_workload

PROFILE_NAMES = sorted(PROFILES)
SIMULATED = [name for name in POLICY_NAMES if name != ORACLE]


# ----------------------------------------------------------------------------- test-side oracles


def whole_table(job: Job) -> bool:
    """Written from the documented rule, not imported: what holds the whole table."""
    return (job.partitions is None or job.reads_whole_table or job.protocol_change
            or job.operation in (Operation.ALTER_METADATA, Operation.UPGRADE_PROTOCOL))


def footprints_overlap(a: Job, b: Job) -> bool:
    if a.table != b.table:
        return False
    if whole_table(a) or whole_table(b):
        return True
    return bool(set(a.partitions or ()) & set(b.partitions or ()))


def exclusive(profile: Profile, a: Job, b: Job) -> bool:
    """The engine never commits both of two overlapping attempts of these jobs."""
    return (footprints_overlap(a, b) and profile.later_fails(a.operation, b.operation)
            and profile.later_fails(b.operation, a.operation))


def erf(times: Sequence[tuple[float, float]]) -> float:
    """One machine, earliest arrival first, never idle while a job waits."""
    end = 0.0
    for arrival, duration in sorted(times):
        end = max(end, arrival) + duration
    return end


def plain_chain(jobs: Sequence[Job], profiles: dict[str, Profile], partitions: dict[str, Sequence[str]],
                committed: Collection[int] | None = None) -> float:
    """The chain term the slow way: every partition (and a whole-table pseudo-partition), every
    subset of operations that pairwise and each with itself fail both ways."""
    chosen = [j for i, j in enumerate(jobs) if committed is None or i in committed]
    best = 0.0
    for table, profile in profiles.items():
        mine = [j for j in chosen if j.table == table]
        ops = sorted({j.operation for j in mine}, key=lambda op: op.value)
        named = {p for j in mine if not whole_table(j) for p in j.partitions or ()}
        places: list[str | None] = [None, *sorted(set(partitions[table]) | named)]
        for size in range(1, len(ops) + 1):
            for combo in itertools.combinations(ops, size):
                if not all(profile.later_fails(a, b) for a in combo for b in combo):
                    continue
                for place in places:
                    on = [(j.arrival, j.duration) for j in mine if j.operation in combo
                          and (whole_table(j) or (place is not None and place in (j.partitions or ())))]
                    best = max(best, erf(on))
    return best


def brute_force_optimum(jobs: Sequence[Job], slots: int, profiles: dict[str, Profile]) -> float:
    """The least makespan over every schedule that runs each job once, at most ``slots`` at a time,
    never two exclusive jobs at once, each not before it arrives.

    Every permutation placed job by job at the earliest feasible time (gaps allowed): placing
    an optimal schedule's jobs in start order starts each one no later, so some permutation
    reaches the optimum."""
    n = len(jobs)
    clash = [[i != k and exclusive(profiles[jobs[i].table], jobs[i], jobs[k]) for k in range(n)] for i in range(n)]
    best = float("inf")
    for order in itertools.permutations(range(n)):
        placed: list[tuple[float, float, int]] = []
        for i in order:
            job = jobs[i]
            candidates = sorted({job.arrival, *(end for _, end, _ in placed if end > job.arrival)})
            start = next(s for s in candidates if fits(s, s + job.duration, i, placed, slots, clash))
            placed.append((start, start + job.duration, i))
        best = min(best, max(end for _, end, _ in placed))
    return best


def fits(start: float, end: float, i: int, placed: list[tuple[float, float, int]], slots: int,
         clash: list[list[bool]]) -> bool:
    during = [(s, e, k) for s, e, k in placed if s < end and start < e]
    if any(clash[i][k] for _, _, k in during):
        return False
    # The most jobs running at once in [start, end): check at start and at each start inside.
    points = [start, *(s for s, _, _ in during if s > start)]
    return all(sum(1 for s, e, _ in during if s <= x < e) < slots for x in points)


# ----------------------------------------------------------------------------- random workloads


def random_job(rng: random.Random, table: str, profile: Profile, keys: list[str], spread: float) -> dict[str, Any]:
    job: dict[str, Any] = {
        "table": table,
        "operation": rng.choice(profile.operations).value,
        "duration": round(rng.uniform(1, 60), 3),
        "arrival": 0 if rng.random() < 0.3 else round(rng.uniform(0, spread), 3),
    }
    if rng.random() < 0.25:
        job["partitions"] = "all"
    else:
        job["partitions"] = rng.sample(keys, rng.randint(1, len(keys)))
    if rng.random() < 0.1:
        job["reads_whole_table"] = True
    if rng.random() < 0.05:
        job["protocol_change"] = True
    return job


def random_workload(rng: random.Random, index: int) -> Workload:
    """Profiles in turn, so that each one is drawn as often as the others."""
    tables: list[tuple[str, Profile, int]] = []
    for t in range(1 if rng.random() < 0.7 else 2):
        profile = PROFILE_NAMES[index % len(PROFILE_NAMES)] if t == 0 else rng.choice(PROFILE_NAMES)
        tables.append((f"t{t}", get_profile(profile), rng.randint(1, 4)))
    spread = rng.choice([0, 30, 200])
    jobs = []
    for _ in range(rng.randint(2, 12)):
        name, profile_of, count = rng.choice(tables)
        keys = [""] if count == 1 else [f"p{i:03d}" for i in range(count)]  # as the workload file names them
        jobs.append(random_job(rng, name, profile_of, keys, spread))
    return parse_workload({
        "name": f"random-{index}",
        "slots": rng.randint(1, 4),
        "tables": [{"name": name, "profile": p.name, "partitions": count} for name, p, count in tables],
        "jobs": jobs,
        "policies": {
            "naive": {"retries": rng.randint(0, 4), "retry_delay": rng.choice([0, 5, 30])},
            "airflow": {"admission_latency": rng.choice([0, 0.5, 3]), "requeue_delay": rng.choice([0, 5])},
        },
    }, f"random-{index}.yaml")


def context(w: Workload) -> tuple[dict[str, Profile], dict[str, Sequence[str]]]:
    return {t.name: t.profile for t in w.tables}, {t.name: t.partitions for t in w.tables}


def committed_jobs(run: Run) -> set[int]:
    return {o.job for o in run.outcomes if o.status == "committed"}


def check_run(w: Workload, run: Run) -> None:
    profiles, partitions = context(w)
    committed = committed_jobs(run)
    assert len(run.outcomes) == len(run.jobs), (w.name, run.policy, "every job ends")
    bound = lower_bound(run.jobs, w.slots, profiles, partitions, committed=committed)
    makespan = run.metrics.makespan
    assert makespan >= bound.value - 1e-9, (w.name, run.policy, makespan, bound)
    if len(committed) == len(run.jobs):
        assert makespan >= run.bound.value - 1e-9, (w.name, run.policy, makespan, run.bound)
    # The premise of the chain: committed attempts of exclusive jobs never overlap in time.
    wins = [a for a in run.attempts if a.committed]
    for a, b in itertools.combinations(wins, 2):
        ja, jb = run.jobs[a.job], run.jobs[b.job]
        if a.start < b.end and b.start < a.end:
            assert not exclusive(profiles[ja.table], ja, jb), (w.name, run.policy, ja, jb, a, b)


def run_random(count: int, seed: int) -> int:
    rng = random.Random(seed)
    checked = 0
    for index in range(count):
        w = random_workload(rng, index)
        for policy in SIMULATED:
            check_run(w, simulate(w, policy, seed=index))
            checked += 1
    return checked


def test_no_policy_ends_before_the_bound_on_random_workloads_of_every_profile() -> None:
    assert run_random(len(PROFILE_NAMES) * 30, seed=13) == len(PROFILE_NAMES) * 30 * len(SIMULATED)


def test_no_policy_ends_before_the_bound_on_1500_random_workloads() -> None:
    # The count (about 9 s of CPU: under the ~20 s that would make it a slow test).
    assert run_random(1500, seed=1313) == 1500 * len(SIMULATED)


# ----------------------------------------------------------------------------- brute force


def tiny_workload(rng: random.Random, index: int) -> Workload:
    profile = get_profile(PROFILE_NAMES[index % len(PROFILE_NAMES)])
    keys = ["p000", "p001"]
    jobs = []
    for _ in range(rng.randint(2, 5)):
        job = random_job(rng, "t", profile, keys, spread=0)
        job["arrival"] = rng.choice([0, 0, 5, 20])
        job["duration"] = rng.choice([5, 10, 15, 30])
        jobs.append(job)
    return parse_workload({"name": f"tiny-{index}", "slots": rng.randint(1, 2),
                           "tables": [{"name": "t", "profile": profile.name, "partitions": 2}], "jobs": jobs})


def test_bound_never_exceeds_the_brute_force_optimum() -> None:
    rng = random.Random(7)
    tight = 0
    for index in range(len(PROFILE_NAMES) * 8):
        w = tiny_workload(rng, index)
        jobs = w.jobs(0)
        profiles, partitions = context(w)
        bound = lower_bound(jobs, w.slots, profiles, partitions)
        optimum = brute_force_optimum(jobs, w.slots, profiles)
        assert bound.value <= optimum + 1e-9, (w.name, bound, optimum, jobs)
        tight += bound.value == pytest.approx(optimum)
        # The brute force is right too: a run that commits every job is one such schedule.
        for policy in SIMULATED:
            run = simulate(w, policy)
            if len(committed_jobs(run)) == len(jobs):
                assert run.metrics.makespan >= optimum - 1e-9, (w.name, policy)
    assert tight > 0  # on some of them the bound is the optimum


def test_bound_is_the_optimum_when_every_job_excludes_every_other_on_one_slot() -> None:
    # One slot, mutually failing merges and deletes on one partition: 1|r_j|C_max, which
    # earliest-arrival-first solves exactly, so bound and optimum agree.
    profile = get_profile("delta-serializable")
    assert profile.later_fails("merge", "delete") and profile.later_fails("delete", "merge")
    rng = random.Random(3)
    for _ in range(20):
        w = parse_workload({"slots": 1, "tables": [{"name": "t", "profile": profile.name, "partitions": 2}],
                            "jobs": [{"table": "t", "operation": rng.choice(["merge", "delete"]),
                                      "partitions": ["p000"], "duration": rng.choice([5, 10, 40]),
                                      "arrival": rng.choice([0, 10, 30, 100])} for _ in range(5)]}, "one.yaml")
        jobs = w.jobs(0)
        assert lower_bound(jobs, 1, *context(w)).value == pytest.approx(brute_force_optimum(jobs, 1, context(w)[0]))


# ----------------------------------------------------------------------------- the chain, the slow way


def test_chain_matches_the_plain_per_partition_computation() -> None:
    rng = random.Random(11)
    for index in range(len(PROFILE_NAMES) * 4):
        profile = get_profile(PROFILE_NAMES[index % len(PROFILE_NAMES)])
        count = rng.choice([1, 3, 30])
        keys = [f"p{i:03d}" for i in range(count)] if count > 1 else [""]
        spread = rng.choice([0, 100, 5000])
        specs = [random_job(rng, "t", profile, keys, spread) for _ in range(rng.randint(1, 60))]
        w = parse_workload({"slots": 3, "tables": [{"name": "t", "profile": profile.name, "partitions": count}],
                            "jobs": specs}, "chain.yaml")
        jobs = w.jobs(0)
        profiles, partitions = context(w)
        committed = {i for i in range(len(jobs)) if rng.random() < 0.6}
        for subset in (None, committed):
            got = lower_bound(jobs, w.slots, profiles, partitions, committed=subset).chain
            assert got == pytest.approx(plain_chain(jobs, profiles, partitions, subset)), (profile.name, subset)


# ----------------------------------------------------------------------------- by hand


def hand(jobs: list[dict[str, Any]], slots: int, partitions: int = 2, profile: str = "delta-serializable") -> Workload:
    return parse_workload({"slots": slots, "tables": [{"name": "t", "profile": profile, "partitions": partitions}],
                           "jobs": jobs}, "hand.yaml")


def bound_of(w: Workload, committed: Collection[int] | None = None) -> LowerBound:
    return lower_bound(w.jobs(0), w.slots, *context(w), committed=committed)


def test_work_term_counts_late_arrivals_from_their_arrival() -> None:
    # 2 slots; an early 10 s job, then four 30 s appends arriving at 100 on their own partitions.
    # From t=0: 0 + 130/2 = 65; from t=100: 100 + 120/2 = 160. Longest: 100 + 30 = 130.
    w = hand([{"table": "t", "operation": "insert_into", "partitions": ["p000"], "duration": 10},
              *({"table": "t", "operation": "insert_into", "partitions": [f"p{i:03d}"], "duration": 30,
                 "arrival": 100} for i in range(4))], slots=2, partitions=4)
    bound = bound_of(w)
    assert bound.work == pytest.approx(160)
    assert bound.longest == pytest.approx(130)
    assert bound.value == pytest.approx(160)
    assert simulate(w, "naive").metrics.makespan == pytest.approx(160)  # tight: two waves of two


def test_chain_term_on_a_partition_with_a_whole_table_job() -> None:
    # delta-serializable: merge, delete and optimize fail each other both ways.
    profile = get_profile("delta-serializable")
    for a, b in itertools.permutations(["merge", "delete", "optimize"], 2):
        assert profile.later_fails(a, b)
    w = hand([
        {"table": "t", "operation": "merge", "partitions": ["p000"], "duration": 50},
        {"table": "t", "operation": "delete", "partitions": ["p000"], "duration": 30, "arrival": 10},
        {"table": "t", "operation": "optimize", "partitions": "all", "duration": 20, "arrival": 60},
        {"table": "t", "operation": "merge", "partitions": ["p001"], "duration": 100},
    ], slots=8)
    # p000: merge 0-50, delete 50-80, optimize 80-100 -> 100; p001: merge 0-100, optimize 100-120.
    bound = bound_of(w)
    assert bound.chain == pytest.approx(120)
    assert bound.chain_footprint.startswith("t/p001")
    assert bound.work == pytest.approx(60 + 20 / 8)  # from t=0 only 200 / 8 = 25
    assert bound.longest == pytest.approx(100)
    assert bound.value == pytest.approx(120)
    # Without the optimize among the committed jobs: p000 80, p001 100.
    assert bound_of(w, committed={0, 1, 3}).chain == pytest.approx(100)
    # Every run that commits all four takes at least 120 s.
    for policy in SIMULATED:
        run = simulate(w, policy)
        if len(committed_jobs(run)) == 4:
            assert run.metrics.makespan >= 120 - 1e-9


def test_chain_term_with_sparse_whole_table_jobs_and_a_long_partition_job() -> None:
    # Whole-table optimizes at 0, 100, 200 (10 s each), a merge on p000 at 150 for 100 s:
    # 0-10, 100-110, merge 150-250, optimize 250-260 -> 260.
    w = hand([*({"table": "t", "operation": "optimize", "partitions": "all", "duration": 10, "arrival": t}
                for t in (0, 100, 200)),
              {"table": "t", "operation": "merge", "partitions": ["p000"], "duration": 100, "arrival": 150}],
             slots=4)
    bound = bound_of(w)
    assert bound.chain == pytest.approx(260)
    assert bound.chain_footprint.startswith("t/p000")
    assert bound.longest == pytest.approx(250)


def test_longest_term() -> None:
    w = hand([{"table": "t", "operation": "insert_into", "partitions": ["p000"], "duration": 300, "arrival": 500},
              {"table": "t", "operation": "insert_into", "partitions": ["p001"], "duration": 10}], slots=1)
    bound = bound_of(w)
    assert bound.longest == pytest.approx(800)
    assert bound.work == pytest.approx(800)  # from t=500: 500 + 300 / 1
    assert bound.value == pytest.approx(800)
    assert bound.to_dict()["value"] == pytest.approx(800)


def test_appends_make_no_chain() -> None:
    # insert_into never fails in delta-serializable: no two appends exclude each other.
    profile = get_profile("delta-serializable")
    assert not profile.later_fails("insert_into", "insert_into")
    w = hand([{"table": "t", "operation": "insert_into", "partitions": ["p000"], "duration": 40} for _ in range(3)],
             slots=3)
    assert bound_of(w).chain == 0  # a chain needs operations that fail each other
    assert bound_of(w).value == pytest.approx(40)  # the longest job


def test_bad_arguments_are_clear_errors() -> None:
    w = hand([{"table": "t", "operation": "merge", "partitions": ["p000"], "duration": 5}], slots=1)
    with pytest.raises(ValueError, match="slots must be at least 1, got 0"):
        lower_bound(w.jobs(0), 0, *context(w))
    with pytest.raises(ValueError, match="committed names job 3, but there are only 1 jobs"):
        bound_of(w, committed={0, 3})
