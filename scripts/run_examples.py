"""Run the example DAGs on a real Airflow with real concurrency, then say what happened.

    .venv/bin/python scripts/run_examples.py [--dags NAME,...] [--home DIR] [--parallelism N]

Starts a throwaway Airflow (its own AIRFLOW_HOME, SQLite metadata DB, LocalExecutor) as the
real services: scheduler, dag-processor, api-server (the task execution API) and triggerer
(deferred admission and sensors). The DAG folder is ``dags_example/``. Each example DAG is
triggered at once (the DAGs run side by side, their tasks in parallel); while they run, the
script prints a progress line whenever a task starts, defers (waits for a lease), is
rescheduled or retried, commits (with the attempts it lost) or fails. At the end it prints, per
task, the attempts, the conflicts met, what the policy did, the seconds wasted in lost attempts,
and each DAG's final row count against the serial expectation. The Airflow home (services'
logs, task logs, the tables, the lease store) is kept and its path printed. Exit status 0 only
if every DAG run succeeded and every verification task passed.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DAGS = REPO / "dags_example"
EXAMPLES = {
    "occflow_iceberg_backfill": "a concurrent backfill of one partitioned Iceberg table by mapped tasks",
    "occflow_delta_merge_vs_compaction": "MERGE upserts racing a compaction (delta-rs)",
    "occflow_delta_schema_change": "a schema change during appends (delta-rs)",
    "occflow_delta_spark_concurrent": "a backfill, a MERGE, an OPTIMIZE and a schema change on one Delta table "
    "(Spark, delta-spark)",
    "occflow_maxcompute_transactional": "concurrent writes on a MaxCompute Delta table and a standard table "
    "(stand-in project unless a MaxCompute connection is configured)",
    "occflow_nightly_maintenance": "hourly writers and the nightly expire_snapshots on one Iceberg table "
    "(pyiceberg, no JVM)",
}
SERVICES = ("scheduler", "dag-processor", "api-server", "triggerer")
#: A SIGTERM while a service is being started is held until it is recorded (``Airflow.start``).
_TERM = {"starting": False, "asked": False}


def _on_sigterm(*_: object) -> None:
    if _TERM["starting"]:
        _TERM["asked"] = True
        return
    sys.exit(143)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def airflow_env(home: Path, parallelism: int) -> dict[str, str]:
    port = free_port()
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": str(parallelism),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        # Airflow generates a 24-byte secret; PyJWT wants 64 for HS512 and warns (InsecureKeyLengthWarning) in
        # every service log at each token it signs. One secret for all of this run's services.
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
        # The examples' tables, Iceberg catalog and lease store live under this run's home.
        "OCCFLOW_HOME": str(home / "occflow"),
        "OCCFLOW_LEASE_STORE_URL": f"sqlite:///{home / 'occflow_leases.db'}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(DAGS), os.environ.get("PYTHONPATH", "")])),
    }


class Airflow:
    """The services of one throwaway Airflow, started and stopped as process groups we own."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.home = home
        self.env = {**os.environ, **env}
        self.bin = str(Path(sys.executable).with_name("airflow"))
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def cli(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run([self.bin, *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"airflow {' '.join(args)} failed:\n{done.stderr[-3000:]}")
        return done.stdout

    def start(self) -> None:
        self.cli("db", "migrate", timeout=600)
        for name in SERVICES:
            log = open(self.home / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
            # A SIGTERM that lands inside Popen (the service has started, Popen has not returned)
            # would leave a service no one stops: it waits until the service is in self.procs.
            _TERM["starting"] = True
            try:
                self.procs[name] = subprocess.Popen(
                    [self.bin, name], env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            finally:
                _TERM["starting"] = False
            if _TERM["asked"]:
                sys.exit(143)

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                tail = (self.home / f"{name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"airflow {name} exited with {proc.returncode}:\n{tail}")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def wait_for_dags(airflow: Airflow, dag_ids: list[str], timeout: float) -> None:
    from airflow.models.dag import DagModel
    from airflow.models.errors import ParseImportError
    from airflow.utils.session import create_session
    from sqlalchemy import select

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        airflow.check_alive()
        with create_session() as session:
            errors = session.scalars(select(ParseImportError)).all()
            if errors:
                raise RuntimeError("example DAGs do not import:\n" + "\n".join(e.stacktrace for e in errors))
            found = set(session.scalars(select(DagModel.dag_id).where(DagModel.dag_id.in_(dag_ids))).all())
        if found == set(dag_ids):
            return
        time.sleep(2)
    raise TimeoutError(f"the dag-processor did not parse {sorted(set(dag_ids) - found)} in {timeout}s")


def trigger(dag_id: str) -> str:
    """Unpauses and triggers one DAG run in this process (the CLI costs seconds of imports per call)."""
    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from airflow.utils.types import DagRunTriggeredByType
    from sqlalchemy import update

    run_id = f"occflow_examples__{time.strftime('%Y%m%dT%H%M%S')}"
    with create_session() as session:
        session.execute(update(DagModel).where(DagModel.dag_id == dag_id).values(is_paused=False))
    trigger_dag(dag_id, run_id=run_id, triggered_by=DagRunTriggeredByType.CLI)
    return run_id


def run_times(dag_id: str, run_id: str) -> dict[str, float | None]:
    """The DAG run's start and end (epoch seconds) as Airflow's metadata records them."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalars(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)).first()
        return {"start": run.start_date.timestamp() if run and run.start_date else None,
                "end": run.end_date.timestamp() if run and run.end_date else None}


def run_dag(airflow: Airflow, dag_id: str, timeout: float) -> tuple[str, str, float]:
    """Triggers one run and waits for its end: run id, state, seconds from its start to its end
    ("timed out" and ``timeout`` if it has not ended by then). What the benchmarks run a DAG with."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    run_id = trigger(dag_id)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        airflow.check_alive()
        with create_session() as session:
            run = session.scalars(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)).first()
            if run is not None and str(run.state) in ("success", "failed"):
                return run_id, str(run.state), (run.end_date - run.start_date).total_seconds()
        time.sleep(0.5)
    return run_id, "timed out", timeout


#: What a task instance's state means in a progress line.
STATE_WORDS = {
    "queued": "queued",
    "running": "started",
    "deferred": "deferred (waits for a lease or a commit; its worker slot is free)",
    "up_for_reschedule": "rescheduled (goes back through admission)",
    "up_for_retry": "failed this try; Airflow retries it",
    "failed": "FAILED",
    "upstream_failed": "not run (upstream failed)",
    "skipped": "skipped",
}


def progress_line(value: Any) -> str:
    """The end of one task's story from its write report: committed, after which lost attempts."""
    if not isinstance(value, dict):
        return "done"
    if "decisions" not in value:
        return "done" + (f": {value['rows']} rows" if "rows" in value else "")
    lost = [d["kind"] for d in value.get("decisions", [])]
    verb = "committed" if value.get("committed") else "ended without a commit"
    tail = f" after losing {len(lost)} ({', '.join(lost)})" if lost else ""
    return f"{verb} on attempt {value['attempts']}{tail}, {value.get('wasted_seconds', 0.0):.1f}s wasted"


def watch(airflow: Airflow, runs: dict[str, str], timeout: float, poll: float = 1.0) -> dict[str, tuple[str, float]]:
    """Follows the DAG runs until each ends, printing a line per task state change.

    Returns per DAG its final state and its run time in seconds."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    started = time.monotonic()
    seen: dict[tuple[str, str, int], tuple[str, int]] = {}
    ended: dict[str, tuple[str, float]] = {}
    while len(ended) < len(runs):
        airflow.check_alive()
        now = time.monotonic() - started
        with create_session() as session:
            for dag_id, run_id in runs.items():
                if dag_id in ended:
                    continue
                tis = session.scalars(
                    select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
                ).all()
                for ti in sorted(tis, key=lambda t: (t.task_id, t.map_index)):
                    state = str(getattr(ti.state, "value", ti.state))
                    key = (dag_id, ti.task_id, ti.map_index)
                    if state in ("None", "scheduled") or seen.get(key) == (state, ti.try_number):
                        continue
                    seen[key] = (state, ti.try_number)
                    if state == "success":
                        xcom = session.scalars(
                            select(XComModel).where(
                                XComModel.dag_id == dag_id, XComModel.run_id == run_id,
                                XComModel.task_id == ti.task_id, XComModel.map_index == ti.map_index,
                                XComModel.key == "return_value",
                            )
                        ).first()
                        word = progress_line(None if xcom is None else XComModel.deserialize_value(xcom))
                    else:
                        word = STATE_WORDS.get(state, state)
                    task = ti.task_id + ("" if ti.map_index < 0 else f"[{ti.map_index}]")
                    print(f"  {now:6.1f}s  {dag_id}  {task} (try {ti.try_number}): {word}", flush=True)
                state = session.scalar(select(DagRun.state).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
                if str(state) in ("success", "failed"):
                    ended[dag_id] = (str(state), now)
                    print(f"  {now:6.1f}s  {dag_id}: run {state}", flush=True)
        if now > timeout:
            for dag_id in runs:
                ended.setdefault(dag_id, ("timed out", now))
            break
        time.sleep(poll)
    return ended


def task_results(dag_id: str, run_id: str) -> list[dict[str, Any]]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskreschedule import TaskReschedule
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    rows = []
    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance)
            .where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
            .order_by(TaskInstance.task_id, TaskInstance.map_index)
        ).all()
        for ti in tis:
            xcom = session.scalars(
                select(XComModel).where(
                    XComModel.dag_id == dag_id,
                    XComModel.run_id == run_id,
                    XComModel.task_id == ti.task_id,
                    XComModel.map_index == ti.map_index,
                    XComModel.key == "return_value",
                )
            ).first()
            reschedules = session.scalar(
                select(func.count()).select_from(TaskReschedule).where(TaskReschedule.ti_id == ti.id)
            )
            rows.append(
                {
                    "task": ti.task_id + ("" if ti.map_index < 0 else f"[{ti.map_index}]"),
                    "state": str(getattr(ti.state, "value", ti.state)),
                    "tries": ti.try_number,
                    "reschedules": int(reschedules or 0),
                    "start": ti.start_date.timestamp() if ti.start_date else None,
                    "end": ti.end_date.timestamp() if ti.end_date else None,
                    "queued": ti.queued_dttm.timestamp() if ti.queued_dttm else None,
                    "value": None if xcom is None else XComModel.deserialize_value(xcom),
                }
            )
    return rows


def describe(dag_id: str, state: str, seconds: float, rows: list[dict[str, Any]]) -> tuple[str, bool]:
    lines = [f"\n== {dag_id}: {EXAMPLES[dag_id]}", f"   run {state} in {seconds:.0f}s"]
    lines.append(f"   {'task':<24} {'state':<10} {'attempts':>8} {'wasted s':>8}  conflicts -> policy")
    verified = False
    for row in rows:
        value = row["value"]
        if isinstance(value, dict) and "attempts" in value and "decisions" in value:
            story = ", ".join(f"{d['kind']} -> {d['action']}" for d in value["decisions"]) or "none"
            lines.append(
                f"   {row['task']:<24} {row['state']:<10} {value['attempts']:>8} {value['wasted_seconds']:>8.1f}  {story}"
            )
        else:
            extra = f" (rescheduled {row['reschedules']}x)" if row["reschedules"] else ""
            lines.append(f"   {row['task']:<24} {row['state']:<10} {'':>8} {'':>8}  {extra}".rstrip())
        if row["task"] == "verify" and isinstance(value, dict) and "rows" in value:
            verified = row["state"] == "success" and value["rows"] == value["expected_rows"]
            lines.append(
                f"   final row count of {value['table']}: {value['rows']} (a serial run gives "
                f"{value['expected_rows']}): {'correct' if verified else 'WRONG'}"
            )
            if "compaction" in value:
                lines.append(f"   compaction: {value['compaction']}")
            if "history" in value:
                lines.append(f"   table history: {', '.join(value['history'])}")
    if not verified:
        lines.append("   verification did not pass")
    return "\n".join(lines), verified and state == "success"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dags", default=",".join(EXAMPLES), help="comma-separated example DAG ids")
    parser.add_argument("--home", help="AIRFLOW_HOME to use (default: a new temp dir, kept)")
    parser.add_argument("--parallelism", type=int, default=4, help="LocalExecutor slots (default 4)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds for all DAG runs")
    parser.add_argument("--json", help="also write what happened to this file (bench/examples_bench.py reads it)")
    args = parser.parse_args(argv)
    # SIGTERM (a CI timeout, kill PID) unwinds like Ctrl-C: the finally block stops Airflow's
    # services, which lead sessions of their own and would outlive this process otherwise.
    signal.signal(signal.SIGTERM, _on_sigterm)
    dag_ids = [d.strip() for d in args.dags.split(",") if d.strip()]
    unknown = sorted(set(dag_ids) - set(EXAMPLES))
    if unknown:
        parser.error(f"unknown example DAGs {unknown}; known: {', '.join(EXAMPLES)}")

    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="occflow-examples-"))
    home.mkdir(parents=True, exist_ok=True)
    env = airflow_env(home, args.parallelism)
    os.environ.update(env)  # before airflow is imported: this process reads the same DB
    airflow = Airflow(home, env)
    began = time.monotonic()
    print(f"occflow examples: Airflow home {home}, LocalExecutor with {args.parallelism} slots")
    print("starting Airflow (db migrate, scheduler, dag-processor, api-server, triggerer) ...", flush=True)
    ok = True
    try:
        airflow.start()
        from airflow import settings

        settings.configure_orm()
        print(f"Airflow is up ({time.monotonic() - began:.0f}s); waiting for the dag-processor to parse the DAGs ...",
              flush=True)
        wait_for_dags(airflow, dag_ids, timeout=300)
        print(f"triggering {', '.join(dag_ids)}; progress (seconds since the trigger):", flush=True)
        runs = {dag_id: trigger(dag_id) for dag_id in dag_ids}
        ended = watch(airflow, runs, args.timeout)
        results = {}
        for dag_id, run_id in runs.items():
            state, seconds = ended[dag_id]
            rows = task_results(dag_id, run_id)
            text, good = describe(dag_id, state, seconds, rows)
            print(text, flush=True)
            ok = ok and good
            results[dag_id] = {"run_id": run_id, "state": state, "verified": good, "tasks": rows,
                               **run_times(dag_id, run_id)}
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1, default=str) + "\n")
    finally:
        # A second Ctrl-C or TERM must not cut the stop short and leave services running.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        airflow.stop()
        print(f"\nlogs kept in {home} (services: *.log, tasks: logs/, tables: occflow/, leases: occflow_leases.db)")
    verdict = "all example DAGs ended with correct data" if ok else "some example DAG did not end correctly"
    print(f"\n{verdict} ({time.monotonic() - began:.0f}s in all)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
