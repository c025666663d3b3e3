"""``get_provider_info()``: what Airflow's providers manager learns about occflow."""

from __future__ import annotations

from typing import Any

# Each entry is added when the module it names exists; tests/test_provider_info.py imports them all.
_HOOKS: list[str] = ["occflow.hooks.spark"]
_OPERATORS: list[str] = [
    "occflow.operators.base",
    "occflow.operators.spark",
    "occflow.operators.spark_submit",
    "occflow.operators.delta",
]
_SENSORS: list[str] = ["occflow.sensors.commit", "occflow.sensors.conflict_free"]
_TRIGGERS: list[str] = ["occflow.triggers.lease", "occflow.triggers.table"]
_NOTIFICATIONS: list[str] = []
_CONNECTION_TYPES: list[dict[str, str]] = [
    {"hook-class-name": "occflow.hooks.spark.OccflowSparkHook", "connection-type": "occflow_spark"}
]
_TASK_DECORATORS: list[dict[str, str]] = [
    {"name": "occflow_write", "class-name": "occflow.decorators.occflow_write.occflow_write"}
]


def get_provider_info() -> dict[str, Any]:
    from . import __version__

    info: dict[str, Any] = {
        "package-name": "airflow-provider-occflow",
        "name": "occflow",
        "description": "Concurrent write pipelines on Delta Lake, Iceberg and MaxCompute tables "
        "that know each format's conflict matrix.",
        "versions": [__version__],
    }
    if _HOOKS:
        info["hooks"] = [{"integration-name": "occflow", "python-modules": _HOOKS}]
    if _OPERATORS:
        info["operators"] = [{"integration-name": "occflow", "python-modules": _OPERATORS}]
    if _SENSORS:
        info["sensors"] = [{"integration-name": "occflow", "python-modules": _SENSORS}]
    if _TRIGGERS:
        info["triggers"] = [{"integration-name": "occflow", "python-modules": _TRIGGERS}]
    if _NOTIFICATIONS:
        info["notifications"] = _NOTIFICATIONS
    if _CONNECTION_TYPES:
        info["connection-types"] = _CONNECTION_TYPES
    if _TASK_DECORATORS:
        info["task-decorators"] = _TASK_DECORATORS
    return info
