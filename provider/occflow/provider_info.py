"""``get_provider_info()``: what Airflow's providers manager learns about occflow."""

from __future__ import annotations

from typing import Any

from . import __version__

_INTEGRATION = "occflow"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-occflow",
        "name": "occflow",
        "description": "Concurrent write pipelines on Delta Lake, Iceberg and MaxCompute tables "
        "that know each format's conflict matrix.",
        "versions": [__version__],
        "hooks": [{"integration-name": _INTEGRATION, "python-modules": ["occflow.hooks.spark"]}],
        "operators": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "occflow.operators.base",
                    "occflow.operators.spark",
                    "occflow.operators.spark_submit",
                    "occflow.operators.delta",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": ["occflow.sensors.commit", "occflow.sensors.conflict_free"],
            }
        ],
        "triggers": [
            {"integration-name": _INTEGRATION, "python-modules": ["occflow.triggers.lease", "occflow.triggers.table"]}
        ],
        "notifications": ["occflow.notifications.conflict.ConflictNotifier"],
        "connection-types": [
            {"hook-class-name": "occflow.hooks.spark.OccflowSparkHook", "connection-type": "occflow_spark"}
        ],
        "task-decorators": [
            {"name": "occflow_write", "class-name": "occflow.decorators.occflow_write.occflow_write"}
        ],
    }
