"""Table facts read from real tables (delta-rs, Spark + Iceberg): the profile follows from them,
and a declared profile they contradict is refused, naming the fact (issue 12)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from occflow.core.errors import InvalidDeclarationError
from occflow.core.operations import Operation
from occflow.core.tablefacts import TableFacts
from occflow.engines.deltars.facts import deltars_table_facts


def _rows() -> pa.Table:
    return pa.table({"id": [1, 2, 3], "DS": ["a", "a", "b"], "country": ["NL", "DE", "NL"]})


def _delta(path: Path, partition_by: list[str] | None, **configuration: str) -> str:
    write_deltalake(str(path), _rows(), partition_by=partition_by, configuration=configuration or None)
    return str(path)


# ---------------------------------------------------------------------------------------- delta-rs


def test_deltars_facts_are_the_tables_log(tmp_path: Path) -> None:
    uri = _delta(tmp_path / "t", ["DS", "country"], **{"delta.isolationLevel": "Serializable",
                                                       "delta.enableDeletionVectors": "true"})
    facts = deltars_table_facts(uri, table="db.t")
    log = DeltaTable(uri).metadata()  # the oracle: what delta-rs itself reads from the log
    assert facts.partition_columns == tuple(c.lower() for c in log.partition_columns) == ("ds", "country")
    assert dict(facts.properties) == log.configuration
    assert facts.delta_isolation_level == "Serializable" and facts.deletion_vectors
    assert "deletionVectors" in facts.features  # the protocol's table features
    # delta-rs commits the write: its own matrix, whatever the isolation level says.
    assert facts.engine == "delta-rs" and facts.profile_name() == "delta-rs"
    assert any("delta-rs behaves the same" in w for w in facts.why())
    facts.check_declared_profile("delta-rs")
    with pytest.raises(InvalidDeclarationError, match="committed by delta-rs.*its matrix is 'delta-rs'"):
        facts.check_declared_profile("delta-write-serializable")
    with pytest.raises(InvalidDeclarationError, match="describes iceberg tables and db.t is a delta table"):
        facts.check_declared_profile("iceberg-serializable")


def test_a_location_without_a_delta_table_is_delta_rs_own_error(tmp_path: Path) -> None:
    from deltalake.exceptions import TableNotFoundError

    with pytest.raises(TableNotFoundError):
        deltars_table_facts(tmp_path / "nothing")


@pytest.mark.parametrize(
    ("partition_by", "configuration", "expected", "reason"),
    [
        (None, {}, "delta-write-serializable", "unset: Delta's default"),
        (None, {"delta.isolationLevel": "Serializable"}, "delta-serializable", "is Serializable"),
        (None, {"delta.enableDeletionVectors": "true"}, "delta-write-serializable-rlc", "row-level concurrency"),
        (None, {"delta.enableDeletionVectors": "true", "delta.isolationLevel": "Serializable"},
         "delta-serializable-rlc", "Databricks Runtime 14.2"),
        (["DS"], {"delta.enableDeletionVectors": "true"}, "delta-write-serializable",
         "partitioned by ds: tables with partitions do not support row-level concurrency"),
    ],
)
def test_the_databricks_profile_follows_from_the_tables_properties(
    tmp_path: Path, partition_by: list[str] | None, configuration: dict[str, str], expected: str, reason: str
) -> None:
    # The same log, committed by Databricks instead of delta-rs (engine unknown / databricks).
    facts = replace(deltars_table_facts(_delta(tmp_path / "t", partition_by, **configuration), table="db.t"),
                    engine="databricks")
    assert facts.profile_name() == expected
    assert any(reason in w for w in facts.why()), facts.why()
    facts.check_declared_profile(expected)
    # Open-source delta-spark has no row-level concurrency: the plain matrix of the level.
    oss = replace(facts, engine="delta-spark")
    assert oss.profile_name() == expected.removesuffix("-rlc")
    assert any("delta-io/delta#7360" in w for w in oss.why())


def test_a_contradicting_delta_profile_is_refused_naming_the_fact(tmp_path: Path) -> None:
    serializable = replace(deltars_table_facts(_delta(tmp_path / "s", None, **{"delta.isolationLevel": "Serializable"}),
                                               table="db.s"), engine="databricks")
    with pytest.raises(InvalidDeclarationError, match=r"delta.isolationLevel=Serializable"):
        serializable.check_declared_profile("delta-write-serializable")
    with pytest.raises(InvalidDeclarationError, match="not delta-rs"):
        serializable.check_declared_profile("delta-rs")
    partitioned = replace(deltars_table_facts(_delta(tmp_path / "p", ["DS"], **{"delta.enableDeletionVectors": "true"}),
                                              table="db.p"), engine="databricks")
    # Declaring row-level concurrency on a partitioned table would admit pairs that fail.
    with pytest.raises(InvalidDeclarationError, match="needs a table without partitions and db.p is partitioned by ds"):
        partitioned.check_declared_profile("delta-write-serializable-rlc")
    rlc = replace(deltars_table_facts(_delta(tmp_path / "r", None, **{"delta.enableDeletionVectors": "true"}),
                                      table="db.r"), engine="databricks")
    # The plain matrix on a row-level table keeps more pairs apart (a runtime before 14.2): allowed.
    rlc.check_declared_profile("delta-write-serializable")
    with pytest.raises(InvalidDeclarationError, match="delta.isolationLevel=WriteSerializable"):
        rlc.check_declared_profile("delta-serializable-rlc")


@pytest.mark.parametrize(
    ("facts", "error"),
    [
        (dict(table_format="delta", properties={"delta.isolationLevel": "Snapshot"}), "Delta knows Serializable"),
        (dict(table_format="delta", properties={"delta.enableDeletionVectors": "yes"}), "expected true or false"),
        (dict(table_format="iceberg", properties={"write.merge.isolation-level": "strict"}), "Iceberg knows serializable"),
        (dict(table_format="iceberg", properties={"write.update.mode": "in-place"}), "copy-on-write, merge-on-read"),
        (dict(table_format="hudi"), "unknown table format 'hudi'"),
        (dict(table_format="iceberg", engine="delta-rs"), "engine 'delta-rs' does not write iceberg tables"),
    ],
)
def test_facts_a_format_does_not_know_are_refused_when_read(facts: dict, error: str) -> None:
    with pytest.raises(InvalidDeclarationError, match=error):
        TableFacts(table="db.t", **facts)


def test_maxcompute_profiles_follow_transactional_and_the_primary_key() -> None:
    standard = TableFacts("p.t", "maxcompute")
    assert standard.profile_name() == "maxcompute-standard"
    delta_table = TableFacts("p.t", "maxcompute", properties={"transactional": "true"}, primary_key=("id",))
    assert delta_table.profile_name() == "maxcompute-transactional"
    # transactional without a primary key: an ACID table, spec 000's rules (not a Delta Table).
    acid = TableFacts("p.t", "maxcompute", properties={"Transactional": "TRUE"}, primary_key=())
    assert acid.profile_name() == "maxcompute-standard"
    with pytest.raises(InvalidDeclarationError, match=r"is transactional \(transactional=true\)"):
        acid.check_declared_profile("maxcompute-transactional")
    with pytest.raises(InvalidDeclarationError, match="not transactional"):
        standard.check_declared_profile("maxcompute-transactional")


# ---------------------------------------------------------------------------------- Spark + Iceberg


@pytest.fixture(scope="module")
def spark(iceberg_engine):  # type: ignore[no-untyped-def]
    return iceberg_engine.session()


@pytest.mark.spark
def test_iceberg_facts_are_the_tables_spec_and_properties(spark) -> None:  # type: ignore[no-untyped-def]
    from occflow.engines.spark.facts import spark_table_facts

    table = "lake.db.facts_events"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, DS STRING, ts TIMESTAMP) USING iceberg "
        "PARTITIONED BY (DS, days(ts), bucket(4, id)) TBLPROPERTIES ('format-version'='2', "
        "'write.merge.isolation-level'='snapshot', 'write.delete.mode'='merge-on-read')"
    )
    facts = spark_table_facts(spark, table)
    # Oracles: the table's own partitions metadata table and its properties as Spark lists them.
    partition_fields = [f.name for f in spark.table(f"{table}.partitions").schema["partition"].dataType.fields]
    assert partition_fields == ["DS", "ts_day", "id_bucket"]
    assert facts.partition_columns == ("ds",)  # the identity field only
    assert facts.partition_transforms == ("days(ts)", "bucket(4, id)")
    listed = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}
    assert dict(facts.properties) == listed
    assert (facts.table_format, facts.engine) == ("iceberg", "spark-iceberg")

    assert facts.profile_name(Operation.MERGE) == "iceberg-snapshot"
    assert facts.profile_name(Operation.UPDATE) == "iceberg-serializable"
    assert facts.iceberg_write_mode(Operation.DELETE) == "merge-on-read"
    assert facts.iceberg_write_mode(Operation.MERGE) == "copy-on-write"
    assert any("days(ts) is a transform" in w for w in facts.why(Operation.MERGE))
    # Levels differ across operations: anything else is held to serializable, and says why.
    assert facts.profile_name() == "iceberg-serializable"
    assert any("merge=snapshot" in w for w in facts.why())

    facts.check_declared_profile("iceberg-snapshot", Operation.MERGE)
    with pytest.raises(InvalidDeclarationError, match=r"write.update.isolation-level=serializable \(unset"):
        facts.check_declared_profile("iceberg-snapshot", Operation.UPDATE)
    with pytest.raises(InvalidDeclarationError, match="write.merge.isolation-level=snapshot"):
        facts.check_declared_profile("iceberg-serializable", Operation.MERGE)


@pytest.mark.spark
def test_iceberg_identity_partitions_are_read_as_spark_lists_them(spark) -> None:  # type: ignore[no-untyped-def]
    from occflow.engines.spark.facts import spark_table_facts

    # Spark prints an all-identity spec as Hive's "# Partition Information", not "# Partitioning".
    table = "lake.db.facts_identity"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(f"CREATE TABLE {table} (id BIGINT, ds STRING, country STRING) USING iceberg PARTITIONED BY (ds, country)")
    facts = spark_table_facts(spark, table)
    partition_fields = [f.name for f in spark.table(f"{table}.partitions").schema["partition"].dataType.fields]
    assert facts.partition_columns == tuple(partition_fields) == ("ds", "country")
    assert facts.partition_transforms == ()
    spark.sql("DROP TABLE IF EXISTS lake.db.facts_flat")
    spark.sql("CREATE TABLE lake.db.facts_flat (id BIGINT, ds STRING) USING iceberg")
    assert spark_table_facts(spark, "lake.db.facts_flat").partition_columns == ()


@pytest.mark.spark
def test_spark_facts_of_a_missing_or_plain_table_are_refused_by_name(spark) -> None:  # type: ignore[no-untyped-def]
    from occflow.engines.spark.facts import spark_table_facts

    with pytest.raises(InvalidDeclarationError, match="cannot read the table facts of lake.db.no_such_table"):
        spark_table_facts(spark, "lake.db.no_such_table")
    spark.sql("CREATE DATABASE IF NOT EXISTS spark_catalog.facts_db")
    spark.sql("DROP TABLE IF EXISTS spark_catalog.facts_db.plain")
    spark.sql("CREATE TABLE spark_catalog.facts_db.plain (id BIGINT) USING parquet")
    with pytest.raises(InvalidDeclarationError, match="is a parquet table"):
        spark_table_facts(spark, "spark_catalog.facts_db.plain")
    with pytest.raises(InvalidDeclarationError, match="bad table identifier"):
        spark_table_facts(spark, "lake.db.x; DROP TABLE lake.db.y")
