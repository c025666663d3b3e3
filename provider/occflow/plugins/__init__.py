"""occflow's Airflow UI plugin: the "Table writes" view (docs/ui.md).

Registered through the provider (``get_provider_info()["plugins"]``), it gives the api-server a
FastAPI app under ``/occflow`` and the UI two external views: "Table writes" in the Browse menu,
and "Table write" on each task instance, which opens the view on that task's write.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from .app import URL_PREFIX, app


class OccflowTableWritesPlugin(AirflowPlugin):
    name = "occflow_table_writes"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "occflow table writes"}]
    external_views = [
        {
            "name": "Table writes",
            "href": f"{URL_PREFIX}/",
            "destination": "nav",
            "category": "browse",
            "url_route": "occflow_table_writes",
        },
        {
            "name": "Table write",
            "href": f"{URL_PREFIX}/write?dag_id={{DAG_ID}}&run_id={{RUN_ID}}&task_id={{TASK_ID}}&map_index={{MAP_INDEX}}",
            "destination": "task_instance",
            "url_route": "occflow_task_write",
        },
    ]


__all__ = ["OccflowTableWritesPlugin"]
