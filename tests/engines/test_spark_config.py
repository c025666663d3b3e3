"""SparkConfig, table identifiers and SQL splitting: bad input gets an error that names it.

No Spark session is started here: these are the checks a user hits before any job runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from occflow.core.errors import InvalidDeclarationError
from occflow.core.operations import Operation
from occflow.engines.spark import (
    ApplicationJob,
    CallableJob,
    SparkConfig,
    SparkConfigError,
    SqlJob,
    as_job,
    quote_table,
    split_statements,
    split_table,
)
from occflow.engines.spark.iceberg_catalog import IcebergCatalogConfig


def test_default_config_is_local_session_with_iceberg_jdbc_catalog_on_sqlite(tmp_path: Path) -> None:
    conf = SparkConfig(home=str(tmp_path)).spark_conf()
    assert conf["spark.sql.extensions"] == "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
    assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.lake.catalog-impl"] == "org.apache.iceberg.jdbc.JdbcCatalog"
    assert conf["spark.sql.catalog.lake.uri"] == f"jdbc:sqlite:{tmp_path / 'iceberg_catalog.db'}"
    assert conf["spark.sql.catalog.lake.warehouse"] == (tmp_path / "warehouse").as_uri()
    assert conf["spark.sql.catalog.lake.jdbc.init-catalog-tables"] == "false"
    jars = conf["spark.jars"].split(",")
    assert any(j.endswith("iceberg-spark-runtime-3.5_2.12-1.10.2.jar") for j in jars)
    assert any("sqlite-jdbc" in Path(j).name for j in jars)
    assert SparkConfig().master == "local[2]"


def test_commit_retries_and_isolation_become_catalog_table_defaults(tmp_path: Path) -> None:
    cfg = SparkConfig.from_dict(
        {"home": str(tmp_path), "catalog": {"commit_retries": 0, "isolation": "snapshot"}}
    )
    conf = cfg.spark_conf()
    assert conf["spark.sql.catalog.lake.table-default.commit.retry.num-retries"] == "0"
    assert conf["spark.sql.catalog.lake.table-default.write.merge.isolation-level"] == "snapshot"


def test_user_conf_overrides_defaults_and_round_trips_through_dict(tmp_path: Path) -> None:
    cfg = SparkConfig.from_dict(
        {"master": "local[1]", "conf": {"spark.sql.shuffle.partitions": 1}, "home": str(tmp_path)}
    )
    assert cfg.spark_conf()["spark.sql.shuffle.partitions"] == "1"
    again = SparkConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"mastr": "local"}, "unknown Spark config keys ['mastr']"),
        ({"table_format": "orc"}, "unknown table_format 'orc'"),
        ({"master": ""}, "master must be"),
        ({"remote": "http://x:15002"}, "Spark Connect URL"),
        ({"conf": ["a"]}, "conf must be a mapping"),
        ({"conf": {"k": {"nested": 1}}}, "conf['k']"),
        ({"catalog": {"uri": "jdbc:sqlite:/x", "retries": 1}}, "unknown Iceberg catalog keys ['retries']"),
        ({"catalog": {"commit_retries": -1}}, "commit_retries must be an integer >= 0"),
        ({"catalog": {"isolation": "read-committed"}}, "isolation must be one of"),
        ({"catalog": {"type": "nessie"}}, "unknown Iceberg catalog type 'nessie'"),
        ({"catalog": {"name": "my-cat"}}, "catalog name must be an identifier"),
        ({"table_format": "parquet", "catalog": {"name": "x"}}, "takes no catalog settings"),
        ({"jars": 5}, "jars must be a list"),
    ],
)
def test_malformed_config_is_a_clear_error(data: dict[str, object], needle: str) -> None:
    with pytest.raises(SparkConfigError) as err:
        SparkConfig.from_dict(data)
    assert needle in str(err.value)


def test_config_that_is_not_a_mapping_is_rejected() -> None:
    with pytest.raises(SparkConfigError, match="must be a mapping"):
        SparkConfig.from_dict(["master", "local"])  # type: ignore[arg-type]


def test_delta_without_jars_names_the_manifest_coordinate_and_the_environment_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("OCCFLOW_DELTA_SPARK_JARS", raising=False)
    monkeypatch.setenv("OCCFLOW_JVM_JARS_DIR", str(tmp_path))  # a bootstrap that resolved nothing
    with pytest.raises(SparkConfigError, match="io.delta:delta-spark_2.12:3.3.3.*OCCFLOW_DELTA_SPARK_JARS"):
        SparkConfig(table_format="delta").spark_conf()


def test_delta_jars_from_environment_and_extensions(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    jars = [tmp_path / "delta-spark_2.12-3.3.2.jar", tmp_path / "delta-storage-3.3.2.jar"]
    for jar in jars:
        jar.write_bytes(b"")
    monkeypatch.setenv("OCCFLOW_DELTA_SPARK_JARS", ",".join(map(str, jars)))
    conf = SparkConfig(table_format="delta").spark_conf()
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.sql.catalog.spark_catalog"] == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    assert conf["spark.jars"].split(",") == [str(j) for j in jars]


def test_delta_jar_that_does_not_exist_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OCCFLOW_DELTA_SPARK_JARS", str(tmp_path / "missing.jar"))
    with pytest.raises(SparkConfigError, match="missing.jar"):
        SparkConfig(table_format="delta").spark_conf()


def test_postgres_catalog_needs_its_debian_jdbc_driver(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OCCFLOW_JAVA_SHARE", str(tmp_path))  # an empty /usr/share/java
    cfg = SparkConfig(catalog={"uri": "jdbc:postgresql://127.0.0.1:5432/lake"}, home=str(tmp_path))
    with pytest.raises(SparkConfigError, match="libpostgresql-jdbc-java"):
        cfg.spark_conf()


def test_in_memory_sqlite_catalog_is_refused_because_drivers_cannot_share_it(tmp_path: Path) -> None:
    # Refused when the catalog settings are made, before any driver could prepare() it.
    with pytest.raises(SparkConfigError, match="in-memory SQLite"):
        IcebergCatalogConfig(uri="jdbc:sqlite::memory:", warehouse=str(tmp_path)).prepare()
    with pytest.raises(SparkConfigError, match="catalog: uri 'jdbc:sqlite::memory:': an in-memory SQLite"):
        SparkConfig.from_dict({"catalog": {"uri": "jdbc:sqlite::memory:"}})


def test_every_bad_field_is_one_line_naming_the_field_the_value_and_what_is_allowed() -> None:
    with pytest.raises(SparkConfigError) as err:
        SparkConfig.from_dict(
            {"master": "", "tabel_format": "delta", "conf": {"spark.x": [1]}, "catalog": {"isolation": "none"}}
        )
    assert str(err.value).splitlines() == [
        "invalid Spark config:",
        "  unknown Spark config keys ['tabel_format']; known keys: master, remote, app_name, table_format, conf, "
        "catalog, jars, home, log_level",
        "  master must be a Spark master URL such as 'local[2]' or 'spark://host:7077' (no spaces or line breaks), got ''",
        "  conf['spark.x'] must be a string, number or boolean, got [1]",
        "  catalog: isolation must be one of serializable, snapshot, got 'none'",
    ]
    assert len(err.value.problems) == 4


def test_settings_are_read_only_and_coerced_to_spark_text(tmp_path: Path) -> None:
    cfg = SparkConfig(home=tmp_path, conf={"spark.a": 1, "spark.b": True}, jars="a.jar, b.jar")
    assert cfg.home == str(tmp_path)
    assert dict(cfg.conf) == {"spark.a": "1", "spark.b": "true"}
    assert cfg.jars == ("a.jar", "b.jar")
    with pytest.raises(TypeError):
        cfg.conf["spark.a"] = "2"  # type: ignore[index]
    with pytest.raises(ValueError, match="frozen"):
        cfg.master = "local[1]"  # type: ignore[misc]
    with pytest.raises(SparkConfigError, match="cache_enabled must be true or false, got 'yes'"):
        IcebergCatalogConfig(cache_enabled="yes")  # type: ignore[arg-type]
    with pytest.raises(SparkConfigError, match=r"needs properties\['catalog-impl'\]"):
        IcebergCatalogConfig(type="custom")


@pytest.mark.parametrize(
    ("table", "quoted"),
    [
        ("lake.db.events", "`lake`.`db`.`events`"),
        ("db.t_1", "`db`.`t_1`"),
        ("lake.`my db`.`we``ird`", "`lake`.`my db`.`we``ird`"),
    ],
)
def test_table_identifiers_are_backquoted(table: str, quoted: str) -> None:
    assert quote_table(table) == quoted


@pytest.mark.parametrize("bad", ["", "lake.db.t; DROP TABLE x", "lake..t", "db.t'--", "1db.t", "db.t x"])
def test_bad_table_identifier_is_rejected(bad: str) -> None:
    with pytest.raises(InvalidDeclarationError, match="table identifier"):
        split_table(bad)


def test_sql_text_splits_into_statements_outside_quotes_and_comments() -> None:
    text = "SET a = 1; -- comment; still comment\nINSERT INTO t VALUES ('x;y', \"a;b\"); /* c; */ ;UPDATE t SET v = 1"
    assert split_statements(text) == [
        "SET a = 1",
        "-- comment; still comment\nINSERT INTO t VALUES ('x;y', \"a;b\")",
        "UPDATE t SET v = 1",
    ]


def test_sql_job_operation_is_its_first_write_statement() -> None:
    job = SqlJob("SET spark.sql.shuffle.partitions = 1; MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE")
    assert job.operation() is Operation.MERGE
    with pytest.raises(InvalidDeclarationError, match="no statement"):
        SqlJob(" ; -- nothing\n")


def test_job_shapes_are_recognised_and_bad_references_named(tmp_path: Path) -> None:
    assert isinstance(as_job("INSERT INTO t VALUES (1)"), SqlJob)
    assert isinstance(as_job(tmp_path / "app.py"), ApplicationJob)
    assert isinstance(as_job(lambda spark, ctx: None), CallableJob)
    assert CallableJob.from_reference("json:dumps").fn is json.dumps
    with pytest.raises(InvalidDeclarationError, match="package.module:function"):
        CallableJob.from_reference("json.dumps")
    with pytest.raises(InvalidDeclarationError, match="no attribute"):
        CallableJob.from_reference("json:nope")
    with pytest.raises(InvalidDeclarationError, match=r"\.py file"):
        ApplicationJob("job.sh")
    with pytest.raises(InvalidDeclarationError, match="a job is SQL text"):
        as_job(42)  # type: ignore[arg-type]
