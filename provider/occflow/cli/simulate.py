"""``occflow simulate WORKLOAD``: compare the policies on a workload, in simulated time."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from tabulate import tabulate

from ..sim import POLICY_ALIASES, POLICY_NAMES, Run, load_workload, parse_policies, simulate
from ..sim.metrics import Metrics
from ..sim.plot import plot_runs
from ..sim.workload import IN_WORKER_LATENCY, at_latency
from . import SUBCOMMANDS


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "simulate",
        help=SUBCOMMANDS["simulate"].help,
        description="Run a workload YAML file (bench/workloads/) through the discrete-event simulator; "
        "commits are validated by each table's conflict matrix at partition granularity.",
    )
    p.add_argument("workload", help="a workload YAML file")
    p.add_argument(
        "--policy",
        action="append",
        metavar="P",
        help=f"a policy to run (repeatable; default all): {', '.join(POLICY_NAMES)} "
        f"({', '.join(f'{old} = {new}' for old, new in POLICY_ALIASES.items())})",
    )
    p.add_argument("--seed", type=int, default=0, help="draws the jobs and the jitter (default 0)")
    p.add_argument(
        "--deferral-latency",
        type=float,
        metavar="S",
        help="seconds from a release to the start of a deferred write (default: the workload's "
        "policies.airflow.admission_latency, 5.8 measured); every ratio is also given at the in-worker "
        f"latency, {IN_WORKER_LATENCY:g} s",
    )
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("--plot", metavar="FILE", help="write a PNG: timelines and wasted work per policy")
    p.set_defaults(func=_simulate)


def _simulate(args: argparse.Namespace) -> int:
    policies = parse_policies(args.policy)  # an unknown name fails before the file is read
    workload = load_workload(args.workload)
    if args.deferral_latency is not None:
        if args.deferral_latency < 0:
            raise SystemExit(f"--deferral-latency must be 0 or more seconds, got {args.deferral_latency:g}")
        workload = at_latency(workload, args.deferral_latency)
    runs = [simulate(workload, policy, seed=args.seed) for policy in policies]
    in_worker_workload = at_latency(workload, IN_WORKER_LATENCY)
    in_worker = [simulate(in_worker_workload, policy, seed=args.seed, record=False) for policy in policies]
    if args.format == "json":
        print(json.dumps(runs_json(runs, in_worker), indent=2))
    else:
        print(runs_table(runs, in_worker))
    if args.plot:
        out = plot_runs(runs, args.plot)
        if args.format == "table":
            print(f"\nwrote {out}")
    return 0


def ratio(m: Metrics) -> str:
    """The makespan over the bound, only for a run that committed every job."""
    if m.makespan_over_bound is None:
        return f"- ({m.dropped} dropped)"
    return f"{m.makespan_over_bound:.2f}"


def runs_json(runs: Sequence[Run], in_worker: Sequence[Run]) -> dict[str, object]:
    """One object per policy: the metrics at the deferral latency, and under ``in_worker`` the
    same at the in-worker latency (``makespan_over_bound`` is null for a run that dropped jobs)."""
    first = runs[0]
    return {
        "workload": first.workload,
        "seed": first.seed,
        "slots": first.slots,
        "jobs": len(first.jobs),
        "admission_latency": {"in_worker": IN_WORKER_LATENCY, "deferral": _deferral(runs)},
        "lower_bound": first.bound.to_dict(),
        "policies": [{**run.metrics.to_dict(), "in_worker": other.metrics.to_dict()}
                     for run, other in zip(runs, in_worker, strict=True)],
    }


def _deferral(runs: Sequence[Run]) -> float:
    return next((run.metrics.admission_latency for run in runs if run.policy != "oracle"), 0.0)


def runs_table(runs: Sequence[Run], in_worker: Sequence[Run]) -> str:
    first = runs[0]
    bound = first.bound
    fast, slow = IN_WORKER_LATENCY, _deferral(runs)
    header = (
        f"{first.workload}: {len(first.jobs)} jobs on {first.slots} slots, seed {first.seed}; "
        f"lower bound {bound.value:.0f}s (work/slots {bound.work:.0f}s, conflict chain {bound.chain:.0f}s, "
        f"longest job {bound.longest:.0f}s)\n"
        f"a write that waited starts {fast:g} s after the release in its worker, {slow:g} s when deferred; "
        f"the other columns are at {slow:g} s. x bound only for runs that committed every job."
    )
    cols = ("policy", f"makespan {fast:g}s", f"x bound {fast:g}s", f"makespan {slow:g}s", f"x bound {slow:g}s",
            "useful/slot", "wasted", "wasted %", "failed att", "done/skip/fail", "p50 lat", "p95 lat")
    rows: list[tuple[str, ...]] = [cols]
    for run, other in zip(runs, in_worker, strict=True):
        m, f = run.metrics, other.metrics
        rows.append((
            m.policy,
            f"{f.makespan:.0f}s",
            ratio(f),
            f"{m.makespan:.0f}s",
            ratio(m),
            f"{100 * m.useful_fraction:.1f}%",
            f"{m.wasted_seconds:.0f}s",
            f"{100 * m.wasted_fraction:.1f}%",
            str(m.failed_attempts),
            f"{m.committed}/{m.skipped}/{m.failed}",
            "-" if m.latency_p50 is None else f"{m.latency_p50:.0f}s",
            "-" if m.latency_p95 is None else f"{m.latency_p95:.0f}s",
        ))
    # The column names go in as the first row: tabulate pads a real header row 2 wider.
    align = ("left",) + ("right",) * (len(cols) - 1)
    return "\n".join([header, "", tabulate(rows, tablefmt="plain", colalign=align, disable_numparse=True)])
