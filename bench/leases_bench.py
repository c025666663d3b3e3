"""Decision latency of ``LeaseStore.try_acquire`` with 10,000 live leases, SQLite and PostgreSQL.

    .venv/bin/python bench/leases_bench.py [--leases 10000] [--decisions 500] [--backends sqlite,postgresql]

Fills each store with live leases (half on one hot table with one lease per partition, half
spread over tables of 100 partitions; 200 through ``try_acquire``, the rest written in bulk as
the rows a grant writes), then times single
decisions from one client: a granted request (an INSERT INTO next to a live INSERT INTO; the
lease is released untimed) and a refused one (an UPDATE on a held partition; its queue place is
cancelled untimed), on the hot table and on a spread table. PostgreSQL is a throwaway local
server from scripts/postgres.sh. Prints the figures and the machine, writes
bench/results/leases.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from occflow.leases import LeaseRequest, LeaseStore, schema
from occflow.leases.rows import lease_rows

REPO = Path(__file__).resolve().parents[1]
PROFILE = "maxcompute-standard"  # INSERT INTOs share a partition; UPDATE conflicts with them


def machine() -> dict[str, object]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    with contextlib.suppress(OSError):
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split(":", 1)[1].strip()
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory": mem,
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
    }


def fill(store: LeaseStore, leases: int) -> dict[str, object]:
    """Live leases: the first 200 through try_acquire (timed), the rest written in bulk as the
    same rows a grant writes (store.lease_rows), so filling 10,000 does not take minutes."""
    hot = leases // 2
    requests = [LeaseRequest.create("bench.hot", "insert_into", PROFILE, [f"ds={i}"], ttl=3600)
                for i in range(hot)]
    requests += [LeaseRequest.create(f"bench.spread_{i // 100}", "insert_into", PROFILE, [f"ds={i % 100}"],
                                     ttl=3600) for i in range(leases - hot)]
    through_store = requests[:100] + requests[hot:hot + 100]
    started = time.perf_counter()
    for request in through_store:
        assert store.try_acquire(request) is not None
    seconds = time.perf_counter() - started
    bulk = [r for r in requests if r not in set(through_store)]
    now = store.now()
    for chunk in range(0, len(bulk), 1000):
        rows = [lease_rows(r, uuid.uuid4().hex, now) for r in bulk[chunk:chunk + 1000]]
        with store.engine.begin() as conn:
            conn.execute(schema.leases.insert(), [lease for lease, _ in rows])
            conn.execute(schema.lease_keys.insert(), [k for _, keys in rows for k in keys])
    if store.dialect == "postgresql":
        with store.engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")  # what autovacuum would have done by now
    return {"leases": leases, "through_try_acquire": len(through_store),
            "grants_per_second": round(len(through_store) / seconds, 1)}


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return {"n": len(ordered), "median_ms": round(statistics.median(ordered) * 1000, 3),
            "p99_ms": round(p99 * 1000, 3), "max_ms": round(ordered[-1] * 1000, 3)}


def measure(store: LeaseStore, leases: int, decisions: int) -> dict[str, dict[str, float]]:
    results = {}
    hot = leases // 2
    for where, table, partitions in (("hot table", "bench.hot", hot),
                                     ("spread table", "bench.spread_0", min(100, leases - hot))):
        granted, refused = [], []
        for i in range(decisions):
            part = [f"ds={(i * 37) % partitions}"]
            request = LeaseRequest.create(table, "insert_into", PROFILE, part)
            t = time.perf_counter()
            lease = store.try_acquire(request)
            granted.append(time.perf_counter() - t)
            assert lease is not None
            store.release(lease)
            request = LeaseRequest.create(table, "update", PROFILE, part)
            t = time.perf_counter()
            lease = store.try_acquire(request)
            refused.append(time.perf_counter() - t)
            assert lease is None
            store.cancel(request)
        results[f"{where}, granted"] = summary(granted)
        results[f"{where}, refused"] = summary(refused)
    return results


def start_postgres(directory: str) -> str:
    env = {**os.environ, "OCCFLOW_PG_DIR": directory}
    done = subprocess.run(["bash", str(REPO / "scripts" / "postgres.sh"), "start"], env=env,
                          capture_output=True, text=True, check=True)
    return done.stdout.strip().splitlines()[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--leases", type=int, default=10_000)
    parser.add_argument("--decisions", type=int, default=500)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "leases.json"))
    args = parser.parse_args()

    report: dict[str, object] = {"machine": machine(), "live_leases": args.leases,
                                 "decisions_per_case": args.decisions, "backends": {}}
    work = tempfile.mkdtemp(prefix="occflow-bench-")
    os.chmod(work, 0o755)  # the PostgreSQL server runs as `postgres` when we are root
    try:
        for backend in args.backends.split(","):
            if backend == "sqlite":
                url = f"sqlite:///{work}/leases.db"
            elif backend == "postgresql":
                url = start_postgres(f"{work}/pg")
            else:
                raise SystemExit(f"unknown backend {backend!r}: use sqlite or postgresql")
            store = LeaseStore.from_url(url)
            if backend == "postgresql":
                with store.engine.connect() as conn:
                    report["machine"]["postgresql"] = conn.exec_driver_sql("SHOW server_version").scalar()  # type: ignore[index]
            print(f"{backend}: filling {args.leases} live leases ...", flush=True)
            filled = fill(store, args.leases)
            assert len(store.leases()) == args.leases
            latency = measure(store, args.leases, args.decisions)
            report["backends"][backend] = {"fill": filled, "try_acquire": latency}  # type: ignore[index]
            print(f"{backend}: {filled['leases']} live leases; sequential grants through try_acquire: "
                  f"{filled['grants_per_second']}/s")
            for case, s in latency.items():
                print(f"  {case:24} median {s['median_ms']:8.2f} ms   p99 {s['p99_ms']:8.2f} ms   (n={s['n']})")
            store.dispose()
    finally:
        if Path(f"{work}/pg").exists():
            subprocess.run(["bash", str(REPO / "scripts" / "postgres.sh"), "stop"],
                           env={**os.environ, "OCCFLOW_PG_DIR": f"{work}/pg"}, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    report["machine"]["load_average_after"] = os.getloadavg()  # type: ignore[index]
    m = report["machine"]
    print(f"machine: {m['cpus']} x {m['cpu_model']}, {m['memory']}, load average {m['load_average']} "  # type: ignore[index]
          f"-> {m['load_average_after']}, Python {m['python']}, SQLite {m['sqlite']}")  # type: ignore[index]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
