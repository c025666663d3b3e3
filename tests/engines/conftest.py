"""The engines' Spark fixtures: a fresh Iceberg table per test on the run's one Spark session
(``iceberg_engine`` and ``spark_home`` live in tests/conftest.py, shared by every package)."""

from __future__ import annotations

import itertools

import pytest

_counter = itertools.count()


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
