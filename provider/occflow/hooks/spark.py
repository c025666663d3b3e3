"""``occflow_spark`` connections: where a write job's Spark session comes from.

A connection names a master URL (``local[2]``, ``spark://host:7077``, ``yarn``) in its host or a
Spark Connect URL (``sc://host:15002``), and in its extras the keys of
``occflow.engines.spark.SparkConfig``: ``table_format``, ``conf`` (Spark conf), ``catalog`` (the
table format's catalog settings), ``jars``, ``home``, ``app_name``. The default connection id
maps to the embedded local session (``local[2]``, an Iceberg JDBC catalog on SQLite and a local
warehouse under ``$OCCFLOW_HOME``) when no such connection is defined, so the example DAGs run
on a laptop.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from ..engines.deltars.location import table_location
from ..engines.spark import SparkConfig, SparkConfigError

DEFAULT_CONN_ID = "occflow_spark_default"
CONN_TYPE = "occflow_spark"


def embedded_home() -> Path:
    """Where the embedded default keeps warehouse and catalog: ``$OCCFLOW_HOME`` or ``~/.occflow``."""
    return Path(os.environ.get("OCCFLOW_HOME") or Path.home() / ".occflow").expanduser()


def embedded_warehouse() -> str:
    return str(embedded_home() / "warehouse")


def delta_warehouse() -> Path:
    """The root every derived delta-rs location stays under: ``$OCCFLOW_HOME/delta``."""
    return embedded_home() / "delta"


def default_delta_location(table: str) -> str:
    """``$OCCFLOW_HOME/delta/<db>/<table>`` (``~/.occflow`` by default) for the embedded default;
    an error if the name would lead outside that root (``engines.deltars.location``)."""
    return table_location(delta_warehouse(), table)


def config_from_connection(host: str | None, extras: Mapping[str, Any]) -> dict[str, Any]:
    """A Spark config dict from a connection's host and extras, validated by ``SparkConfig``."""
    data: dict[str, Any] = {}
    for key, value in extras.items():
        # The UI stores nested extras as JSON text.
        data[key] = json.loads(value) if key in ("conf", "catalog", "jars") and isinstance(value, str) else value
    if host and "master" not in data and "remote" not in data:
        data["remote" if host.startswith("sc://") else "master"] = host
    return SparkConfig.from_dict(data).to_dict()


class OccflowSparkHook(BaseHook):
    """Reads an ``occflow_spark`` connection into the config the Spark engine starts from."""

    conn_name_attr = "occflow_spark_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONN_TYPE
    hook_name = "occflow Spark"

    def __init__(self, occflow_spark_conn_id: str = DEFAULT_CONN_ID) -> None:
        super().__init__()
        self.conn_id = occflow_spark_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema", "login", "password", "port"],
            "relabeling": {"host": "Master or Spark Connect URL"},
            "placeholders": {
                "host": "local[2] | spark://host:7077 | yarn | sc://host:15002",
                "extra": json.dumps(
                    {
                        "table_format": "iceberg",
                        "conf": {"spark.executor.memory": "2g"},
                        "catalog": {"type": "hadoop", "warehouse": "s3a://bucket/warehouse"},
                    }
                ),
            },
        }

    def session_config(self) -> dict[str, Any]:
        """The config for this connection; the embedded default when the default id is undefined."""
        try:
            conn = self.get_connection(self.conn_id)
        except AirflowNotFoundException:
            if self.conn_id == DEFAULT_CONN_ID:
                return SparkConfig().to_dict()
            raise
        try:
            return config_from_connection(conn.host, conn.extra_dejson or {})
        except SparkConfigError as exc:  # say which connection's extras (or host) to mend
            raise SparkConfigError(f"connection {self.conn_id!r} (host or extras): {exc}", exc.problems) from None
