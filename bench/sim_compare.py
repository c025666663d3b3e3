"""Benchmark (not a test): every shipped workload x every policy x ten seeds x two latencies.

For each workload in bench/workloads/*.yaml, each admission latency (in-worker, 0.1 s, and the
measured deferral latency, 5.8 s, ``--deferral-latency``) and each seed, every simulated policy
runs once (``simulate(..., record=False)``), and so does ``occflow-order-blind``: occflow's
admission as it was before issue 25 (a pair that fails in one commit order only never runs
together; maintenance after every data write, with no age limit), for before/after figures.
Per workload and latency it reports, over the seeds: occflow's wasted share of slot time, the
makespan ratio occflow / partition-lock per seed (median and min-max), occflow / the lower bound,
occflow against naive, and the jobs each policy dropped. A ratio below 1 means occflow finished
first. A ratio to the bound is taken only over the seeds on which the policy committed every job
(a run that dropped jobs did less work than the bound assumes); the count of such runs is given.

Targets (issues 13 and 25): occflow wastes 0%, its makespan is <= 1.00x partition-lock's on every
workload and seed; partition-lock / occflow >= 1.2 on the streaming mix; occflow <= 1.10x the
bound at the measured (deferral) latency.

Run: ``.venv/bin/python bench/sim_compare.py [--seeds 10] [--workload STEM ...] [--deferral-latency 5.8]``.
Writes bench/results/sim_compare.json and prints the markdown tables docs/simulator.md shows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchlib import machine  # bench/ is the script directory, so first on sys.path

from occflow.sim import POLICY_NAMES, SimPolicy, Workload, build_policy, load_workload, simulate
from occflow.sim.policies import ORACLE, MatrixAdmission
from occflow.sim.workload import ADMISSION_LATENCY, IN_WORKER_LATENCY, at_latency

HERE = Path(__file__).resolve().parent
BEFORE = "occflow-order-blind"
POLICIES = [*(p for p in POLICY_NAMES if p != ORACLE), BEFORE]
STREAMING = "streaming-mix"


def policy(name: str, workload: Workload) -> SimPolicy:
    if name == BEFORE:
        now = build_policy("occflow", workload)
        return replace(now, name=BEFORE, admission=MatrixAdmission(order_aware=False, maintenance_age=None))
    return build_policy(name, workload)


def spread(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4)}


def complete_ratio(rows: Sequence[dict[str, float]]) -> dict[str, Any]:
    """makespan / bound over the runs that committed every job, and how many runs did not."""
    kept = [r["makespan"] / r["bound"] for r in rows if not r["dropped"]]
    return {"spread": spread(kept), "runs_with_drops": sum(1 for r in rows if r["dropped"])}


def run_latency(workload: Workload, seeds: Sequence[int]) -> dict[str, Any]:
    per: dict[str, list[dict[str, float]]] = {p: [] for p in POLICIES}
    for seed in seeds:
        for name in POLICIES:
            m = simulate(workload, policy(name, workload), seed=seed, record=False).metrics
            per[name].append({"makespan": m.makespan, "bound": m.lower_bound, "wasted": m.wasted_fraction,
                              "failed": m.failed, "skipped": m.skipped, "dropped": m.dropped})
    occ, lock, naive, before = per["occflow"], per["partition-lock"], per["naive"], per[BEFORE]
    return {
        "admission_latency": workload.airflow.admission_latency,
        "occflow_wasted_pct": spread([100 * r["wasted"] for r in occ]),
        "occflow_over_partition_lock": spread([o["makespan"] / p["makespan"] for o, p in zip(occ, lock, strict=True)]),
        "occflow_slower_than_partition_lock_seeds": [s for s, o, p in zip(seeds, occ, lock, strict=True)
                                                     if o["makespan"] > p["makespan"] + 1e-6],
        "occflow_over_bound": complete_ratio(occ),
        "order_blind_over_bound": complete_ratio(before),
        "occflow_over_order_blind": spread([o["makespan"] / b["makespan"] for o, b in zip(occ, before, strict=True)]),
        "naive_over_occflow": spread([n["makespan"] / o["makespan"] for n, o in zip(naive, occ, strict=True)]),
        "naive_wasted_pct": spread([100 * r["wasted"] for r in naive]),
        "policies": {
            p: {
                "makespan_over_bound": complete_ratio(rows),
                "wasted_pct": spread([100 * r["wasted"] for r in rows]),
                "jobs_failed": int(sum(r["failed"] for r in rows)),
                "jobs_skipped": int(sum(r["skipped"] for r in rows)),
            }
            for p, rows in per.items()
        },
    }


def run_workload(path: Path, seeds: Sequence[int], deferral: float) -> dict[str, object]:
    workload = load_workload(path)
    started = time.perf_counter()
    latencies = {f"{lat:g}": run_latency(at_latency(workload, lat), seeds) for lat in (IN_WORKER_LATENCY, deferral)}
    return {
        "workload": workload.name,
        "file": path.name,
        "jobs": workload.job_count,
        "slots": workload.slots,
        "seeds": list(seeds),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "latencies": latencies,
    }


def _cell(s: dict[str, float] | None, digits: int = 2) -> str:
    if s is None:
        return "-"
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"


def _ratio(r: dict[str, Any]) -> str:
    text = _cell(r["spread"])
    return text if not r["runs_with_drops"] else f"{text}, {r['runs_with_drops']} runs dropped jobs"


def table(results: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| workload | latency | occflow / bound | before (order-blind) / bound | occflow / partition-lock "
        "| occflow wasted % | naive / occflow | jobs dropped (naive / lock / occflow-retry / occflow) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for i, (lat, row) in enumerate(r["latencies"].items()):
            pol = row["policies"]
            dropped = " / ".join(str(pol[p]["jobs_failed"]) for p in ("naive", "partition-lock", "occflow-retry", "occflow"))
            lines.append(
                f"| {r['workload'] if i == 0 else ''} | {lat} s | {_ratio(row['occflow_over_bound'])} "
                f"| {_ratio(row['order_blind_over_bound'])} | {_cell(row['occflow_over_partition_lock'])} "
                f"| {_cell(row['occflow_wasted_pct'], 1)} | {_cell(row['naive_over_occflow'])} | {dropped} |"
            )
    return "\n".join(lines)


def policy_table(results: Sequence[dict[str, Any]]) -> str:
    lats = list(results[0]["latencies"])
    lines = [f"| workload | policy | {' | '.join(f'makespan / bound at {lat} s' for lat in lats)} "
             "| wasted % | jobs failed / skipped |",
             "|---|---|" + "---|" * len(lats) + "---|---|"]
    for r in results:
        for i, p in enumerate(POLICIES):
            rows = [r["latencies"][lat]["policies"][p] for lat in lats]
            name = f"**{p}**" if p == "occflow" else p
            ratios = " | ".join(_ratio(row["makespan_over_bound"]) for row in rows)
            last = rows[-1]
            lines.append(f"| {r['workload'] if i == 0 else ''} | {name} | {ratios} "
                         f"| {_cell(last['wasted_pct'], 1)} | {last['jobs_failed']} / {last['jobs_skipped']} |")
    return "\n".join(lines)


def targets(results: Sequence[dict[str, Any]], deferral: str) -> list[str]:
    """Each target with its measured value and whether it is met."""
    out = []
    for r in results:
        name = r["workload"]
        for lat, row in r["latencies"].items():
            wasted, vs_lock = row["occflow_wasted_pct"], row["occflow_over_partition_lock"]
            slower = row["occflow_slower_than_partition_lock_seeds"]
            out.append(f"{name} @{lat}s: occflow wastes 0% (max {wasted['max']:.2f}%): "
                       f"{'met' if wasted['max'] == 0 else 'MISSED'}")
            out.append(f"{name} @{lat}s: occflow never slower than partition-lock (max {vs_lock['max']:.3f}; "
                       f"slower on seeds {slower}): {'met' if not slower else 'MISSED'}")
            if lat == deferral:
                bound = row["occflow_over_bound"]
                value = bound["spread"]
                ok = value is not None and value["median"] <= 1.10 and not bound["runs_with_drops"]
                out.append(f"{name} @{lat}s: occflow <= 1.10x bound (median {value and value['median']:.3f}, "
                           f"max {value and value['max']:.3f}): {'met' if ok else 'MISSED'}")
            if name == STREAMING:
                better = 1 / vs_lock["median"]
                out.append(f"{name} @{lat}s: partition-lock / occflow >= 1.2 (median {better:.3f}): "
                           f"{'met' if better >= 1.2 else 'MISSED'}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 (default 10)")
    parser.add_argument("--workload", action="append", help="a workload file stem (default: all shipped)")
    parser.add_argument("--deferral-latency", type=float, default=ADMISSION_LATENCY,
                        help=f"seconds from a release to a deferred write's start (default {ADMISSION_LATENCY:g})")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "sim_compare.json")
    args = parser.parse_args()
    paths = sorted((HERE / "workloads").glob("*.yaml"))
    if args.workload:
        paths = [p for p in paths if p.stem in args.workload]
    load_before = os.getloadavg()
    results = []
    for path in paths:
        results.append(run_workload(path, range(args.seeds), args.deferral_latency))
        print(f"{results[-1]['workload']}: {results[-1]['wall_seconds']}s", flush=True)
    load_after = os.getloadavg()
    command = "python bench/sim_compare.py" + (f" --seeds {args.seeds}" if args.seeds != 10 else "") + (
        f" --deferral-latency {args.deferral_latency:g}" if args.deferral_latency != ADMISSION_LATENCY else "")
    report = {
        "benchmark": "simulated policies on the shipped workloads, at the in-worker and the deferral latency",
        "command": command,
        "machine": machine(),
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in load_after]},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "policies": POLICIES,
        "workloads": results,
        "targets": targets(results, f"{args.deferral_latency:g}"),
    }
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print()
    print(table(results))
    print()
    print(policy_table(results))
    print()
    print("\n".join(report["targets"]))
    print(f"\nload average before {report['load_average']['before']}, after "
          f"{report['load_average']['after']}; wrote {args.out}")


if __name__ == "__main__":
    main()
