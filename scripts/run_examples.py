"""Run the example DAGs on a real Airflow with real concurrency, then say what happened.

    .venv/bin/python scripts/run_examples.py [--dags NAME,...] [--home DIR] [--parallelism N]

Starts a throwaway Airflow (its own AIRFLOW_HOME, SQLite metadata DB, LocalExecutor) as the
real services: scheduler, dag-processor, api-server (the task execution API) and triggerer
(deferred admission and sensors). The DAG folder is ``dags_example/``. Each example DAG is
triggered and runs with its tasks in parallel; then the script prints, per task, the attempts,
the conflicts met, what the policy did, the seconds wasted in lost attempts, and each DAG's
final row count against the serial expectation. Exit status 0 only if every DAG run succeeded
and every verification task passed.
"""

from __future__ import annotations

import argparse
import os
import shutil
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
}
SERVICES = ("scheduler", "dag-processor", "api-server", "triggerer")


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
            self.procs[name] = subprocess.Popen(
                [self.bin, name], env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

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


def run_dag(airflow: Airflow, dag_id: str, timeout: float) -> tuple[str, str, float]:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    airflow.cli("dags", "unpause", dag_id)
    run_id = f"occflow_examples__{time.strftime('%Y%m%dT%H%M%S')}"
    airflow.cli("dags", "trigger", dag_id, "--run-id", run_id)
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        airflow.check_alive()
        with create_session() as session:
            state = session.scalar(select(DagRun.state).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
        if state in ("success", "failed"):
            return run_id, str(state), time.monotonic() - started
        time.sleep(3)
    return run_id, "timed out", time.monotonic() - started


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
    if not verified:
        lines.append("   verification did not pass")
    return "\n".join(lines), verified and state == "success"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dags", default=",".join(EXAMPLES), help="comma-separated example DAG ids")
    parser.add_argument("--home", help="AIRFLOW_HOME to use (default: a new temp dir, removed after)")
    parser.add_argument("--parallelism", type=int, default=4, help="LocalExecutor slots (default 4)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per DAG run")
    args = parser.parse_args(argv)
    dag_ids = [d.strip() for d in args.dags.split(",") if d.strip()]
    unknown = sorted(set(dag_ids) - set(EXAMPLES))
    if unknown:
        parser.error(f"unknown example DAGs {unknown}; known: {', '.join(EXAMPLES)}")

    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="occflow-examples-"))
    home.mkdir(parents=True, exist_ok=True)
    env = airflow_env(home, args.parallelism)
    os.environ.update(env)  # before airflow is imported: this process reads the same DB
    airflow = Airflow(home, env)
    print(f"occflow examples: Airflow home {home}, LocalExecutor with {args.parallelism} slots")
    ok = True
    try:
        airflow.start()
        from airflow import settings

        settings.configure_orm()
        wait_for_dags(airflow, dag_ids, timeout=300)
        for dag_id in dag_ids:
            print(f"running {dag_id} ...", flush=True)
            run_id, state, seconds = run_dag(airflow, dag_id, args.timeout)
            text, good = describe(dag_id, state, seconds, task_results(dag_id, run_id))
            print(text, flush=True)
            ok = ok and good
    finally:
        airflow.stop()
        if not args.home and ok:
            shutil.rmtree(home, ignore_errors=True)
        elif not ok:
            print(f"\nlogs kept in {home} (services: *.log, tasks: logs/)")
    print("\nall example DAGs ended with correct data" if ok else "\nsome example DAG did not end correctly")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
