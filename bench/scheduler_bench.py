"""Racing against admission on a real Airflow scheduler (issue 25).

    .venv/bin/python bench/scheduler_bench.py [--repeats 3] [--shapes short,expensive]
        [--stores sqlite,postgresql] [--parallelism 4] [--out bench/results/scheduler_bench.json]

Starts a throwaway Airflow 3.3 as scripts/run_examples.py does (its own AIRFLOW_HOME, SQLite
metadata database, LocalExecutor with ``--parallelism`` slots; scheduler, dag-processor,
api-server, triggerer) and a throwaway PostgreSQL (scripts/postgres.sh) for one of the lease
stores; the other is a SQLite file. The DAGs are bench/scheduler_dags/occflow_scheduler_bench.py:
per shape (``short``: 13 delta-rs writes of sub-second commits, upserts, a backfill, a purge and
an update on one table; ``expensive``: 8 MERGEs whose jobs take ``SLOW_SECONDS`` before they
commit) and store, one DAG per mode:

- ``racing``: ``admission=False``; conflicts are retried by occflow's policy;
- ``defaults``: admission with the operator's defaults;
- ``old``: admission as before issue 25 (no wait in the worker, a trigger that takes the lease
  and resumes the task 10 s after its deferral at the earliest: bench/scheduler_dags/old_admission.py).

One DAG run at a time; per repeat the order of the modes is rotated. Per run: wall time (the DAG
run's start to end in Airflow's metadata), lease hold times (grant to release or expiry, from the
store's history, ``OCCFLOW_LEASE_HISTORY=1``), conflicts and wasted seconds (the write reports),
Airflow tries beyond the first, and the 1-minute load average before and after. Ratios are taken
within one repeat (admitted / racing of the same shape and store), then summarised.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DAGS = REPO / "bench" / "scheduler_dags"
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "bench"))

import run_examples  # noqa: E402 - scripts/ is not a package
from admission_latency import start_postgres, stop_postgres  # noqa: E402
from benchlib import machine, moment, spread  # noqa: E402

MODES = ("racing", "defaults", "old")



def holds(events: list[dict[str, Any]]) -> list[float]:
    """Seconds each lease was held: its grant to its release (or expiry / takeover)."""
    granted = {e["lease_id"]: e["at"] for e in events if e["kind"] == "grant"}
    return [e["at"] - granted[e["lease_id"]] for e in events
            if e["kind"] in ("release", "expire", "takeover") and e["lease_id"] in granted]


def run_one(airflow: run_examples.Airflow, urls: dict[str, str], shape: str, store: str, mode: str,
            repeat: int) -> dict[str, Any]:
    from occflow.leases import LeaseStore

    dag_id = f"occflow_sched_{shape}_{store}_{mode}"
    load_before = os.getloadavg()[0]
    run_id, state, seconds = run_examples.run_dag(airflow, dag_id, timeout=900)
    # The events of this run's tasks (a delta-rs table's leases are keyed by its location).
    lease_store = LeaseStore.from_url(urls[store], history=True)
    events = [e for e in lease_store.history_events() if (e["dag_id"], e["run_id"]) == (dag_id, run_id)]
    lease_store.dispose()
    tasks = [t for t in run_examples.task_results(dag_id, run_id) if t["task"] != "create_table"]
    reports = [t["value"] for t in tasks if isinstance(t["value"], dict)]
    held = holds(events)
    result = {
        "shape": shape, "store": store, "mode": mode, "repeat": repeat, "run_id": run_id, "state": state,
        "wall_s": round(seconds, 2),
        "conflicts": sum(len(r.get("conflicts", [])) for r in reports),
        "wasted_s": round(sum(r.get("wasted_seconds", 0.0) for r in reports), 2),
        "extra_airflow_tries": sum(max(t["tries"] - 1, 0) for t in tasks),
        "failed_tasks": [t["task"] for t in tasks if t["state"] != "success"],
        "write_s_median": round(statistics.median([r["seconds"] for r in reports if r.get("seconds")] or [0]), 3),
        "hold_s": [round(h, 3) for h in held],
        "hold_s_median": round(statistics.median(held), 3) if held else None,
        "hold_s_max": round(max(held), 3) if held else None,
        "load_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        # Per write task: seconds from its (last) try's start to its end, as Airflow recorded them.
        "task_s": {t["task"]: round(t["end"] - t["start"], 2) for t in tasks if t.get("start") and t.get("end")},
    }
    print(f"  r{repeat} {shape:<9} {store:<10} {mode:<8} {state:<8} {seconds:6.1f}s  conflicts {result['conflicts']:>2}"
          f"  wasted {result['wasted_s']:6.1f}s  hold median/max {result['hold_s_median']}/{result['hold_s_max']}"
          f"  extra tries {result['extra_airflow_tries']}  load {result['load_1min']}", flush=True)
    return result



def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    cases = sorted({(r["shape"], r["store"]) for r in runs})
    for shape, store in cases:
        mine = [r for r in runs if (r["shape"], r["store"]) == (shape, store)]
        by = {(r["repeat"], r["mode"]): r for r in mine}
        for mode in MODES:
            rs = [r for r in mine if r["mode"] == mode]
            if not rs:
                continue
            ratios = [by[(r["repeat"], mode)]["wall_s"] / by[(r["repeat"], "racing")]["wall_s"]
                      for r in rs if (r["repeat"], "racing") in by]
            out.append({
                "shape": shape, "store": store, "mode": mode,
                "wall_s": spread([r["wall_s"] for r in rs]),
                "wall_over_racing": spread(ratios),
                "conflicts": spread([r["conflicts"] for r in rs]),
                "wasted_s": spread([r["wasted_s"] for r in rs]),
                "hold_s": spread([h for r in rs for h in r["hold_s"]]),
                "write_s_median": spread([r["write_s_median"] for r in rs]),
                "extra_airflow_tries": sum(r["extra_airflow_tries"] for r in rs),
                "all_succeeded": all(r["state"] == "success" for r in rs),
            })
    return out


def table(summary: list[dict[str, Any]]) -> str:
    def f(s: dict[str, Any], digits: int = 1) -> str:
        if not s.get("n"):
            return "-"
        return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"

    lines = ["| shape | store | mode | wall s | wall / racing | conflicts | wasted s | lease hold s (median, min-max) | write s | extra tries |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in summary:
        lines.append(f"| {row['shape']} | {row['store']} | {row['mode']} | {f(row['wall_s'])} | "
                     f"{f(row['wall_over_racing'], 2)} | {f(row['conflicts'], 0)} | {f(row['wasted_s'])} | "
                     f"{f(row['hold_s'], 2)} | {f(row['write_s_median'], 2)} | {row['extra_airflow_tries']} |")
    return "\n".join(lines)


def render_markdown(result: dict[str, Any]) -> str:
    """bench/results/scheduler_bench.md: the summary table, the machine, its load, the command."""
    m, loads = result["machine"], [x for r in result["runs"] for x in r["load_1min"]]
    return "\n".join([
        "# Scheduler benchmark: racing vs admission on a real Airflow scheduler",
        "",
        f"Reproduce: `{result['command']}` (writes `bench/results/scheduler_bench.json` and this file).",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}; Airflow 3.3 LocalExecutor with "
        f"{result['parallelism']} slots; expensive shape's jobs take {result['slow_seconds']:g} s before committing.",
        f"Load: `{result['started']['uptime']}` at the start, `{result['ended']['uptime']}` at the end; "
        f"1-minute load average {min(loads):.1f}-{max(loads):.1f} across the runs (sampled before and after "
        "each run; other jobs shared the machine, so absolute seconds are noisy: compare the ratios, "
        "taken within one repeat).",
        "",
        "Median (min-max) over the repeats; lease hold over every lease of those runs; `wall / racing` "
        "is each run's wall time over the racing run of the same repeat, shape and store; `write s` "
        "is the median write report's `seconds` (the committing attempt); `extra tries` counts Airflow "
        "tries beyond the first (a killed or failed try).",
        "",
        table(result["summary"]),
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shapes", default="short,expensive")
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--parallelism", type=int, default=4, help="LocalExecutor slots")
    parser.add_argument("--slow-seconds", type=float, default=5.0, help="job time of the expensive shape")
    parser.add_argument("--provider", help="the provider/ folder whose occflow the tasks import "
                        "(default: a copy of this checkout's, made at the start)")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "scheduler_bench.json"))
    args = parser.parse_args(argv)
    shapes, stores = args.shapes.split(","), args.stores.split(",")

    home = Path(tempfile.mkdtemp(prefix="occflow-sched-bench-"))
    # The tasks import occflow from a copy made now: edits to the checkout during the runs (a
    # shared checkout) must not change the code under measurement half-way.
    code = home / "code"
    shutil.copytree(Path(args.provider) if args.provider else REPO / "provider", code,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    urls = {"sqlite": f"sqlite:///{home / 'occflow_leases.db'}"}
    if "postgresql" in stores:
        urls["postgresql"] = start_postgres(home)
    env = run_examples.airflow_env(home, parallelism=args.parallelism)
    env.update({
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(code), str(DAGS), os.environ.get("PYTHONPATH", "")])),
        "OCCFLOW_LEASE_HISTORY": "1",
        "OCCFLOW_BENCH_SQLITE_URL": urls["sqlite"],
        "OCCFLOW_BENCH_PG_URL": urls.get("postgresql", "postgresql://unused@127.0.0.1:1/unused"),
        "OCCFLOW_BENCH_SLOW_SECONDS": str(args.slow_seconds),
    })
    os.environ.update(env)
    airflow = run_examples.Airflow(home, env)
    started = moment()
    print(f"scheduler bench: Airflow home {home}; {started['uptime']}", flush=True)
    runs: list[dict[str, Any]] = []
    try:
        airflow.start()
        from airflow import settings

        settings.configure_orm()
        run_examples.wait_for_dags(
            airflow, [f"occflow_sched_{s}_{st}_{m}" for s in shapes for st in stores for m in MODES], timeout=600)
        for repeat in range(args.repeats):
            order = MODES[repeat % 3:] + MODES[:repeat % 3]
            for shape in shapes:
                for store in stores:
                    for mode in order:
                        runs.append(run_one(airflow, urls, shape, store, mode, repeat))
    finally:
        airflow.stop()
        stop_postgres(home)
    ended = moment()
    summary = summarise(runs)
    command = ".venv/bin/python bench/scheduler_bench.py " + " ".join(argv if argv is not None else sys.argv[1:])
    result = {"command": command.strip(), "machine": machine(), "started": started, "ended": ended,
              "parallelism": args.parallelism, "slow_seconds": args.slow_seconds, "summary": summary, "runs": runs}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(render_markdown(result))
    print(table(summary))
    ok = all(r["state"] == "success" for r in runs)
    if ok:
        shutil.rmtree(home, ignore_errors=True)
    else:
        print(f"some runs did not succeed; logs kept in {home}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
