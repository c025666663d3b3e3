"""CPU seconds (user + system) the ``occflow`` command spends from start to exit.

Each command runs as its own process (start-up and imports included, as a user meets them),
``--repeats`` times after one warm-up run that fills the bytecode caches; the CPU time of each
run is the operating system's accounting of the finished child (``os.wait4``'s rusage), so other
load on the machine does not inflate it the way it does wall time. Prints min, median and max
per command (the median is the figure to quote; min and max show the spread).

    .venv/bin/python bench/cli_startup.py [--repeats 5] [--occflow .venv/bin/occflow]

Writes bench/results/cli_startup.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchlib import machine

ROOT = Path(__file__).resolve().parent.parent

#: Spec 003's MERGE, as docs/explain.md explains it.
MERGE = (
    "MERGE INTO db.events t USING updates s ON s.user_id = t.user_id AND s.date = t.date "
    "AND t.date = '2024-01-01' WHEN MATCHED THEN UPDATE SET * "
    "WHEN NOT MATCHED THEN INSERT (user_id, date) VALUES (s.user_id, '2024-01-01')"
)

COMMANDS: dict[str, list[str]] = {
    "occflow --help": ["--help"],
    "occflow explain MERGE": ["explain", MERGE, "--table-format", "delta", "--partition-columns", "date"],
    "occflow policy delta merge": ["policy", "delta", "merge"],
}


def cpu_seconds(argv: list[str]) -> float:
    """User + system CPU seconds of one run of ``argv`` (its output thrown away)."""
    # As a user's install runs: bytecode cached (a shell or test runner that exports
    # PYTHONDONTWRITEBYTECODE would make every run compile its modules again).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {process.returncode}")
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="counted runs per command (default 5, at least 3)")
    parser.add_argument("--occflow", default=str(ROOT / ".venv" / "bin" / "occflow"), help="the occflow command")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "cli_startup.json"))
    args = parser.parse_args()
    if args.repeats < 3:
        parser.error("--repeats: at least 3 (a median of fewer says little)")
    results = {}
    for name, rest in COMMANDS.items():
        argv = [args.occflow, *rest]
        cpu_seconds(argv)  # warm-up: bytecode caches
        runs = sorted(cpu_seconds(argv) for _ in range(args.repeats))
        results[name] = {"min": runs[0], "median": statistics.median(runs), "max": runs[-1], "runs": runs}
        print(f"{name:30} cpu s  min {runs[0]:.3f}  median {statistics.median(runs):.3f}  max {runs[-1]:.3f}"
              f"  (n={len(runs)})")
    out = {"machine": machine(), "load_average": os.getloadavg(), "repeats": args.repeats, "commands": results}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
