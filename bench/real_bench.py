"""Benchmark (not a test): the same write jobs for real under naive, partition-lock and occflow.

M jobs, each a MERGE (upsert a range of ids into one partition) or a blind append (INSERT INTO
new ids of one partition), in two workloads: ``merge`` (MERGE-only upserts, ``--merge-jobs``) and
``mixed`` (MERGEs and appends, ``--jobs``, ``--append-share``), run on K worker slots (threads, like Airflow's parallelism) under
each policy (see bench/real_bench_sched.py): ``naive`` (Airflow retries, fixed delay),
``partition-lock`` (a hand-built exclusive lock per (table, partition), Airflow retries) and
``occflow`` (the lease store admits by the profile's matrix; classified retries).

Variants: ``iceberg`` (Spark ``local[2]`` + Iceberg 1.10 through ``occflow.engines.spark``,
serializable MERGE, copy-on-write) and ``delta`` (delta-rs through ``occflow.engines.deltars``).
One run = each workload, each variant, each policy, on a fresh table with the same seed rows and jobs;
``--repeats N`` repeats it, rotating the policy order per repeat (the Spark JVM is warmed up
first). Reported per workload, variant and policy: wall time and wasted executor seconds (median and
min-max over the repeats), attempts, failed attempts (each with the engine's error text and the
commit it lost to) and the table check; the ratios naive/occflow and partition-lock/occflow per
repeat with their median and spread. Executor time: for Spark the executors' task run time of the
attempt's Spark jobs (``executorRunTime`` by job group); delta-rs runs in-process, so its
executor time is the attempt's wall time. The table check reads the table back after each
policy: row count, sum of values (Iceberg) and one commit per committed job (exactly once).

Run: ``.venv/bin/python bench/real_bench.py [--workload merge|mixed|both] [--variant iceberg|delta|both]
[--repeats 3]``.
Writes bench/results/real_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import machine  # bench/ is the script directory, so first on sys.path
from real_bench_sched import (
    POLICIES,
    BenchJob,
    PolicyResult,
    Settings,
    make_jobs,
    policy_order,
    run_policy,
    spread,
)

from occflow.engines.outcome import WriteOutcome
from occflow.leases import LeaseStore

HERE = Path(__file__).resolve().parent
# Default sizes: an Iceberg MERGE attempt takes about 8-15 s, a delta-rs one a few seconds, so
# that the 2 s retry delay does not dominate what a lost attempt costs.
ICEBERG_ROWS, ICEBERG_SEED_ROWS = 250000, 1500000
DELTA_ROWS, DELTA_SEED_ROWS = 1000000, 6000000


def expected_rows(committed: list[BenchJob], partitions: int, seed_rows: int) -> int:
    """Rows after the committed jobs: seed rows, new ids a merge inserted, appended rows."""
    inserted = {(j.partition, i) for j in committed if j.kind == "merge" for i in j.ids if i >= seed_rows}
    return partitions * seed_rows + len(inserted) + sum(j.rows for j in committed if j.kind == "append")


def check_table(found: dict[str, int], expected: dict[str, int]) -> str:
    """'ok: ...' when every figure read from the table is the expected one, else 'MISMATCH: ...'."""
    bad = [f"{k} {found[k]} != {v}" for k, v in expected.items() if found[k] != v]
    if bad:
        return "MISMATCH: " + ", ".join(bad)
    return "ok: " + ", ".join(f"{k} {v}" for k, v in expected.items())


# --------------------------------------------------------------------------- Iceberg on Spark


class IcebergVariant:
    name = "iceberg"
    profile = "iceberg-serializable"

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        from occflow.engines.spark import SparkConfig, SparkEngine

        self.args, self.workdir = args, workdir
        self.engine = SparkEngine(SparkConfig(
            master="local[2]", app_name="occflow-real-bench", table_format="iceberg", home=str(workdir / "iceberg"),
            conf={"spark.driver.memory": "1g", "spark.sql.adaptive.enabled": "false"},
        ))
        self.spark = self.engine.session()
        self.spark.sparkContext.setLogLevel("ERROR")
        self.spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.bench")
        # Each attempt runs in a new session whose catalog caches the table (``pinned_session``),
        # as a separate Airflow task's driver would load it once: with the table uncached (the
        # catalog default) or shared by two threads' jobs, a copy-on-write MERGE fails before
        # its commit ("Runtime file filtering is not possible: the table has been concurrently
        # modified") whenever another job commits to any partition during its planning.

    def describe(self) -> dict[str, str]:
        return {"variant": self.name, "engine": "spark local[2] + iceberg 1.10 (jdbc/sqlite catalog)",
                "profile": self.profile, "executor_time": "Spark task executorRunTime by job group",
                "rows": str(self.args.rows), "seed_rows": str(self.args.seed_rows)}

    def warm_up(self, jobs: list[BenchJob]) -> None:
        """Class loading and JIT on a scratch table, so that the policy measured first does not pay."""
        self.create("lake.bench.warmup")
        for job in jobs[:3]:
            self.run_job("lake.bench.warmup", job, "warmup")

    def create(self, table: str) -> None:
        from occflow.engines.spark import quote_table, sql_string

        q = quote_table(table)
        self.spark.sql(f"DROP TABLE IF EXISTS {q}")
        self.spark.sql(
            f"CREATE TABLE {q} (id BIGINT, part STRING, v BIGINT) USING iceberg PARTITIONED BY (part) "
            "TBLPROPERTIES ('write.merge.isolation-level'='serializable', 'write.merge.mode'='copy-on-write', "
            "'format-version'='2')"
        )
        for i in range(self.args.partitions):
            self.spark.sql(f"INSERT INTO {q} SELECT id, {sql_string(f'p{i}')}, CAST(0 AS BIGINT) "
                           f"FROM range({self.args.seed_rows})")

    def run_job(self, table: str, job: BenchJob, group: str) -> tuple[WriteOutcome, float]:
        from occflow.engines.spark import pinned_session, quote_table, sql_string

        q, part = quote_table(table), sql_string(job.partition or "")
        rows = f"range({job.first_id}, {job.first_id + job.rows})"
        if job.kind == "append":
            sql = f"INSERT INTO {q} SELECT id, {part}, CAST({job.value} AS BIGINT) FROM {rows}"
        else:
            sql = (
                f"MERGE INTO {q} t USING (SELECT id, {part} AS part, CAST({job.value} AS BIGINT) AS v FROM {rows}) s "
                f"ON t.part = {part} AND t.id = s.id WHEN MATCHED THEN UPDATE SET t.v = t.v + s.v "
                "WHEN NOT MATCHED THEN INSERT (id, part, v) VALUES (s.id, s.part, s.v)"
            )
        self.spark.sparkContext.setJobGroup(group, group)
        outcome = self.engine.run(sql, table, operation=job.operation, session=pinned_session(self.spark))
        return outcome, executor_seconds(self.spark, group, outcome.seconds)

    def run(self, policy: str, tag: str, jobs: list[BenchJob]) -> PolicyResult:
        from occflow.engines.spark import quote_table

        table = f"lake.bench.{tag}_{policy.replace('-', '_')}"
        self.create(table)
        store = new_store(self.workdir, f"iceberg-{tag}-{policy}") if policy == "occflow" else None
        result = run_policy(policy, jobs, lambda job, group: self.run_job(table, job, group),
                            settings(self.args, self.profile, table), store)
        committed = result.committed(jobs)
        q, reader = quote_table(table), self.spark.newSession()  # a new session: no cached snapshot
        row = reader.sql(f"SELECT count(*) AS n, coalesce(sum(v), 0) AS s FROM {q}").first()
        snapshots = reader.sql(f"SELECT count(*) AS n FROM {q}.snapshots").first()["n"]
        result.table_check = check_table(
            {"rows": row["n"], "sum(v)": row["s"], "snapshots": snapshots},
            {"rows": expected_rows(committed, self.args.partitions, self.args.seed_rows),
             "sum(v)": sum(j.value * j.rows for j in committed),
             "snapshots": self.args.partitions + len(committed)},
        )
        self.spark.sql(f"DROP TABLE IF EXISTS {q}")
        return result

    def close(self) -> None:
        self.engine.stop()


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


class DeltaVariant:
    name = "delta"
    profile = "delta-rs"

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args, self.workdir = args, workdir

    def describe(self) -> dict[str, str]:
        return {"variant": self.name, "engine": "delta-rs (deltalake) in-process", "profile": self.profile,
                "executor_time": "attempt wall time (delta-rs runs in the worker)",
                "rows": str(self.args.delta_rows), "seed_rows": str(self.args.delta_seed_rows)}

    def warm_up(self, jobs: list[BenchJob]) -> None:
        return None

    def rows(self, ids: range, part: str, value: int) -> Any:
        import numpy as np
        import pyarrow as pa

        return pa.table({"id": pa.array(np.arange(ids.start, ids.stop, dtype=np.int64)),
                         "part": pa.repeat(pa.scalar(part, pa.string()), len(ids)),
                         "v": pa.repeat(pa.scalar(value, pa.int64()), len(ids))})

    def run_job(self, table: Any, job: BenchJob) -> tuple[WriteOutcome, float]:
        source = self.rows(job.ids, job.partition or "", job.value)
        if job.kind == "append":
            outcome = table.append(source)
        else:
            outcome = table.merge(source, ["id"], partition={"part": job.partition})
        return outcome, outcome.seconds

    def run(self, policy: str, tag: str, jobs: list[BenchJob]) -> PolicyResult:
        import pyarrow as pa

        from occflow.engines.deltars import DeltaRsTable

        table = DeltaRsTable(self.workdir / f"delta-{tag}-{policy}")
        seed_rows = self.args.delta_seed_rows
        seed = pa.concat_tables([self.rows(range(seed_rows), f"p{i}", 0) for i in range(self.args.partitions)])
        created = table.create(seed, partition_by=["part"])
        if not created.committed:
            raise RuntimeError(f"could not create the delta table: {created.error}")
        store = new_store(self.workdir, f"delta-{tag}-{policy}") if policy == "occflow" else None
        result = run_policy(policy, jobs, lambda job, group: self.run_job(table, job),
                            settings(self.args, self.profile, f"bench.delta_{tag}_{policy}"), store)
        committed = result.committed(jobs)
        # delta-rs's merge sets v = s.v (update all), so no sum; rows and one commit per job.
        result.table_check = check_table(
            {"rows": table.load().to_pyarrow_table().num_rows, "commits": table.version()},
            {"rows": expected_rows(committed, self.args.partitions, seed_rows), "commits": len(committed)},
        )
        return result

    def close(self) -> None:
        return None


# --------------------------------------------------------------------------- main


def new_store(workdir: Path, name: str) -> LeaseStore:
    return LeaseStore.from_url(f"sqlite:///{workdir / f'leases-{name}.db'}")


def settings(args: argparse.Namespace, profile: str, table: str) -> Settings:
    return Settings(profile=profile, table=table, slots=args.slots, retries=args.retries,
                    retry_delay=args.retry_delay, seed=args.seed)


WORKLOADS = ("merge", "mixed")


def aggregate(variant: dict[str, Any], workload: str, runs: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Median and spread over the repeats of one workload and variant (``runs``: per repeat, policy -> summary)."""
    policies = {}
    for policy in POLICIES:
        rows = [run[policy] for run in runs]
        policies[policy] = {
            "wall_seconds": spread([r["wall_seconds"] for r in rows]),
            "wasted_executor_seconds": spread([r["wasted_executor_seconds"] for r in rows]),
            "useful_executor_seconds": spread([r["useful_executor_seconds"] for r in rows]),
            "attempts": [r["attempts"] for r in rows],
            "failed_attempts": [r["failed_attempts"] for r in rows],
            "jobs_committed": [r["jobs_committed"] for r in rows],
            "table_checks_ok": all(r["table_check"].startswith("ok") for r in rows),
        }
    ratios = {
        f"{name.replace('-', '_')}_over_occflow_wall": spread(
            [run[name]["wall_seconds"] / run["occflow"]["wall_seconds"] for run in runs])
        for name in ("naive", "partition-lock")
    }
    return {"workload": workload, **variant, "policies": policies, "ratios": ratios}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="M concurrent MERGE/append jobs under naive, partition-lock and occflow")
    p.add_argument("--variant", choices=["iceberg", "delta", "both"], default="both")
    p.add_argument("--workload", choices=[*WORKLOADS, "both"], default="both",
                   help="merge: MERGE-only upserts; mixed: MERGEs and blind appends (--append-share)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--merge-jobs", type=int, default=10, help="jobs of the merge workload")
    p.add_argument("--jobs", type=int, default=12, help="jobs of the mixed workload")
    p.add_argument("--slots", type=int, default=2)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--append-share", type=float, default=0.4, help="share of the mixed jobs that are blind appends")
    p.add_argument("--rows", type=int, default=ICEBERG_ROWS, help="rows each Iceberg job writes")
    p.add_argument("--seed-rows", type=int, default=ICEBERG_SEED_ROWS, help="rows per Iceberg partition before the jobs")
    p.add_argument("--delta-rows", type=int, default=DELTA_ROWS, help="rows each delta-rs job writes")
    p.add_argument("--delta-seed-rows", type=int, default=DELTA_SEED_ROWS, help="rows per delta partition before the jobs")
    p.add_argument("--retries", type=int, default=3)
    p.add_argument("--retry-delay", type=float, default=2.0)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", type=Path, default=HERE / "results" / "real_bench.json")
    p.add_argument("--workdir", type=Path, default=None, help="keep tables here (default: a temp dir)")
    return p


def job_sets(args: argparse.Namespace, variants: list[Any], repeat: int) -> dict[str, dict[str, list[BenchJob]]]:
    """workload -> variant -> its jobs in ``repeat``: drawn from seed ``--seed`` + ``repeat``, so
    every policy of a repeat runs the same jobs and the repeats sample different draws (which
    partitions collide depends on the draw as much as on timing)."""
    workloads = WORKLOADS if args.workload == "both" else (args.workload,)
    return {
        w: {v.name: make_jobs(args.merge_jobs if w == "merge" else args.jobs, args.partitions, *rows_of(args, v.name),
                              args.seed + repeat, 0.0 if w == "merge" else args.append_share)
            for v in variants}
        for w in workloads
    }


def run_all(args: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    """Every repeat of every workload, variant and policy; returns one entry per repeat."""
    variants: list[Any] = []
    if args.variant in ("iceberg", "both"):
        variants.append(IcebergVariant(args, workdir))
    if args.variant in ("delta", "both"):
        variants.append(DeltaVariant(args, workdir))
    repeats = []
    try:
        for v in variants:
            v.warm_up(next(iter(job_sets(args, variants, 0).values()))[v.name])
        for r in range(args.repeats):
            jobs = job_sets(args, variants, r)
            entry: dict[str, Any] = {"repeat": r, "order": policy_order(r), "loadavg_before": loadavg(),
                                     "seed": args.seed + r, "workloads": {}, "jobs": jsonable(jobs)}
            for w, sets in jobs.items():
                entry["workloads"][w] = {}
                for v in variants:
                    entry["workloads"][w][v.name] = {}
                    for policy in policy_order(r):
                        summary = v.run(policy, f"r{r}_{w}", sets[v.name]).summary()
                        entry["workloads"][w][v.name][policy] = summary
                        print(json.dumps({"repeat": r, "workload": w, "variant": v.name,
                                          **{k: x for k, x in summary.items() if k != "attempt_log"}}), flush=True)
            repeats.append(entry)
    finally:
        for v in variants:
            v.close()
    return [{"descriptions": [v.describe() for v in variants], "workloads": list(job_sets(args, variants, 0))}, *repeats]


def jsonable(jobs: dict[str, dict[str, list[BenchJob]]]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    return {w: {name: [vars(j) for j in js] for name, js in sets.items()} for w, sets in jobs.items()}


def rows_of(args: argparse.Namespace, variant: str) -> tuple[int, int]:
    return (args.rows, args.seed_rows) if variant == "iceberg" else (args.delta_rows, args.delta_seed_rows)


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parser().parse_args(argv)
    if args.repeats < 1:
        raise SystemExit(f"--repeats must be >= 1, got {args.repeats}")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="occflow-real-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    started, load_before = time.time(), loadavg()
    try:
        head, *repeats = run_all(args, workdir)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    summary = [aggregate(d, w, [rep["workloads"][w][d["variant"]] for rep in repeats])
               for w in head["workloads"] for d in head["descriptions"]]
    report = {
        "benchmark": "concurrent MERGE (and append) jobs: naive vs partition-lock vs occflow, same jobs, same run",
        "command": " ".join(["python bench/real_bench.py", *(argv if argv is not None else sys.argv[1:])]),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "workdir"},
        "machine": machine(),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "total_seconds": round(time.time() - started, 1),
        "summary": summary,
        "repeats": repeats,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
