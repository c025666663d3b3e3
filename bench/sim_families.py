"""Benchmark (not a test): occflow against the exact optimum on six families of tiny instances.

``bench/sim_exact.py`` draws one family (one table, 1-3 slots, 3-6 jobs of 1-8 units). Issue 38
found the worst cases elsewhere; this script draws that old family and five new ones:

- ``old``: ``sim_exact.instance`` as it is (the same instances for the same seed);
- ``more slots``: 3-4 slots, 4-6 jobs;
- ``maintenance mix``: half the jobs compactions (the profile's ``is_compaction`` operations);
- ``short and long``: each job 1-2 units or 6-8 units;
- ``two tables``: the jobs spread over two tables of the profile;
- ``tiny random``: every knob above drawn at random (slots 1-4, one or two tables, any mix).

Each instance is run under occflow (duration-aware, as shipped), occflow duration-blind
(``MatrixAdmission(durations=None)``: the rule before issue 38) and the per-partition lock, at
both latencies (the in-worker wait 0.1 s, the deferral 5.8 s), against the exact optimum of
``sim_exact.optimum`` (shares no code with occflow's admission), and every occflow schedule is
replayed against ``sim_exact.lost_work`` (a schedule that loses work fails the run). Instance i
of family F and seed S is drawn from ``random.Random(f"{F}:{S}:{i}")``.

Run: ``.venv/bin/python bench/sim_families.py [--per-family 200] [--seed 38] [--gate-factor K]``.
Writes bench/results/sim_families_<seed>.json and prints the summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sim_exact import LATENCIES, PROFILE_NAMES, UNIT, Instance, TinyJob, instance, lost_work, optimum, spread

from occflow.core.admission_rule import Durations
from occflow.core.profiles import get_profile
from occflow.sim import simulate
from occflow.sim.policies import MatrixAdmission, build_policy

HERE = Path(__file__).resolve().parent


def _draw(family: str, seed: int, index: int, *, slots: tuple[int, int], jobs: tuple[int, int],
          compaction_share: float | None, durations: Callable[[random.Random], int], tables: int) -> Instance:
    rng = random.Random(f"{family}:{seed}:{index}")
    profile = get_profile(PROFILE_NAMES[index % len(PROFILE_NAMES)])
    keys = tuple(f"p{k}" for k in range(rng.randint(1, 3)))
    compactions = [op for op in profile.operations if op.is_compaction]
    drawn = []
    for _ in range(rng.randint(*jobs)):
        if compaction_share is not None and compactions and rng.random() < compaction_share:
            operation = rng.choice(compactions)
        else:
            # without VACUUM / expire_snapshots, as the documented runs drew (before they joined
            # the profiles): the figures in docs/simulator.md reproduce
            operation = rng.choice([op for op in profile.operations if not op.is_maintenance])
        partition = None if rng.random() < 0.2 else rng.choice(keys)
        table = "t" if tables == 1 or rng.random() < 0.5 else "u"
        drawn.append(TinyJob(operation, partition, rng.choice([0, 0, 0, 1, 2, 4]), durations(rng), table))
    return Instance(seed, index, profile, keys, rng.randint(*slots), tuple(drawn))


def _any(rng: random.Random) -> int:
    return rng.randint(1, 8)


def _short_or_long(rng: random.Random) -> int:
    return rng.randint(1, 2) if rng.random() < 0.5 else rng.randint(6, 8)


def _random(family: str, seed: int, index: int) -> Instance:
    rng = random.Random(f"{family}:{seed}:{index}:knobs")
    return _draw(family, seed, index, slots=(1, 4), jobs=(3, 5),
                 compaction_share=rng.choice([None, 0.25, 0.5]),
                 durations=rng.choice([_any, _short_or_long]), tables=rng.choice([1, 2]))


FAMILIES: dict[str, Callable[[int, int], Instance]] = {
    "old": instance,
    "more slots": lambda s, i: _draw("more slots", s, i, slots=(3, 4), jobs=(4, 6), compaction_share=None,
                                     durations=_any, tables=1),
    "maintenance mix": lambda s, i: _draw("maintenance mix", s, i, slots=(1, 3), jobs=(3, 6), compaction_share=0.5,
                                          durations=_any, tables=1),
    "short and long": lambda s, i: _draw("short and long", s, i, slots=(1, 3), jobs=(3, 6), compaction_share=None,
                                         durations=_short_or_long, tables=1),
    "two tables": lambda s, i: _draw("two tables", s, i, slots=(1, 3), jobs=(3, 6), compaction_share=None,
                                     durations=_any, tables=2),
    "tiny random": lambda s, i: _random("tiny random", s, i),
}


def measure(family: str, seed: int, count: int, durations: Durations) -> dict[str, Any]:
    ratios: dict[str, list[float]] = {}
    problems: list[str] = []
    for index in range(count):
        inst = FAMILIES[family](seed, index)
        best = optimum(inst) * UNIT
        for latency in LATENCIES:
            workload = inst.workload(latency)
            base = build_policy("occflow", workload)
            runs = {
                "occflow": simulate(workload, dataclasses.replace(base, admission=MatrixAdmission(durations=durations))),
                "duration-blind": simulate(workload, dataclasses.replace(base, admission=MatrixAdmission(durations=None))),
                "partition-lock": simulate(workload, build_policy("partition-lock", workload), record=False),
            }
            for name in ("occflow", "duration-blind"):
                problems += [f"{family} {index} ({inst.describe()}) @{latency:g} {name}: {p}"
                             for p in lost_work(inst, runs[name])]
            lock = runs["partition-lock"].metrics.makespan
            for name, run in runs.items():
                ratios.setdefault(f"{name}@{latency:g}", []).append(run.metrics.makespan / best)
                if name != "partition-lock":
                    ratios.setdefault(f"{name} over lock@{latency:g}", []).append(run.metrics.makespan / lock)
    out: dict[str, Any] = {"instances": count, "problems": problems}
    for latency in LATENCIES:
        row: dict[str, Any] = {}
        for name in ("occflow", "duration-blind", "partition-lock"):
            row[f"{name}_over_optimum"] = spread(ratios[f"{name}@{latency:g}"])
        for name in ("occflow", "duration-blind"):
            over = ratios[f"{name} over lock@{latency:g}"]
            row[f"{name}_slower_than_partition_lock"] = sum(r > 1 + 1e-9 for r in over)
            row[f"{name}_slower_than_partition_lock_worst"] = round(max(over), 4)
        out[f"latency {latency:g}s"] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--per-family", type=int, default=200)
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument("--gate-factor", type=float, default=Durations().gate_factor)
    parser.add_argument("--families", nargs="*", default=list(FAMILIES))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    unknown = set(args.families) - set(FAMILIES)
    if unknown:
        raise SystemExit(f"unknown families {sorted(unknown)}; families: {', '.join(FAMILIES)}")
    durations = Durations(gate_factor=args.gate_factor)
    print(f"seed {args.seed}, {args.per_family} per family; {durations.describe()}", flush=True)
    started, load_before = time.perf_counter(), os.getloadavg()
    families = {}
    for family in args.families:
        families[family] = measure(family, args.seed, args.per_family, durations)
        shown = {k: v for k, v in families[family].items() if k != "problems"}
        print(family, json.dumps(shown), flush=True)
    report = {
        "benchmark": "occflow (duration-aware and blind) and the per-partition lock against the exact optimum, "
                     "six families of tiny instances",
        "command": f"python bench/sim_families.py --per-family {args.per_family} --seed {args.seed} "
                   f"--gate-factor {args.gate_factor:g}",
        "durations": dataclasses.asdict(durations),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "load_average": {"before": [round(x, 2) for x in load_before],
                         "after": [round(x, 2) for x in os.getloadavg()]},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "families": families,
    }
    out = args.out or HERE / "results" / f"sim_families_{args.seed}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    problems = [p for f in families.values() for p in f["problems"]]
    print(f"schedules losing work: {len(problems)}")
    for p in problems[:10]:
        print("  " + p)
    print(f"{report['wall_seconds']} s; wrote {out}")
    if problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
