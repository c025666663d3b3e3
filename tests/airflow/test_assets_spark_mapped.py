"""A mapped ``SparkWriteOperator`` (``partial(...).expand(...)``) declares its table as an outlet
at DAG parse time (docs/assets.md), although Airflow builds a mapped task without the operator's
``__init__``.

The oracle is the URI the unmapped operator builds in its ``__init__`` (``table_asset_uri``) from
the same arguments, and Airflow's own records: the example DAGs are parsed by a real ``DagBag``
and the outlets are read back as Airflow's DAG processor collects them for the scheduler.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.airflow

EXAMPLES = Path(__file__).resolve().parents[2] / "dags_example"


def _parsed(name: str, dag_id: str) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(EXAMPLES / name))
    assert not bag.import_errors, bag.import_errors
    return bag.dags[dag_id]  # read from the parse, not the metadata DB


def _recorded_outlets(dag: Any, task_id: str) -> list[str]:
    """The task's outlet URIs as the DAG processor records them for the scheduler
    (``task_outlet_asset_reference``): collected by Airflow from the serialized DAG."""
    from airflow.dag_processing.collection import AssetModelOperation
    from airflow.serialization.serialized_objects import LazyDeserializedDAG

    collected = AssetModelOperation.collect({dag.dag_id: LazyDeserializedDAG.from_dag(dag)})
    return [asset.uri for task, asset in collected.outlet_references[dag.dag_id] if task == task_id]


def test_the_iceberg_backfill_examples_mapped_writes_name_the_table_the_unmapped_operator_names():
    from airflow.sdk import DAG

    from occflow.operators.spark import SparkWriteOperator

    dag = _parsed("iceberg_backfill.py", "occflow_iceberg_backfill")
    backfill = dag.get_task("backfill_day")
    assert backfill.operator_class.__name__ == "SparkWriteOperator"
    fixed = {k: v for k, v in backfill.partial_kwargs.items() if k not in ("outlets", "task_id")}
    with DAG("unmapped", schedule=None):
        unmapped = SparkWriteOperator(task_id="one_day", partitions={"ds": "2024-01-01"}, **fixed)
    expected = [a.uri for a in unmapped.outlets]
    # The example runs on the occflow_spark connection: its id stands for the warehouse.
    assert expected == ["iceberg://occflow_spark_default/db.events_backfill"]
    assert [a.uri for a in backfill.outlets] == expected
    assert _recorded_outlets(dag, "backfill_day") == expected


def test_mapped_and_unmapped_writes_of_the_delta_spark_example_are_one_asset():
    from occflow.operators.spark import SparkWriteOperator

    dag = _parsed("delta_spark_concurrent.py", "occflow_delta_spark_concurrent")
    # A mapped task's class is its operator_class; an unmapped one's is its type.
    writes = {t.task_id: [a.uri for a in t.outlets] for t in dag.tasks
              if getattr(t, "operator_class", type(t)) is SparkWriteOperator}
    assert sorted(writes) == ["add_channel_column", "backfill_day", "compact", "upsert_day"]
    # One table, written mapped and unmapped: one asset, whatever builds the task.
    assert len({tuple(uris) for uris in writes.values()}) == 1, writes
    assert len(writes["upsert_day"]) == 1
    assert _recorded_outlets(dag, "backfill_day") == writes["upsert_day"]


def test_spark_config_in_partial_names_its_warehouse_and_a_table_left_to_expand_names_none():
    from airflow.sdk import DAG, Asset

    from occflow.operators.spark import SparkWriteOperator

    config = {"table_format": "iceberg", "catalog": {"name": "lake", "type": "hadoop", "warehouse": "s3a://bkt/wh"}}
    fixed: dict[str, Any] = {"table": "DB.Events", "profile": "iceberg-serializable", "operation": "insert_into",
                             "job": lambda s, j: None, "spark_config": config}
    own = Asset(uri="s3://bucket/elsewhere")
    with DAG("spark_mapped_outlets", schedule=None):
        unmapped = SparkWriteOperator(task_id="one", **fixed)
        mapped = SparkWriteOperator.partial(task_id="many", outlets=[own], **fixed).expand(
            partitions=[{"ds": "a"}, {"ds": "b"}]
        )
        by_table = SparkWriteOperator.partial(
            task_id="by_table", table_format="iceberg", operation="insert_into", job=lambda s, j: None
        ).expand(table=["db.a", "db.b"])
    assert [a.uri for a in unmapped.outlets] == ["iceberg://bkt/wh/lake.db.events"]
    assert [a.uri for a in mapped.outlets] == [own.uri, "iceberg://bkt/wh/lake.db.events"]  # the user's kept
    assert by_table.outlets == []  # no table at parse time: no outlet rather than a wrong one
