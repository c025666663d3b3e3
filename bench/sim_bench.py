"""Benchmark (not a test): how long the simulator takes for 10,000 jobs.

The MERGE-heavy workload (bench/workloads/merge_heavy.yaml) scaled up: 40x its jobs over 40x
its hours, same tables and distributions, so contention per hour is unchanged. Every simulated
policy runs once; wall time is measured with time.perf_counter around ``simulate`` (which
includes drawing the jobs, computing the lower bound and every reference-engine commit).

Run: ``.venv/bin/python bench/sim_bench.py [--scale 40] [--seed 0]``.
Writes bench/results/sim_bench.json.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from benchlib import machine  # bench/ is the script directory, so first on sys.path

from occflow.sim import load_workload, simulate
from occflow.sim.workload import Every, Uniform

HERE = Path(__file__).resolve().parent




def scaled(scale: int):  # type: ignore[no-untyped-def]
    workload = load_workload(HERE / "workloads" / "merge_heavy.yaml")
    specs = []
    for spec in workload.specs:
        arrival = spec.arrival
        if isinstance(arrival, Uniform):
            arrival = replace(arrival, high=arrival.low + (arrival.high - arrival.low) * scale)
        assert isinstance(arrival, Uniform | Every), arrival  # Every keeps its period: more of them
        specs.append(replace(spec, count=spec.count * scale, arrival=arrival))
    return replace(workload, specs=tuple(specs), name=f"{workload.name} x{scale}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    workload = scaled(args.scale)
    rows = []
    for policy in ("naive", "pool", "occflow-retry", "occflow"):
        started = time.perf_counter()
        run = simulate(workload, policy, seed=args.seed)
        seconds = time.perf_counter() - started
        m = run.metrics
        rows.append({
            "policy": policy,
            "jobs": m.jobs,
            "attempts": m.attempts,
            "wall_seconds": round(seconds, 2),
            "makespan_over_bound": round(m.makespan_over_bound, 3),
            "wasted_fraction": round(m.wasted_fraction, 4),
        })
        print(f"{policy:14} {m.jobs} jobs, {m.attempts} attempts: {seconds:.2f}s "
              f"(makespan {m.makespan_over_bound:.2f}x bound, wasted {100 * m.wasted_fraction:.1f}%)")
    out = HERE / "results" / "sim_bench.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({
        "benchmark": "simulator wall time",
        "workload": workload.name,
        "seed": args.seed,
        "machine": machine(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "runs": rows,
    }, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
