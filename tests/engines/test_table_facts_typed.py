"""The types of a table's partition columns, read by each engine's facts reader (issue 33): the
oracle is each engine's own schema (delta-rs's ``DeltaTable.schema()``, Spark's ``spark.table``
schema, PyODPS's own ``TableSchema`` objects), and a typed literal derived with the facts' types
names the partition the real engine wrote (delta-rs). The Spark tests start a JVM: run them
under ``flock /tmp/occflow-heavy.lock``."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from occflow.core.declaration import partition_key
from occflow.core.errors import InvalidDeclarationError
from occflow.core.partvalues import ColumnType, column_type
from occflow.core.sqlderive import derive_write
from occflow.core.tablefacts import TableFacts
from occflow.engines.deltars.facts import deltars_table_facts
from occflow.engines.maxcompute.facts import maxcompute_table_facts


def _typed_delta(path: Path) -> str:
    rows = pa.table({
        "id": pa.array([1, 2], pa.int64()),
        "P": pa.array([7, 8], pa.int32()),
        "d": pa.array([dt.date(2024, 1, 1), dt.date(2024, 5, 1)]),
        "b": pa.array([True, False]),
        "hh": pa.array(["07", "7"]),
        "amount": pa.array([1.5, 2.5]),
    })
    write_deltalake(str(path), rows, partition_by=["P", "d", "b", "hh"])
    return str(path)


def test_deltars_facts_carry_the_partition_column_types_of_the_tables_schema(tmp_path: Path) -> None:
    uri = _typed_delta(tmp_path / "t")
    facts = deltars_table_facts(uri, table="db.t")
    schema = {f.name.lower(): f.type.type for f in DeltaTable(uri).schema().fields}  # delta-rs's own word
    assert dict(facts.partition_column_types) == {c: schema[c] for c in ("p", "d", "b", "hh")}
    assert {c: column_type(c, t) for c, t in facts.partition_column_types.items()} == {
        "p": ColumnType.INTEGRAL, "d": ColumnType.DATE, "b": ColumnType.BOOLEAN, "hh": ColumnType.STRING,
    }
    assert "amount" not in facts.partition_column_types  # a data column is not a partition column


def test_a_literal_derived_with_the_read_types_names_the_partition_delta_rs_rewrote(tmp_path: Path) -> None:
    """``p = '07'`` on the INT column: delta-rs deletes from ``P=7``; derived with the facts'
    types the footprint is ``p=7``, which the engine's log names (untyped it is not ``p=07`` alone)."""
    uri = _typed_delta(tmp_path / "t")
    facts = deltars_table_facts(uri)
    before = set(DeltaTable(uri).file_uris())
    DeltaTable(uri).delete("P = '07'")
    after = DeltaTable(uri)
    removed = before - set(after.file_uris())
    assert [next(d for d in path.split("/") if d.startswith("P=")) for path in removed] == ["P=7"]  # the oracle: the engine's own record
    typed = derive_write("DELETE FROM db.t WHERE P = '07'", list(facts.partition_columns), facts.engine,
                         column_types=facts.partition_column_types)
    assert typed.partitions is not None
    assert [partition_key(p) for p in typed.partitions] == [partition_key({"p": "7"})]


def test_table_facts_keep_their_types_through_json_and_old_json_loads() -> None:
    facts = TableFacts("db.t", "delta", "delta-rs", ("ds", "P"), partition_column_types={"P": "Integer", "ds": "date"})
    assert dict(facts.partition_column_types) == {"p": "integer", "ds": "date"}
    assert TableFacts.from_json(facts.to_json()) == facts
    old = {k: v for k, v in facts.to_json().items() if k != "partition_column_types"}  # written before issue 33
    assert TableFacts.from_json(old).partition_column_types == {}
    assert TableFacts.from_json(old).partition_columns == ("ds", "p")


@pytest.mark.parametrize(("types", "error"), [
    ({"region": "string"}, r"no partition column 'region'.*partition columns are ds, p"),
    ({"p": "intt"}, r"unknown type 'intt' for partition column 'p'"),
])
def test_a_type_the_facts_cannot_hold_is_refused_naming_the_table_and_column(types: dict[str, str], error: str) -> None:
    with pytest.raises(InvalidDeclarationError, match=error):
        TableFacts("db.t", "delta", "delta-rs", ("ds", "p"), partition_column_types=types)
    with pytest.raises(InvalidDeclarationError, match="need table_format"):
        TableFacts.from_json({"table": "db.t"})


class _Table:
    """What PyODPS's ``Table`` answers about a table, its schema built from PyODPS's own
    ``TableSchema`` (MaxCompute is a remote service: the SDK's type objects are the oracle here)."""

    def __init__(self, schema: Any) -> None:
        self.table_schema = schema
        self.is_transactional = False
        self.primary_key = None
        self.table_properties: dict[str, str] = {}


class _Client:
    def __init__(self, table: _Table) -> None:
        self.table = table

    def get_table(self, name: str) -> _Table:
        return self.table


def test_maxcompute_facts_carry_the_partition_types_as_pyodps_names_them() -> None:
    odps_models = pytest.importorskip("odps.models", reason="MaxCompute tests need pyodps")
    schema = odps_models.TableSchema(
        columns=[odps_models.Column(name="id", type="bigint")],
        partitions=[odps_models.Partition(name="ds", type="string"), odps_models.Partition(name="hh", type="bigint"),
                    odps_models.Partition(name="code", type="varchar(8)"), odps_models.Partition(name="d", type="date")],
    )
    facts = maxcompute_table_facts(_Client(_Table(schema)), "proj.t")
    assert dict(facts.partition_column_types) == {str(p.name): str(p.type).lower() for p in schema.partitions}
    assert column_type("hh", facts.partition_column_types["hh"]) is ColumnType.INTEGRAL
    # On MaxCompute a STRING '07' compared with BIGINT compares as DOUBLE: hh=7.
    derived = derive_write("INSERT OVERWRITE TABLE t PARTITION (ds='2024-01-01', hh='07', code='x', d='2024-01-01') "
                           "SELECT 1", list(facts.partition_columns), "maxcompute",
                           column_types=facts.partition_column_types)
    assert derived.partitions is not None and [p["hh"] for p in derived.partitions] == ["7"]


def test_the_maxcompute_stand_in_has_no_column_types_and_its_facts_say_none_are_known(tmp_path: Path) -> None:
    """The stand-in (``engines/maxcompute/standin.py``) lists partition columns without types:
    every column is untyped, so type-dependent literals reach the whole table."""
    from occflow.engines.maxcompute.standin import StandInProject

    project = StandInProject(tmp_path / "project.json")
    project.create_table("t", partition_columns=["ds"], partitions=[{"ds": "2024-01-01"}])
    facts = maxcompute_table_facts(project, "t")
    assert facts.partition_columns == ("ds",) and dict(facts.partition_column_types) == {}


@pytest.fixture(scope="module")
def spark(iceberg_engine: Any) -> Any:
    return iceberg_engine.session()


@pytest.mark.spark
def test_iceberg_facts_carry_the_identity_partition_types_of_the_tables_schema(spark: Any) -> None:
    from occflow.engines.spark.facts import spark_table_facts

    table = "lake.db.facts_typed"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(f"CREATE TABLE {table} (id BIGINT, p INT, d DATE, b BOOLEAN, hh STRING, amt DECIMAL(10,2), ts TIMESTAMP) "
              "USING iceberg PARTITIONED BY (p, d, b, hh, amt, days(ts))")
    facts = spark_table_facts(spark, table)
    schema = {f.name: f.dataType.simpleString() for f in spark.table(table).schema.fields}  # Spark's own word
    assert dict(facts.partition_column_types) == {c: schema[c] for c in ("p", "d", "b", "hh", "amt")}
    assert facts.partition_transforms == ("days(ts)",) and "ts" not in facts.partition_column_types
