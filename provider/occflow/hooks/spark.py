"""``occflow_spark`` connections: where a write job's Spark session comes from.

A connection names a master URL (``local[2]``, ``spark://host:7077``, ``yarn``) or a Spark
Connect URL (``sc://host:15002``), Spark conf, and the table format's catalog settings, all in
its extras. The default connection id maps to the embedded local session (``local[2]``, a
local Iceberg warehouse) when no such connection is defined, so the example DAGs run on a laptop.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from ..core.errors import InvalidDeclarationError

DEFAULT_CONN_ID = "occflow_spark_default"
CONN_TYPE = "occflow_spark"

# Extras a connection may carry; anything else is a typo the user should hear about.
_EXTRA_KEYS = frozenset({"master", "remote", "conf", "catalog", "warehouse", "app_name", "spark_submit"})


def embedded_warehouse() -> str:
    """Where the embedded default keeps its tables: ``$OCCFLOW_WAREHOUSE`` or ``$AIRFLOW_HOME/occflow_warehouse``."""
    if os.environ.get("OCCFLOW_WAREHOUSE"):
        return os.environ["OCCFLOW_WAREHOUSE"]
    home = Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow")
    return str(home / "occflow_warehouse")


def embedded_config() -> dict[str, Any]:
    """The session config of the embedded default: small local Spark, local Iceberg warehouse."""
    return {
        "master": "local[2]",
        "app_name": "occflow",
        "warehouse": embedded_warehouse(),
        "conf": {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
        "catalog": {},
    }


def config_from_extras(host: str | None, extras: Mapping[str, Any]) -> dict[str, Any]:
    """A session config from a connection's host and extras; unknown extras are an error."""
    unknown = set(extras) - _EXTRA_KEYS
    if unknown:
        raise InvalidDeclarationError(
            f"occflow_spark connection: unknown extras {sorted(unknown)}; known: {sorted(_EXTRA_KEYS)}"
        )
    config = embedded_config()
    master = extras.get("master") or host or config["master"]
    if str(master).startswith("sc://"):
        config["remote"] = str(master)
        config.pop("master")
    else:
        config["master"] = str(master)
    if extras.get("remote"):
        config["remote"] = str(extras["remote"])
        config.pop("master", None)
    for key in ("conf", "catalog", "spark_submit"):
        value = extras.get(key, {})
        if isinstance(value, str):
            value = json.loads(value)
        if not isinstance(value, Mapping):
            raise InvalidDeclarationError(f"occflow_spark connection: extra {key!r} must be a JSON object")
        config[key] = {**config.get(key, {}), **{str(k): str(v) for k, v in value.items()}}
    for key in ("warehouse", "app_name"):
        if extras.get(key):
            config[key] = str(extras[key])
    return config


class OccflowSparkHook(BaseHook):
    """Reads an ``occflow_spark`` connection into the config dict the Spark engine starts from."""

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
                    {"conf": {"spark.executor.memory": "2g"}, "catalog": {"type": "hadoop"},
                     "warehouse": "s3a://bucket/warehouse"}
                ),
            },
        }

    def session_config(self) -> dict[str, Any]:
        """The config for this connection; the embedded default when the default id is undefined."""
        try:
            conn = self.get_connection(self.conn_id)
        except AirflowNotFoundException:
            if self.conn_id == DEFAULT_CONN_ID:
                return embedded_config()
            raise
        return config_from_extras(conn.host, conn.extra_dejson or {})
