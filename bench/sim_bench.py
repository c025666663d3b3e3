"""Benchmark (not a test): simulator CPU time and peak memory for 100,000 jobs per policy.

The MERGE-heavy workload (bench/workloads/merge_heavy.yaml) scaled up to at least ``--jobs``
jobs: N times its jobs over N times its hours, same tables and distributions, so contention per
hour is unchanged. Each simulated policy runs ``--repeats`` times, every run in a fresh Python
process, with ``record=False`` (no per-attempt history: what a big run uses).

Measured per run:
- ``cpu_seconds``: ``time.process_time()`` around ``simulate`` in the child (drawing the jobs,
  the lower bound and the event loop);
- ``draw_and_bound_cpu_seconds``: the part of that spent drawing the jobs and computing the lower
  bound (measured again after the run, in the same child);
- ``peak_rss_mb``: the child's peak resident set (``os.wait4``'s ``ru_maxrss``: the whole
  process, interpreter and imports included).
Reported per policy: median and min-max over the repeats. The 1-minute load average before and
after each run is recorded: the machine may be shared, and CPU time grows under contention.

Run: ``.venv/bin/python bench/sim_bench.py [--jobs 100000] [--repeats 3] [--seed 0]``.
Writes bench/results/sim_bench.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from benchlib import machine  # bench/ is the script directory, so first on sys.path

from occflow.sim import POLICY_NAMES, Workload, build_policy, load_workload, simulate
from occflow.sim.policies import ORACLE
from occflow.sim.simulator import workload_bound
from occflow.sim.workload import Every, Uniform

HERE = Path(__file__).resolve().parent
BASE = HERE / "workloads" / "merge_heavy.yaml"


def scaled(scale: int) -> Workload:
    workload = load_workload(BASE)
    specs = []
    for spec in workload.specs:
        arrival = spec.arrival
        if isinstance(arrival, Uniform):
            arrival = replace(arrival, high=arrival.low + (arrival.high - arrival.low) * scale)
        assert isinstance(arrival, Uniform | Every), arrival  # Every keeps its period: more of them
        specs.append(replace(spec, count=spec.count * scale, arrival=arrival))
    return replace(workload, specs=tuple(specs), name=f"{workload.name} x{scale}")


def scale_for(jobs: int) -> int:
    return max(1, math.ceil(jobs / load_workload(BASE).job_count))


def child(policy: str, scale: int, seed: int) -> None:
    """One run; prints one JSON line for the parent."""
    workload = scaled(scale)
    started = time.process_time()
    run = simulate(workload, policy, seed=seed, record=False)
    cpu = time.process_time() - started
    m, peaks = run.metrics, run.peaks
    del run
    started = time.process_time()
    workload_bound(workload, workload.jobs(seed))
    draw = time.process_time() - started
    print(json.dumps({
        "cpu_seconds": cpu, "draw_and_bound_cpu_seconds": draw, "jobs": m.jobs, "attempts": m.attempts,
        "makespan_over_bound": m.makespan_over_bound, "wasted_fraction": m.wasted_fraction,
        "peak_waiting": peaks.waiting, "peak_live": peaks.live, "peak_retained_commits": peaks.retained_commits,
    }))


def measure(policy: str, scale: int, seed: int) -> dict[str, object]:
    load_before = os.getloadavg()[0]
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", policy, "--scale", str(scale), "--seed", str(seed)],
        stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"the run of {policy} failed (exit {proc.returncode})")
    row: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    row["peak_rss_mb"] = usage.ru_maxrss / 1024  # Linux: kilobytes
    row["load_1min_before_after"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    return row


def spread(values: list[float], digits: int = 2) -> dict[str, float]:
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits)}


def summary(policy: str, rows: list[dict[str, object]]) -> dict[str, object]:
    def values(key: str) -> list[float]:
        return [float(r[key]) for r in rows]  # type: ignore[arg-type]

    first = rows[0]
    return {
        "policy": policy,
        "jobs": first["jobs"],
        "attempts": first["attempts"],
        "cpu_seconds": spread(values("cpu_seconds")),
        "draw_and_bound_cpu_seconds": spread(values("draw_and_bound_cpu_seconds")),
        "peak_rss_mb": spread(values("peak_rss_mb"), 1),
        # null for a run that dropped jobs (its ratio would flatter it)
        "makespan_over_bound": None if first["makespan_over_bound"] is None
        else round(float(first["makespan_over_bound"]), 3),  # type: ignore[arg-type]
        "wasted_fraction": round(float(first["wasted_fraction"]), 4),  # type: ignore[arg-type]
        "peaks": {k: first[k] for k in ("peak_waiting", "peak_live", "peak_retained_commits")},
        "load_1min_before_after": [r["load_1min_before_after"] for r in rows],
    }


def policies(workload: Workload) -> list[str]:
    """Every simulated policy once (an alias runs under its own name only once)."""
    names: dict[str, str] = {}
    for name in POLICY_NAMES:
        if name != ORACLE:
            names.setdefault(build_policy(name, workload).name, name)
    return list(names)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="at least this many jobs (default 100000)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policy", action="append", help="only these policies (repeatable)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--scale", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.scale, args.seed)
        return
    scale = scale_for(args.jobs)
    workload = scaled(scale)
    rows = []
    for policy in args.policy or policies(workload):
        runs = [measure(policy, scale, args.seed) for _ in range(args.repeats)]
        row = summary(policy, runs)
        rows.append(row)
        cpu, rss = row["cpu_seconds"], row["peak_rss_mb"]
        print(f"{policy:14} {row['jobs']} jobs, {row['attempts']} attempts: cpu {cpu} s, peak rss {rss} MB")
    out = HERE / "results" / "sim_bench.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({
        "benchmark": "simulator CPU time and peak memory, record=False, one fresh process per run",
        "workload": workload.name,
        "jobs": workload.job_count,
        "seed": args.seed,
        "repeats": args.repeats,
        "machine": machine(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "runs": rows,
    }, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
