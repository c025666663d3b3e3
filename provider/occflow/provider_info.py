"""``get_provider_info()``: what Airflow's providers manager learns about occflow.

``airflow providers get airflow-provider-occflow --full`` prints it; ``airflow providers
notifications`` / ``behaviours`` / ``widgets`` / ``links`` / ``hooks`` show what Airflow made of
each part (tests/airflow/test_registration.py runs those commands).

The UI plugin (``occflow.plugins.OccflowTableWritesPlugin``) is not listed here: it is the
``airflow.plugins`` entry point in pyproject.toml, which Airflow always loads, while the
``plugins`` of provider info load only when providers are not discovered lazily (Airflow 3's
default is lazy). Listed in both, every service logged "Plugin 'occflow_table_writes' already
registered, skipping" and ``airflow plugins`` counted it as an import error.

The ``documentation-url`` ``airflow providers get`` shows is not provider info either: Airflow
sets it from the package's ``Project-URL: Documentation`` (pyproject's ``[project.urls]``).

The connection forms are declared here (``conn-fields``, ``ui-field-behaviour``): Airflow 3.2+
reads them without importing the hooks or Flask-AppBuilder, and deprecates the hook methods
``get_connection_form_widgets`` / ``get_ui_field_behaviour`` for them. ``OccflowSparkHook``
still answers ``get_ui_field_behaviour`` from the same data.

Airflow calls ``get_provider_info()`` while it is itself still importing (provider discovery
reads the configuration sections), so this module and what it imports are pure data: no
Airflow import, no import of the classes it names (tests/airflow/test_registration.py checks
that every named class loads).
"""

from __future__ import annotations

from typing import Any

from . import __version__
from .hooks.forms import (
    MAXCOMPUTE_CONNECTION,
    SPARK_CONN_TYPE,
    SPARK_CONNECTION_FIELDS,
    SPARK_FIELD_BEHAVIOUR,
)

#: The operators' extra links (``occflow.operators.links``), named, not imported: see above.
EXTRA_LINKS = ("occflow.operators.links.WriteCommitLink", "occflow.operators.links.TableHistoryLink")

_INTEGRATION = "occflow"
#: The documentation's index, relative to the project (the mkdocs site built from docs/).
DOCS_URL = "docs/index.md"
#: The pages a user of each part reads first (how-to guides in Airflow's integration entry).
HOW_TO_GUIDES = ["docs/operators.md", "docs/alerting.md", "docs/admission.md"]

#: Asset URI schemes occflow names tables by where Airflow has none (docs/assets.md): a table in
#: a Spark catalog (``iceberg``, ``delta``) or a MaxCompute project. Tables at a location are
#: ``file://`` / ``s3://`` ..., Airflow's own. The handler normalises the table identifier.
ASSET_SCHEMES = ("iceberg", "delta", "maxcompute")
ASSET_URI_HANDLER = "occflow.operators.assets.sanitize_table_uri"

MAXCOMPUTE_HOOK_MODULE = "occflow.hooks.maxcompute"
MAXCOMPUTE_OPERATOR_MODULE = "occflow.operators.maxcompute"


def get_provider_info() -> dict[str, Any]:
    hooks = ["occflow.hooks.spark", MAXCOMPUTE_HOOK_MODULE]
    operators = [
        "occflow.operators.base",
        "occflow.operators.spark",
        "occflow.operators.spark_submit",
        "occflow.operators.delta",
        "occflow.operators.pyiceberg",
        MAXCOMPUTE_OPERATOR_MODULE,
    ]
    connection_types: list[dict[str, Any]] = [
        {
            "connection-type": SPARK_CONN_TYPE,
            "hook-class-name": "occflow.hooks.spark.OccflowSparkHook",
            "hook-name": "occflow Spark",
            "ui-field-behaviour": SPARK_FIELD_BEHAVIOUR,
            "conn-fields": SPARK_CONNECTION_FIELDS,
        }
    ]
    connection_types.append(MAXCOMPUTE_CONNECTION)
    info: dict[str, Any] = {
        "package-name": "airflow-provider-occflow",
        "name": "occflow",
        "description": "Concurrent write pipelines on Delta Lake, Iceberg and MaxCompute tables "
        "that know each format's conflict matrix.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": _INTEGRATION,
                "external-doc-url": DOCS_URL,
                "how-to-guide": list(HOW_TO_GUIDES),
                "tags": ["software"],
            }
        ],
        "hooks": [{"integration-name": _INTEGRATION, "python-modules": hooks}],
        "operators": [{"integration-name": _INTEGRATION, "python-modules": operators}],
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
        "connection-types": connection_types,
        "extra-links": list(EXTRA_LINKS),
        "asset-uris": [{"schemes": list(ASSET_SCHEMES), "handler": ASSET_URI_HANDLER}],
        "task-decorators": [
            {"name": "occflow_write", "class-name": "occflow.decorators.occflow_write.occflow_write"}
        ],
    }
    return info
