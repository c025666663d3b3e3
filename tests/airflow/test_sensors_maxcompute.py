"""TableCommitSensor on MaxCompute tables: ID and time versions, compactions told apart.

MaxCompute is a remote service that cannot run here: every test reads the table's commits from
``occflow.engines.maxcompute.StandInProject``, a stand-in behind PyODPS's client interface that
commits through occflow's reference engine with the table's MaxCompute profile. The commits are
real commits of that engine, made while the sensor waits (from another thread): a MINOR COMPACT
(an ID version, no time version, no data change: spec 001) and an INSERT INTO (both versions).
The oracle for which commit a sensor must return is the stand-in's own history, read after the
run, and the instance ids the writer thread recorded.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from occflow.core.errors import InvalidDeclarationError
from occflow.engines.maxcompute import StandInProject
from occflow.sensors.commit import TableCommitSensor
from occflow.triggers.commits import CommitCondition, maxcompute_location
from occflow.triggers.table import TableCommitTrigger

pytestmark = pytest.mark.airflow

TABLE = "mc.orders"
DAY = "ds = '2024-01-01'"
INSERT = f"INSERT INTO {TABLE} PARTITION ({DAY}) SELECT id, amount FROM mc.staged"
COMPACT = f"ALTER TABLE {TABLE} PARTITION ({DAY}) COMPACT minor"


def _project(path: Path) -> StandInProject:
    """A Delta table (transactional, primary key) with one seed commit: ID version 1."""
    project = StandInProject(path, job_seconds={"*": 3600})  # jobs end when finish() ends them
    project.create_table(TABLE, partition_columns=["ds"], partitions=[{"ds": "2024-01-01"}, {"ds": "2024-01-02"}],
                         transactional=True, primary_key=["id"])
    _commit(project, INSERT)
    assert [c.version for c in project.history(TABLE)] == [1]
    return project


def _commit(project: StandInProject, sql: str) -> str:
    job = project.run_sql(sql)
    project.finish(job.id)
    job.wait_for_success()
    return str(job.id)


def _later(path: Path, made: dict[str, str], pause: float) -> threading.Thread:
    """Another writer: a compaction, then (after ``pause``, while the sensor sees only the
    compaction) a data commit."""

    def run() -> None:
        project = StandInProject(path)
        time.sleep(pause)
        made["compaction"] = _commit(project, COMPACT)
        time.sleep(pause)
        made["insert"] = _commit(project, INSERT)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_compaction_does_not_satisfy_a_wait_for_a_data_change_but_does_for_any_commit(run_dag, tmp_path):
    path = tmp_path / "project.bin"
    seed_time = _project(path).history(TABLE)[0].time_version
    run = run_dag(
        f'''
import os, threading, time
import pendulum
from airflow.sdk import DAG
from occflow.engines.maxcompute import StandInProject
from occflow.sensors.commit import TableCommitSensor

def commit_later():
    project = StandInProject({str(path)!r})
    time.sleep(2)
    job = project.run_sql({COMPACT!r}); project.finish(job.id); job.wait_for_success()
    time.sleep(3)
    job = project.run_sql({INSERT!r}); project.finish(job.id); job.wait_for_success()

# A writer outside Airflow commits a compaction, then an INSERT, while the sensors wait (once,
# however often the file is parsed).
if not os.path.exists({str(tmp_path / "writer.started")!r}):
    open({str(tmp_path / "writer.started")!r}, "w").close()
    threading.Thread(target=commit_later, daemon=True).start()

with DAG("maxcompute_commit_sensor", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    TableCommitSensor(task_id="any_commit", table_format="maxcompute", table="{TABLE}", standin={str(path)!r},
                      min_id_version=2, data_changes_only=False, poll_interval=0.5)
    TableCommitSensor(task_id="data_change", table_format="maxcompute", table="{TABLE}", standin={str(path)!r},
                      min_id_version=2, partition={{"ds": "2024-01-01"}}, poll_interval=0.5)
    TableCommitSensor(task_id="time_version", table_format="maxcompute", table="{TABLE}", standin={str(path)!r},
                      min_time_version={seed_time!r} + 1e-6, data_changes_only=False, poll_interval=0.5)
'''
    )
    assert run.state == "success"
    history = StandInProject(path).history(TABLE)
    compaction, insert = history[1], history[2]
    assert (compaction.operation.value, compaction.time_version) == ("minor_compact", None)
    assert (insert.operation.value, insert.version) == ("insert_into", 3) and insert.time_version is not None
    any_commit = run.task("any_commit").xcom["return_value"]
    assert (any_commit["version"], any_commit["data_change"]) == (2, False)
    assert any_commit["metadata"]["maxcompute.instance_id"] == compaction.txn_id
    for task_id in ("data_change", "time_version"):  # the compaction has no time version: only the INSERT
        found = run.task(task_id).xcom["return_value"]
        assert (found["version"], found["operation"], found["data_change"]) == (3, "insert_into", True), task_id
        assert found["metadata"]["maxcompute.instance_id"] == insert.txn_id
        assert found["time_version"] == insert.time_version


def test_poke_is_false_after_the_compaction_and_true_after_the_data_commit(tmp_path):
    path = tmp_path / "project.bin"
    _project(path)
    sensor = TableCommitSensor(task_id="wait", table_format="maxcompute", table=TABLE, standin=str(path),
                               min_id_version=2, deferrable=False)
    assert sensor.poke({}) is False
    _commit(StandInProject(path), COMPACT)
    assert [c.version for c in StandInProject(path).history(TABLE)] == [1, 2]
    assert sensor.poke({}) is False  # version 2 exists, but it changed no data
    _commit(StandInProject(path), INSERT)
    assert sensor.poke({}) is True


def test_the_trigger_fires_on_the_data_commit_another_thread_makes(tmp_path):
    path = tmp_path / "project.bin"
    _project(path)
    made: dict[str, str] = {}
    condition = CommitCondition(min_version=2, data_changes_only=True)
    trigger = TableCommitTrigger("maxcompute", maxcompute_location(TABLE, standin=str(path)), condition.to_dict(), 0.2)

    async def first_event() -> Any:
        async for event in trigger.run():
            return event.payload
        return None

    writer = _later(path, made, pause=0.6)
    payload = asyncio.run(asyncio.wait_for(first_event(), timeout=30))
    writer.join(5)
    assert payload["commit"]["metadata"]["maxcompute.instance_id"] == made["insert"] != made["compaction"]
    assert payload["commit"]["version"] == 3


def test_the_sensor_waits_for_exactly_the_commit_its_upstream_write_made(run_dag, tmp_path):
    path = tmp_path / "project.bin"
    _project(path)
    StandInProject(path, job_seconds={"*": 0.05})  # the writes' jobs end on their own
    run = run_dag(
        f'''
import pendulum
from airflow.sdk import DAG
from occflow.operators.maxcompute import MaxComputeWriteOperator
from occflow.sensors.commit import TableCommitSensor

with DAG("maxcompute_commit_sensor_upstream", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    write = MaxComputeWriteOperator(task_id="append_day", table="{TABLE}", sql={INSERT!r}, standin={str(path)!r},
                                    poll_interval=0.05, admission=False)
    compact = MaxComputeWriteOperator(task_id="compact_day", table="{TABLE}", sql={COMPACT!r},
                                      standin={str(path)!r}, poll_interval=0.05, admission=False)
    wait_write = TableCommitSensor(task_id="wait_write", table_format="maxcompute", table="{TABLE}",
                                   standin={str(path)!r}, upstream_task_id="append_day", poll_interval=0.2)
    wait_compact = TableCommitSensor(task_id="wait_compact", table_format="maxcompute", table="{TABLE}",
                                     standin={str(path)!r}, upstream_task_id="compact_day", poll_interval=0.2,
                                     data_changes_only=False)
    refused = TableCommitSensor(task_id="refused", table_format="maxcompute", table="{TABLE}",
                                standin={str(path)!r}, upstream_task_id="compact_day", poll_interval=0.2)
    write >> compact >> [wait_write, wait_compact, refused]
'''
    )
    assert run.task("append_day").state == "success" and run.task("compact_day").state == "success"
    history = {c.txn_id: c for c in StandInProject(path).history(TABLE)}
    for sensor, writer in (("wait_write", "append_day"), ("wait_compact", "compact_day")):
        instance = run.task(writer).xcom["return_value"]["maxcompute"]["instance_id"]
        found = run.task(sensor).xcom["return_value"]
        assert found["metadata"]["maxcompute.instance_id"] == instance
        assert found["version"] == history[instance].version
    assert run.task("refused").state == "failed"  # a compaction never counts as a data change


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"table_format": "hudi", "min_version": 1}, "table_format must be one of .*'hudi'"),
        ({"table_format": "maxcompute", "min_id_version": -1}, "min_id_version must be a version number >= 0, got -1"),
        ({"table_format": "maxcompute", "min_time_version": -0.5}, "min_time_version must be a version number >= 0"),
        ({"table_format": "maxcompute", "min_id_version": "two"}, "min_id_version must be a version number"),
        ({"table_format": "delta", "min_version": -3}, "min_version must be a version number >= 0"),
        ({"table_format": "maxcompute", "min_version": 2}, "min_version does not apply to table_format='maxcompute'"),
        ({"table_format": "maxcompute", "snapshot_id": 2, "min_id_version": 1}, "snapshot_id does not apply"),
        ({"table_format": "delta", "min_id_version": 2}, "min_id_version does not apply to table_format='delta'"),
        ({"table_format": "iceberg", "min_version": 1, "data_changes_only": True}, "data_changes_only does not apply"),
        ({"table_format": "maxcompute", "data_changes_only": True}, "say what to wait for: min_id_version"),
    ],
)
def test_bad_input_is_refused_naming_what_was_wrong(kwargs, message):
    with pytest.raises(InvalidDeclarationError, match=message):
        TableCommitSensor(task_id="wait", table=TABLE, **kwargs)


def test_a_templated_version_is_checked_once_rendered(tmp_path):
    path = tmp_path / "project.bin"
    _project(path)
    sensor = TableCommitSensor(task_id="wait", table_format="maxcompute", table=TABLE, standin=str(path),
                               min_id_version="{{ params.v }}", deferrable=False)
    sensor.min_id_version = "-4"  # as rendered
    with pytest.raises(InvalidDeclarationError, match="min_id_version must be a version number >= 0, got '-4'"):
        sensor.poke({})
    with pytest.raises(InvalidDeclarationError, match="min_time_version must be a version >= 0"):
        CommitCondition(min_time_version=-1.0)  # the trigger's side


def test_the_maxcompute_trigger_serializes_to_json_and_back():
    import importlib
    import json

    condition = CommitCondition(min_version=2, partition="ds=a", min_time_version=1.5, data_changes_only=True)
    trigger = TableCommitTrigger("maxcompute", maxcompute_location(TABLE, standin="/tmp/p.bin"), condition.to_dict())
    path, kwargs = trigger.serialize()
    module, _, name = path.rpartition(".")
    again = getattr(importlib.import_module(module), name)(**json.loads(json.dumps(kwargs)))
    assert again.serialize() == (path, kwargs)
    assert CommitCondition(**again.condition) == condition
