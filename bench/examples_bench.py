"""The example DAGs racing against admitted, on a real scheduler (issue 25).

    .venv/bin/python bench/examples_bench.py [--repeats 3] [--out bench/results/examples_bench.json]

Per repeat the main job (``scripts/run_examples.py``: the four example DAGs triggered together
on a throwaway Airflow 3.3, LocalExecutor with 4 slots, SQLite lease store) runs twice, in
rotated order: once with ``OCCFLOW_ADMISSION=off`` (racing: every write that may race does, and a
conflict is retried by occflow's policy; writes that can corrupt data keep their lease) and once
with the defaults (admitted). Each run starts its own Airflow, so both pay the same start-up.
The tasks import occflow from a copy of ``provider/`` made at the start (``--provider``).

Per run: wall time (the first DAG run's start to the last one's end, from Airflow's metadata),
each DAG's run time, conflicts and wasted seconds (the write reports), Airflow tries beyond the
first, whether every DAG ended with correct data, and the 1-minute load average before and
after. Ratios (admitted / racing) are taken within one repeat, then summarised.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from benchlib import machine, moment, spread  # noqa: E402

MODES = {"racing": "off", "admitted": "on"}



def run_once(mode: str, repeat: int, code: Path, work: Path) -> dict[str, Any]:
    out = work / f"r{repeat}_{mode}.json"
    env = {**os.environ, "OCCFLOW_ADMISSION": MODES[mode],
           "PYTHONPATH": os.pathsep.join(filter(None, [str(code), os.environ.get("PYTHONPATH", "")]))}
    load_before = os.getloadavg()[0]
    began = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "run_examples.py"), "--home", str(work / f"r{repeat}_{mode}"),
         "--json", str(out)],
        env=env, capture_output=True, text=True,
    )
    if not out.exists():
        raise SystemExit(f"{mode} run {repeat} wrote no results (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n"
                         f"{proc.stderr[-3000:]}")
    dags = json.loads(out.read_text())
    reports = [t["value"] for d in dags.values() for t in d["tasks"]
               if isinstance(t["value"], dict) and "decisions" in t["value"]]
    starts = [d["start"] for d in dags.values() if d["start"]]
    ends = [d["end"] for d in dags.values() if d["end"]]
    result = {
        "mode": mode, "repeat": repeat, "exit": proc.returncode,
        "wall_s": round(max(ends) - min(starts), 2),
        "command_s": round(time.monotonic() - began, 1),
        "dag_s": {k: round(d["end"] - d["start"], 2) for k, d in dags.items() if d["start"] and d["end"]},
        "all_verified": all(d["verified"] for d in dags.values()),
        "states": {k: d["state"] for k, d in dags.items()},
        "conflicts": sum(len(r.get("conflicts", [])) for r in reports),
        "wasted_s": round(sum(r.get("wasted_seconds", 0.0) for r in reports), 2),
        "extra_airflow_tries": sum(max(t["tries"] - 1, 0) for d in dags.values() for t in d["tasks"]),
        # Seconds from a write's lease grant to its first attempt (admitted runs): what a lease
        # covers besides the work (a Spark session's start, if it came after the grant).
        "grant_to_start_s": sorted(round(r["grant_to_start_seconds"], 2) for r in reports
                                   if r.get("grant_to_start_seconds") is not None),
        "load_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    print(f"  r{repeat} {mode:<9} exit {proc.returncode}  wall {result['wall_s']:6.1f}s  "
          f"conflicts {result['conflicts']:>2}  wasted {result['wasted_s']:6.1f}s  verified {result['all_verified']}  "
          f"dags {result['dag_s']}  load {result['load_1min']}", flush=True)
    return result



def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    by = {(r["repeat"], r["mode"]): r for r in runs}
    repeats = sorted({r["repeat"] for r in runs})
    paired = [r for r in repeats if (r, "racing") in by and (r, "admitted") in by]
    dags = sorted({d for r in runs for d in r["dag_s"]})
    return {
        "wall_s": {m: spread([by[(r, m)]["wall_s"] for r in repeats if (r, m) in by]) for m in MODES},
        "admitted_over_racing": spread([by[(r, "admitted")]["wall_s"] / by[(r, "racing")]["wall_s"] for r in paired]),
        "per_dag_admitted_over_racing": {
            d: spread([by[(r, "admitted")]["dag_s"][d] / by[(r, "racing")]["dag_s"][d] for r in paired
                       if d in by[(r, "admitted")]["dag_s"] and d in by[(r, "racing")]["dag_s"]])
            for d in dags
        },
        "conflicts": {m: spread([by[(r, m)]["conflicts"] for r in repeats if (r, m) in by]) for m in MODES},
        "wasted_s": {m: spread([by[(r, m)]["wasted_s"] for r in repeats if (r, m) in by]) for m in MODES},
        "all_verified": all(r["all_verified"] for r in runs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--provider", help="the provider/ folder whose occflow the tasks import "
                        "(default: a copy of this checkout's, made at the start)")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "examples_bench.json"))
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="occflow-examples-bench-"))
    code = work / "code"
    shutil.copytree(Path(args.provider) if args.provider else REPO / "provider", code,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    started = moment()
    print(f"examples bench: work dir {work}; {started['uptime']}", flush=True)
    runs = []
    order = list(MODES)
    for repeat in range(args.repeats):
        for mode in order[repeat % 2:] + order[:repeat % 2]:  # rotated
            runs.append(run_once(mode, repeat, code, work))
    result = {
        "command": ".venv/bin/python bench/examples_bench.py --repeats " + str(args.repeats),
        "machine": machine(), "started": started,
        "ended": moment(),
        "summary": summarise(runs), "runs": runs,
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))
    print(f"wrote {args.out}")
    return 0 if result["summary"]["all_verified"] and all(r["exit"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
