"""Spark for the exactly-once tests: the run's running session if there is one, else our own.

Spark allows one session per JVM with one Iceberg catalog configuration, so when the engine tests
(tests/engines/conftest.py) already started their session, these tests attach to it and use its
``lake`` catalog; alone, they start the same embedded default (SQLite catalog, local warehouse).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

_counter = itertools.count()


@pytest.fixture(scope="session")
def eo_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    pytest.importorskip("pyspark", reason="Spark tests need pyspark (pip install 'airflow-provider-occflow[spark]')")
    from pyspark.sql import SparkSession

    from occflow.engines.spark import SparkConfig, SparkEngine

    active = SparkSession.getActiveSession()
    home: Path = tmp_path_factory.mktemp("occflow-exactly-once")
    engine = SparkEngine(SparkConfig(home=str(home), app_name="occflow-exactly-once-tests"))
    if active is not None:
        engine.attach(active)
    spark = engine.session()
    spark.sparkContext.setLogLevel("ERROR")
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.eo")
    yield engine
    if active is None:
        engine.stop()


@pytest.fixture
def eo_table(eo_spark: object) -> str:
    """A fresh Iceberg table ``(id BIGINT, w BIGINT)``: ``w`` is the logical write a row belongs to."""
    spark = eo_spark.session()  # type: ignore[attr-defined]
    name = f"lake.eo.t{next(_counter)}"
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.sql(f"CREATE TABLE {name} (id BIGINT, w BIGINT) USING iceberg TBLPROPERTIES ('format-version'='2')")
    return name
