"""Apache Iceberg on Spark: runtime jars and a catalog safe across driver processes.

The embedded default is a JDBC catalog (``org.apache.iceberg.jdbc.JdbcCatalog``) on a SQLite
file next to a local warehouse. Its commit is one compare-and-swap ``UPDATE ... WHERE
metadata_location = <the one this writer read>`` inside SQLite, whose file locks serialise
writers across processes, so two Spark drivers committing to one table never lose a commit
(``tests/engines/test_spark_iceberg.py`` proves it with row counts). PostgreSQL works the same
way: give a ``jdbc:postgresql://`` ``uri`` (Debian: libpostgresql-jdbc-java).

The runtime jar is the manifest's ``org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2``
(``scripts/jvm/pom.xml``, resolved by the bootstrap into ``<sys.prefix>/share/occflow/jars/``:
``jvm_artifacts.py``); it already contains the SQL extensions (``IcebergSparkSessionExtensions``),
so the separate extensions jar is not added.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, StrictBool, field_validator, model_validator

from .jvm_artifacts import ICEBERG_SPARK_RUNTIME, jar
from .settings import PathText, SparkConfigError, SparkSettings, SparkValues, no_settings

RUNTIME_JAR = ICEBERG_SPARK_RUNTIME.file_name
EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
JDBC_DRIVER_JARS = {
    # scheme -> (jar candidates under /usr/share/java, Debian package)
    "sqlite": (("sqlite-jdbc.jar", "xerial-sqlite-jdbc.jar"), "libxerial-sqlite-jdbc-java"),
    "postgresql": (("postgresql.jar", "postgresql-jdbc4.jar"), "libpostgresql-jdbc-java"),
}
ISOLATION_LEVELS = ("serializable", "snapshot")
CATALOG_TYPES = ("jdbc", "hadoop", "hive", "rest", "custom")
# Iceberg's JDBC catalog schema (V0, as JdbcUtil creates it), created by us; see _bootstrap_sqlite.
_SQLITE_TABLES = (
    "CREATE TABLE IF NOT EXISTS iceberg_tables(catalog_name VARCHAR(255) NOT NULL,"
    "table_namespace VARCHAR(255) NOT NULL,table_name VARCHAR(255) NOT NULL,"
    "metadata_location VARCHAR(1000),previous_metadata_location VARCHAR(1000),"
    "PRIMARY KEY (catalog_name, table_namespace, table_name))",
    "CREATE TABLE IF NOT EXISTS iceberg_namespace_properties(catalog_name VARCHAR(255) NOT NULL,"
    "namespace VARCHAR(255) NOT NULL,property_key VARCHAR(255),property_value VARCHAR(1000),"
    "PRIMARY KEY (catalog_name, namespace, property_key))",
)


def runtime_jars() -> list[str]:
    """The Iceberg Spark runtime jar (Scala 2.12, as PySpark 3.5 is) from the manifest's folder."""
    return [jar(ICEBERG_SPARK_RUNTIME)]


def jdbc_driver_jar(uri: str) -> str | None:
    """The JDBC driver jar for the catalog ``uri`` from /usr/share/java, or None if not ours."""
    scheme = uri.split(":", 2)[1] if uri.startswith("jdbc:") and uri.count(":") >= 2 else ""
    if scheme not in JDBC_DRIVER_JARS:
        return None
    names, package = JDBC_DRIVER_JARS[scheme]
    share = Path(os.environ.get("OCCFLOW_JAVA_SHARE", "/usr/share/java"))
    for name in names:
        if (share / name).is_file():
            return str(share / name)
    raise SparkConfigError(
        f"no JDBC driver for {scheme} in {share} (looked for {', '.join(names)}): install the Debian "
        f"package {package}"
    )


class IcebergCatalogConfig(SparkSettings):
    """The Iceberg catalog the session registers as ``spark.sql.catalog.<name>``.

    ``commit_retries`` becomes the catalog's default for ``commit.retry.num-retries`` of the
    tables it creates (0 makes a lost commit race surface as ``CommitFailedException``);
    ``isolation`` the default ``write.{update,delete,merge}.isolation-level``. ``cache_enabled``
    is off by default: a cached table does not see commits made by other drivers until it expires.
    """

    settings_name = "Iceberg catalog"

    name: str = "lake"
    type: str = "jdbc"
    uri: str | None = None
    warehouse: PathText | None = None
    commit_retries: int | None = None
    isolation: str | None = None
    cache_enabled: StrictBool = False
    busy_timeout_ms: int = 60000
    properties: SparkValues = Field(default_factory=no_settings)

    @field_validator("name")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not value.isidentifier():
            raise ValueError(f"Iceberg catalog name must be an identifier, got {value!r}")
        return value

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if value not in CATALOG_TYPES:
            raise ValueError(f"unknown Iceberg catalog type {value!r}; known: {', '.join(CATALOG_TYPES)}")
        return value

    @field_validator("uri")
    @classmethod
    def _shared_uri(cls, value: str | None) -> str | None:
        if value is not None and _in_memory_sqlite(value):
            raise ValueError(
                f"uri {value!r}: an in-memory SQLite catalog cannot be shared by drivers; give a file path"
            )
        return value

    @field_validator("commit_retries", mode="before")
    @classmethod
    def _retry_count(cls, value: object) -> object:
        # Strictly a whole number: True or "3" in a connection's extras is a mistake, not a count.
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"commit_retries must be an integer >= 0, got {value!r}")
        return value

    @field_validator("isolation")
    @classmethod
    def _known_isolation(cls, value: str | None) -> str | None:
        if value is not None and value not in ISOLATION_LEVELS:
            raise ValueError(f"isolation must be one of {', '.join(ISOLATION_LEVELS)}, got {value!r}")
        return value

    @model_validator(mode="after")
    def _custom_has_impl(self) -> IcebergCatalogConfig:
        if self.type == "custom" and "catalog-impl" not in self.properties:
            raise ValueError(
                "a custom Iceberg catalog needs properties['catalog-impl'] (the catalog's class)"
            )
        return self

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IcebergCatalogConfig:
        return cls(**dict(data))

    def resolved(self, home: Path) -> IcebergCatalogConfig:
        """With the embedded defaults filled in: SQLite catalog and warehouse under ``home``."""
        uri = self.uri
        warehouse = self.warehouse
        if self.type == "jdbc" and uri is None:
            uri = f"jdbc:sqlite:{home / 'iceberg_catalog.db'}"
        if warehouse is None and self.type in ("jdbc", "hadoop"):
            warehouse = str(home / "warehouse")
        return self.model_copy(update={"uri": uri, "warehouse": warehouse})

    def spark_conf(self) -> dict[str, str]:
        prefix = f"spark.sql.catalog.{self.name}"
        out = {
            prefix: "org.apache.iceberg.spark.SparkCatalog",
            f"{prefix}.cache-enabled": str(self.cache_enabled).lower(),
        }
        if self.type == "jdbc":
            out[f"{prefix}.catalog-impl"] = "org.apache.iceberg.jdbc.JdbcCatalog"
        elif self.type != "custom":
            out[f"{prefix}.type"] = self.type
        if self.uri:
            out[f"{prefix}.uri"] = self.uri
        if self.warehouse:
            wh = self.warehouse
            out[f"{prefix}.warehouse"] = wh if "://" in wh else Path(wh).absolute().as_uri()
        if self.is_sqlite:
            out[f"{prefix}.jdbc.busy_timeout"] = str(self.busy_timeout_ms)
            # Iceberg's table-exists probe leaves a SQLite statement open, which holds a read lock
            # for the life of the connection and blocks every other driver's commit; we create
            # the catalog tables ourselves (prepare()) and switch the probe off.
            out[f"{prefix}.jdbc.init-catalog-tables"] = "false"
        if self.commit_retries is not None:
            out[f"{prefix}.table-default.commit.retry.num-retries"] = str(self.commit_retries)
        if self.isolation is not None:
            for op in ("update", "delete", "merge"):
                out[f"{prefix}.table-default.write.{op}.isolation-level"] = self.isolation
        for key, value in self.properties.items():
            out[f"{prefix}.{key}"] = value
        return out

    @property
    def is_sqlite(self) -> bool:
        return bool(self.uri and self.uri.startswith("jdbc:sqlite:"))

    def prepare(self) -> None:
        """Create what the catalog needs before a driver starts: warehouse, SQLite schema."""
        if self.warehouse and "://" not in self.warehouse:
            Path(self.warehouse).mkdir(parents=True, exist_ok=True)
        if self.is_sqlite and self.uri:
            _bootstrap_sqlite(_sqlite_path(self.uri))


def _sqlite_path(uri: str) -> str:
    return uri[len("jdbc:sqlite:") :].split("?", 1)[0]


def _in_memory_sqlite(uri: str) -> bool:
    path = _sqlite_path(uri)
    return uri.startswith("jdbc:sqlite:") and (path in ("", ":memory:") or path.startswith("file::memory"))


def _bootstrap_sqlite(path: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path, timeout=60) as conn:
        for ddl in _SQLITE_TABLES:
            conn.execute(ddl)
