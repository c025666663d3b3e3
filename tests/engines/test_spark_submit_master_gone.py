"""A spark-submit driver whose standalone cluster goes away is stopped, not waited on forever
(``SubmittedJob.wait(master_gone_after=...)``).

Real pieces only: a standalone master and worker (``scripts/deployed/services.py``), a driver in
client mode whose job sleeps inside a Spark action on the cluster's executor; then the master and
worker are stopped under it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from occflow.engines.spark import JobContext, SparkConfig, SparkEngine
from occflow.engines.spark.jobs import CallableJob
from occflow.engines.spark.submit import SubmittedJob, submit_job

SERVICES = Path(__file__).resolve().parents[2] / "scripts" / "deployed"
pytestmark = [pytest.mark.spark, pytest.mark.slow]

START_TIMEOUT = 420  # two JVMs for the cluster, one for the driver, one executor: a loaded 2-core box


def sleep_inside_an_action(spark: Any, context: JobContext) -> None:
    """A write that runs long on the cluster: one task that sleeps on the executor."""
    spark.sparkContext.parallelize([0], 1).foreach(lambda _: time.sleep(120))
    spark.sql(f"INSERT INTO {context.table} VALUES (99, 'z', 1)")


def _group_members(pgid: int) -> dict[int, str]:
    """The processes of group ``pgid`` still there (zombies too), each with its state and command."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            if int(fields[2]) == pgid:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found[int(entry.name)] = f"[{fields[0]}, parent {fields[1]}] {command[:300]}"
    return found


def _processes_naming(text: str) -> list[int]:
    """Pids whose command line holds ``text`` (the driver's JVM and its Python both name the outcome)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def _services() -> Any:
    """``scripts/deployed/services.py``, imported here only: the driver imports this module for its
    job, and there the scripts are not on the path."""
    if str(SERVICES) not in sys.path:
        sys.path.insert(0, str(SERVICES))
    import services

    return services


def _executor_running(worker_uis: list[str], app_id: str) -> bool:
    services = _services()
    with contextlib.suppress(OSError, ValueError):
        executors = [ex for ui in worker_uis for ex in services.get_json(ui + "/json/")["executors"]]
        return any(ex.get("appid") == app_id for ex in executors)
    return False


def test_driver_whose_master_is_gone_is_stopped_with_a_master_gone_outcome(
    iceberg_engine: SparkEngine, iceberg_table: str, spark_home: Path, tmp_path: Path
) -> None:
    services = _services()
    cluster = services.SparkCluster(tmp_path / "cluster", workers=1, cores=1, memory="1g")
    cluster.home.mkdir()
    job: SubmittedJob | None = None
    try:
        cluster.start()
        config = SparkConfig(
            home=str(spark_home), master=cluster.master_url, app_name="occflow-master-gone-test",
            conf={"spark.driver.memory": "512m", "spark.executor.memory": "512m", "spark.cores.max": "1",
                  "spark.driver.host": "127.0.0.1"},
        )
        job = submit_job(CallableJob(sleep_inside_an_action), iceberg_table, tmp_path / "outcome.json",
                         "insert_into", config, py_files=[__file__], env={"SPARK_LOCAL_IP": "127.0.0.1"})
        deadline = time.monotonic() + START_TIMEOUT
        uis = cluster.worker_uis
        while not ((app := job.application()) and _executor_running(uis, app["application_id"])):
            assert job.poll() is None, f"the driver ended before its task ran:\n{job.log_tail()}"
            assert time.monotonic() < deadline, f"no executor after {START_TIMEOUT}s:\n{job.log_tail()}"
            time.sleep(1)
        assert app is not None and app["master"] == cluster.master_url
        time.sleep(3)  # the task is sleeping on the executor now

        services.stop_all(cluster.procs, grace=20)  # the whole cluster goes away under the running driver
        began = time.monotonic()
        outcome = job.wait(timeout=120, master_gone_after=5)
        took = time.monotonic() - began
        assert took < 60, f"wait took {took:.0f}s to notice the master was gone"
        assert not outcome.committed
        assert outcome.tag["master_gone"] == cluster.master_url, outcome.tag
        assert outcome.error is not None
        assert outcome.error.exception_class == "occflow.engines.spark.submit.MasterGone"
        assert cluster.master_url in outcome.error.messages[0]

        # The driver (spark-submit's JVM and the Python process it started) is gone with its group.
        assert job.join(timeout=60), f"driver pid {job.pid} still runs after master_gone:\n{job.log_tail()}"
        deadline = time.monotonic() + 30
        while _group_members(job.pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _group_members(job.pid) == {}, f"the driver's process group {job.pid} has members left"
        with pytest.raises(ProcessLookupError):
            os.killpg(job.pid, 0)
        assert _processes_naming(job.outcome_path) == []
        # Nothing committed: the table has only the fixture's rows.
        spark = iceberg_engine.session()
        assert spark.sql(f"SELECT count(*) FROM {iceberg_table} WHERE ds = 'z'").collect()[0][0] == 0
    finally:
        if job is not None and _processes_naming(job.outcome_path):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.pid, signal.SIGKILL)  # a driver left over by a failed assertion
        services.stop_all(cluster.procs, grace=20)
