"""Benchmark (not a test): the same MERGE jobs for real, under Airflow-style retries and occflow.

M MERGE jobs, each upserting a range of ids into one partition of a local table, run on K
worker slots (threads, like Airflow's parallelism), once under each policy, in one run:

- ``naive``: Airflow retries: any failure goes back to the queue after a fixed ``retry_delay``
  (the slot is freed meanwhile), up to ``retries`` times.
- ``occflow``: a job starts only once the lease store (``occflow.leases``, SQLite) admits it by
  the profile's matrix; a failure is classified (``WriteOutcome.classification``) and handled by
  ``derive_policy(profile, "merge").decide`` (retry in the slot, reschedule, skip, fail).

Variants: ``iceberg`` (Spark ``local[2]`` + Iceberg 1.10 through ``occflow.engines.spark``,
serializable MERGE, copy-on-write) and ``delta`` (delta-rs through ``occflow.engines.deltars``).
Each policy gets a fresh table with the same seed rows and the same jobs. Reported per policy:
wall time, attempts, failed attempts, executor time spent in failed attempts ("wasted") and in
committed ones, and the ratio naive/occflow. For Spark, executor time is the executors' task run
time of the attempt's Spark jobs (``executorRunTime`` from the status store, by job group);
delta-rs runs in-process, so its executor time is the attempt's wall time. After each policy the
table is checked: every committed MERGE applied exactly once (sum of values as expected).

Run: ``.venv/bin/python bench/real_bench.py [--variant iceberg|delta|both] [--jobs 8] [--slots 2]``.
Writes bench/results/real_bench.json.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib import machine  # bench/ is the script directory, so first on sys.path

from occflow.core.kinds import Classification, ConflictKind
from occflow.core.policy import Action, derive_policy
from occflow.engines.outcome import WriteOutcome
from occflow.leases import LeaseStore
from occflow.leases.model import LeaseRequest

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class MergeJob:
    index: int
    partition: str
    first_id: int
    rows: int
    value: int

    @property
    def expected_sum(self) -> int:
        return self.value * self.rows


@dataclass
class AttemptRecord:
    job: int
    number: int
    start: float
    end: float
    committed: bool
    executor_seconds: float
    kind: str | None = None
    action: str | None = None
    # A lost attempt's evidence: the engine's error text and the commit it lost to, so a loss
    # under admission (which should not happen) can be explained from the results file.
    error: str | None = None
    winner: dict[str, Any] | None = None


@dataclass
class PolicyResult:
    policy: str
    attempts: list[AttemptRecord] = field(default_factory=list)
    status: dict[int, str] = field(default_factory=dict)
    wall_seconds: float = 0.0
    table_check: str = ""

    def summary(self) -> dict[str, Any]:
        failed = [a for a in self.attempts if not a.committed]
        ok = [a for a in self.attempts if a.committed]
        kinds: dict[str, int] = {}
        for a in failed:
            kinds[a.kind or "unclassified"] = kinds.get(a.kind or "unclassified", 0) + 1
        return {
            "policy": self.policy,
            "wall_seconds": round(self.wall_seconds, 2),
            "jobs_committed": sum(1 for s in self.status.values() if s == "committed"),
            "jobs_skipped": sum(1 for s in self.status.values() if s == "skipped"),
            "jobs_failed": sum(1 for s in self.status.values() if s == "failed"),
            "attempts": len(self.attempts),
            "failed_attempts": len(failed),
            "failures_by_kind": kinds,
            "wasted_executor_seconds": round(sum(a.executor_seconds for a in failed), 2),
            "useful_executor_seconds": round(sum(a.executor_seconds for a in ok), 2),
            "wasted_attempt_wall_seconds": round(sum(a.end - a.start for a in failed), 2),
            "lost_attempts": [
                {"job": a.job, "attempt": a.number, "kind": a.kind, "error": a.error, "winner": a.winner}
                for a in failed
            ],
            "table_check": self.table_check,
        }


# --------------------------------------------------------------------------- the scheduler

Attempt = Callable[[MergeJob, str], tuple[WriteOutcome, float]]


def run_policy(
    policy: str,
    jobs: list[MergeJob],
    attempt: Attempt,
    *,
    profile: str,
    table: str,
    slots: int,
    retries: int,
    retry_delay: float,
    store: LeaseStore | None,
    seed: int,
) -> PolicyResult:
    """Run ``jobs`` on ``slots`` threads under ``policy`` (``naive`` or ``occflow``)."""
    result = PolicyResult(policy)
    write_policy = derive_policy(profile, "merge")
    rng = random.Random(seed)
    lock = threading.Condition()
    # FIFO of [job, ready_at, lease request]: a job re-enters at the back when it is retried.
    queue: list[list[Any]] = []
    for job in jobs:
        queue.append([job, 0.0, _request(table, profile, job) if policy == "occflow" else None])
    failures: dict[int, int] = {}
    first_start: dict[int, float] = {}
    t0 = time.monotonic()

    def take() -> tuple[MergeJob, Any] | None:
        with lock:
            while True:
                if len(result.status) == len(jobs):
                    return None
                now = time.monotonic()
                for item in queue:
                    job, ready, request = item
                    if ready > now:
                        continue
                    lease = None
                    if store is not None and request is not None:
                        lease = store.try_acquire(request)
                        if lease is None:
                            continue  # deferred: the slot stays free for another job
                    queue.remove(item)
                    return job, lease
                lock.wait(0.05)

    def requeue(job: MergeJob, delay: float) -> None:
        with lock:
            request = _request(table, profile, job) if policy == "occflow" else None
            queue.append([job, time.monotonic() + delay, request])
            lock.notify_all()

    def finish(job: MergeJob, status: str) -> None:
        with lock:
            result.status[job.index] = status
            lock.notify_all()

    def worker() -> None:
        while (taken := take()) is not None:
            job, lease = taken
            while True:  # in-slot retries loop here; everything else leaves the slot
                number = failures.get(job.index, 0) + 1
                start = time.monotonic() - t0
                first_start.setdefault(job.index, start)
                outcome, executor = attempt(job, f"{policy}-j{job.index}-a{number}-{uuid.uuid4().hex[:6]}")
                end = time.monotonic() - t0
                if outcome.committed:
                    result.attempts.append(AttemptRecord(job.index, number, start, end, True, executor))
                    if lease is not None and store is not None:
                        store.release(lease)
                    finish(job, "committed")
                    break
                failures[job.index] = number
                classification = outcome.classification or Classification(
                    ConflictKind.NOT_A_CONFLICT, outcome.engine, "unrecognised error"
                )
                if policy == "naive":
                    action = Action.RESCHEDULE if number <= retries else Action.FAIL
                    delay = retry_delay
                else:
                    decision = write_policy.decide(classification, number, end - first_start[job.index], rng)
                    action, delay = decision.action, decision.delay_seconds
                    if action is Action.DEFAULT:  # not a conflict: Airflow's own retries
                        action = Action.RESCHEDULE if number <= retries else Action.FAIL
                        delay = retry_delay
                winner = classification.winning_commit
                result.attempts.append(
                    AttemptRecord(job.index, number, start, end, False, executor, classification.kind.value,
                                  action.value, None if outcome.error is None else outcome.error.text[:500],
                                  None if winner is None else winner.to_dict())
                )
                if action is Action.RETRY:
                    time.sleep(delay)  # the retry loop sleeps in the task: slot and lease stay held
                    continue
                if lease is not None and store is not None:
                    store.release(lease)
                if action is Action.RESCHEDULE:
                    requeue(job, delay)
                else:
                    finish(job, "skipped" if action is Action.SKIP else "failed")
                break

    threads = [threading.Thread(target=worker, name=f"slot-{i}") for i in range(slots)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result.wall_seconds = time.monotonic() - t0
    return result


def _request(table: str, profile: str, job: MergeJob) -> LeaseRequest:
    return LeaseRequest.create(table, "merge", profile, partitions=[f"part={job.partition}"], ttl=3600)


def make_jobs(count: int, partitions: int, rows: int, seed_rows: int, seed: int) -> list[MergeJob]:
    """Each job upserts ``rows`` ids from a random start below ``seed_rows``: updates and inserts."""
    rng = random.Random(seed)
    parts = [f"p{i}" for i in range(partitions)]
    return [
        MergeJob(i, rng.choice(parts), first_id=rng.randrange(0, seed_rows), rows=rows, value=i + 1)
        for i in range(count)
    ]


# --------------------------------------------------------------------------- Iceberg on Spark


def iceberg_variant(args: argparse.Namespace, jobs: list[MergeJob], workdir: Path) -> dict[str, Any]:
    from occflow.engines.spark import SparkConfig, SparkEngine, quote_table, sql_string

    engine = SparkEngine(SparkConfig(
        master="local[2]",
        app_name="occflow-real-bench",
        table_format="iceberg",
        home=str(workdir / "iceberg"),
        conf={"spark.driver.memory": "1g", "spark.sql.adaptive.enabled": "false"},
    ))
    spark = engine.session()
    spark.sparkContext.setLogLevel("ERROR")
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.bench")
    # Warm the JVM (class loading, JIT) on a scratch table first, so that the policy measured
    # first does not pay for it.
    spark.sql("CREATE TABLE IF NOT EXISTS lake.bench.warmup (id BIGINT, part STRING, v BIGINT) USING iceberg "
              "PARTITIONED BY (part)")
    spark.sql("INSERT INTO lake.bench.warmup SELECT id, 'p0', 0 FROM range(1000)")
    for _ in range(2):
        spark.sql("MERGE INTO lake.bench.warmup t USING (SELECT id, 'p0' AS part, 1L AS v FROM range(500, 1500)) s "
                  "ON t.part = 'p0' AND t.id = s.id WHEN MATCHED THEN UPDATE SET t.v = t.v + s.v "
                  "WHEN NOT MATCHED THEN INSERT *")
    results = []
    for policy in ("naive", "occflow"):
        table = f"lake.bench.orders_{policy}"
        q = quote_table(table)
        spark.sql(f"DROP TABLE IF EXISTS {q}")
        spark.sql(
            f"CREATE TABLE {q} (id BIGINT, part STRING, v BIGINT) USING iceberg PARTITIONED BY (part) "
            "TBLPROPERTIES ('write.merge.isolation-level'='serializable', 'write.merge.mode'='copy-on-write', "
            "'format-version'='2')"
        )
        parts = sorted({f"p{i}" for i in range(args.partitions)})
        for p in parts:
            spark.sql(f"INSERT INTO {q} SELECT id, {sql_string(p)}, CAST(0 AS BIGINT) FROM range({args.seed_rows})")

        def attempt(job: MergeJob, group: str, q: str = q, table: str = table) -> tuple[WriteOutcome, float]:
            sc = spark.sparkContext
            sc.setJobGroup(group, group)
            sql = (
                f"MERGE INTO {q} t USING (SELECT id, {sql_string(job.partition)} AS part, "
                f"CAST({job.value} AS BIGINT) AS v FROM range({job.first_id}, {job.first_id + job.rows})) s "
                f"ON t.part = {sql_string(job.partition)} AND t.id = s.id "
                "WHEN MATCHED THEN UPDATE SET t.v = t.v + s.v "
                "WHEN NOT MATCHED THEN INSERT (id, part, v) VALUES (s.id, s.part, s.v)"
            )
            outcome = engine.run(sql, table, operation="merge")
            return outcome, executor_seconds(spark, group, outcome.seconds)

        store = LeaseStore.from_url(f"sqlite:///{workdir / f'leases-{policy}.db'}") if policy == "occflow" else None
        result = run_policy(policy, jobs, attempt, profile="iceberg-serializable", table=table, slots=args.slots,
                            retries=args.retries, retry_delay=args.retry_delay, store=store, seed=args.seed)
        committed = [j for j in jobs if result.status.get(j.index) == "committed"]
        total = spark.sql(f"SELECT coalesce(sum(v), 0) AS s FROM {q}").first()["s"]
        expected = sum(j.expected_sum for j in committed)
        result.table_check = f"sum(v) {total} == {expected} expected from {len(committed)} committed merges" \
            if total == expected else f"MISMATCH: sum(v) {total} != {expected}"
        results.append(result.summary())
        print(json.dumps(results[-1]))
    engine.stop()
    return {"variant": "iceberg", "engine": "spark local[2] + iceberg 1.10 (jdbc/sqlite catalog)",
            "profile": "iceberg-serializable", "executor_time": "Spark task executorRunTime by job group",
            "policies": results}


def executor_seconds(spark: Any, group: str, fallback: float) -> float:
    """Executor run time of the Spark jobs of ``group`` (status store); ``fallback`` if unreadable."""
    sc = spark.sparkContext
    try:
        store = sc._jsc.sc().statusStore()
        jvm = sc._jvm
        total_ms = 0
        for job_id in sc.statusTracker().getJobIdsForGroup(group):
            info = sc.statusTracker().getJobInfo(job_id)
            if info is None:
                continue
            for stage_id in info.stageIds:
                stages = store.stageData(stage_id, False, jvm.java.util.ArrayList(), False,
                                         sc._gateway.new_array(jvm.double, 0))
                for i in range(stages.size()):
                    total_ms += stages.apply(i).executorRunTime()
        return total_ms / 1000.0
    except Exception:  # noqa: BLE001 - an older/newer status store API: use the attempt's wall time
        return fallback


# --------------------------------------------------------------------------- delta-rs


def delta_variant(args: argparse.Namespace, jobs: list[MergeJob], workdir: Path) -> dict[str, Any]:
    import pyarrow as pa

    from occflow.engines.deltars import DeltaRsTable

    results = []
    for policy in ("naive", "occflow"):
        path = workdir / f"delta-{policy}"
        table = DeltaRsTable(path)
        parts = [f"p{i}" for i in range(args.partitions)]
        seed = pa.table({
            "id": pa.array([i for _ in parts for i in range(args.seed_rows)], pa.int64()),
            "part": pa.array([p for p in parts for _ in range(args.seed_rows)], pa.string()),
            "v": pa.array([0] * (len(parts) * args.seed_rows), pa.int64()),
        })
        created = table.create(seed, partition_by=["part"])
        assert created.committed, created.error

        def attempt(job: MergeJob, group: str, table: DeltaRsTable = table) -> tuple[WriteOutcome, float]:
            ids = range(job.first_id, job.first_id + job.rows)
            source = pa.table({
                "id": pa.array(list(ids), pa.int64()),
                "part": pa.array([job.partition] * job.rows, pa.string()),
                "v": pa.array([job.value] * job.rows, pa.int64()),
            })
            outcome = table.merge(source, ["id"], partition={"part": job.partition})
            return outcome, outcome.seconds

        store = LeaseStore.from_url(f"sqlite:///{workdir / f'leases-delta-{policy}.db'}") if policy == "occflow" \
            else None
        result = run_policy(policy, jobs, attempt, profile="delta-rs", table=f"bench.delta_{policy}",
                            slots=args.slots, retries=args.retries, retry_delay=args.retry_delay, store=store,
                            seed=args.seed)
        # delta-rs's merge sets v = s.v (update all): each committed job's rows end with its value
        # unless a later committed job overwrote them; check the row count instead.
        data = table.load().to_pyarrow_table()
        expected_rows = len(parts) * args.seed_rows + len(
            {(j.partition, i) for j in jobs if result.status.get(j.index) == "committed"
             for i in range(j.first_id, j.first_id + j.rows) if i >= args.seed_rows}
        )
        result.table_check = f"rows {data.num_rows} == {expected_rows} expected" if data.num_rows == expected_rows \
            else f"MISMATCH: rows {data.num_rows} != {expected_rows}"
        results.append(result.summary())
        print(json.dumps(results[-1]))
    return {"variant": "delta", "engine": "delta-rs (deltalake) in-process", "profile": "delta-rs",
            "executor_time": "attempt wall time (delta-rs runs in the worker)", "policies": results}


# --------------------------------------------------------------------------- main




def ratios(variant: dict[str, Any]) -> dict[str, Any]:
    by = {p["policy"]: p for p in variant["policies"]}
    naive, occ = by["naive"], by["occflow"]
    wasted = naive["wasted_executor_seconds"] / occ["wasted_executor_seconds"] \
        if occ["wasted_executor_seconds"] else None
    return {
        "wasted_executor_seconds_naive_over_occflow": None if wasted is None else round(wasted, 2),
        "wasted_executor_seconds_saved": round(naive["wasted_executor_seconds"] - occ["wasted_executor_seconds"], 2),
        "wall_seconds_naive_over_occflow": round(naive["wall_seconds"] / occ["wall_seconds"], 3),
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="M concurrent MERGE jobs under naive retries and occflow")
    p.add_argument("--variant", choices=["iceberg", "delta", "both"], default="both")
    p.add_argument("--jobs", type=int, default=8)
    p.add_argument("--slots", type=int, default=2)
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--rows", type=int, default=20000, help="rows each MERGE upserts")
    p.add_argument("--seed-rows", type=int, default=50000, help="rows per partition before the jobs")
    p.add_argument("--retries", type=int, default=3)
    p.add_argument("--retry-delay", type=float, default=2.0)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", type=Path, default=HERE / "results" / "real_bench.json")
    p.add_argument("--workdir", type=Path, default=None, help="keep tables here (default: a temp dir)")
    return p


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parser().parse_args(argv)
    jobs = make_jobs(args.jobs, args.partitions, args.rows, args.seed_rows, args.seed)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="occflow-real-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    variants = []
    try:
        if args.variant in ("iceberg", "both"):
            variants.append(iceberg_variant(args, jobs, workdir))
        if args.variant in ("delta", "both"):
            variants.append(delta_variant(args, jobs, workdir))
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    for variant in variants:
        variant["ratios"] = ratios(variant)
    report = {
        "benchmark": "concurrent MERGE jobs: naive Airflow retries vs occflow, same jobs, same run",
        "jobs": [vars(j) for j in jobs],
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "workdir"},
        "machine": machine(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "total_seconds": round(time.time() - started, 1),
        "variants": variants,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
