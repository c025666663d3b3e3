"""Benchmark (not a test): commit validation cost on the reference engine.

100 transactions start on version 1 of a table, then 10,000 other commits land, then the 100
commit concurrently from threads: each validates against the 10,000 newer commits (the
profile's rules for every pair) and is rebased onto the latest version (meta-level retry).
Every profile is measured with appends: the history lands in 100 partitions, the 100 pending
transactions write 100 others, so none conflicts and each of the 100 commits validates the
whole history (10,000 pairs through the profile's rules) before it is rebased.

Run: ``.venv/bin/python bench/commit_validation.py [--history 10000] [--txns 100]``.
Writes bench/results/commit_validation.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path

from benchlib import machine  # bench/ is the script directory, so first on sys.path

from occflow.core.profiles import PROFILES
from occflow.core.reference import ReferenceTable


def measure(profile_name: str, history: int, txns: int) -> dict[str, object]:
    hist_parts = [f"ds=h{i:03d}" for i in range(100)]
    txn_parts = [f"ds=t{i:03d}" for i in range(100)]
    table = ReferenceTable(profile_name, partitions=hist_parts + txn_parts, rows_per_insert=1)
    table.run("insert_into", hist_parts[:1])
    pending = [table.begin("insert_into", [txn_parts[i % 100]]) for i in range(txns)]
    for i in range(history):
        table.run("insert_into", [hist_parts[(i * 7) % 100]])
    durations: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    barrier = threading.Barrier(txns)

    def commit(txn) -> None:  # type: ignore[no-untyped-def]
        barrier.wait()
        start = time.perf_counter()
        try:
            txn.commit()
        except BaseException as exc:  # noqa: BLE001 - reported below
            with lock:
                errors.append(exc)
            return
        elapsed = time.perf_counter() - start
        with lock:
            durations.append(elapsed)

    validations_before = table.validations
    threads = [threading.Thread(target=commit, args=(t,)) for t in pending]
    wall = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - wall
    if errors:
        raise SystemExit(f"{profile_name}: {len(errors)} commits failed, first: {errors[0]!r}")
    durations.sort()
    validations = table.validations - validations_before
    assert table.version == 1 + history + txns
    assert [c.version for c in table.history] == list(range(1, table.version + 1))
    return {
        "profile": profile_name,
        "history": history,
        "transactions": txns,
        "pair_validations": validations,
        "commit_ms_median": round(statistics.median(durations) * 1e3, 2),
        "commit_ms_p99": round(durations[int(0.99 * (len(durations) - 1))] * 1e3, 2),
        # the threads share one interpreter lock, so the wall time over all pair checks is the cost
        "per_pair_validation_us": round(wall / validations * 1e6, 3),
        "wall_s_all_100": round(wall, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=10_000)
    parser.add_argument("--txns", type=int, default=100)
    args = parser.parse_args()
    results = [
        measure(name, args.history, args.txns)
        for name, p in PROFILES.items()
        if any(op.value == "insert_into" for op in p.operations)
    ]
    report = {"machine": machine(), "results": results}
    print(f"machine: {report['machine']}")
    print("commit latency of each of the 100 concurrent commits (each validating ~10,000 newer")
    print("commits), and the cost of one pair validation (wall time / pairs validated)")
    print(f"{'profile':28} {'median ms':>10} {'p99 ms':>8} {'us/pair':>8} {'wall s':>7}")
    for r in results:
        print(
            f"{r['profile']:28} {r['commit_ms_median']:>10} {r['commit_ms_p99']:>8} "
            f"{r['per_pair_validation_us']:>8} {r['wall_s_all_100']:>7}"
        )
    out = Path(__file__).parent / "results" / "commit_validation.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
