"""Where and how Spark write jobs run (``SparkConfig``), and the table format a config names."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationInfo, field_validator

from .delta_spark import DeltaFormat
from .formats import NoConflictDetectionWarning, PlainFormat, TableFormat
from .iceberg import IcebergFormat
from .iceberg_catalog import IcebergCatalogConfig
from .jvm_artifacts import check_spark_jars
from .log4j import LOG_LEVELS, driver_log_conf
from .settings import (
    PathText,
    ReadOnlyMapping,
    SparkConfigError,
    SparkSettings,
    SparkValues,
    StrList,
    no_settings,
)

TABLE_FORMATS = ("iceberg", "delta", "parquet", "hive")
#: Spark's built-in catalog: where ``db.table`` resolves unless ``spark.sql.defaultCatalog`` says otherwise.
SESSION_CATALOG = "spark_catalog"
#: ``sc://host[:port][/;key=value;...]``, whole: no whitespace or control character anywhere (a
#: newline in the URL would smuggle arguments into spark-submit and the Connect client).
_SPARK_CONNECT_URL = re.compile(r"sc://[A-Za-z0-9.\-\[\]:]+(?:/(?:;[A-Za-z0-9_.\-]+=[^;\s\x00-\x1f\x7f]*)*)?")
#: Nothing a master URL holds is whitespace or a control character.
_NO_SPACE = re.compile(r"[^\s\x00-\x1f\x7f]+")

__all__ = [
    "SESSION_CATALOG",
    "TABLE_FORMATS",
    "NoConflictDetectionWarning",
    "SparkConfig",
    "SparkConfigError",
    "table_format_for",
]


class SparkConfig(SparkSettings):
    """Where and how write jobs run: master or Spark Connect URL, conf, table format, catalog.

    ``catalog`` holds the table format's catalog settings (for Iceberg see
    ``IcebergCatalogConfig``; Delta takes ``jars``). ``home`` is where the embedded default keeps
    its warehouse and catalog database (``$OCCFLOW_HOME`` or ``~/.occflow``). ``log_level`` is the
    level of Spark's own log lines in a session occflow starts in its process, with the start-up
    lines nobody can act on dropped (``log4j.py``); ``None`` keeps Spark's logging as it is.
    """

    settings_name = "Spark config"

    master: str = "local[2]"
    remote: str | None = None
    app_name: str = "occflow"
    table_format: str = "iceberg"
    conf: SparkValues = Field(default_factory=no_settings)
    catalog: ReadOnlyMapping = Field(default_factory=no_settings)
    jars: StrList = ()
    home: PathText | None = None
    log_level: str | None = "WARN"

    @field_validator("master")
    @classmethod
    def _master_url(cls, value: str) -> str:
        if not value or not _NO_SPACE.fullmatch(value):
            raise ValueError(
                f"master must be a Spark master URL such as 'local[2]' or 'spark://host:7077' (no spaces or "
                f"line breaks), got {value!r}"
            )
        return value

    @field_validator("remote")
    @classmethod
    def _connect_url(cls, value: str | None) -> str | None:
        if value is not None and not _SPARK_CONNECT_URL.fullmatch(value):
            raise ValueError(
                f"remote must be a Spark Connect URL 'sc://host:port' (optionally '/;key=value' parameters, no "
                f"spaces or line breaks), got {value!r}"
            )
        return value

    @field_validator("log_level")
    @classmethod
    def _log4j_level(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if value.upper() not in LOG_LEVELS:
            raise ValueError(
                f"log_level must be one of Spark's log4j levels {', '.join(LOG_LEVELS)}, or null for Spark's own "
                f"logging configuration, got {value!r}"
            )
        return value.upper()

    @field_validator("table_format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value not in TABLE_FORMATS:
            raise ValueError(f"unknown table_format {value!r}; known formats: {', '.join(TABLE_FORMATS)}")
        return value

    @field_validator("catalog")
    @classmethod
    def _catalog_of_format(cls, value: Mapping[str, Any], info: ValidationInfo) -> Mapping[str, Any]:
        # Checked now, not at the first job; skipped when the table format itself is bad.
        if "table_format" in info.data:
            _check_catalog(info.data["table_format"], value)
        return value

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> SparkConfig:
        """From a plain dict (an Airflow connection's extras); unknown keys are an error."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise SparkConfigError(f"Spark config must be a mapping, got {type(data).__name__}")
        # A key given as null takes its default (connection extras spell "not set" that way).
        return cls(**{k: v for k, v in data.items() if v is not None or k not in cls.model_fields})

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types: what ``from_dict`` reads back (the spark-submit driver's ``--config``)."""
        return self.model_dump(mode="json")

    @property
    def home_dir(self) -> Path:
        return Path(self.home or os.environ.get("OCCFLOW_HOME") or Path.home() / ".occflow").expanduser()

    def table_format_spec(self) -> TableFormat:
        return table_format_for(self)

    @property
    def table_catalog(self) -> str:
        """The catalog a declared ``db.table`` is in: the engine qualifies it with the Iceberg
        catalog (``lake``); Delta and plain tables live in Spark's session catalog."""
        fmt = self.table_format_spec()
        return fmt.catalog.name if isinstance(fmt, IcebergFormat) else SESSION_CATALOG

    @property
    def sql_catalog(self) -> str:
        """The catalog Spark SQL resolves ``db.table`` in (``spark.sql.defaultCatalog``): for SQL
        jobs, ``db.t`` on an Iceberg config is ``spark_catalog.db.t``, not ``lake.db.t``."""
        return self.conf.get("spark.sql.defaultCatalog") or SESSION_CATALOG

    def spark_conf(self) -> dict[str, str]:
        """Every Spark setting the session needs; the user's ``conf`` wins over our defaults."""
        fmt = self.table_format_spec()
        out = {
            "spark.app.name": self.app_name,
            # Small sessions: other Spark drivers share the machine, and writes are small.
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
        }
        out.update(fmt.spark_conf())
        # The format's jars are checked by the format; the user's extra ones here, before any write.
        check_spark_jars([*self.jars, *str(self.conf.get("spark.jars", "")).split(",")],
                         origin="the Spark config's jars / spark.jars")
        jars = [*fmt.jars(), *self.jars]
        if jars:
            out["spark.jars"] = ",".join(jars)
        out.update(self.conf)
        return out

    def driver_log_conf(self) -> dict[str, str]:
        """The conf that gives a driver JVM started in this process occflow's log configuration
        (merged with ``conf``'s own Java options; empty if ``conf`` names its own log4j file)."""
        return driver_log_conf(self.log_level, self.master, self.conf)


def _check_catalog(table_format: str, catalog: Mapping[str, Any]) -> None:
    """Raise ``SparkConfigError`` if ``catalog`` is not the settings ``table_format`` takes."""
    if table_format == "iceberg":
        IcebergCatalogConfig.from_dict(catalog)
    elif table_format == "delta":
        DeltaFormat.from_catalog(catalog)
    elif catalog:
        raise SparkConfigError(f"table_format {table_format!r} takes no catalog settings")


def table_format_for(config: SparkConfig) -> TableFormat:
    """The table format ``config`` names (its catalog settings were checked when it was made)."""
    if config.table_format == "iceberg":
        return IcebergFormat.from_catalog(config.catalog, config.home_dir)
    if config.table_format == "delta":
        return DeltaFormat.from_catalog(config.catalog)
    return PlainFormat(name=config.table_format)
