"""A delta-spark write commits only while its lease is live, checked inside the commit (issue 34
item 5, issue 31 item 1): ``occflow.delta.LeaseFencedLogStore`` checks the lease window right
before delta-spark writes the commit file ``_delta_log/<version>.json`` and refuses (no file
written) when the lease is not certainly live.

- In-process (``SparkTarget``, as ``SparkWriteOperator`` runs a write): an append stalls inside
  the engine call (a Python UDF in its source) past its 3 s lease, a DELETE of the same partition
  is admitted and commits, the append resumes. Fenced, its commit is refused and the flow takes
  the lease-loss path; the control, whose lease is kept live, commits; with the fence's jar
  missing the late append lands after the DELETE (what the fence is for).
- spark-submit: the driver's lease window lapses while its INSERT runs (after the driver's own
  check before the statement); nothing lands in ``_delta_log``.

The oracle is Delta's own record: the commit files of ``_delta_log`` (and ``DESCRIBE HISTORY``),
and the rows. The in-process runs are processes of their own (``delta_spark_fence_writer.py``):
this test run's session is the Iceberg one, and a JVM's SQL extensions and log stores are fixed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from occflow.core.operations import parse_operation
from occflow.engines.spark import ApplicationJob, SparkConfig
from occflow.engines.spark.delta_spark import DeltaFormat
from occflow.engines.spark.lease_window import WindowPublisher, window_path
from occflow.engines.spark.settings import SparkConfigError
from occflow.engines.spark.submit import _driver_command, _driver_conf, submit_job
from occflow.engines.spark.submit_fence import (
    AT_COMMIT,
    AT_STATEMENT_START,
    DELTA_SCHEMES,
    FENCED_LOG_STORE,
    JAR_ENV,
    LEASE_CHECKED_AT,
    built_jar,
    in_session,
    plan,
)


def _delta_jars() -> str | None:
    try:
        DeltaFormat().jars()
    except SparkConfigError as exc:
        return str(exc)
    return None


pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(_delta_jars() is not None, reason=f"no delta-spark jars: {_delta_jars()}"),
]

WRITER = Path(__file__).with_name("delta_spark_fence_writer.py")
TIMEOUT = 600  # a JVM per run, on a loaded 2-core machine
FENCE = 7


def _fenced_jar() -> Path:
    jar, why = built_jar()
    assert jar is not None, why  # scripts/bootstrap.sh builds it
    assert plan(SparkConfig(table_format="delta")).at_commit, plan(SparkConfig(table_format="delta")).describe()
    return jar


def _run_writer(home: Path, *scenarios: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(WRITER), str(home), *scenarios], capture_output=True, text=True,
                          timeout=TIMEOUT, env={**os.environ, **(env or {})})
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-6000:]
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT "):])
    return result


def _new(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The commits made since the scenario's table was set up, after checking the older ones stayed."""
    start, after = run["start"]["commits"], run["after"]["commits"]
    assert after[: len(start)] == start
    # DESCRIBE HISTORY and the log's commit files tell the same story.
    assert run["after"]["history"] == [[c["version"], c["operation"]] for c in after]
    return list(after[len(start):])


def _log_names(location: Path) -> list[str]:
    return sorted(p.name for p in (location / "_delta_log").iterdir())


# ------------------------------------------------------------------ in-process (SparkTarget)


@pytest.fixture(scope="module")
def fenced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    _fenced_jar()
    home = tmp_path_factory.mktemp("delta-fenced")
    return home, _run_writer(home, "lapse", "control")


@pytest.mark.slow
def test_an_append_stalled_past_its_lease_does_not_commit_after_the_next_holder(
    fenced: tuple[Path, dict[str, Any]],
) -> None:
    home, result = fenced
    assert result["checked_at"] == AT_COMMIT, result["describe"]
    assert FENCED_LOG_STORE in result["describe"]
    run = result["lapse"]
    assert run["blocked_while_live"]  # the DELETE waits for the append's lease: one at a time
    second = run["second"]["report"]
    assert second["status"] == "committed" and second["tag"][LEASE_CHECKED_AT] == AT_COMMIT, run["second"]

    # Refused inside its commit, not before: the flow's lease-loss path (reschedule), no retry.
    stalled = run["stalled"]
    assert stalled["error_class"] == "AirflowRescheduleException", stalled
    assert stalled["attempts"] == 1 and stalled["lost"] == 0, stalled
    (loss,) = stalled["lease_losses"]
    assert loss["fence"] == run["fence"]
    assert "refused inside its commit" in loss["reason"] and "lease not live at the commit of" in loss["reason"]
    assert f"(fence {run['fence']}) is not certainly live" in loss["reason"], loss

    # Delta's record: one commit since the start, the DELETE's, once the first lease had lapsed;
    # nothing by the append (no commit file, no temporary one, for the next version either).
    start_version = run["start"]["commits"][-1]["version"]
    (new,) = _new(run)
    assert new["version"] == start_version + 1 == second["version"] and new["operation"] == "DELETE"
    assert new["timestamp"] >= run["lapsed_by"] - 1.0
    names = _log_names(home / "lapse")
    assert not [n for n in names if f"{start_version + 2:020d}" in n], names
    assert not [n for n in names if n.endswith(".tmp")], names
    # Partition 'a' deleted once, nothing appended after the DELETE; 'b' untouched.
    assert run["after"]["rows"] == [[4, "b", 4]]


@pytest.mark.slow
def test_an_append_stalled_under_a_live_lease_commits(fenced: tuple[Path, dict[str, Any]]) -> None:
    """Control: the same stall, longer than two TTLs, with the keeper beating: the commit goes
    through (so the refusal above is the lapsed lease's, not the stall's nor the log store's)."""
    _, result = fenced
    run = result["control"]
    writer = run["writer"]
    assert writer["error_class"] is None, writer
    report = writer["report"]
    assert report["status"] == "committed" and report["tag"][LEASE_CHECKED_AT] == AT_COMMIT, writer
    assert not writer["lease_losses"]
    (new,) = _new(run)
    assert new["version"] == report["version"] == run["start"]["commits"][-1]["version"] + 1
    assert new["operation"] == "WRITE"
    assert run["after"]["rows"] == [[1, "a", 1], [2, "a", 2], [3, "a", 3], [4, "b", 4], [10, "a", 10]]


@pytest.mark.slow
def test_without_the_log_store_the_stalled_append_commits_after_the_next_holder(tmp_path: Path) -> None:
    """The same race with the fence's jar missing: the session keeps Delta's own log stores, the
    flow says its check stops at the statement start, and the append lands after the DELETE that
    was admitted once its lease had lapsed (so the first test can fail)."""
    result = _run_writer(tmp_path, "lapse", env={JAR_ENV: str(tmp_path / "not-built.jar")})
    assert result["checked_at"] == AT_STATEMENT_START and "not-built.jar is not built" in result["describe"]
    run = result["lapse"]
    assert run["second"]["report"]["status"] == "committed"
    late = run["stalled"]["report"]
    assert late is not None and late["status"] == "committed", run["stalled"]
    assert late["tag"][LEASE_CHECKED_AT] == AT_STATEMENT_START
    delete, append = _new(run)
    assert delete["operation"] == "DELETE" and append["operation"] == "WRITE"
    assert append["version"] == delete["version"] + 1 == late["version"]
    assert append["timestamp"] > run["lapsed_by"]  # committed by a writer whose lease had lapsed
    assert [10, "a", 10] in run["after"]["rows"]  # its row outlived the DELETE admitted after it


# ------------------------------------------------------------------ what a session is started with


def test_an_in_process_delta_session_wraps_every_schemes_log_store(tmp_path: Path) -> None:
    from occflow.engines.spark.attempt_fence import session_conf

    jar = _fenced_jar()
    config = SparkConfig(table_format="delta", home=str(tmp_path))
    conf = session_conf(config.spark_conf(), config)
    for scheme in DELTA_SCHEMES:
        assert conf[f"spark.delta.logStore.{scheme}.impl"] == FENCED_LOG_STORE
    assert conf["spark.occflow.lease.scope"] == "thread"
    assert "spark.occflow.lease.window" not in conf  # each attempt names its own
    assert not [k for k in conf if ".delegate" in k]  # Delta's default LogStore for each scheme
    assert str(jar) in conf["spark.jars"].split(",")


def test_the_log_stores_a_config_names_become_the_delegates(tmp_path: Path) -> None:
    _fenced_jar()
    config = SparkConfig(table_format="delta", home=str(tmp_path), conf={
        "spark.delta.logStore.s3a.impl": "io.delta.storage.S3DynamoDBLogStore",
        "spark.delta.logStore.oss.impl": "com.example.OssLogStore",
    })
    conf = plan(config).spark_conf(config.spark_conf(), tmp_path / "w.json", FENCE)
    assert conf["spark.delta.logStore.s3a.impl"] == FENCED_LOG_STORE
    assert conf["spark.occflow.delta.logStore.s3a.delegate"] == "io.delta.storage.S3DynamoDBLogStore"
    assert conf["spark.delta.logStore.oss.impl"] == FENCED_LOG_STORE  # a scheme Delta does not know
    assert conf["spark.occflow.delta.logStore.oss.delegate"] == "com.example.OssLogStore"
    # One LogStore for every scheme: Delta refuses it beside scheme settings, so it becomes the fallback delegate.
    single = SparkConfig(table_format="delta", home=str(tmp_path),
                         conf={"spark.delta.logStore.class": "com.example.AnyLogStore"})
    conf = plan(single).spark_conf(single.spark_conf(), tmp_path / "w.json", FENCE)
    assert "spark.delta.logStore.class" not in conf
    assert conf["spark.occflow.delta.logStore.delegate"] == "com.example.AnyLogStore"
    assert conf["spark.delta.logStore.file.impl"] == FENCED_LOG_STORE


def test_a_delta_driver_gets_the_log_store_and_its_window(tmp_path: Path) -> None:
    jar = _fenced_jar()
    config = SparkConfig(table_format="delta", home=str(tmp_path))
    window = tmp_path / "o.json.lease.json"
    command = _driver_command("spark-submit", config, (), tmp_path / "o.json", "lake.db.t",
                              parse_operation("insert_into"), None, None, (window, FENCE))
    assert command[command.index("--lease-window") + 1] == str(window.absolute())
    conf = _driver_conf(config, "lake.db.t", (window, FENCE))  # what the driver's properties file holds
    assert conf["spark.delta.logStore.file.impl"] == FENCED_LOG_STORE
    assert conf["spark.occflow.lease.window"] == str(window.absolute())
    assert conf["spark.occflow.lease.fence"] == str(FENCE)
    assert "spark.occflow.lease.scope" not in conf  # the session's own window
    assert conf["spark.jars"].split(",")[-1] == str(jar)
    assert in_session(conf, config, window, FENCE).checked_at == AT_COMMIT
    assert in_session(conf, config, window, FENCE + 1).checked_at == AT_STATEMENT_START


def test_without_the_jar_a_delta_write_says_its_check_stops_at_the_statement_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(JAR_ENV, str(tmp_path / "not-built.jar"))
    config = SparkConfig(table_format="delta", home=str(tmp_path))
    found = plan(config)
    assert found.checked_at == AT_STATEMENT_START and "not-built.jar is not built" in found.describe()
    assert found.spark_conf(config.spark_conf(), tmp_path / "w.json", FENCE) == config.spark_conf()


# ------------------------------------------------------------------ a spark-submit driver

APP = """
import pathlib, sys, time
from pyspark.sql import SparkSession
from pyspark.sql.types import IntegerType

spark = SparkSession.builder.getOrCreate()
table, location, reached, release = sys.argv[1:5]
spark.sql(f"CREATE TABLE {table} (id BIGINT, ds STRING, v INT) USING delta PARTITIONED BY (ds) LOCATION '{location}'")
spark.sql(f"INSERT INTO {table} VALUES (1, 'a', 1), (4, 'b', 4)")

def hold(value):  # the INSERT's only task waits here: the statement has started, not committed
    pathlib.Path(reached).touch()
    give_up = time.time() + 180
    while not pathlib.Path(release).exists() and time.time() < give_up:
        time.sleep(0.05)
    return value

spark.udf.register("occflow_hold", hold, IntegerType())
spark.sql(f"INSERT INTO {table} SELECT 92L, 'a', occflow_hold(92)")
"""


@pytest.mark.slow
def test_a_driver_whose_lease_lapses_while_its_insert_runs_writes_no_commit_file(tmp_path: Path) -> None:
    """The driver checks its window right before the application's statements (live), the INSERT
    starts and holds inside the engine call, the task stops confirming the lease, the window goes
    stale, the INSERT resumes: the lease-fenced log store refuses the commit file."""
    _fenced_jar()
    location = tmp_path / "events"
    table = "default.events"
    app = tmp_path / "stalled_insert.py"
    app.write_text(APP)
    reached, release = tmp_path / "reached", tmp_path / "release"
    path = tmp_path / "outcome.json"
    window = window_path(path)
    lapsed: list[float] = []

    def confirmed() -> float:
        if not lapsed and reached.exists():
            lapsed.append(time.time())  # the keeper stops confirming once the INSERT runs
        return lapsed[0] - 5.0 if lapsed else time.time() + 30

    config = SparkConfig(table_format="delta", home=str(tmp_path), app_name="occflow-delta-lease-window-test",
                         conf={"spark.driver.memory": "768m"})
    with WindowPublisher(window, FENCE, confirmed, interval=0.1):
        job = submit_job(ApplicationJob(str(app), (table, str(location), str(reached), str(release))), table, path,
                         "insert_into", config, lease_window=(window, FENCE))
        deadline = time.monotonic() + TIMEOUT
        while not reached.exists() and job.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        while not (json.loads(window.read_text())["live_until"] < time.time() - 1) and time.monotonic() < deadline:
            time.sleep(0.1)  # the window file the driver reads is stale now
        release.touch()
        outcome = job.wait(timeout=TIMEOUT)
    assert reached.exists(), job.log_tail()
    assert not outcome.committed, job.log_tail()
    assert outcome.tag[LEASE_CHECKED_AT] == AT_COMMIT, job.log_tail()
    refused = outcome.lease_refused
    assert refused is not None and refused.at == AT_COMMIT, outcome  # its check before the statement passed
    assert f"(fence {FENCE}) is not certainly live" in refused.reason and refused.fence == FENCE, refused
    assert "lease not live at the commit of" in refused.reason, refused
    # Delta's record: the CREATE and the first INSERT (under the live lease), nothing for version 2.
    names = _log_names(location)
    assert [n for n in names if n.endswith(".json") and n[:20].isdigit()] == [f"{v:020d}.json" for v in (0, 1)], names
    assert not [n for n in names if f"{2:020d}" in n or n.endswith(".tmp")], names
