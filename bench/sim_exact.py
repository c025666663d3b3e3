"""Benchmark (not a test): the simulator's policies against an exact optimum on tiny instances.

Each instance is one table (1-3 partitions) of a random profile, 3-6 jobs with random operations
of that profile, each on one partition or the whole table, integer durations of 1-8 units and
arrivals of 0-4 units (a unit is ``UNIT`` = 60 simulated seconds), on 1-3 worker slots. Profiles
are taken in turn, so each is drawn as often as the others. Instance i of seed S is drawn from
``random.Random(f"{S}:{i}")``: one instance can be replayed alone.

The exact scheduler shares no code with occflow's admission, the simulator's engine or
``footprint_reach``. It reads the profile's matrix cells directly (``Profile.cell``: whether the
later job fails, and whether the pair corrupts the data) and decides for itself:

- **what loses work**: job i commits first and job j began before that commit (on an overlapping
  footprint) — then j is validated against i, and the pair loses work unless the cell
  (earlier = i, later = j) lets j commit without corrupting the data. Footprints: a job's
  partitions, or the whole table for a job without partitions, a metadata or protocol change, or an operation
  the profile lists in ``reads_whole_table`` (read from the profile's data, as a fact of the
  engine). Attempts that begin at the instant another commits begin after it.
- **the optimum**: the least makespan over every schedule that runs each job exactly once (no
  lost attempt), each not before its arrival, at most ``slots`` at once, in which no pair loses
  work as above. A depth-first branch and bound over integer times: at each instant it tries every
  set of waiting jobs to start (or none), with the commit order of every overlapping pair read
  off the end times (jobs committing at the same instant may commit in any order that works).
  Integer times are exact: for a fixed choice of which jobs overlap and in what order they
  commit, the constraints are differences of start times with integer constants, so an optimal
  vertex has integer coordinates.
- **its own oracle**: every schedule the simulator produces (``record=True``: each attempt's
  start and commit, in commit order) is replayed against the rule above; any lost attempt, or a
  pair the rule says loses work, is reported (and fails ``--check``).

The ``order-blind optimum`` is the same search with a pair that fails in one commit order only
treated as failing in both: what an admission that asks "do they conflict in either order?" can
reach at best. The share of occflow's gap that order-blindness explains is
(order-blind optimum - optimum) / (occflow - optimum), summed over the instances.

**Ablation** (``--ablation``): occflow with each of its two choices that trade the worst case
for the average turned off, at both latencies, over the same instances, each against the
optimum and against partition-lock: ``commit_ahead`` (a newcomer that must commit first joins a
running job and holds that job's commit until its own lease ends) and ``maintenance_last``
(compactions are looked at after waiting data writes, with their age limit). Both are fields of
``occflow.sim.policies.MatrixAdmission``; the store applies the same rules. ``duration-blind``:
occflow without the duration-aware choices of issue 38 (``MatrixAdmission(durations=None)``).

Run: ``.venv/bin/python bench/sim_exact.py [--instances 1500] [--seed 25] [--check] [--ablation]``.
Writes bench/results/sim_exact.json and prints the summary (the seed is printed first).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from occflow.core.operations import Operation
from occflow.core.profiles import PROFILES, Effect, Profile, get_profile
from occflow.sim import Run, parse_workload, simulate
from occflow.sim.policies import MatrixAdmission, build_policy
from occflow.sim.workload import Workload

HERE = Path(__file__).resolve().parent
UNIT = 60.0  # simulated seconds per time unit of an instance
#: The profiles the instance families draw from: those before pyiceberg's joined (issue 36), so
#: the families stay the instances the documented figures were measured on.
PROFILE_NAMES = sorted(name for name in PROFILES if not name.startswith("pyiceberg-"))
#: In-worker wait (a write waiting in its worker starts 0.1 s after the release) and the measured
#: deferral latency (bench/admission_latency.py): every ratio is reported at both.
LATENCIES = (0.1, 5.8)
POLICIES = ("occflow", "partition-lock")


# ----------------------------------------------------------------------------- instances


@dataclass(frozen=True)
class TinyJob:
    operation: Operation
    partition: str | None  # None: the whole table
    arrival: int  # units
    duration: int  # units
    table: str = "t"  # the families of bench/sim_families.py put jobs on two tables


@dataclass(frozen=True)
class Instance:
    seed: int
    index: int
    profile: Profile
    partitions: tuple[str, ...]
    slots: int
    jobs: tuple[TinyJob, ...]

    def workload(self, admission_latency: float) -> Workload:
        """The instance as a simulator workload (one spec per job, fixed duration and arrival)."""
        tables = [{"name": name, "profile": self.profile.name, "partitions": list(self.partitions)}
                  for name in sorted({job.table for job in self.jobs})]
        jobs = [
            {"name": f"j{k}", "table": job.table, "operation": job.operation.value,
             "partitions": "all" if job.partition is None else [job.partition],
             "duration": job.duration * UNIT, "arrival": job.arrival * UNIT}
            for k, job in enumerate(self.jobs)
        ]
        return parse_workload({
            "name": f"tiny-{self.seed}-{self.index}", "slots": self.slots, "tables": tables, "jobs": jobs,
            "policies": {"naive": {"retries": 3, "retry_delay": 60},
                         "airflow": {"admission_latency": admission_latency, "requeue_delay": 5}},
        }, f"tiny-{self.seed}-{self.index}.yaml")

    def describe(self) -> str:
        jobs = ", ".join(f"{j.operation.value}@{'' if j.table == 't' else j.table + ':'}{j.partition or '*'} "
                         f"r{j.arrival} d{j.duration}" for j in self.jobs)
        return f"{self.profile.name}, {self.slots} slot(s), partitions {list(self.partitions)}: {jobs}"


def instance(seed: int, index: int) -> Instance:
    rng = random.Random(f"{seed}:{index}")
    profile = get_profile(PROFILE_NAMES[index % len(PROFILE_NAMES)])
    count = rng.randint(1, 3)
    keys = tuple(f"p{k}" for k in range(count))
    jobs = []
    # The family's operations as they were before maintenance joined the profiles (issue 36):
    # the old family stays the same instances; maintenance mixes are bench/sim_families.py's.
    operations = [op for op in profile.operations if not op.is_maintenance]
    for _ in range(rng.randint(3, 6)):
        partition = None if rng.random() < 0.2 else rng.choice(keys)
        jobs.append(TinyJob(rng.choice(operations), partition, rng.choice([0, 0, 0, 1, 2, 4]),
                            rng.randint(1, 8)))
    return Instance(seed, index, profile, keys, rng.randint(1, 3), tuple(jobs))


# ----------------------------------------------------------------------------- the rule


def whole_table(profile: Profile, job: TinyJob) -> bool:
    # A schema or protocol change is one for every partition (Delta fails a write of any
    # partition across it: "metadata changed", "protocol changed").
    return (job.partition is None or job.operation in (Operation.ALTER_METADATA, Operation.UPGRADE_PROTOCOL)
            or job.operation in profile.reads_whole_table)


def overlapping(profile: Profile, a: TinyJob, b: TinyJob) -> bool:
    if a.table != b.table:
        return False  # two tables never meet
    return whole_table(profile, a) or whole_table(profile, b) or a.partition == b.partition


def commits_cleanly(profile: Profile, earlier: Operation, later: Operation) -> bool:
    """The cell read directly: the later job commits, and the data is right."""
    cell = profile.cell(earlier, later)
    return not cell.later_fails and cell.effect is not Effect.DUPLICATES_ROWS


def allowed(inst: Instance, order_blind: bool = False) -> list[list[bool]]:
    """``allowed[i][j]``: j may begin before i commits and commit after it without losing work."""
    p, jobs = inst.profile, inst.jobs
    n = len(jobs)
    ok = [[True] * n for _ in range(n)]
    for i, j in itertools.permutations(range(n), 2):
        if overlapping(p, jobs[i], jobs[j]):
            ok[i][j] = commits_cleanly(p, jobs[i].operation, jobs[j].operation)
            if order_blind:
                ok[i][j] = ok[i][j] and commits_cleanly(p, jobs[j].operation, jobs[i].operation)
    return ok


# ----------------------------------------------------------------------------- the exact scheduler


def optimum(inst: Instance, order_blind: bool = False) -> int:
    """The least makespan (units) of a schedule that loses no work (module docstring)."""
    jobs, slots = inst.jobs, inst.slots
    n = len(jobs)
    ok = allowed(inst, order_blind)
    arrival = [j.arrival for j in jobs]
    duration = [j.duration for j in jobs]
    everyone = (1 << n) - 1
    # One job at a time in arrival order never overlaps two jobs: always feasible.
    best = 0
    for k in sorted(range(n), key=arrival.__getitem__):
        best = max(best, arrival[k]) + duration[k]
    seen: set[tuple[int, int, tuple[tuple[int, int], ...]]] = set()

    def pair_fits(i: int, ei: int, j: int, ej: int) -> bool:
        if ei < ej:
            return ok[i][j]
        if ej < ei:
            return ok[j][i]
        return ok[i][j] or ok[j][i]

    def ties_fit(group: Sequence[int]) -> bool:
        """Jobs committing at one instant: some commit order among them loses nothing."""
        if len(group) < 2:
            return True
        return any(all(ok[a][b] for a, b in itertools.combinations(order, 2))
                   for order in itertools.permutations(group))

    def bound(t: int, remaining: int, running: tuple[tuple[int, int], ...]) -> int:
        low = max((e for e, _ in running), default=t)
        work = sum(e - t for e, _ in running)
        for k in range(n):
            if remaining >> k & 1:
                low = max(low, max(t, arrival[k]) + duration[k])
                work += duration[k]
        return max(low, t + -(-work // slots))

    def search(t: int, remaining: int, running: tuple[tuple[int, int], ...]) -> None:
        key = (t, remaining, running)
        if key in seen:
            return
        seen.add(key)
        if bound(t, remaining, running) >= best:
            return
        free = slots - len(running)
        ready = [k for k in range(n) if remaining >> k & 1 and arrival[k] <= t]
        for size in range(min(free, len(ready)), -1, -1):
            for chosen in itertools.combinations(ready, size):
                placed = list(running)
                fits = True
                for k in chosen:
                    ek = t + duration[k]
                    if not all(pair_fits(i, ei, k, ek) for ei, i in placed):
                        fits = False
                        break
                    placed.append((ek, k))
                if not fits:
                    continue
                left = remaining
                for k in chosen:
                    left &= ~(1 << k)
                advance(t, left, tuple(sorted(placed)))

    def advance(t: int, remaining: int, running: tuple[tuple[int, int], ...]) -> None:
        """Move to the next instant a decision can be made, committing what ends on the way."""
        nonlocal best
        if not remaining:  # only commits are left: their ends are fixed
            for _, group in itertools.groupby(running, key=lambda r: r[0]):
                if not ties_fit([k for _, k in group]):
                    return
            best = min(best, max(e for e, _ in running))
            return
        if len(running) < slots and any(remaining >> k & 1 and arrival[k] <= t for k in range(n)):
            nxt = t + 1  # a job waits on purpose: it may start at any later instant
        else:
            nxt = min([*(e for e, _ in running), *(arrival[k] for k in range(n) if remaining >> k & 1 and arrival[k] > t)])
        ending = [r for r in running if r[0] <= nxt]
        for _, group in itertools.groupby(ending, key=lambda r: r[0]):
            if not ties_fit([k for _, k in group]):
                return
        search(nxt, remaining, tuple(r for r in running if r[0] > nxt))

    search(0, everyone, ())
    return best


# ----------------------------------------------------------------------------- the oracle


def lost_work(inst: Instance, run: Run) -> list[str]:
    """What the rule says this run lost: failed attempts, and committed pairs that lose work."""
    problems = [f"attempt {a.number} of j{a.job} failed ({a.kind})" for a in run.attempts if not a.committed]
    ok = allowed(inst)
    wins = [a for a in run.attempts if a.committed]  # in commit order
    for x, y in itertools.combinations(wins, 2):
        if y.start < x.end and not ok[x.job][y.job]:
            problems.append(f"j{y.job} began at {y.start:g} before j{x.job} committed at {x.end:g} and "
                            f"committed after it: {inst.jobs[x.job].operation.value} then "
                            f"{inst.jobs[y.job].operation.value} loses work")
    if len({a.job for a in wins}) != len(inst.jobs):
        problems.append("not every job committed")
    return problems


# ----------------------------------------------------------------------------- the benchmark


def spread(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return {"mean": round(statistics.fmean(values), 4), "p90": round(p90, 4), "max": round(max(values), 4)}


def measure(seed: int, count: int, check: bool) -> dict[str, Any]:
    rows = []
    problems: list[str] = []
    for index in range(count):
        inst = instance(seed, index)
        best = optimum(inst)
        blind = optimum(inst, order_blind=True)
        row: dict[str, Any] = {"index": index, "profile": inst.profile.name, "jobs": len(inst.jobs),
                               "slots": inst.slots, "optimum": best * UNIT, "order_blind_optimum": blind * UNIT}
        for latency in LATENCIES:
            for policy in POLICIES:
                run = simulate(inst.workload(latency), build_policy(policy, inst.workload(latency)))
                row[f"{policy}@{latency:g}"] = run.metrics.makespan
                if policy == "occflow":
                    problems += [f"instance {index} ({inst.describe()}), latency {latency:g}: {p}"
                                 for p in lost_work(inst, run)]
        rows.append(row)
        if check and problems:
            break
    return {"rows": rows, "problems": problems}


#: name -> MatrixAdmission fields: occflow and its ablations (``--ablation``).
VARIANTS: dict[str, dict[str, Any]] = {
    "occflow": {},
    "duration-blind": {"durations": None},
    "no commit-ahead": {"commit_ahead": False},
    "maintenance not last": {"maintenance_last": False},
    "neither": {"commit_ahead": False, "maintenance_last": False},
}


def ablation(seed: int, count: int) -> dict[str, Any]:
    """Per latency, each variant over optimum and over partition-lock on instances 0..count-1."""
    return {f"latency {latency:g}s": ablation_at(seed, count, latency) for latency in LATENCIES}


def ablation_at(seed: int, count: int, latency: float) -> dict[str, Any]:
    over: dict[str, list[float]] = {name: [] for name in VARIANTS}
    over_lock: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for index in range(count):
        inst = instance(seed, index)
        best = optimum(inst) * UNIT
        workload = inst.workload(latency)
        lock = simulate(workload, build_policy("partition-lock", workload), record=False).metrics.makespan
        for name, fields in VARIANTS.items():
            policy = build_policy("occflow", workload)
            policy = dataclasses.replace(policy, admission=MatrixAdmission(**fields))
            run = simulate(workload, policy, record=False)
            if run.metrics.dropped:
                raise SystemExit(f"instance {index}: {name} did not commit every job")
            over[name].append(run.metrics.makespan / best)
            over_lock[name].append(run.metrics.makespan / lock)
    return {
        name: {"over_optimum": spread(over[name]),
               "slower_than_partition_lock": sum(r > 1 + 1e-9 for r in over_lock[name]),
               "slower_than_partition_lock_worst": round(max(over_lock[name]), 4)}
        for name in VARIANTS
    }


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "order_blind_optimum_over_optimum": spread([r["order_blind_optimum"] / r["optimum"] for r in rows]),
    }
    for latency in LATENCIES:
        occ = [r[f"occflow@{latency:g}"] for r in rows]
        lock = [r[f"partition-lock@{latency:g}"] for r in rows]
        gap = sum(o - r["optimum"] for o, r in zip(occ, rows, strict=True))
        blind_gap = sum(min(o, r["order_blind_optimum"]) - r["optimum"] for o, r in zip(occ, rows, strict=True))
        out[f"latency {latency:g}s"] = {
            "occflow_over_optimum": spread([o / r["optimum"] for o, r in zip(occ, rows, strict=True)]),
            "partition_lock_over_optimum": spread([p / r["optimum"] for p, r in zip(lock, rows, strict=True)]),
            "occflow_slower_than_partition_lock": sum(o > p + 1e-9 for o, p in zip(occ, lock, strict=True)),
            "occflow_slower_than_partition_lock_worst": round(max(o / p for o, p in zip(occ, lock, strict=True)), 4),
            "share_of_gap_from_order_blindness": round(blind_gap / gap, 3) if gap > 0 else 0.0,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--instances", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=25)
    parser.add_argument("--check", action="store_true", help="stop at the first schedule that loses work; exit 1")
    parser.add_argument("--ablation", action="store_true",
                        help="also run occflow with commit_ahead / maintenance_last turned off")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "sim_exact.json")
    args = parser.parse_args()
    print(f"seed {args.seed}, {args.instances} instances", flush=True)
    started, load_before = time.perf_counter(), os.getloadavg()
    result = measure(args.seed, args.instances, args.check)
    rows, problems = result["rows"], result["problems"]
    report = {
        "benchmark": "simulator policies against an exact optimum on tiny random instances",
        "command": f"python bench/sim_exact.py --instances {args.instances} --seed {args.seed}"
                   + (" --ablation" if args.ablation else ""),
        "seed": args.seed,
        "instances": len(rows),
        "unit_seconds": UNIT,
        "admission_latencies": list(LATENCIES),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "load_average": {"before": [round(x, 2) for x in load_before],
                         "after": [round(x, 2) for x in os.getloadavg()]},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "summary": summary(rows),
        "schedules_losing_work": problems,
        "rows": rows,
    }
    if args.ablation:
        report["ablation"] = ablation(args.seed, len(rows))
        report["wall_seconds"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["summary"], indent=2))
    if args.ablation:
        print("ablation:", json.dumps(report["ablation"], indent=2))
    print(f"schedules losing work: {len(problems)}")
    for p in problems[:10]:
        print("  " + p)
    print(f"{report['wall_seconds']} s; wrote {args.out}")
    if problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
