"""OpenLineage events of occflow's write operators, emitted by a real Airflow run.

Each test writes a DAG file and runs it with ``airflow dags test`` (``dag.test()``) in a child
process whose configuration turns the OpenLineage provider on with a file transport: the
provider's plugin registers its listener at start-up as in a deployment, the listener calls the
operators' ``get_openlineage_facets_on_complete`` / ``_on_failure``, and every event lands as one
JSON line in a file that the test reads. A child process, because the provider reads its
configuration once per process and its listener would otherwise run (and fork) for every other
Airflow test of the session.

The writes are real delta-rs writes; the conflict is a real race (a second writer commits into
the partition after the operator read its snapshot). The oracles are the table's own Delta log
(versions, operations) and the data the DAG wrote, not the operator's report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.airflow

_AIRFLOW = Path(sys.executable).with_name("airflow")

# The operator itself: OccflowWriteOperator has the mixin among its bases and keeps its report.
DAG_HEAD = '''
import pathlib
import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from airflow.providers.standard.operators.python import PythonOperator
from occflow.engines.deltars import CommitOptions, DeltaRsTable
from occflow.operators.delta import DeltaWriteOperator
from occflow.operators.lineage import OpenLineageMixin

assert issubclass(DeltaWriteOperator, OpenLineageMixin)
Writer = DeltaWriteOperator

PATH = {path!r}
MARK = {mark!r}

def create():
    DeltaRsTable(PATH).create(
        pa.table({{"id": [1, 2, 3, 4], "ds": ["a", "a", "b", "b"], "v": [0, 0, 0, 0]}}), partition_by=["ds"]
    )

def competitor_once():
    """A second writer that commits into partition a once, after the operator took its snapshot."""
    mark = pathlib.Path(MARK)
    if not mark.exists():
        mark.write_text("raced")
        assert DeltaRsTable(PATH).append(pa.table({{"id": [5], "ds": ["a"], "v": [1]}})).committed
'''


def run_with_openlineage(dag_folder: Path, tmp_path: Path, source: str, dag_id: str) -> list[dict[str, Any]]:
    """Run ``dag_id`` from ``source`` with ``airflow dags test`` and OpenLineage's file transport;
    the task events it emitted (``RunEvent`` dicts, in order)."""
    dag_file = dag_folder / f"test_ol_{uuid.uuid4().hex[:10]}.py"
    dag_file.write_text(textwrap.dedent(source))
    events = tmp_path / "openlineage.jsonl"
    env = {
        **os.environ,  # tests/airflow/conftest.py's Airflow home, DB and DAG folder
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(events), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "occflow-test",
        "AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT": "60",
    }
    env.pop("OPENLINEAGE_DISABLED", None)
    done = subprocess.run(
        [str(_AIRFLOW), "dags", "test", dag_id, "-f", str(dag_file)],
        env=env, capture_output=True, text=True, timeout=600,
    )
    if not events.exists():
        raise AssertionError(
            f"no OpenLineage event was written (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
        )
    found = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
    return [e for e in found if "run" in e and "job" in e]


def task_event(events: list[dict[str, Any]], dag_id: str, task_id: str, event_type: str) -> dict[str, Any]:
    matching = [e for e in events if e["job"]["name"] == f"{dag_id}.{task_id}" and e["eventType"] == event_type]
    if len(matching) != 1:
        seen = sorted({(e["job"]["name"], e["eventType"]) for e in events})
        raise AssertionError(f"expected one {event_type} event for {dag_id}.{task_id}, found {len(matching)}; seen {seen}")
    return matching[0]


def only_output(event: dict[str, Any]) -> dict[str, Any]:
    assert len(event["outputs"]) == 1, event["outputs"]
    return event["outputs"][0]


def delta_log(path: str) -> list[dict[str, Any]]:
    """The table's commits from its own Delta log, oldest first: the oracle for versions."""
    from deltalake import DeltaTable

    return sorted(DeltaTable(path).history(), key=lambda c: c["version"])


def rows(path: str) -> dict[int, int]:
    from deltalake import DeltaTable

    return {r["id"]: r["v"] for r in DeltaTable(path).to_pyarrow_table().to_pylist()}


@pytest.mark.slow
def test_complete_events_carry_the_table_operation_partitions_version_and_conflicts(dag_folder, tmp_path):
    path, mark = str(tmp_path / "events"), str(tmp_path / "raced")
    dag_id = "ol_delta_writes"
    events = run_with_openlineage(
        dag_folder,
        tmp_path,
        DAG_HEAD.format(path=path, mark=mark)
        + f'''
def source(context, snapshot):
    competitor_once()
    return pa.table({{"id": [1, 9], "ds": ["a", "a"], "v": [7, 7]}})

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    setup = PythonOperator(task_id="create", python_callable=create)
    merge = Writer(
        task_id="merge", table="events", path=PATH, operation="merge",
        partitions={{"ds": "a"}}, data=source, merge_keys=["id"],
    )
    overwrite = Writer(
        task_id="overwrite", table="events", path=PATH, operation="insert_overwrite",
        partitions={{"ds": "{{{{ 'b' }}}}"}}, data=pa.table({{"id": [30], "ds": ["b"], "v": [3]}}),
    )
    setup >> merge >> overwrite
''',
        dag_id,
    )
    # What the table's own log says happened: create, the competitor's append, the merge (retried
    # after it lost to the append), the overwrite of partition b.
    log = delta_log(path)
    assert [c["operation"] for c in log] == ["WRITE", "WRITE", "MERGE", "WRITE"]
    merge_version, overwrite_version = log[2]["version"], log[3]["version"]
    assert rows(path) == {1: 7, 2: 0, 5: 1, 9: 7, 30: 3}

    merge = task_event(events, dag_id, "merge", "COMPLETE")
    out = only_output(merge)
    assert (out["namespace"], out["name"]) == ("file", str(Path(path).resolve()))
    assert out["facets"]["symlinks"]["identifiers"] == [
        {"namespace": Path(path).resolve().parent.as_uri(), "name": "events", "type": "TABLE"}
    ]
    assert out["facets"]["storage"]["storageLayer"] == "delta"
    write = out["facets"]["occflow_write"]
    assert write["operation"] == "merge"
    assert write["engine"] == "delta-rs"
    assert write["committed"] is True
    assert write["partitions"] == [{"ds": "a"}]
    assert write["version"] == merge_version
    assert out["facets"]["version"]["datasetVersion"] == str(merge_version)
    assert "lifecycleStateChange" not in out["facets"]  # a merge changes rows, not the dataset
    assert out["outputFacets"]["subset"]["outputCondition"] == {
        "type": "partition", "partitions": [{"dimensions": {"ds": "a"}}]
    }
    merged = log[2]["operationMetrics"]  # rows the merge wrote: inserted and updated ones
    expected_rows = merged["num_target_rows_inserted"] + merged["num_target_rows_updated"]
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == expected_rows
    conflicts = merge["run"]["facets"]["occflow_conflicts"]
    assert conflicts["attempts"] == 2
    assert conflicts["wastedSeconds"] > 0
    assert len(conflicts["conflicts"]) == 1
    lost = conflicts["conflicts"][0]
    assert (lost["attempt"], lost["kind"], lost["action"]) == (1, "concurrent_append", "retry")
    # The winner is the competitor's append, as the Delta log records it.
    assert lost["winner"]["version"] == log[1]["version"]
    assert lost["winner"]["operation"] == log[1]["operation"]
    assert conflicts["_schemaURL"].endswith("OccflowConflictsRunFacet")

    overwrite = task_event(events, dag_id, "overwrite", "COMPLETE")
    out = only_output(overwrite)
    write = out["facets"]["occflow_write"]
    assert write["operation"] == "insert_overwrite"
    assert write["partitions"] == [{"ds": "b"}]  # rendered, not the template
    assert out["facets"]["version"]["datasetVersion"] == str(overwrite_version)
    assert out["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "OVERWRITE"
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == log[3]["operationMetrics"]["num_added_rows"]
    assert overwrite["run"]["facets"]["occflow_conflicts"]["attempts"] == 1
    assert overwrite["run"]["facets"]["occflow_conflicts"]["conflicts"] == []


@pytest.mark.slow
def test_fail_events_carry_the_conflict_that_failed_fast_and_the_table_of_any_failure(dag_folder, tmp_path):
    path, mark = str(tmp_path / "events"), str(tmp_path / "unused")
    dag_id = "ol_delta_failures"
    events = run_with_openlineage(
        dag_folder,
        tmp_path,
        DAG_HEAD.format(path=path, mark=mark)
        + f'''
def append_as_stream(table, snapshot, partition, commit, context):
    # Another writer shares this job's application transaction id and commits first.
    other = DeltaRsTable(PATH).append(
        pa.table({{"id": [50], "ds": ["b"], "v": [5]}}), commit=CommitOptions(app_id="stream-1", app_version=7)
    )
    assert other.committed, other
    mine = CommitOptions(metadata=commit.metadata, app_id="stream-1", app_version=7)
    return table.append(pa.table({{"id": [60], "ds": ["b"], "v": [6]}}), snapshot=snapshot, commit=mine)

def wrong_schema(context, snapshot):
    return pa.table({{"id": [99], "ds": ["a"], "v": ["not a number"], "extra": [1]}})

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    setup = PythonOperator(task_id="create", python_callable=create)
    stream = Writer(
        task_id="stream_append", table="events", path=PATH, operation="insert_into",
        partitions={{"ds": "b"}}, job=append_as_stream,
    )
    broken = Writer(task_id="bad_schema", table="events", path=PATH, operation="insert_into", data=wrong_schema)
    setup >> stream >> broken
    broken.trigger_rule = "all_done"
''',
        dag_id,
    )
    log = delta_log(path)
    assert [c["operation"] for c in log] == ["WRITE", "WRITE"]  # only the other stream writer
    assert 60 not in rows(path) and 99 not in rows(path)

    # A conflict that occflow fails fast on: the FAIL event has the conflict and no version.
    stream = task_event(events, dag_id, "stream_append", "FAIL")
    out = only_output(stream)
    assert (out["namespace"], out["name"]) == ("file", str(Path(path).resolve()))
    write = out["facets"]["occflow_write"]
    assert (write["operation"], write["committed"], write["partitions"]) == ("insert_into", False, [{"ds": "b"}])
    assert "version" not in out["facets"] and "lifecycleStateChange" not in out["facets"]
    conflicts = stream["run"]["facets"]["occflow_conflicts"]
    assert conflicts["attempts"] == 1
    assert [(c["kind"], c["action"]) for c in conflicts["conflicts"]] == [("concurrent_transaction", "fail")]
    # The winner is the other writer with the same transaction id: version 1 in the Delta log.
    winner = conflicts["conflicts"][0]["winner"]
    assert (winner["version"], winner["operation"]) == (log[1]["version"], log[1]["operation"])
    assert "errorMessage" in stream["run"]["facets"]  # the provider's own facet, beside ours

    # An error that is not a conflict: the table and the declaration, and never a conflict.
    broken = task_event(events, dag_id, "bad_schema", "FAIL")
    out = only_output(broken)
    assert out["name"] == str(Path(path).resolve())
    assert out["facets"]["occflow_write"]["operation"] == "insert_into"
    assert out["facets"]["occflow_write"]["committed"] is False
    assert "subset" not in out.get("outputFacets", {})  # the whole table was declared
    # A report, when the failure carries one (WriteNotCommitted.report), counts the attempt only.
    facet = broken["run"]["facets"].get("occflow_conflicts")
    assert facet is None or (facet["attempts"] == 1 and facet["conflicts"] == []), facet
    assert "SchemaMismatchError" in broken["run"]["facets"]["errorMessage"]["message"]


def test_the_facets_need_no_openlineage_until_the_provider_asks():
    """occflow imports the mixin without OpenLineage; only asking for facets imports it."""
    code = (
        "import sys\n"
        "import occflow.operators.delta, occflow.operators.lineage\n"
        "assert 'openlineage' not in sys.modules, sorted(m for m in sys.modules if 'openlineage' in m)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=dict(os.environ),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
