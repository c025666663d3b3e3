"""Typed partition keys against real Spark, ANSI off and on (issue 33, item 1).

The oracle is Spark itself (one in-process session for the module): each predicate is evaluated
on a relation holding the column's values, with ``spark.sql.ansi.enabled`` false and true, and a
static ``PARTITION (p = '07')`` is written to a real partitioned table whose partitions Spark
lists. The derivation for a Spark engine (both settings in force) must name exactly the values
either setting matches, refuse only what both refuse, and be the whole table only where a
comparison matches values no one key names. Starts a JVM: run under
``flock /tmp/occflow-heavy.lock``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest

from occflow.core.errors import InvalidDeclarationError, InvalidFootprintError
from occflow.core.footprint import footprints_overlap
from occflow.core.identifiers import canonical_value
from occflow.core.sqlderive import derive_write

pyspark = pytest.importorskip("pyspark")
pytestmark = [pytest.mark.spark]

#: Column type -> (the relation's SQL type, the values it holds).
VALUES: dict[str, tuple[str, list[Any]]] = {
    "int": ("INT", [7, 8, 70]),
    "string": ("STRING", ["7", "07", " 7", "7.0", "+7", "x", "2024-05-01", "2024-5-1", "true"]),
    "date": ("DATE", [dt.date(2024, 1, 1), dt.date(2024, 5, 1)]),
    "boolean": ("BOOLEAN", [True, False]),
    "decimal(10,2)": ("DECIMAL(10,2)", ["7", "7.5"]),
}

PREDICATES = [
    ("int", "p = '07'"), ("int", "p = ' 7'"), ("int", "p IN ('07')"), ("int", "p = '7.9'"), ("int", "p = '7.0'"),
    ("int", "p = '+7'"), ("int", "p = 'x'"), ("int", "p = 7.0"), ("int", "p = '7e0'"), ("int", "p = ''"),
    ("int", "p < '08'"), ("int", "p BETWEEN '07' AND '08'"), ("int", "p NOT IN ('07')"),
    ("string", "p = 7"), ("string", "p IN (7)"), ("string", "p = 7.0"), ("string", "p = '2024-5-1'"),
    ("string", "p = '07'"), ("string", "p = DATE '2024-05-01'"), ("string", "p = true"),
    ("date", "p = '2024-01'"), ("date", "p = '2024-1-1'"), ("date", "p = '2024-01-01 10:00:00'"), ("date", "p = '2024'"),
    ("date", "p = ' 2024-01-01 '"), ("date", "p = '2024-01-01T00:00'"), ("date", "p = 'x'"), ("date", "p = '2024-02-30'"),
    ("date", "p = 20240101"), ("date", "p >= '2024-2'"),
    ("boolean", "p = 1"), ("boolean", "p = 0"), ("boolean", "p = 2"), ("boolean", "p = 'yes'"), ("boolean", "p = 't'"),
    ("boolean", "p = '1'"), ("boolean", "p = 'on'"), ("boolean", "p = 'x'"), ("boolean", "p = ' true '"),
    ("decimal(10,2)", "p = '7'"), ("decimal(10,2)", "p = '07.50'"), ("decimal(10,2)", "p = 7"),
]

#: Where a comparison matches values no key names (Spark casts the STRING column to the literal's
#: type: ``p = 7`` matches '07', ' 7', '+7', '7.0'; ANSI off compares ``NOT IN ('07')`` as text,
#: so it matches 7 too), so the footprint is the whole table.
WHOLE_TABLE = {("string", "p = 7"), ("string", "p IN (7)"), ("string", "p = 7.0"), ("string", "p = DATE '2024-05-01'"),
               ("string", "p = true"), ("int", "p NOT IN ('07')")}


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from pyspark.sql import SparkSession  # heavy optional dependency: only this module needs it

    warehouse = tmp_path_factory.mktemp("warehouse")
    session = (
        SparkSession.builder.master("local[1]")
        .appName("occflow-partvalues")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _key(value: Any, column_type: str) -> str:
    """A value as occflow's keys spell it for the column's type: canonical, except a STRING
    column's text, its own spelling, quoted where the canonical form would change it (issue 33:
    ``'2024-5-1'`` is not the partition ``2024-05-01``)."""
    if isinstance(value, bool):
        return f"p={'true' if value else 'false'}"
    if column_type != "string":
        return f"p={canonical_value('p', value)}"
    try:
        kept = canonical_value("p", value) == value
    except InvalidFootprintError:
        kept = False
    return f"p={value}" if kept and not value.startswith("'") else f"p='{value}'"


def _matched(spark: Any, column_type: str, predicate: str, ansi: bool) -> set[str] | None:
    """The values ``predicate`` selects, keyed; ``None``: Spark refused the statement."""
    sql_type, values = VALUES[column_type]
    rows = ", ".join(f"(CAST({_sql(v)} AS {sql_type}))" for v in values)
    spark.conf.set("spark.sql.ansi.enabled", str(ansi).lower())
    try:
        found = spark.sql(f"SELECT p FROM VALUES {rows} AS t(p) WHERE {predicate}").collect()
    except Exception:  # AnalysisException, CAST_INVALID_INPUT: the statement fails
        return None
    return {_key(row[0], column_type) for row in found}


def _sql(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).upper()
    return f"'{value}'" if isinstance(value, (str, dt.date)) else str(value)


@pytest.mark.parametrize(("column_type", "predicate"), PREDICATES)
def test_derived_keys_are_what_spark_matches_with_ansi_off_or_on(spark: Any, column_type: str, predicate: str) -> None:
    by_mode = [_matched(spark, column_type, predicate, ansi) for ansi in (False, True)]
    sql = f"DELETE FROM db.t WHERE {predicate}"
    if by_mode == [None, None]:
        with pytest.raises(InvalidDeclarationError, match="refuses the statement"):
            derive_write(sql, ["p"], "spark-iceberg", column_types={"p": column_type})
        return
    keys = derive_write(sql, ["p"], "spark-iceberg", column_types={"p": column_type}).partition_keys()
    engine = set().union(*(m for m in by_mode if m is not None))
    if keys is None and not engine:
        return  # no value matches: a condition true for no partition is read as the whole table
    if keys is None:
        assert (column_type, predicate) in WHOLE_TABLE, by_mode
        return
    assert (column_type, predicate) not in WHOLE_TABLE
    held = {_key(v, column_type) for v in VALUES[column_type][1]}
    named = {k for k in held if footprints_overlap(frozenset({k}), keys)}
    # Spark ANSI off compares ``p IN ('07')`` as text (nothing), ANSI on as a number (7): the
    # footprint holds both settings' rows, so it may name what one setting alone does not.
    assert named == engine, (predicate, sorted(keys), by_mode)


@pytest.mark.parametrize("spelled", ["'07'", "' 7'", "'+7'"])
def test_static_partition_text_on_int_is_the_partition_spark_writes(spark: Any, spelled: str) -> None:
    """``INSERT INTO t PARTITION (p = '07')`` writes partition p=7 (Spark lists it), and the
    derivation names p=7, not p=07."""
    spark.conf.set("spark.sql.ansi.enabled", "false")
    spark.sql("DROP TABLE IF EXISTS typed_static")
    spark.sql("CREATE TABLE typed_static (v INT, p INT) USING parquet PARTITIONED BY (p)")
    spark.sql(f"INSERT INTO typed_static PARTITION (p = {spelled}) SELECT 1")
    listed = {row[0] for row in spark.sql("SHOW PARTITIONS typed_static").collect()}
    derived = derive_write(
        f"INSERT INTO db.t PARTITION (p = {spelled}) SELECT 1", ["p"], "spark-iceberg", column_types={"p": "int"}
    )
    assert derived.partition_keys() == listed == {"p=7"}


@pytest.mark.parametrize("spelled", ["'08'", "' 8'", "'+08'", "'8.9'"])
def test_update_set_text_on_int_moves_rows_where_spark_casts_the_value(spark: Any, spelled: str) -> None:
    """``SET p = '08'`` on an INT column: the rows move to Spark's own cast of the value under
    each ANSI setting; the footprint is the rows' partition and every such destination."""
    destinations = set()
    for ansi in ("false", "true"):
        spark.conf.set("spark.sql.ansi.enabled", ansi)
        try:
            cast = spark.sql(f"SELECT CAST({spelled} AS INT)").collect()[0][0]
        except Exception:  # CAST_INVALID_INPUT: that setting fails the statement
            continue
        destinations.add(f"p={cast}")
    derived = derive_write(f"UPDATE db.t SET p = {spelled} WHERE p = 7", ["p"], "spark-iceberg", column_types={"p": "int"})
    assert destinations and derived.partition_keys() == {"p=7"} | destinations
