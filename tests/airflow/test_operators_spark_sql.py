"""SparkWriteOperator and SparkSubmitWriteOperator check a SQL job when the DAG is parsed
(issue 11, item 7): no Spark starts here. The rendered job is checked again at run time
(``test_operators_spark.py``, with a real session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from occflow.core.errors import InvalidDeclarationError

pytestmark = pytest.mark.airflow

ICEBERG = {"table_format": "iceberg", "home": "/nonexistent/occflow-home"}


def spark_write(job, **kwargs):
    from occflow.operators.spark import SparkWriteOperator

    kwargs = {"task_id": "t", "table": "db.events", "table_format": "iceberg", "operation": "delete", **kwargs}
    return SparkWriteOperator(job=job, **kwargs)


@pytest.mark.parametrize(
    ("job", "why"),
    [
        ("DELETE FROM lake.db.events WHERE ds = 'x'; DROP TABLE lake.db.other; --'", r"statement 2 of 2 \('DROP TABLE"),
        ("DELETE FROM lake.db.other WHERE ds = 'x'", "writes lake.db.other"),
        ("UPDATE lake.db.events SET v = 1", "is a update but the task declares delete"),
        ("SET spark.sql.shuffle.partitions = 1; DELETE FROM lake.db.events", "give the job as a list"),
        (["SET spark.sql.defaultCatalog = other", "DELETE FROM db.events"], "changes how the write's table name"),
        ("DELETE FROM lake.db.events WHERE ds = 'x", "unclosed quote"),
    ],
)
def test_a_static_sql_job_that_is_not_the_declared_write_fails_the_dag_import(job, why) -> None:
    with pytest.raises(InvalidDeclarationError, match=why):
        spark_write(job)


def test_the_declared_write_passes_and_a_list_may_set_settings_first() -> None:
    spark_write("DELETE FROM lake.db.events WHERE ds = 'x'")
    op = spark_write(["SET spark.sql.shuffle.partitions = 1", "DELETE FROM lake.db.events WHERE ds = 'x'"])
    assert op.sql == ["SET spark.sql.shuffle.partitions = 1", "DELETE FROM lake.db.events WHERE ds = 'x'"]
    # A template is checked once rendered, not at parse time.
    spark_write("DELETE FROM lake.db.events WHERE ds = '{{ params.ds }}'")


def test_a_known_config_puts_the_table_in_its_catalog() -> None:
    op = spark_write("DELETE FROM lake.db.events", spark_config=ICEBERG)
    assert op.occflow_write.table_key == "lake.db.events"
    assert op.occflow_write.engine_profile == "iceberg-serializable"
    # Spark SQL resolves a bare db.events in the session catalog, not in the Iceberg catalog.
    with pytest.raises(InvalidDeclarationError, match="writes spark_catalog.db.events"):
        spark_write("DELETE FROM db.events", spark_config=ICEBERG)
    default_catalog = {**ICEBERG, "conf": {"spark.sql.defaultCatalog": "lake"}}
    spark_write("DELETE FROM db.events", spark_config=default_catalog)


def test_spark_submit_checks_its_sql_the_same_way(tmp_path: Path) -> None:
    from occflow.operators.spark_submit import SparkSubmitWriteOperator

    common = {"task_id": "t", "table": "db.events", "table_format": "iceberg", "operation": "insert_into"}
    SparkSubmitWriteOperator(job="INSERT INTO lake.db.events VALUES (1, 'a')", **common)
    with pytest.raises(InvalidDeclarationError, match="statement 2 of 2"):
        SparkSubmitWriteOperator(job="INSERT INTO lake.db.events VALUES (1, 'a'); DROP TABLE lake.db.x", **common)
    SparkSubmitWriteOperator(job="package.module:function", **common)  # a callable reference, not SQL
