"""Shared Spark fixtures: one local Spark session with the embedded Iceberg catalog per test run.

The session is expensive (about 8 s to start here), so every Spark test in the run shares it;
each test makes its own table under a unique name.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

_counter = itertools.count()


@pytest.fixture(scope="session")
def spark_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Warehouse and SQLite catalog of the embedded default, shared by drivers in other processes."""
    return tmp_path_factory.mktemp("occflow-spark")


@pytest.fixture(scope="session")
def iceberg_engine(spark_home: Path) -> Iterator[object]:
    pytest.importorskip("pyspark", reason="Spark tests need pyspark (pip install 'airflow-provider-occflow[spark]')")
    from occflow.engines.spark import SparkConfig, SparkEngine

    engine = SparkEngine(SparkConfig(home=str(spark_home), app_name="occflow-tests"))
    spark = engine.session()
    spark.sparkContext.setLogLevel("ERROR")
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")
    yield engine
    engine.stop()


@pytest.fixture
def iceberg_table(iceberg_engine: object, request: pytest.FixtureRequest) -> str:
    """A fresh partitioned Iceberg table (v2) with three rows in partition 'a' and one in 'b'."""
    spark = iceberg_engine.session()  # type: ignore[attr-defined]
    name = f"lake.db.t_{request.node.name.split('[')[0][-30:].lower()}_{next(_counter)}"
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.sql(
        f"CREATE TABLE {name} (id BIGINT, ds STRING, v INT) USING iceberg PARTITIONED BY (ds) "
        "TBLPROPERTIES ('format-version'='2')"
    )
    spark.sql(f"INSERT INTO {name} VALUES (1, 'a', 1), (2, 'a', 2), (3, 'a', 3), (4, 'b', 4)")
    return name
