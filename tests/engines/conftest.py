"""Shared Spark fixtures: one local Spark session with the embedded Iceberg catalog per test run.

The session is expensive (about 8 s to start here), so every Spark test in the run shares it;
each test makes its own table under a unique name.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

_counter = itertools.count()


def _running_home() -> Path | None:
    """The embedded home of a Spark session another test package already started, if any."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return None
    active = SparkSession.getActiveSession()
    if active is None:
        return None
    uri = active.sparkContext.getConf().get("spark.sql.catalog.lake.uri", None) or ""
    if not uri.startswith("jdbc:sqlite:"):
        return None
    return Path(uri[len("jdbc:sqlite:") :]).parent


@pytest.fixture(scope="session")
def spark_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Warehouse and SQLite catalog of the embedded default, shared with driver processes.

    One Spark application keeps the catalog it started with, so every Spark test in the run must
    agree on it: a running session's home wins, then ``$OCCFLOW_HOME``, then a fresh directory.
    """
    running = _running_home()
    if running is not None:
        return running
    if os.environ.get("OCCFLOW_HOME"):
        return Path(os.environ["OCCFLOW_HOME"])
    return tmp_path_factory.mktemp("occflow-spark")


@pytest.fixture(scope="session")
def iceberg_engine(spark_home: Path) -> Iterator[object]:
    pytest.importorskip("pyspark", reason="Spark tests need pyspark (pip install 'airflow-provider-occflow[spark]')")
    from pyspark.sql import SparkSession

    from occflow.engines.spark import SparkConfig, SparkEngine

    active = SparkSession.getActiveSession()
    engine = SparkEngine(SparkConfig(home=str(spark_home), app_name="occflow-tests"))
    if active is not None:
        engine.attach(active)
    spark = engine.session()
    spark.sparkContext.setLogLevel("ERROR")
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")
    yield engine
    if active is None:
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
