"""Benchmark (not a test): every shipped workload x every policy x ten seeds, in the simulator.

For each workload in bench/workloads/*.yaml and each seed, every simulated policy runs once
(``simulate(..., record=False)``). Per workload it reports, over the seeds: occflow's wasted
share of slot time, the makespan ratio occflow / partition-lock per seed (median and min-max),
occflow / the lower bound, occflow against naive, and the jobs each policy dropped. A ratio
below 1 means occflow finished first.

Targets (issue 13): occflow wastes 0% and its makespan is <= 1.00x partition-lock's on every
workload; partition-lock / occflow >= 1.2 on the streaming mix; occflow <= 1.10x the bound.

Run: ``.venv/bin/python bench/sim_compare.py [--seeds 10] [--workload NAME ...]``.
Writes bench/results/sim_compare.json and prints the markdown table docs/simulator.md shows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from benchlib import machine  # bench/ is the script directory, so first on sys.path

from occflow.sim import POLICY_NAMES, load_workload, simulate
from occflow.sim.policies import ORACLE

HERE = Path(__file__).resolve().parent
POLICIES = [p for p in POLICY_NAMES if p != ORACLE]
STREAMING = "streaming-mix"


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4)}


def run_workload(path: Path, seeds: Sequence[int]) -> dict[str, object]:
    workload = load_workload(path)
    per: dict[str, list[dict[str, float]]] = {p: [] for p in POLICIES}
    started = time.perf_counter()
    for seed in seeds:
        for policy in POLICIES:
            m = simulate(workload, policy, seed=seed, record=False).metrics
            per[policy].append({"makespan": m.makespan, "bound": m.lower_bound, "wasted": m.wasted_fraction,
                                "failed": m.failed, "skipped": m.skipped})
    occ, lock, naive = per["occflow"], per["partition-lock"], per["naive"]
    return {
        "workload": workload.name,
        "file": path.name,
        "jobs": workload.job_count,
        "slots": workload.slots,
        "seeds": list(seeds),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "occflow_wasted_pct": spread([100 * r["wasted"] for r in occ]),
        "occflow_over_partition_lock": spread([o["makespan"] / p["makespan"] for o, p in zip(occ, lock, strict=True)]),
        "occflow_over_bound": spread([r["makespan"] / r["bound"] for r in occ]),
        "naive_over_occflow": spread([n["makespan"] / o["makespan"] for n, o in zip(naive, occ, strict=True)]),
        "naive_wasted_pct": spread([100 * r["wasted"] for r in naive]),
        "policies": {
            p: {
                "makespan_over_bound": spread([r["makespan"] / r["bound"] for r in rows]),
                "wasted_pct": spread([100 * r["wasted"] for r in rows]),
                "jobs_failed": int(sum(r["failed"] for r in rows)),
                "jobs_skipped": int(sum(r["skipped"] for r in rows)),
            }
            for p, rows in per.items()
        },
    }


def _cell(s: dict[str, float], digits: int = 2) -> str:
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"


def table(results: Sequence[dict[str, object]]) -> str:
    lines = [
        "| workload | occflow wasted % | occflow / partition-lock | occflow / bound | naive / occflow | "
        "naive wasted % | jobs dropped (naive / lock / occflow-retry / occflow) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        pol = r["policies"]
        assert isinstance(pol, dict)
        dropped = " / ".join(str(pol[p]["jobs_failed"]) for p in ("naive", "partition-lock", "occflow-retry", "occflow"))
        lines.append(
            f"| {r['workload']} | {_cell(r['occflow_wasted_pct'], 1)} | {_cell(r['occflow_over_partition_lock'])} "  # type: ignore[arg-type]
            f"| {_cell(r['occflow_over_bound'])} | {_cell(r['naive_over_occflow'])} "  # type: ignore[arg-type]
            f"| {_cell(r['naive_wasted_pct'], 1)} | {dropped} |"  # type: ignore[arg-type]
        )
    return "\n".join(lines)


def policy_table(results: Sequence[dict[str, object]]) -> str:
    lines = ["| workload | policy | makespan / bound | wasted % | jobs failed / skipped |", "|---|---|---|---|---|"]
    for r in results:
        pol = r["policies"]
        assert isinstance(pol, dict)
        for i, p in enumerate(POLICIES):
            row = pol[p]
            name = f"**{p}**" if p == "occflow" else p
            lines.append(f"| {r['workload'] if i == 0 else ''} | {name} | {_cell(row['makespan_over_bound'])} "
                         f"| {_cell(row['wasted_pct'], 1)} | {row['jobs_failed']} / {row['jobs_skipped']} |")
    return "\n".join(lines)


def targets(results: Sequence[dict[str, object]]) -> list[str]:
    """Each target with its measured value and whether it is met (on the median over seeds)."""
    out = []
    for r in results:
        name = r["workload"]
        wasted, vs_lock, vs_bound = r["occflow_wasted_pct"], r["occflow_over_partition_lock"], r["occflow_over_bound"]
        assert isinstance(wasted, dict) and isinstance(vs_lock, dict) and isinstance(vs_bound, dict)
        out.append(f"{name}: occflow wastes 0% (max {wasted['max']:.2f}%): {'met' if wasted['max'] == 0 else 'MISSED'}")
        out.append(f"{name}: occflow <= 1.00x partition-lock (median {vs_lock['median']:.3f}, max "
                   f"{vs_lock['max']:.3f}): {'met' if vs_lock['median'] <= 1.0 else 'MISSED'}")
        out.append(f"{name}: occflow <= 1.10x bound (median {vs_bound['median']:.3f}, max {vs_bound['max']:.3f}): "
                   f"{'met' if vs_bound['median'] <= 1.10 else 'MISSED'}")
        if name == STREAMING:
            better = 1 / vs_lock["median"]
            out.append(f"{name}: partition-lock / occflow >= 1.2 (median {better:.3f}): "
                       f"{'met' if better >= 1.2 else 'MISSED'}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 (default 10)")
    parser.add_argument("--workload", action="append", help="a workload file stem (default: all shipped)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "sim_compare.json")
    args = parser.parse_args()
    paths = sorted((HERE / "workloads").glob("*.yaml"))
    if args.workload:
        paths = [p for p in paths if p.stem in args.workload]
    load_before = os.getloadavg()
    results = []
    for path in paths:
        results.append(run_workload(path, range(args.seeds)))
        print(f"{results[-1]['workload']}: {results[-1]['wall_seconds']}s", flush=True)
    load_after = os.getloadavg()
    report = {
        "benchmark": "simulated policies on the shipped workloads",
        "command": "python bench/sim_compare.py" + (f" --seeds {args.seeds}" if args.seeds != 10 else ""),
        "machine": machine(),
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in load_after]},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "policies": POLICIES,
        "workloads": results,
        "targets": targets(results),
    }
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print()
    print(table(results))
    print()
    print(policy_table(results))
    print()
    print("\n".join(report["targets"]))  # type: ignore[arg-type]
    print(f"\nload average before {report['load_average']['before']}, after "  # type: ignore[index]
          f"{report['load_average']['after']}; wrote {args.out}")


if __name__ == "__main__":
    main()
