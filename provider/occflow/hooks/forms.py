"""The connection forms, as data (``conn-fields`` and ``ui-field-behaviour`` of
``get_provider_info()``). Pure: Airflow's providers manager calls ``get_provider_info()`` while
Airflow itself is still importing, so nothing reached from it may import Airflow."""

from __future__ import annotations

import json
from typing import Any

SPARK_CONN_TYPE = "occflow_spark"

#: The connection form (``get_provider_info()["connection-types"]``, Airflow's ``conn-fields``):
#: extra fields, each stored under its name in the connection's extras.
SPARK_CONNECTION_FIELDS: dict[str, dict[str, Any]] = {
    "table_format": {
        "label": "Table format",
        "description": "The format the session writes: iceberg (default), delta, parquet or hive.",
        "schema": {"type": ["string", "null"]},
    },
    "deploy_mode": {
        "label": "Deploy mode",
        "description": "client or cluster: where the driver runs on a cluster master (spark.submit.deployMode).",
        "schema": {"type": ["string", "null"]},
    },
    "catalog_type": {
        "label": "Iceberg catalog type",
        "description": "jdbc (default), hadoop, hive or rest.",
        "schema": {"type": ["string", "null"]},
    },
    "catalog_uri": {
        "label": "Catalog URI",
        "description": "The catalog's URI: a JDBC URL, a Hive metastore thrift:// URL or a REST catalog URL.",
        "schema": {"type": ["string", "null"]},
    },
    "warehouse": {
        "label": "Warehouse",
        "description": "Where the catalog keeps table data, e.g. s3a://bucket/warehouse.",
        "schema": {"type": ["string", "null"]},
    },
    "conf": {
        "label": "Spark conf (JSON)",
        "description": 'Spark settings as a JSON object, e.g. {"spark.executor.memory": "2g"}.',
        "schema": {"type": ["object", "null"], "format": "json"},
    },
    "app_name": {
        "label": "Application name",
        "schema": {"type": ["string", "null"]},
    },
}

#: Which standard fields the form shows, and as what (``ui-field-behaviour``, kebab-case keys).
SPARK_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["schema", "login", "password", "port"],
    "relabeling": {"host": "Master or Spark Connect URL"},
    "placeholders": {
        "host": "local[2] | spark://host:7077 | yarn | sc://host:15002",
        "extra": json.dumps({"catalog": {"type": "hadoop", "warehouse": "s3a://bucket/warehouse"}}),
        "warehouse": "s3a://bucket/warehouse",
        "catalog_uri": "jdbc:postgresql://host/iceberg | thrift://metastore:9083 | https://catalog/api",
        "conf": json.dumps({"spark.executor.memory": "2g"}),
    },
}

MAXCOMPUTE_CONNECTION = {
    "connection-type": "occflow_maxcompute",
    "hook-class-name": "occflow.hooks.maxcompute.OccflowMaxComputeHook",
    "hook-name": "occflow MaxCompute",
    "ui-field-behaviour": {
        "hidden-fields": ["schema", "port", "host"],
        "relabeling": {"login": "AccessKey ID", "password": "AccessKey secret"},
        "placeholders": {"login": "LTAI...", "password": "the AccessKey secret"},
    },
    "conn-fields": {
        "project": {"label": "Project", "description": "The MaxCompute project the tables are in.",
                    "schema": {"type": ["string", "null"]}},
        "endpoint": {"label": "Endpoint",
                     "description": "The project's endpoint, e.g. https://service.cn-hangzhou.maxcompute.aliyun.com/api",
                     "schema": {"type": ["string", "null"], "format": "url"}},
    },
}
