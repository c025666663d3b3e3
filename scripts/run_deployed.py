"""The deployed mode of the main command: occflow on Celery workers, a Spark cluster and PostgreSQL.

    bash scripts/run.sh --deployed [--dags NAME,...] [--no-admission] [--home DIR] [--report FILE]
    .venv/bin/python scripts/run_deployed.py ...             (the same, without the bootstrap)

Starts on this machine, from installed Debian / PyPI packages, each process by us and stopped by
its PID (process group) at the end:

- PostgreSQL (``scripts/postgres.sh``): database ``airflow`` (Airflow's metadata) and database
  ``occflow`` (occflow's lease store, with its history on, and Iceberg's JDBC catalog);
- Redis, and Airflow with the CeleryExecutor: scheduler, dag-processor, api-server, triggerer
  and two ``airflow celery worker`` processes with their own ``--concurrency`` and host name;
- a Spark standalone cluster: master and two workers (``spark-class``), the ``spark://`` master
  in the ``occflow_spark_default`` connection, Iceberg tables in the JDBC catalog on PostgreSQL.

The DAG folder (``<home>/dags``) links the example DAGs from ``dags_example/`` and the deployed
one, ``dags_deployed/deployed_spread.py`` (conflicting spark-submit MERGEs spread over both
workers). The chosen DAGs are triggered together and followed as the embedded run follows them
(``scripts/run_examples.py``: progress lines, per-task summary, serial-result checks). At the end
the script writes ``<home>/deployed-report.json``: start-up and run seconds, the task instances
with the host (Celery worker) that ran each, the Spark master's and workers' status (applications,
executors), the lease history, the drivers' outcomes and the admission rate measured on the
PostgreSQL lease store. Exit status 0 only if every DAG run ended with correct data.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).resolve().parent
REPO = SCRIPTS.parent
sys.path[:0] = [str(SCRIPTS), str(SCRIPTS / "deployed"), str(REPO / "bench")]

import run_examples  # noqa: E402 - the embedded run's watch / summary / checks, reused as they are
from services import (  # noqa: E402
    CeleryAirflow,
    Postgres,
    Process,
    SparkCluster,
    airflow_env,
    free_port,
    start_redis,
    stop_all,
    wait_for,
)

SPREAD = "occflow_deployed_spread"
DAG_FILES = {
    SPREAD: REPO / "dags_deployed" / "deployed_spread.py",
    "occflow_iceberg_backfill": REPO / "dags_example" / "iceberg_backfill.py",
    "occflow_delta_merge_vs_compaction": REPO / "dags_example" / "delta_merge_vs_compaction.py",
    "occflow_delta_schema_change": REPO / "dags_example" / "delta_schema_change.py",
    "occflow_delta_spark_concurrent": REPO / "dags_example" / "delta_spark_concurrent.py",
}
DESCRIPTIONS = {
    SPREAD: "conflicting spark-submit MERGEs spread over two Celery workers and a Spark cluster",
}
DEFAULT_DAGS = (SPREAD, "occflow_delta_merge_vs_compaction", "occflow_delta_schema_change", "occflow_iceberg_backfill",
                "occflow_delta_spark_concurrent")
#: The connection the Delta-on-Spark example runs on here (``OCCFLOW_EXAMPLE_DELTA_SPARK_CONN_ID``).
DELTA_SPARK_CONN_ID = "occflow_spark_delta"


def spark_connection(cluster: SparkCluster, pg: Postgres, home: Path) -> str:
    """The ``occflow_spark_default`` connection (JSON form): the cluster's master, small
    executors (one core each, so several drivers get executors at once), the shared catalog."""
    return json.dumps({
        "conn_type": "occflow_spark",
        "host": cluster.master_url,
        "extra": {
            "table_format": "iceberg",
            "catalog": {
                "type": "jdbc",
                "uri": pg.jdbc_url("occflow"),
                "warehouse": str(home / "occflow" / "warehouse"),
                "properties": {"jdbc.user": "occflow"},
            },
            "conf": CLUSTER_CONF,
        },
    })


#: Small executors (one core each, so several drivers get executors at once).
CLUSTER_CONF = {
    "spark.cores.max": "1",
    "spark.executor.cores": "1",
    "spark.executor.memory": "512m",
    "spark.driver.memory": "512m",
    "spark.driver.host": "127.0.0.1",
}


def delta_spark_connection(cluster: SparkCluster) -> str:
    """The ``occflow_spark_delta`` connection: the same cluster and executors with delta-spark.
    Its jars (the manifest's or ``$OCCFLOW_DELTA_SPARK_JARS``) go into ``spark.jars`` as local
    paths: the driver serves them to the executors."""
    return json.dumps({
        "conn_type": "occflow_spark",
        "host": cluster.master_url,
        "extra": {"table_format": "delta", "app_name": "occflow-delta-spark-example", "conf": CLUSTER_CONF},
    })


def dag_folder(home: Path, dag_ids: list[str]) -> Path:
    folder = home / "dags"
    folder.mkdir(parents=True, exist_ok=True)
    for dag_id in dag_ids:
        link = folder / DAG_FILES[dag_id].name
        if not link.exists():
            link.symlink_to(DAG_FILES[dag_id])
    return folder


def workers_ready(airflow: CeleryAirflow) -> bool:
    """Each Celery worker answers a ping through the broker (it consumes the queue)."""
    from airflow.providers.celery.executors.celery_executor_utils import app

    answered = {name.split("@", 1)[0] for reply in app.control.ping(timeout=2.0) for name in reply}
    return set(airflow.worker_names()) <= answered


# ------------------------------------------------------------------------------ evidence


def task_instances(runs: dict[str, str]) -> list[dict[str, Any]]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    out = []
    with create_session() as session:
        for dag_id, run_id in runs.items():
            for ti in session.scalars(
                select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
            ).all():
                out.append({
                    "dag_id": dag_id, "task_id": ti.task_id, "map_index": ti.map_index, "try_number": ti.try_number,
                    "state": str(getattr(ti.state, "value", ti.state)), "hostname": ti.hostname,
                    "operator": ti.operator, "queue": ti.queue,
                    "start": None if ti.start_date is None else ti.start_date.timestamp(),
                    "end": None if ti.end_date is None else ti.end_date.timestamp(),
                })
    return out


def driver_outcomes(submit_dir: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(submit_dir.rglob("*.json")):
        if path.name.endswith((".job.json", ".app.json")):
            continue
        data = json.loads(path.read_text())
        out.append({"path": str(path.relative_to(submit_dir)), **{k: data.get(k) for k in (
            "committed", "snapshot_id", "version", "seconds", "driver", "tag", "classification")}})
    return out


def lease_history(url: str) -> list[dict[str, Any]]:
    from occflow.leases import LeaseStore

    store = LeaseStore.from_url(url)  # creates the (empty) tables when no write took a lease
    try:
        return [dict(e) for e in store.history_events()]
    finally:
        store.dispose()


def _load_worker(url: str, worker: int, seconds: float, queue: Any) -> None:
    from lease_load import LoadShape, run_worker

    shape = LoadShape(tables=[("bench.admission", "iceberg-serializable")], cycles=200,
                      hold_max=0.0, poll=0.001, poll_max=0.01)
    began = time.monotonic()  # after the imports: the rate is the store's, not Python's start-up
    grants = polls = 0
    while time.monotonic() - began < seconds:  # run_worker has no time limit: batches until time is up
        report = run_worker(url, worker, shape, seed=worker * 100_000 + grants)
        grants += len(report.requests) - len(report.given_up)
        polls += report.polls
    queue.put((grants, polls, time.monotonic() - began))


def measure_admission(url: str, seconds: float) -> dict[str, Any]:
    """Admission decisions per second from two processes (one per Celery worker) on the
    deployment's PostgreSQL lease store: each acquires and releases leases on overlapping
    footprints of one table in a loop (``bench/lease_load.py``, conflicting operations mixed in);
    a decision is one ``try_acquire`` (granted or refused) or one release."""
    from occflow.leases import LeaseStore

    LeaseStore.from_url(url).dispose()  # the schema, if no task made it (a run without admission)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_load_worker, args=(url, n, seconds, queue)) for n in (1, 2)]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=seconds + 180) for _ in procs]
    for proc in procs:
        proc.join(timeout=30)
    grants = sum(r[0] for r in results)
    decisions = sum(r[1] for r in results) + grants  # every poll is a decision, every release too
    wall = max(r[2] for r in results)
    return {"processes": len(procs), "seconds": round(wall, 1), "grants": grants, "decisions": decisions,
            "decisions_per_second": round(decisions / wall, 1)}


# ------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deployed", action="store_true", help=argparse.SUPPRESS)  # routed here by run.sh
    parser.add_argument("--dags", default=",".join(DEFAULT_DAGS), help="comma-separated DAG ids")
    parser.add_argument("--home", help="directory for everything the run starts (default: a new temp dir, kept)")
    parser.add_argument("--concurrency", default="2,2", help="--concurrency of each Celery worker (default 2,2)")
    parser.add_argument("--no-admission", action="store_true", help="the deployed DAG writes without leases")
    parser.add_argument("--batches", type=int, default=6, help="MERGE tasks of the deployed DAG (default 6)")
    parser.add_argument("--measure-admission", type=float, default=0.0, metavar="SECONDS",
                        help="also measure admission decisions per second on the PostgreSQL store")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds for all DAG runs")
    parser.add_argument("--report", help="also write the JSON report here")
    args = parser.parse_args(argv)
    # SIGTERM (a CI timeout, kill PID) unwinds like Ctrl-C: the finally block stops what we started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    dag_ids = [d.strip() for d in args.dags.split(",") if d.strip()]
    unknown = sorted(set(dag_ids) - set(DAG_FILES))
    if unknown:
        parser.error(f"unknown DAGs {unknown}; known: {', '.join(DAG_FILES)}")
    try:
        concurrency = [int(c) for c in args.concurrency.split(",")]
    except ValueError:
        parser.error(f"--concurrency takes integers separated by commas, got {args.concurrency!r}")
    if args.batches < 2:
        parser.error(f"--batches must be at least 2 (one write per partition), got {args.batches}")
    if len(concurrency) != 2 or min(concurrency) < 1:
        parser.error(f"--concurrency names two workers' slots (each >= 1), got {args.concurrency!r}")

    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="occflow-deployed-"))
    home.mkdir(parents=True, exist_ok=True)
    run_examples.EXAMPLES.update(DESCRIPTIONS)  # the summary names the deployed DAG too
    began = time.monotonic()
    report: dict[str, Any] = {"home": str(home), "dags": dag_ids, "admission": not args.no_admission,
                              "concurrency": concurrency, "batches": args.batches}
    print(f"occflow deployed mode: home {home}")
    # PostgreSQL runs as its own user (as root: postgres), which must reach its directory: a
    # directory of its own under /tmp, not under a home whose parents may be private (pytest's).
    pg_dir = Path(tempfile.mkdtemp(prefix="occflow-deployed-pg-"))
    pg_dir.chmod(0o755)
    pg = Postgres(pg_dir)
    procs: list[Process] = []
    cluster = SparkCluster(home)
    airflow: CeleryAirflow | None = None
    spark_up: threading.Thread | None = None
    ok = False
    try:
        print("starting PostgreSQL, Redis, the Spark cluster ...", flush=True)
        pg.start(["airflow", "occflow"])
        redis, broker = start_redis(home)
        procs.append(redis)
        # The cluster starts while Airflow migrates its database and starts its services.
        spark_up = threading.Thread(target=cluster.start, name="spark-cluster", daemon=True)
        spark_up.start()
        lease_url = pg.database_url("occflow")
        env = airflow_env(home, dag_folder(home, dag_ids), pg, broker, free_port())
        env.update({
            "OCCFLOW_HOME": str(home / "occflow"),
            "OCCFLOW_SUBMIT_DIR": str(home / "occflow" / "submit"),
            "OCCFLOW_LEASE_STORE_URL": lease_url,
            "OCCFLOW_LEASE_HISTORY": "1",
            "OCCFLOW_SPARK_MASTER_UI": cluster.master_ui,
            "OCCFLOW_DEPLOYED_ADMISSION": "0" if args.no_admission else "1",
            "OCCFLOW_DEPLOYED_BATCHES": str(args.batches),
            "AIRFLOW_CONN_OCCFLOW_SPARK_DEFAULT": spark_connection(cluster, pg, home),
            f"AIRFLOW_CONN_{DELTA_SPARK_CONN_ID.upper()}": delta_spark_connection(cluster),
            "OCCFLOW_EXAMPLE_DELTA_SPARK_CONN_ID": DELTA_SPARK_CONN_ID,
            "SPARK_LOCAL_IP": "127.0.0.1",
        })
        os.environ.update(env)  # before airflow is imported: this process reads the same metadata DB
        print(f"  postgres {pg.url}, redis {broker}, spark {cluster.master_url}", flush=True)
        print(f"starting Airflow on Celery (workers {', '.join(map(str, concurrency))} slots) ...", flush=True)
        airflow = CeleryAirflow(home, env, concurrency)
        airflow.start()
        spark_up.join(timeout=400)
        if not cluster.up:
            raise RuntimeError(f"the Spark cluster did not start; see {home}/spark-*.log")
        from airflow import settings

        settings.configure_orm()
        run_examples.wait_for_dags(airflow, dag_ids, timeout=300)
        wait_for("the Celery workers", lambda: workers_ready(airflow), 180, airflow.procs)
        report["startup_seconds"] = round(time.monotonic() - began, 1)
        print(f"everything is up ({report['startup_seconds']:.0f}s); triggering {', '.join(dag_ids)}:", flush=True)
        started = time.monotonic()
        runs = {dag_id: run_examples.trigger(dag_id) for dag_id in dag_ids}
        ended = run_examples.watch(airflow, runs, args.timeout)
        report["run_seconds"] = round(time.monotonic() - started, 1)
        ok = True
        report["summaries"] = {}
        for dag_id, run_id in runs.items():
            state, seconds = ended[dag_id]
            rows = run_examples.task_results(dag_id, run_id)
            text, good = run_examples.describe(dag_id, state, seconds, rows)
            print(text, flush=True)
            ok = ok and good
            report["summaries"][dag_id] = {"state": state, "seconds": seconds, "verified": good,
                                           "tasks": rows}
        # Each spark-submit attempt holds one executor core (spark.cores.max=1) for its whole life,
        # so the seconds of lost attempts are executor seconds wasted.
        report["wasted_executor_seconds"] = round(sum(
            float(row["value"].get("wasted_seconds", 0.0))
            for row in report["summaries"].get(SPREAD, {}).get("tasks", [])
            if isinstance(row["value"], dict) and "decisions" in row["value"]
        ), 1)
        report["task_instances"] = task_instances(runs)
        hosts = sorted({ti["hostname"] for ti in report["task_instances"] if ti["hostname"]})
        print(f"\ntasks ran on: {', '.join(hosts)}")
        report["spark"] = cluster.evidence()
        apps = report["spark"]["master"].get("completedapps", []) + report["spark"]["master"].get("activeapps", [])
        print(f"Spark applications on the cluster: {len(apps)}")
        report["drivers"] = driver_outcomes(home / "occflow" / "submit")
        report["lease_history"] = lease_history(lease_url)
        decided = [e for e in report["lease_history"] if e["kind"] in ("grant", "enqueue")]
        report["run_admission_decisions"] = len(decided)
        if args.measure_admission > 0:
            print(f"measuring admission on the PostgreSQL lease store for {args.measure_admission:.0f}s ...",
                  flush=True)
            report["admission_rate"] = measure_admission(lease_url, args.measure_admission)
            print(f"  {report['admission_rate']['decisions_per_second']} decisions/s from two processes", flush=True)
    finally:
        # A second Ctrl-C or TERM must not cut the stop short and leave services running.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("stopping everything this run started ...", flush=True)
        # The Airflow processes first (workers, then services), then what they use.
        stopping = [*(airflow.procs if airflow is not None else []), *cluster.procs, *procs]
        killed = stop_all(stopping)
        if spark_up is not None:
            # Still starting the cluster: it gives up once its master is stopped, and a worker
            # it started meanwhile is stopped too.
            spark_up.join(timeout=60)
            killed += stop_all([p for p in cluster.procs if p not in stopping])
        try:
            pg.stop()  # also when interrupted while it started: the server may run all the same
            shutil.copy(pg_dir / "server.log", home / "postgres.log")
            shutil.rmtree(pg_dir, ignore_errors=True)
        except (RuntimeError, OSError) as exc:
            print(f"  PostgreSQL did not stop cleanly ({pg_dir}): {exc}", flush=True)
        report["killed_after_grace"] = killed
        report["total_seconds"] = round(time.monotonic() - began, 1)
        text = json.dumps(report, indent=1, default=str)
        (home / "deployed-report.json").write_text(text)
        if args.report:
            Path(args.report).write_text(text)
        print(f"logs and report kept in {home} (services: *.log, tasks: logs/, report: deployed-report.json)")
    verdict = "all DAGs ended with correct data" if ok else "some DAG did not end correctly"
    print(f"\n{verdict} (start-up {report.get('startup_seconds', 0):.0f}s, run {report.get('run_seconds', 0):.0f}s, "
          f"{report['total_seconds']:.0f}s in all; admission {'on' if report['admission'] else 'off'}"
          + (f": {report['wasted_executor_seconds']:.1f} executor seconds wasted in {SPREAD}'s lost attempts)"
             if SPREAD in report.get("summaries", {}) else ")"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
