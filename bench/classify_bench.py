"""Classification cost per exception: median and p99 in microseconds.

Corpus: real delta-rs conflicts generated here (two writers on one table version, the loser's
real ``CommitFailedError``), the same errors wrapped in a Python cause chain and as formatted
tracebacks (log tails), plus every fixture text in tests/fixtures/classify (Delta Spark, Delta
4.1, Databricks, Iceberg, MaxCompute, near misses). Each item is classified ``--passes`` times and
every call is timed on its own: wall time (``time.perf_counter_ns``) and the thread's CPU time
(``time.thread_time_ns``, which a loaded machine's run queue does not inflate).

    .venv/bin/python bench/classify_bench.py [--real 1000] [--passes 3]

Prints the figures and the machine, and writes bench/results/classify.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import deltalake
import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError

from occflow.core.classify import classify

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "classify"
RESULTS = ROOT / "bench" / "results" / "classify.json"

Op = Callable[[DeltaTable], object]
SCENARIOS: list[tuple[str, Op, Op]] = [
    ("delete/update", lambda t: t.delete("v = 1"), lambda t: t.update(updates={"v": "v + 10"}, predicate="v = 2")),
    ("delete/delete", lambda t: t.delete("v = 1"), lambda t: t.delete("v = 1")),
    (
        "overwrite/overwrite",
        lambda t: write_deltalake(t, pa.table({"ds": ["a"], "v": [9]}), mode="overwrite", predicate="ds = 'a'"),
        lambda t: write_deltalake(t, pa.table({"ds": ["a"], "v": [8]}), mode="overwrite", predicate="ds = 'a'"),
    ),
    (
        "properties/update",
        lambda t: t.alter.set_table_properties({"delta.appendOnly": "false"}),
        lambda t: t.update(updates={"v": "1"}, predicate="v = 2"),
    ),
    (
        "delete/update-no-retries",
        lambda t: t.delete("v = 1"),
        lambda t: t.update(
            updates={"v": "v + 10"}, predicate="v = 2", commit_properties=CommitProperties(max_commit_retries=0)
        ),
    ),
]


def real_conflicts(count: int, workdir: Path) -> list[BaseException]:
    errors: list[BaseException] = []
    for i in range(count):
        _, winner, loser = SCENARIOS[i % len(SCENARIOS)]
        uri = str(workdir / f"t{i}")
        write_deltalake(uri, pa.table({"ds": ["a", "a", "b"], "v": [1, 2, 3]}), partition_by=["ds"])
        first, second = DeltaTable(uri), DeltaTable(uri)
        winner(first)
        try:
            loser(second)
        except DeltaError as err:
            errors.append(err)
        else:
            raise RuntimeError(f"scenario {SCENARIOS[i % len(SCENARIOS)][0]} did not conflict")
    return errors


def wrapped(error: BaseException) -> BaseException:
    try:
        raise RuntimeError("task failed") from error
    except RuntimeError as outer:
        return outer


def fixture_texts() -> list[str]:
    return [p.read_text(encoding="utf-8").partition("\n---\n")[2] for p in sorted(FIXTURES.glob("*.txt"))]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def measure(items: list[object], passes: int) -> tuple[list[float], list[float], Counter[str]]:
    """Wall time and this thread's CPU time per call, in microseconds."""
    wall: list[float] = []
    cpu: list[float] = []
    kinds: Counter[str] = Counter()
    for _ in range(passes):
        for item in items:
            start_cpu = time.thread_time_ns()
            start = time.perf_counter_ns()
            result = classify(item)
            wall.append((time.perf_counter_ns() - start) / 1000)
            cpu.append((time.thread_time_ns() - start_cpu) / 1000)
            kinds[result.kind.value] += 1
    return wall, cpu, kinds


def summary(wall: list[float], cpu: list[float]) -> dict[str, float | int]:
    ordered, ordered_cpu = sorted(wall), sorted(cpu)
    return {
        "calls": len(ordered),
        "median_us": round(statistics.median(ordered), 1),
        "p99_us": round(percentile(ordered, 0.99), 1),
        "mean_us": round(statistics.fmean(ordered), 1),
        "max_us": round(ordered[-1], 1),
        # CPU time of the classifying thread: the cost without waiting for a core on a loaded machine.
        "cpu_median_us": round(statistics.median(ordered_cpu), 1),
        "cpu_p99_us": round(percentile(ordered_cpu, 0.99), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", type=int, default=1000, help="real delta-rs conflicts to generate")
    parser.add_argument("--passes", type=int, default=3, help="times each item is classified")
    args = parser.parse_args()

    load_before = os.getloadavg()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="occflow-classify-bench-") as tmp:
        real = real_conflicts(args.real, Path(tmp))
    generation_s = time.perf_counter() - started
    groups: dict[str, list[object]] = {
        "real_delta_rs_exceptions": list(real),
        "real_delta_rs_in_cause_chain": [wrapped(e) for e in real],
        "real_delta_rs_traceback_text": ["".join(traceback.format_exception(wrapped(e))) for e in real],
        "fixture_texts": list(fixture_texts()),
    }
    classify(groups["fixture_texts"][0])  # first call compiles nothing new, but warms caches
    report: dict[str, object] = {}
    all_wall: list[float] = []
    all_cpu: list[float] = []
    for name, items in groups.items():
        wall, cpu, kinds = measure(items, args.passes)
        all_wall += wall
        all_cpu += cpu
        report[name] = {"items": len(items), **summary(wall, cpu), "kinds": dict(sorted(kinds.items()))}
    report["all"] = {"items": sum(len(v) for v in groups.values()), **summary(all_wall, all_cpu)}
    machine = {
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "deltalake": deltalake.__version__,
        # Other jobs share this machine's cores; a high load stretches the tail (p99, max).
        "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
    }
    out = {
        "what": "occflow.classify cost per call, each call timed alone (wall: perf_counter_ns, cpu: thread_time_ns)",
        "real_conflicts_generated": len(real),
        "generation_seconds": round(generation_s, 1),
        "passes": args.passes,
        "machine": machine,
        "results": report,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")

    print(
        f"machine: nproc={machine['nproc']} cpu={machine['cpu_model']} python={machine['python']} "
        f"loadavg(1m) before/after={machine['loadavg_1m_before_after']}"
    )
    print(f"real delta-rs conflicts generated: {len(real)} in {generation_s:.1f}s; passes: {args.passes}")
    print(
        f"{'group':30} {'items':>6} {'calls':>6} {'median us':>10} {'p99 us':>8} {'max us':>9}"
        f" {'cpu median us':>14} {'cpu p99 us':>11}"
    )
    for name, row in report.items():
        assert isinstance(row, dict)
        print(
            f"{name:30} {row['items']:>6} {row['calls']:>6} {row['median_us']:>10} {row['p99_us']:>8}"
            f" {row['max_us']:>9} {row['cpu_median_us']:>14} {row['cpu_p99_us']:>11}"
        )
    print(f"written: {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
