"""Partitioned asset events on a real scheduler (scripts/examples.py's ``Airflow``:
scheduler, dag-processor, api-server, triggerer; LocalExecutor).

A producer on ``CronPartitionTimetable`` (two past minutes, caught up) writes the minute its run
is for into a real delta-rs table, taking the partition from the run's key
(``partition_key_columns``); a consumer on ``PartitionedAssetTimetable`` over the table's asset
runs once per written partition and returns what its triggering event said. The oracles are
Airflow's metadata DB (the runs the scheduler made, their keys) and the table's ``_delta_log``
(the version each producer run committed, found by the run id its commit is tagged with).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest
from scheduler_harness import query, run_examples, wait_for

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PRODUCER, CONSUMER = "occflow_assets_producer", "occflow_assets_consumer"
KEY_FORMAT = "%Y%m%dT%H%M"

DAG_SOURCE = '''
import pendulum
import pyarrow as pa
from airflow.sdk import DAG, Asset, CronPartitionTimetable, PartitionedAssetTimetable, task

from occflow.operators.delta import DeltaWriteOperator

PATH, URI = {path!r}, {uri!r}


def rows(context, snapshot, declaration):
    minute = declaration.partitions[0]["minute"]
    return pa.table({{"id": pa.array([1, 2], pa.int64()), "minute": [minute] * 2}})


with DAG({producer!r}, schedule=CronPartitionTimetable("* * * * *", timezone="UTC", key_format={key_format!r}),
         start_date=pendulum.parse({start!r}), end_date=pendulum.parse({end!r}), catchup=True):
    DeltaWriteOperator(task_id="write_minute", table="bench.minutes", path=PATH, operation="insert_overwrite",
                       partition_key_columns=["minute"], data=rows, retries=2)


with DAG({consumer!r}, schedule=PartitionedAssetTimetable(assets=Asset(uri=URI)),
         start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), catchup=False):

    @task
    def read_event(**context):
        events = [e for evs in context["triggering_asset_events"].values() for e in evs]
        return {{
            "run_key": context["dag_run"].partition_key,
            "events": [{{"key": e.partition_key, "version": (e.extra or {{}}).get("version"),
                         "source_run_id": e.source_run_id}} for e in events],
        }}

    read_event()
'''








def _versions_by_run(path: Path) -> dict[str, int]:
    """Per Airflow run id, the ``_delta_log`` version the producer's commit for it is."""
    from occflow.engines.tags import KEYS

    found: dict[str, int] = {}
    for entry in sorted((path / "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            info = json.loads(line).get("commitInfo") or {}
            if info.get(KEYS["dag_id"]) == PRODUCER:
                found[info[KEYS["run_id"]]] = int(entry.stem)
    return found


@pytest.fixture(scope="module")
def scheduled(tmp_path_factory):
    import pyarrow as pa

    from occflow.engines.deltars import DeltaRsTable

    examples = run_examples()
    home = tmp_path_factory.mktemp("assets-airflow")
    (home / "dags").mkdir()
    path = Path(os.path.realpath(home / "minutes"))
    # The table exists before the two producer runs start together (creating is not what is tested).
    empty = pa.table({"id": pa.array([], pa.int64()), "minute": pa.array([], pa.string())})
    assert DeltaRsTable(str(path)).create(empty, partition_by=["minute"]).committed
    start = dt.datetime.now(dt.timezone.utc).replace(second=0, microsecond=0) - dt.timedelta(minutes=3)
    end = start + dt.timedelta(minutes=1)
    (home / "dags" / "assets_partitions.py").write_text(textwrap.dedent(DAG_SOURCE.format(
        path=str(path), uri=path.as_uri(), producer=PRODUCER, consumer=CONSUMER, key_format=KEY_FORMAT,
        start=start.isoformat(), end=end.isoformat())))
    env = examples.airflow_env(home, parallelism=4)
    env.update({"AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
                "OCCFLOW_LEASE_STORE_URL": f"sqlite:///{home / 'leases.db'}"})
    airflow = examples.Airflow(home, env)
    airflow.env = {**{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "OCCFLOW"))}, **env}
    db = home / "airflow.db"
    keys = {(start + dt.timedelta(minutes=i)).strftime(KEY_FORMAT) for i in (0, 1)}
    try:
        airflow.start()

        def consumers_done():
            rows = query(db, "SELECT run_id, partition_key, state FROM dag_run WHERE dag_id = ?", CONSUMER)
            done = [r for r in rows if r[2] in ("success", "failed")]
            return rows if len(done) >= len(keys) else None

        wait_for("a consumer run per written partition", consumers_done, 600, airflow, every=2)
        time.sleep(5)  # a third consumer run, if the scheduler wrongly made one, shows up meanwhile
        producers = query(db, "SELECT run_id, partition_key, state FROM dag_run WHERE dag_id = ?", PRODUCER)
        consumers = query(db, "SELECT run_id, partition_key, state FROM dag_run WHERE dag_id = ?", CONSUMER)
        reads = {run_id: json.loads(v) for run_id, v in query(
            db, "SELECT run_id, value FROM xcom WHERE dag_id = ? AND key = 'return_value'", CONSUMER)}
        yield {"keys": keys, "producers": producers, "consumers": consumers, "reads": reads,
               "versions": _versions_by_run(path), "path": path}
    except BaseException:
        print(f"Airflow logs kept in {home}", file=sys.stderr)
        raise
    finally:
        airflow.stop()


def test_the_producer_writes_the_partition_its_run_is_for(scheduled):
    assert {(key, state) for _, key, state in scheduled["producers"]} == {(k, "success") for k in scheduled["keys"]}
    from deltalake import DeltaTable

    written = {r["minute"] for r in DeltaTable(str(scheduled["path"])).to_pyarrow_table().to_pylist()}
    assert written == scheduled["keys"]


def test_the_consumer_runs_once_per_written_partition_and_reads_the_committed_version(scheduled):
    consumers = scheduled["consumers"]
    assert sorted(key for _, key, _ in consumers) == sorted(scheduled["keys"])
    assert all(state == "success" for _, _, state in consumers), consumers
    versions = scheduled["versions"]
    producer_run_of_key = {key: run_id for run_id, key, _ in scheduled["producers"]}
    for run_id, key, _ in consumers:
        read = scheduled["reads"][run_id]
        assert read["run_key"] == key
        assert len(read["events"]) == 1, read
        event = read["events"][0]
        assert event["key"] == key and event["source_run_id"] == producer_run_of_key[key]
        # The version the event names is the one delta-rs logged for that producer run's commit.
        assert event["version"] == versions[producer_run_of_key[key]]
