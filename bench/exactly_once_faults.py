"""Exactly-once under injected faults: N logical writes per engine, each hit by a fault, then counted.

    .venv/bin/python bench/exactly_once_faults.py [--writes 50] [--engines deltars,iceberg]
                                                  [--spark-kill-every 10]

Each logical write appends 3 rows tagged with its number to a real table; a fault is injected
into its first attempt (``tests/exactly_once/fault_injection.py``), rotating through:

- ``kill``: the try runs in a subprocess that SIGKILLs itself right after the engine committed
  (delta-rs: every kill; Spark: a real driver process every ``--spark-kill-every`` writes,
  since each one starts a JVM);
- ``unknown_after`` / ``unknown_before``: Iceberg's CommitStateUnknownException at the engine
  boundary, after a commit that landed / with no commit;
- ``timeout_after``: a timeout after the commit landed (not a conflict: the next try runs);
- ``crash_after``: the try dies after the commit with an exception nothing handles.

A write is retried (next try, verify first) until it reports committed. Then the rows are
counted: a write with more than 3 rows is a duplicate, one with none is lost. Prints a table
and writes ``bench/results/exactly_once.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests" / "exactly_once"
sys.path.insert(0, str(TESTS))

import fault_injection as fi  # noqa: E402

IN_PROCESS = ("unknown_after", "unknown_before", "timeout_after", "crash_after")


def _settle(first: Any, retry: Any) -> tuple[int, bool]:
    """Tries until committed: (tries, verified on a later try)."""
    tries, verified = 1, False
    result = first
    while result is None or not result.committed:
        tries += 1
        result = retry(tries)
        verified = verified or result.verified
        if tries > 5:
            raise RuntimeError(f"write not committed after {tries} tries: {result}")
    return tries, verified


def _first_try_label(first: Any) -> str:
    if first.verified:
        return "settled_in_first_try_by_verification"
    if first.attempts == 1:
        return "committed_first_try"
    return "written_by_blind_in_task_retry" if first.reason == "blind" else "written_by_in_task_retry_after_verification"


def run_deltars(writes: int, workdir: Path, blind: bool = False) -> dict[str, Any]:
    """delta-rs; ``blind`` is the control run: the same faults, retried without tags or checks."""
    path = str(workdir / ("deltars-blind" if blind else "deltars-events"))
    fi.create_deltars_table(path)
    faults = ("kill", *IN_PROCESS)
    stats: Counter[str] = Counter()
    start = time.perf_counter()
    for n in range(1, writes + 1):
        fault = faults[(n - 1) % len(faults)]
        stats[f"fault:{fault}"] += 1
        first = None
        if fault == "kill" and blind:
            fault = "crash_after"  # the same effect in-process: committed, then the try dies
        if fault == "kill":
            done = subprocess.run([sys.executable, str(TESTS / "fault_injection.py"), "deltars", path, str(n), "1", "kill"],
                                  capture_output=True, text=True, timeout=300)
            if done.returncode != fi.KILLED:
                raise RuntimeError(f"kill fault did not kill the try: {done.returncode} {done.stderr[-2000:]}")
            stats["killed_processes"] += 1
        else:
            try:
                first = fi.deltars_try(path, n, 1, fault, blind)
            except fi.InjectedCrash:
                stats["crashed_tries"] += 1
        if first is not None and first.committed:
            stats[_first_try_label(first)] += 1
            continue
        tries, verified = _settle(first, lambda t, n=n: fi.deltars_try(path, n, t, None, blind))
        stats["found_by_next_try" if verified else "written_by_next_try"] += 1
    seconds = time.perf_counter() - start
    counted = fi.count(fi.deltars_rows(path), range(1, writes + 1))
    return {"engine": "delta-rs (blind retries, control)" if blind else "delta-rs", "seconds": round(seconds, 2), "stats": dict(stats), **counted}


def run_iceberg(writes: int, workdir: Path, kill_every: int) -> dict[str, Any]:
    from occflow.engines.spark import SparkConfig, SparkEngine

    engine = SparkEngine(SparkConfig(home=str(workdir / "spark"), app_name="occflow-exactly-once-bench"))
    spark = engine.session()
    spark.sparkContext.setLogLevel("ERROR")
    table = "lake.bench.exactly_once"
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.bench")
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(f"CREATE TABLE {table} (id BIGINT, w BIGINT) USING iceberg TBLPROPERTIES ('format-version'='2')")
    config = json.dumps(fi.session_config(spark))
    stats: Counter[str] = Counter()
    start = time.perf_counter()
    try:
        for n in range(1, writes + 1):
            kill = kill_every > 0 and n % kill_every == 0
            fault = "kill" if kill else IN_PROCESS[(n - 1) % len(IN_PROCESS)]
            stats[f"fault:{fault}"] += 1
            first = None
            if kill:
                done = subprocess.run(
                    [sys.executable, str(TESTS / "fault_injection.py"), "iceberg", config, table, str(n), "1", "kill"],
                    capture_output=True, text=True, timeout=900,
                )
                if done.returncode != fi.KILLED:
                    raise RuntimeError(f"kill fault did not kill the driver: {done.returncode} {done.stderr[-2000:]}")
                stats["killed_processes"] += 1
            else:
                try:
                    first = fi.iceberg_try(engine, table, n, 1, fault)
                except fi.InjectedCrash:
                    stats["crashed_tries"] += 1
            if first is not None and first.committed:
                stats[_first_try_label(first)] += 1
                continue
            tries, verified = _settle(first, lambda t, n=n: fi.iceberg_try(engine, table, n, t, None))
            stats["found_by_next_try" if verified else "written_by_next_try"] += 1
        seconds = time.perf_counter() - start
        counted = fi.count(fi.iceberg_rows(spark, table), range(1, writes + 1))
        snapshots = spark.sql(f"SELECT count(*) FROM {table}.snapshots").collect()[0][0]
    finally:
        engine.stop()
    return {"engine": "spark-iceberg", "seconds": round(seconds, 2), "stats": dict(stats),
            "snapshots": int(snapshots), **counted}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=50, help="logical writes (faults) per engine")
    parser.add_argument("--engines", default="deltars,iceberg", help="comma-separated: deltars, iceberg")
    parser.add_argument("--spark-kill-every", type=int, default=10,
                        help="every Nth Spark write is a real driver SIGKILL (0: none)")
    parser.add_argument("--out", default=str(HERE / "results" / "exactly_once.json"))
    args = parser.parse_args(argv)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = sorted(set(engines) - {"deltars", "iceberg"})
    if unknown or args.writes < 1:
        parser.error(f"unknown engines {unknown}" if unknown else "--writes must be >= 1")
    results = []
    with tempfile.TemporaryDirectory(prefix="occflow-eo-bench-") as tmp:
        runs: list[Any] = []
        for name in engines:
            if name == "deltars":
                runs += [lambda: run_deltars(args.writes, Path(tmp)),
                         lambda: run_deltars(args.writes, Path(tmp), blind=True)]
            else:
                runs.append(lambda: run_iceberg(args.writes, Path(tmp), args.spark_kill_every))
        for run in runs:
            result = run()
            results.append(result)
            print(f"{result['engine']:>14}: {result['writes']} writes, {result['rows']} rows, "
                  f"duplicated {len(result['duplicated_writes'])}, lost {len(result['lost_writes'])}, "
                  f"partial {len(result['partial_writes'])}, {result['seconds']:.1f}s  {result['stats']}", flush=True)
    report = {
        "method": "one fault per logical write, rotating kill / unknown_after / unknown_before / timeout_after / "
                  "crash_after; tries until committed; rows counted per write afterwards",
        "rows_per_write": fi.ROWS_PER_WRITE,
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    bad = any(r["duplicated_writes"] or r["lost_writes"] or r["partial_writes"] for r in results
              if "control" not in r["engine"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
