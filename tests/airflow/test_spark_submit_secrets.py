"""Secrets in a Spark connection stay off every command line, out of the task log and the view.

A real ``SparkSubmitWriteOperator`` run by ``dag.test()`` (so spark-submit, its JVM and the
Python driver are children of this process) writes an Iceberg table through a connection whose
extra ``conf`` (stored as JSON text, as Airflow's form stores it) carries two recognisable
secrets: an S3 secret key with the characters a properties file escapes, and a catalog token.
While the driver runs, a watcher reads ``/proc/<pid>/cmdline`` of every descendant of this
process and the mode of the driver's conf and config files. The oracles: the cmdlines (none
holds a secret; spark-submit's JVM and the Python driver were seen), the files' modes (0600),
the driver's own session (the application writes the SHA-256 of the secret key as its Spark
conf holds it: the properties file carried it exactly), the command the job's state file keeps,
the task log captured from this process, Airflow's secrets masker (``dag.test()`` prints
unmasked, a real task log is masked: the masker must know the values), and the "Table writes" page.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

DAG_ID = "submit_secrets"
CONN_ID = "occflow_spark_secrets"
MARK = uuid.uuid4().hex[:12]
#: What must never be on a command line, in the log or in the page.
SECRET_KEY = f"occflow-s3cr3t-{MARK} a=b:c#d!e\\f \u00e9\u2603"
TOKEN = f"occflow-t0ken-{MARK}"

APP = '''
import hashlib, pathlib
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
seen = spark.conf.get("spark.hadoop.fs.s3a.secret.key")
pathlib.Path({digest!r}).write_text(hashlib.sha256(seen.encode()).hexdigest())
spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")
spark.sql("CREATE TABLE IF NOT EXISTS lake.db.secretive (id BIGINT) USING iceberg")
spark.sql("INSERT INTO lake.db.secretive VALUES (1), (2)")
'''

DAG = '''
from pathlib import Path
import pendulum
from airflow.sdk import DAG, task
from occflow.hooks.spark import OccflowSparkHook
from occflow.operators.spark_submit import SparkSubmitWriteOperator

with DAG("{dag_id}", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    write = SparkSubmitWriteOperator(
        task_id="write_secretly", table="db.secretive", table_format="iceberg", operation="insert_into",
        job=Path({app!r}), occflow_spark_conn_id="{conn_id}", poll_interval=0.2,
    )

    @task
    def read_conf_again():
        # Another task reading the connection: its secrets reach the masker there too.
        OccflowSparkHook("{conn_id}").session_config()

    write >> read_conf_again()
'''


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rpartition(")")[2].split()[1])
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        children = [p for p, parent in parents.items() if parent == pid]
        found += children
        todo += children
    return found


class Watcher(threading.Thread):
    """Reads every descendant's command line, and the driver files' modes, until stopped."""

    def __init__(self, submit_dir: Path) -> None:
        super().__init__(daemon=True)
        self.submit_dir = submit_dir
        self.cmdlines: set[bytes] = set()
        self.modes: dict[str, set[int]] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for pid in _descendants(os.getpid()):
                with contextlib.suppress(OSError):  # gone between the listing and the read
                    self.cmdlines.add(Path(f"/proc/{pid}/cmdline").read_bytes())
            for pattern in ("*.spark.properties", "*.config"):
                for path in self.submit_dir.rglob(pattern):
                    with contextlib.suppress(OSError):  # removed once the driver is done
                        self.modes.setdefault(pattern, set()).add(path.stat().st_mode & 0o777)
            time.sleep(0.05)


@pytest.fixture
def secret_run(airflow_home, tmp_path, monkeypatch, capfd):
    submit_dir, home = tmp_path / "outcomes", tmp_path / "home"
    conf = {"spark.hadoop.fs.s3a.secret.key": SECRET_KEY, "spark.sql.catalog.lake.token": TOKEN,
            "spark.driver.memory": "768m",
            # A catalog with view support says "not found" for a table the job creates (the default
            # one answers that lookup with UnsupportedOperationException).
            "spark.sql.catalog.lake.jdbc.schema-version": "V1"}
    extra = {"table_format": "iceberg", "home": str(home), "conf": json.dumps(conf)}
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}",
                       json.dumps({"conn_type": "occflow_spark", "host": "local[1]", "extra": extra}))
    monkeypatch.setenv("OCCFLOW_SUBMIT_DIR", str(submit_dir))
    monkeypatch.setenv("OCCFLOW_LEASE_STORE_URL", f"sqlite:///{tmp_path / 'leases.db'}")
    monkeypatch.setenv("OCCFLOW_LEASE_HISTORY", "1")
    from occflow.engines.spark import SparkConfig

    SparkConfig(home=str(home)).table_format_spec().prepare()  # the catalog's database, as a deployment has it
    digest = tmp_path / "digest.txt"
    app = tmp_path / "app.py"
    app.write_text(APP.format(digest=str(digest)))
    from airflow.dag_processing.dagbag import DagBag

    dag_file = airflow_home / "dags" / "test_spark_submit_secrets_dag.py"
    dag_file.write_text(DAG.format(dag_id=DAG_ID, app=str(app), conn_id=CONN_ID))
    bag = DagBag(dag_folder=str(dag_file))
    assert not bag.import_errors, bag.import_errors
    watcher = Watcher(submit_dir)
    capfd.readouterr()
    watcher.start()
    try:
        run = bag.dags[DAG_ID].test()
    finally:
        watcher.done.set()
        watcher.join()
    out = capfd.readouterr()
    return {"run": run, "watcher": watcher, "log": out.out + out.err, "digest": digest, "submit_dir": submit_dir}


def test_spark_connection_secrets_are_on_no_command_line_in_no_log_and_not_in_the_view(secret_run, stored_xcom):
    run, watcher, log = secret_run["run"], secret_run["watcher"], secret_run["log"]
    report = stored_xcom(DAG_ID, run.run_id, "write_secretly", "occflow_report")
    assert str(getattr(run.state, "value", run.state)) == "success", (json.dumps(report)[:3000], log[-6000:])
    assert report["committed"] and report["rows"] == 2, report
    # The driver's session holds the secret exactly as the connection gave it: it came in the file.
    assert secret_run["digest"].read_text() == hashlib.sha256(SECRET_KEY.encode()).hexdigest()

    # No command line of any process this run started holds a secret, and the watcher saw them all.
    cmdlines = [c.replace(b"\0", b" ").decode(errors="replace") for c in watcher.cmdlines]
    assert [c for c in cmdlines if MARK in c] == []
    # The driver's SparkSubmit JVM (an in-process session an earlier test left running in this
    # process is a SparkSubmit JVM too: it runs pyspark-shell, not the driver).
    jvm = [c for c in cmdlines if "org.apache.spark.deploy.SparkSubmit" in c and "driver.py" in c]
    driver = [c for c in cmdlines if "driver.py" in c and "--outcome" in c and "SparkSubmit" not in c]
    assert jvm and driver, cmdlines
    assert "--properties-file" in jvm[0] and "--conf " not in jvm[0]
    assert "--config @" in driver[-1]
    # The conf and config files were private while the driver ran, and are gone now.
    assert watcher.modes == {"*.spark.properties": {0o600}, "*.config": {0o600}}, watcher.modes
    left = [p.name for p in secret_run["submit_dir"].rglob("*") if p.name.endswith((".spark.properties", ".config"))]
    assert left == []

    # The command the operator logs, as the job's state file keeps it: the files, no setting.
    [state] = list(secret_run["submit_dir"].rglob("*.job.json"))
    command = " ".join(json.loads(state.read_text())["command"])
    assert "--properties-file" in command and "--config @" in command and MARK not in command
    # The task log (captured from this process: dag.test() runs the tasks here) holds no secret, and
    # Airflow's masker, which every real task log goes through, hides both: Airflow's own rule for
    # connection extras misses a ``conf`` given as JSON text.
    assert MARK not in log, [line for line in log.splitlines() if MARK in line]
    from airflow.sdk._shared.secrets_masker import redact

    said = redact(f"conf: {SECRET_KEY} and {TOKEN}")
    assert MARK not in said and said.count("***") == 2, said

    from airflow.api_fastapi.app import create_auth_manager, get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    create_auth_manager().init()
    from occflow.plugins.app import create_app

    jwt = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="v", role="viewer"))
    with TestClient(create_app()) as client:
        page = client.get("/", headers={"Authorization": f"Bearer {jwt}"}, params={"dag_id": DAG_ID})
    assert page.status_code == 200 and 'data-task="write_secretly"' in page.text
    assert MARK not in page.text
