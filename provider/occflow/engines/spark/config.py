"""Where and how Spark write jobs run (``SparkConfig``), and the table format a config names."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .delta_spark import DeltaFormat
from .formats import NoConflictDetectionWarning, PlainFormat, TableFormat
from .iceberg import IcebergFormat
from .settings import SparkConfigError, str_mapping, str_tuple

TABLE_FORMATS = ("iceberg", "delta", "parquet", "hive")
#: Spark's built-in catalog: where ``db.table`` resolves unless ``spark.sql.defaultCatalog`` says otherwise.
SESSION_CATALOG = "spark_catalog"

__all__ = ["SESSION_CATALOG", "TABLE_FORMATS", "NoConflictDetectionWarning", "SparkConfig", "SparkConfigError", "table_format_for"]


@dataclass(frozen=True)
class SparkConfig:
    """Where and how write jobs run: master or Spark Connect URL, conf, table format, catalog.

    ``catalog`` holds the table format's catalog settings (for Iceberg see
    ``IcebergCatalogConfig``; Delta takes ``jars``). ``home`` is where the embedded default keeps
    its warehouse and catalog database (``$OCCFLOW_HOME`` or ``~/.occflow``).
    """

    master: str = "local[2]"
    remote: str | None = None
    app_name: str = "occflow"
    table_format: str = "iceberg"
    conf: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    catalog: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    jars: tuple[str, ...] = ()
    home: str | None = None

    def __post_init__(self) -> None:
        if self.table_format not in TABLE_FORMATS:
            raise SparkConfigError(
                f"unknown table_format {self.table_format!r}; known formats: {', '.join(TABLE_FORMATS)}"
            )
        if not isinstance(self.master, str) or not self.master:
            raise SparkConfigError(f"master must be a Spark master URL such as 'local[2]', got {self.master!r}")
        if self.remote is not None and not re.match(r"^sc://[^/\s]+", str(self.remote)):
            raise SparkConfigError(f"remote must be a Spark Connect URL 'sc://host:port', got {self.remote!r}")
        object.__setattr__(self, "conf", str_mapping(self.conf, "conf"))
        if not isinstance(self.catalog, Mapping):
            raise SparkConfigError(f"catalog must be a mapping, got {type(self.catalog).__name__}")
        object.__setattr__(self, "catalog", MappingProxyType(dict(self.catalog)))
        object.__setattr__(self, "jars", str_tuple(self.jars, "jars"))
        self.table_format_spec()  # validates the catalog settings now, not at the first job

    _KEYS = ("master", "remote", "app_name", "table_format", "conf", "catalog", "jars", "home")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> SparkConfig:
        """From a plain dict (an Airflow connection's extras); unknown keys are an error."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise SparkConfigError(f"Spark config must be a mapping, got {type(data).__name__}")
        unknown = sorted(set(data) - set(cls._KEYS))
        if unknown:
            raise SparkConfigError(
                f"unknown Spark config keys {unknown}; known keys: {', '.join(cls._KEYS)}"
            )
        kwargs = {k: v for k, v in data.items() if v is not None or k == "remote"}
        for key in ("master", "app_name", "table_format", "home"):
            if key in kwargs and not isinstance(kwargs[key], str):
                raise SparkConfigError(f"{key} must be a string, got {kwargs[key]!r}")
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "master": self.master,
            "remote": self.remote,
            "app_name": self.app_name,
            "table_format": self.table_format,
            "conf": dict(self.conf),
            "catalog": dict(self.catalog),
            "jars": list(self.jars),
            "home": self.home,
        }

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
        jars = [*fmt.jars(), *self.jars]
        if jars:
            out["spark.jars"] = ",".join(jars)
        out.update(self.conf)
        return out


def table_format_for(config: SparkConfig) -> TableFormat:
    """The table format ``config`` names, with its catalog settings validated."""
    if config.table_format == "iceberg":
        return IcebergFormat.from_catalog(config.catalog, config.home_dir)
    if config.table_format == "delta":
        return DeltaFormat.from_catalog(config.catalog)
    if config.catalog:
        raise SparkConfigError(f"table_format {config.table_format!r} takes no catalog settings")
    return PlainFormat(name=config.table_format)
