"""The processes of the deployed mode, each started by us and stopped by its PID (process group).

- ``Postgres``: ``scripts/postgres.sh`` with its own directory; two databases: ``airflow`` (the
  metadata DB) and ``occflow`` (the lease store and Iceberg's JDBC catalog).
- ``Redis``: ``redis-server`` on a free loopback port, no persistence (the Celery broker).
- ``SparkCluster``: a standalone master and two workers, started with PySpark's ``spark-class``.
- ``CeleryAirflow``: scheduler, dag-processor, api-server, triggerer and two ``airflow celery
  worker`` processes, each with its own ``--concurrency`` and its own host name.

Every process runs in a session of its own (``start_new_session``) so that stopping it stops
what it started (the JVM behind ``spark-class``, Celery's pool processes) and nothing else.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, check: Any, timeout: float, procs: Sequence[Process] = (), interval: float = 0.5) -> None:
    """Poll ``check()`` until it is true; fail early if one of ``procs`` died, late after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            proc.check_alive()
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - not up yet (connection refused and the like)
            pass
        time.sleep(interval)
    raise TimeoutError(f"{what} was not up after {timeout:.0f}s")


@dataclass
class Process:
    """One service process (and its process group): its log file and how to stop it."""

    name: str
    command: list[str]
    log: Path
    env: Mapping[str, str]
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        handle = open(self.log, "ab")  # noqa: SIM115 - the child owns it; closed when we stop it
        self.popen = subprocess.Popen(
            self.command, env=dict(self.env), stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )
        handle.close()
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def check_alive(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.name} (pid {self.pid}) exited with {self.popen.returncode}:\n{tail}")

    def signal(self, sig: int) -> None:
        if self.popen is not None and self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)

    def wait(self, timeout: float) -> bool:
        if self.popen is None:
            return True
        try:
            self.popen.wait(timeout=max(timeout, 0.1))
        except subprocess.TimeoutExpired:
            return False
        return True


def stop_all(procs: Sequence[Process], grace: float = 30.0) -> list[str]:
    """SIGTERM each process group, wait up to ``grace`` seconds, SIGKILL the ones still there.
    Returns the names that had to be killed."""
    for proc in procs:
        proc.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    killed = []
    for proc in procs:
        if not proc.wait(deadline - time.monotonic()):
            proc.signal(signal.SIGKILL)
            proc.wait(5)
            killed.append(proc.name)
    # A group member that outlived its leader (a JVM child, a Celery pool process) goes too.
    for proc in procs:
        if proc.popen is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
    return killed


# --------------------------------------------------------------------------------- PostgreSQL


@dataclass
class Postgres:
    """A throwaway server from ``scripts/postgres.sh`` in ``directory`` (stopped with ``pg_ctl``)."""

    directory: Path
    url: str = ""

    def _run(self, action: str) -> str:
        env = {**os.environ, "OCCFLOW_PG_DIR": str(self.directory)}
        done = subprocess.run(["bash", str(REPO / "scripts" / "postgres.sh"), action], env=env,
                              capture_output=True, text=True, timeout=180)
        if done.returncode != 0:
            raise RuntimeError(f"scripts/postgres.sh {action} failed:\n{done.stderr[-3000:]}")
        return done.stdout.strip()

    def start(self, databases: Sequence[str]) -> None:
        self.url = self._run("start")  # postgresql://occflow@127.0.0.1:PORT/postgres
        import psycopg2  # the Airflow metadata DB driver, in .venv

        conn = psycopg2.connect(self.url)
        conn.autocommit = True
        with conn.cursor() as cur:
            for name in databases:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cur.fetchone() is None:
                    cur.execute(f'CREATE DATABASE "{name}"')  # names are ours: airflow, occflow
        conn.close()

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/", 1)[0])

    def database_url(self, name: str, scheme: str = "postgresql") -> str:
        return f"{scheme}://occflow@127.0.0.1:{self.port}/{name}"

    def jdbc_url(self, name: str) -> str:
        return f"jdbc:postgresql://127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        """Stop the server in ``directory`` if one runs there: also one whose start was
        interrupted before it gave its URL (``postgres.sh stop`` does nothing when none runs)."""
        if self.directory.exists():
            self._run("stop")


# --------------------------------------------------------------------------------- Redis


def start_redis(home: Path) -> tuple[Process, str]:
    port = free_port()
    proc = Process(
        "redis",
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(home)],
        home / "redis.log",
        dict(os.environ),
    ).start()
    url = f"redis://127.0.0.1:{port}/0"

    def ping() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")

    wait_for("redis", ping, 30, [proc])
    return proc, url


# --------------------------------------------------------------------------------- Spark


def spark_home() -> Path:
    import pyspark  # the PySpark package carries the standalone master and worker

    return Path(pyspark.__file__).parent


def get_json(url: str, timeout: float = 5) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - our own loopback UI
        return json.loads(response.read().decode())


@dataclass
class SparkCluster:
    """A standalone master and ``workers`` workers on loopback, each worker with ``cores`` and
    ``memory``. The ports are chosen up front, so the master's URL can go into the Airflow
    connection while the cluster starts."""

    home: Path
    workers: int = 2
    cores: int = 2
    memory: str = "2g"
    procs: list[Process] = field(default_factory=list)
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    worker_uis: list[str] = field(default_factory=list)
    up: bool = False

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def master_ui(self) -> str:
        return f"http://127.0.0.1:{self.ui_port}"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_NO_DAEMONIZE": "1",
            "PYSPARK_PYTHON": sys.executable,
        }

    def start(self) -> None:
        spark_class = str(spark_home() / "bin" / "spark-class")
        env = self.env()
        master = Process("spark-master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                          "--port", str(self.port), "--webui-port", str(self.ui_port)],
                         self.home / "spark-master.log", env).start()
        self.procs.append(master)
        wait_for("the Spark master", lambda: get_json(self.master_ui + "/json/")["status"] == "ALIVE", 180, [master])
        for n in range(1, self.workers + 1):
            wui = free_port()
            work = self.home / f"spark-worker-{n}"
            work.mkdir(parents=True, exist_ok=True)
            self.procs.append(Process(
                f"spark-worker-{n}",
                [spark_class, "org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1",
                 "--cores", str(self.cores), "--memory", self.memory, "--webui-port", str(wui), "--work-dir", str(work)],
                self.home / f"spark-worker-{n}.log", env,
            ).start())
            self.worker_uis.append(f"http://127.0.0.1:{wui}")
        wait_for(f"{self.workers} Spark workers",
                 lambda: sum(w["state"] == "ALIVE" for w in get_json(self.master_ui + "/json/")["workers"]) >= self.workers,
                 180, self.procs)
        self.up = True

    def evidence(self) -> dict[str, Any]:
        """What the master and each worker report: applications, and the executors each worker ran."""
        out: dict[str, Any] = {"master": get_json(self.master_ui + "/json/"), "workers": []}
        for url in self.worker_uis:
            try:
                out["workers"].append(get_json(url + "/json/"))
            except OSError as exc:
                out["workers"].append({"error": str(exc), "url": url})
        return out


# --------------------------------------------------------------------------------- Airflow on Celery

AIRFLOW_SERVICES = ("scheduler", "dag-processor", "api-server", "triggerer")


@dataclass
class CeleryAirflow:
    """Airflow with the CeleryExecutor: the four services plus one Celery worker per entry of
    ``concurrency`` (its ``--concurrency``), each with its own host name."""

    home: Path
    env: dict[str, str]
    concurrency: Sequence[int] = (2, 2)
    procs: list[Process] = field(default_factory=list)

    @property
    def bin(self) -> str:
        return str(Path(sys.executable).with_name("airflow"))

    def cli(self, *args: str, timeout: float = 600) -> str:
        done = subprocess.run([self.bin, *args], env={**os.environ, **self.env}, capture_output=True, text=True,
                              timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"airflow {' '.join(args)} failed:\n{done.stderr[-3000:]}")
        return done.stdout

    def worker_names(self) -> list[str]:
        return [f"occflow-worker-{n}" for n in range(1, len(self.concurrency) + 1)]

    def start(self) -> None:
        self.cli("db", "migrate")
        base = {**os.environ, **self.env}
        for name in AIRFLOW_SERVICES:
            extra = {"AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port())} if name == "triggerer" else {}
            self.procs.append(Process(name, [self.bin, name], self.home / f"{name}.log", {**base, **extra}).start())
        for name, slots in zip(self.worker_names(), self.concurrency, strict=False):
            env = {
                **base,
                # The task's host name (TaskInstance.hostname) is this worker's name, so a
                # reader can tell the two workers apart although they share this machine.
                "OCCFLOW_DEPLOYED_HOSTNAME": name,
                "AIRFLOW__CORE__HOSTNAME_CALLABLE": "deployed_hostname.hostname",
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            }
            self.procs.append(Process(
                name,
                [self.bin, "celery", "worker", "--concurrency", str(slots), "--celery-hostname", f"{name}@%h",
                 "--without-gossip", "--without-mingle"],
                self.home / f"{name}.log", env,
            ).start())

    def check_alive(self) -> None:
        for proc in self.procs:
            proc.check_alive()


def airflow_env(home: Path, dags: Path, pg: Postgres, broker: str, api_port: int) -> dict[str, str]:
    """The settings every Airflow process of the deployed mode shares."""
    metadata = pg.database_url("airflow", "postgresql+psycopg2")
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": "16",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": metadata,
        # No async PostgreSQL driver (asyncpg) is installed; Airflow uses the async engine only for
        # multi-team deployments and the public API's wait-for-run endpoint, neither used here.
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": "",
        "AIRFLOW__CELERY__BROKER_URL": broker,
        "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + pg.database_url("airflow", "postgresql+psycopg2"),
        "AIRFLOW__CELERY__WORKER_PREFETCH_MULTIPLIER": "1",
        "AIRFLOW__CELERY__OPERATION_TIMEOUT": "10",
        "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT": "21600",
        "AIRFLOW__API__PORT": str(api_port),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),  # 64+ bytes: PyJWT warns below that for HS512
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(dags), str(REPO / "dags_example"), str(HERE),
                                                    os.environ.get("PYTHONPATH", "")])),
    }
