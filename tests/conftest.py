"""Shared test configuration, and the lease store fixtures: a real PostgreSQL server
(scripts/postgres.sh) and SQLite files."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SPECS = Path(os.environ.get("OCCFLOW_SPECS_DIR", REPO.parent / "shared" / "specs"))


def _point_airflow_at_the_test_home() -> None:
    """Airflow fixes its configuration when first imported, and a test folder collected before
    tests/airflow (tests/adversarial, say) may import it: apply tests/airflow/conftest.py's
    environment now, with the home shared through OCCFLOW_TEST_AIRFLOW_HOME so both loads agree."""
    os.environ.setdefault("OCCFLOW_TEST_AIRFLOW_HOME", tempfile.mkdtemp(prefix="occflow-airflow-"))
    spec = importlib.util.spec_from_file_location("_occflow_airflow_env", REPO / "tests" / "airflow" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)


_point_airflow_at_the_test_home()


@pytest.fixture(scope="session")
def specs_dir() -> Path:
    if not (SPECS / "000_67b4bcfc3388519b.txt").exists():
        pytest.skip(f"the specification texts are not at {SPECS} (set OCCFLOW_SPECS_DIR)")
    return SPECS


class PostgresServer:
    """A throwaway PostgreSQL server (scripts/postgres.sh) in its own directory, which a test
    may stop (``mode="immediate"`` is a crash) and start again on the same port."""

    def __init__(self) -> None:
        # Not under pytest's 0700 tmp dirs: the server runs as the `postgres` user when we are root.
        self.directory = tempfile.mkdtemp(prefix="occflow-pg-")
        os.chmod(self.directory, 0o755)
        self.env = {**os.environ, "OCCFLOW_PG_DIR": self.directory}
        self.url = ""

    def _script(self, command: str) -> subprocess.CompletedProcess[str]:
        script = str(REPO / "scripts" / "postgres.sh")
        return subprocess.run(["bash", script, command], env=self.env, capture_output=True, text=True, timeout=300)

    def start(self) -> str:
        done = self._script("start")
        if done.returncode != 0:
            pytest.fail(f"scripts/postgres.sh could not start PostgreSQL:\n{done.stdout}\n{done.stderr}")
        self.url = done.stdout.strip().splitlines()[-1]
        return self.url

    def stop(self, mode: str = "fast") -> None:
        """Stop the server; ``immediate`` kills it without a clean shutdown, like a crash."""
        bins = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
        command = [str(bins[-1] / "pg_ctl"), "-D", f"{self.directory}/data", "-m", mode, "-w", "stop"]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, capture_output=True, timeout=120, check=True)

    def remove(self) -> None:
        self._script("stop")
        shutil.rmtree(self.directory, ignore_errors=True)

    def create_database(self) -> str:
        """A fresh database on the server; its URL.

        The throwaway server runs with ``synchronous_commit=off``, so a crash (an immediate
        stop) may forget the last commits it acknowledged; a lease store needs what production
        servers give, so this database commits synchronously.
        """
        import psycopg2  # optional heavy dependency (the postgres extra)

        name = f"occflow_{uuid.uuid4().hex[:12]}"
        admin = psycopg2.connect(self.url)
        admin.autocommit = True
        with admin.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
            cur.execute(f'ALTER DATABASE "{name}" SET synchronous_commit TO on')
            cur.execute("CHECKPOINT")  # the new database's catalog survives a crash too
        admin.close()
        return f"{self.url.rsplit('/', 1)[0]}/{name}"

    def drop_database(self, url: str) -> None:
        import psycopg2  # optional heavy dependency (the postgres extra)

        admin = psycopg2.connect(self.url)
        admin.autocommit = True
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
        admin.close()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The URL of a throwaway PostgreSQL server, started once per test session."""
    if os.environ.get("OCCFLOW_TEST_PG_URL"):
        yield os.environ["OCCFLOW_TEST_PG_URL"]
        return
    server = PostgresServer()
    try:
        yield server.start()
    finally:
        server.remove()


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh database on the server for one test."""
    import psycopg2  # optional heavy dependency (the postgres extra)

    name = f"occflow_{uuid.uuid4().hex[:12]}"
    admin = psycopg2.connect(pg_server)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    base = pg_server.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture(scope="module")
def restartable_pg() -> Iterator[PostgresServer]:
    """A PostgreSQL server of the module's own, so its tests may stop and restart it."""
    server = PostgresServer()
    server.start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'leases.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest) -> str:
    """Each test using this runs on both backends."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("pg_url"))


# ----------------------------------------------------------------- Spark: one session per run
# The session is expensive (about 8 s to start here), so every Spark test in the run shares it
# (tests/engines, exactly_once, conformance_upstream, cli, adversarial); each test makes its own
# tables under unique names.


def _running_home() -> Path | None:
    """The embedded home of a Spark session another test package already started, if any."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return None
    active = SparkSession.getActiveSession()
    if active is None:
        return None
    uri = active.sparkContext.getConf().get("spark.sql.catalog.lake.uri", None) or ""
    if not uri.startswith("jdbc:sqlite:"):
        return None
    return Path(uri[len("jdbc:sqlite:") :]).parent


@pytest.fixture(scope="session")
def spark_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Warehouse and SQLite catalog of the embedded default, shared with driver processes.

    One Spark application keeps the catalog it started with, so every Spark test in the run must
    agree on it: a running session's home wins, then ``$OCCFLOW_HOME``, then a fresh directory.
    """
    running = _running_home()
    if running is not None:
        return running
    if os.environ.get("OCCFLOW_HOME"):
        return Path(os.environ["OCCFLOW_HOME"])
    return tmp_path_factory.mktemp("occflow-spark")


@pytest.fixture(scope="session")
def iceberg_engine(spark_home: Path) -> Iterator[object]:
    pytest.importorskip("pyspark", reason="Spark tests need pyspark (pip install 'airflow-provider-occflow[spark]')")
    from pyspark.sql import SparkSession

    from occflow.engines.spark import SparkConfig, SparkEngine

    active = SparkSession.getActiveSession()
    engine = SparkEngine(SparkConfig(home=str(spark_home), app_name="occflow-tests"))
    if active is not None:
        engine.attach(active)
    spark = engine.session()
    spark.sparkContext.setLogLevel("ERROR")
    for namespace in ("lake.db", "lake.eo"):
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
    yield engine
    if active is None:
        engine.stop()


def pytest_unconfigure(config: pytest.Config) -> None:
    """At the end of the run: stop a Spark session still up, then silence py4j. Its Java gateway
    logs while the interpreter shuts down, after pytest closed the streams it captured, and the
    test command used to end with a py4j "--- Logging error ---" traceback on every run."""
    import logging

    pyspark_sql = sys.modules.get("pyspark.sql")
    active = None if pyspark_sql is None else pyspark_sql.SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    for name in ("py4j", "py4j.clientserver", "py4j.java_gateway"):
        logging.getLogger(name).disabled = True
