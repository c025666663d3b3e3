"""Spark for the exactly-once tests: the run's running session if there is one, else our own.

Spark allows one session per JVM with one Iceberg catalog configuration, so when the engine tests
(tests/engines/conftest.py) already started their session, these tests attach to it and use its
``lake`` catalog; alone, they start the same embedded default (SQLite catalog, local warehouse).
"""

from __future__ import annotations

import itertools

import pytest

_counter = itertools.count()


@pytest.fixture(scope="session")
def eo_spark(iceberg_engine: object) -> object:
    """The run's one Spark session (tests/conftest.py); these tests' tables live in ``lake.eo``."""
    return iceberg_engine


@pytest.fixture
def eo_table(eo_spark: object) -> str:
    """A fresh Iceberg table ``(id BIGINT, w BIGINT)``: ``w`` is the logical write a row belongs to."""
    spark = eo_spark.session()  # type: ignore[attr-defined]
    name = f"lake.eo.t{next(_counter)}"
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.sql(f"CREATE TABLE {name} (id BIGINT, w BIGINT) USING iceberg TBLPROPERTIES ('format-version'='2')")
    return name
