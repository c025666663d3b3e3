"""DeltaWriteOperator on real delta-rs tables, run by real Airflow (``dag.test()``).

The races are real: a second writer commits on the same partition after the operator loaded
its snapshot and before it commits, so delta-rs's conflict checker rejects the operator's
commit. What is checked is what occflow promises: the conflict is classified, the policy acts
(retry from a fresh snapshot, skip a compaction, fail a non-conflict without calling it one), and
the table ends exactly as a serial run would leave it.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.airflow

COMMON = '''
import pathlib
import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from airflow.providers.standard.operators.python import PythonOperator
from occflow.engines.deltars import DeltaRsTable
from occflow.operators.delta import DeltaWriteOperator

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
        outcome = DeltaRsTable(PATH).append(pa.table({{"id": [5], "ds": ["a"], "v": [1]}}))
        assert outcome.committed, outcome
'''


def _rows(path: str) -> dict[int, int]:
    from deltalake import DeltaTable

    data = DeltaTable(path).to_pyarrow_table().to_pylist()
    ids = [r["id"] for r in data]
    assert len(ids) == len(set(ids)), f"duplicate rows: {sorted(ids)}"
    return {r["id"]: r["v"] for r in data}


def test_merge_that_loses_to_a_concurrent_append_is_retried_from_a_fresh_snapshot(run_dag, tmp_path):
    path, mark = str(tmp_path / "events"), str(tmp_path / "raced")
    run = run_dag(
        COMMON.format(path=path, mark=mark)
        + '''
def source(context, snapshot):
    competitor_once()
    return pa.table({"id": [1, 9], "ds": ["a", "a"], "v": [7, 7]})

with DAG("delta_merge_race", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    setup = PythonOperator(task_id="create", python_callable=create)
    merge = DeltaWriteOperator(
        task_id="merge", table="events", path=PATH, operation="MERGE INTO",
        partitions={"ds": "a"}, data=source, merge_keys=["id"],
    )
    setup >> merge
'''
    )
    assert run.state == "success"
    report = run.task("merge").xcom["return_value"]
    assert report["committed"] is True
    assert report["attempts"] == 2
    assert [c["kind"] for c in report["conflicts"]] == ["concurrent_append"]
    assert report["decisions"][0]["action"] == "retry"
    assert report["wasted_seconds"] > 0
    # create = v0, competitor append = v1, the retried merge = v2
    assert report["version"] == 2
    # Serial result: the append, then the merge (updates id 1, inserts id 9).
    assert _rows(path) == {1: 7, 2: 0, 3: 0, 4: 0, 5: 1, 9: 7}
