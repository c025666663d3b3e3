"""DeltaWriteOperator on a table that does not exist yet, under real ``dag.test()`` and delta-rs:
``create_if_missing`` creates it, the ``data`` callable sees the rendered declaration, and the
task's extra links point at the commit it made in the table's Delta log."""

from __future__ import annotations

from pathlib import Path

import pytest

from occflow.core.errors import InvalidDeclarationError

pytestmark = pytest.mark.airflow


def test_a_missing_table_is_created_and_the_data_callable_sees_its_partition(run_dag, tmp_path):
    path = tmp_path / "sales"
    run = run_dag(f'''
import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from occflow.operators.delta import DeltaWriteOperator

PATH = {str(path)!r}

def day_rows(context, snapshot, declaration):
    # The rendered declaration: the partition value the template gave, not the template.
    (spec,) = declaration.partitions
    return pa.table({{"id": [1, 2], "ds": [spec["ds"]] * 2, "amount": [10.0, 20.0]}})

def late_rows(context, snapshot, partition):
    return pa.table({{"id": [3], "ds": [partition["ds"]], "amount": [float(snapshot.version())]}})

def old_style(context, snapshot):
    return pa.table({{"id": [4], "ds": ["2024-01-02"], "amount": [0.5]}})

with DAG("create_if_missing", schedule=None, start_date=pendulum.datetime(2024, 1, 1)) as dag:
    load = DeltaWriteOperator(
        task_id="load", table="lake.sales", path=PATH, operation="insert_overwrite",
        partitions={{"ds": "{{{{ dag_run.conf['day'] }}}}"}}, data=day_rows,
        create_if_missing=True, schema={{"id": "long", "ds": "string", "amount": "double"}},
    )
    late = DeltaWriteOperator(
        task_id="late", table="lake.sales", path=PATH, operation="insert_into",
        partitions={{"ds": "{{{{ dag_run.conf['day'] }}}}"}}, data=late_rows,
    )
    other = DeltaWriteOperator(task_id="other", table="lake.sales", path=PATH, operation="insert_into",
                               data=old_style)
    load >> late >> other
''', run_conf={"day": "2024-01-01"})
    assert run.state == "success", {t: r.state for t, r in run.tasks.items()}
    from deltalake import DeltaTable

    table = DeltaTable(str(path))
    assert table.metadata().partition_columns == ["ds"]
    assert [f.name for f in table.schema().fields] == ["id", "ds", "amount"]
    rows = sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert rows == [
        {"id": 1, "ds": "2024-01-01", "amount": 10.0},
        {"id": 2, "ds": "2024-01-01", "amount": 20.0},
        {"id": 3, "ds": "2024-01-01", "amount": 1.0},  # written on version 1's snapshot
        {"id": 4, "ds": "2024-01-02", "amount": 0.5},
    ]
    # version 0: the empty table create_if_missing made; 1: load; 2: late; 3: other.
    load = run.task("load").xcom
    assert load["return_value"]["version"] == 1
    log = (path / "_delta_log").resolve()
    assert load["_link_WriteCommitLink"] == log.as_uri() + "/00000000000000000001.json"
    assert Path(log / "00000000000000000001.json").is_file()
    assert load["_link_TableHistoryLink"] == log.as_uri() + "/"
    assert run.task("other").xcom["_link_WriteCommitLink"].endswith("/00000000000000000003.json")


def test_an_existing_table_is_left_as_it_is(run_dag, tmp_path):
    import pyarrow as pa

    from occflow.engines.deltars import DeltaRsTable

    path = str(tmp_path / "kept")
    assert DeltaRsTable(path).create(pa.table({"id": [1], "v": ["a"]})).committed
    run = run_dag(f'''
import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from occflow.operators.delta import DeltaWriteOperator

with DAG("create_if_missing_exists", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(task_id="append", table="lake.kept", path={path!r}, operation="insert_into",
                       data=pa.table({{"id": [2], "v": ["b"]}}), create_if_missing=True,
                       schema={{"id": "long", "v": "string", "other": "date"}})
''')
    assert run.task("append").state == "success"
    from deltalake import DeltaTable

    table = DeltaTable(path)
    assert [f.name for f in table.schema().fields] == ["id", "v"]  # not the schema given
    assert sorted(r["id"] for r in table.to_pyarrow_table().to_pylist()) == [1, 2]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"schema": {"id": "long"}}, "schema / partition_by need create_if_missing=True"),
        ({"create_if_missing": True}, "create_if_missing needs schema="),
        ({"create_if_missing": True, "schema": {"id": "bigint!"}}, "'bigint!', not a Delta primitive type"),
        ({"create_if_missing": True, "schema": {"id; DROP": "long"}}, "invalid column name 'id; DROP'"),
        ({"create_if_missing": True, "schema": {"id": "long"}, "partitions": {"ds": "a"}},
         "partition column(s) ['ds'] are not in the schema (id)"),
    ],
)
def test_a_bad_table_to_create_fails_the_dag_import(tmp_path, kwargs, message):
    import pyarrow as pa

    from occflow.operators.delta import DeltaWriteOperator

    with pytest.raises(InvalidDeclarationError) as error:
        DeltaWriteOperator(task_id="t", table="lake.t", path=str(tmp_path / "t"), operation="insert_into",
                           data=pa.table({"id": [1]}), **kwargs)
    assert message in str(error.value)


# ------------------------------------------------------------------ Spark


@pytest.mark.parametrize(
    ("schema", "partition_by", "message"),
    [
        ({"id": "BIGINT); DROP TABLE x; --"}, [], "has type 'BIGINT); DROP TABLE x; --'"),
        ({"id`": "BIGINT"}, [], "invalid column name 'id`'"),
        ({"id": "BIGINT"}, ["ds"], "partition column(s) ['ds'] are not in the schema (id)"),
        ({}, [], "create_if_missing needs schema="),
    ],
)
def test_spark_create_table_refuses_what_is_not_a_name_or_a_type(schema, partition_by, message):
    from occflow.engines.spark.ddl import create_table_sql

    with pytest.raises(InvalidDeclarationError) as error:
        create_table_sql("iceberg", "lake.db.t", schema, partition_by, "t")
    assert message in str(error.value)


def test_spark_create_table_quotes_every_identifier():
    from occflow.engines.spark.ddl import create_table_sql

    assert create_table_sql("iceberg", "lake.db.events", {"id": "bigint", "ds": "string", "amount": "decimal(10, 2)"},
                            ["ds"], "t") == [
        "CREATE NAMESPACE IF NOT EXISTS `lake`.`db`",
        "CREATE TABLE IF NOT EXISTS `lake`.`db`.`events` (`id` BIGINT, `ds` STRING, `amount` DECIMAL(10, 2)) "
        "USING ICEBERG PARTITIONED BY (`ds`)",
    ]


@pytest.mark.spark
@pytest.mark.slow  # a Spark session
def test_spark_write_creates_its_missing_iceberg_table(run_dag, tmp_path, monkeypatch):
    import os
    import tempfile

    os.environ.setdefault("OCCFLOW_HOME", tempfile.mkdtemp(prefix="occflow-home-"))
    run = run_dag('''
import pendulum
from airflow.sdk import DAG
from airflow.providers.standard.operators.python import PythonOperator
from occflow.hooks.spark import OccflowSparkHook
from occflow.operators.spark import SparkWriteOperator, spark_engine

def inspect():
    spark = spark_engine(OccflowSparkHook().session_config()).session()
    rows = [list(r) for r in spark.sql("SELECT id, ds, amount FROM lake.db.created_events").collect()]
    partitions = [r[0].asDict() for r in spark.sql("SELECT partition FROM lake.db.created_events.partitions").collect()]
    return {"rows": rows, "partitions": partitions}

with DAG("spark_create_if_missing", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    SparkWriteOperator(
        task_id="insert", table="lake.db.created_events", table_format="iceberg",
        job="INSERT INTO lake.db.created_events VALUES (1, '2024-01-01', 2.5)",
        create_if_missing=True, schema={"id": "BIGINT", "ds": "STRING", "amount": "DOUBLE"},
        partition_by=["ds"],
    ) >> PythonOperator(task_id="inspect", python_callable=inspect)
''')
    task = run.task("insert")
    assert task.state == "success", task
    report = task.xcom["return_value"]
    assert report["committed"] and report["snapshot_id"] is not None
    seen = run.task("inspect").xcom["return_value"]
    assert seen["rows"] == [[1, "2024-01-01", 2.5]]
    assert seen["partitions"] == [{"ds": "2024-01-01"}]  # partitioned as create_if_missing said
