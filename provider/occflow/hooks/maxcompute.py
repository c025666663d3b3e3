"""Where a MaxCompute write's PyODPS client comes from.

- With ``apache-airflow-providers-alibaba`` installed, its ``maxcompute`` connection
  (``MaxComputeHook``: access key id / secret, ``project`` and ``endpoint`` extras) gives the client.
- Without it, an ``occflow_maxcompute`` connection of occflow's own: login = access key id,
  password = access key secret, extras ``project`` and ``endpoint``.
- ``standin=`` (``memory:NAME`` or a project file's path) gives ``engines.maxcompute.StandInProject``
  instead: MaxCompute's rules on this machine, for tests and the example DAG. ``standin_fallback=``
  gives it only when the connection does not exist (decided when the task runs, never at DAG
  parse time, and logged). Without either, a missing connection fails the task naming it.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from ..core.errors import InvalidDeclarationError
from ..engines.maxcompute import open_standin
from .extras import connection_extras

# The Alibaba provider is optional (the [maxcompute] extra installs it): its hook class, or None.
MaxComputeHook: type[Any] | None
try:
    from airflow.providers.alibaba.cloud.hooks.maxcompute import MaxComputeHook as _AlibabaHook
except ImportError:  # pragma: no cover - exercised where the provider is not installed
    MaxComputeHook = None
else:
    MaxComputeHook = _AlibabaHook

DEFAULT_CONN_ID = "maxcompute_default"
CONN_TYPE = "occflow_maxcompute"


def connection_configured(conn_id: str) -> bool:
    """Whether Airflow knows the connection ``conn_id`` (a DAG picks the stand-in otherwise)."""
    try:
        BaseHook.get_connection(conn_id)
    except (AirflowNotFoundException, Exception):  # noqa: BLE001 - no connection, or no Airflow DB
        return False
    return True


class OccflowMaxComputeHook(BaseHook):
    """A PyODPS client for a MaxCompute project (see the module docstring)."""

    conn_name_attr = "maxcompute_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONN_TYPE
    hook_name = "occflow MaxCompute"

    def __init__(
        self,
        maxcompute_conn_id: str = DEFAULT_CONN_ID,
        *,
        project: str | None = None,
        endpoint: str | None = None,
        standin: str | None = None,
        standin_fallback: str | None = None,
    ) -> None:
        super().__init__()
        self.maxcompute_conn_id = maxcompute_conn_id
        self.project = project
        self.endpoint = endpoint
        self.standin = standin
        self.standin_fallback = standin_fallback

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["host", "schema", "port"],
            "relabeling": {"login": "Access Key ID", "password": "Access Key Secret"},
            "placeholders": {"extra": '{"project": "my_project", "endpoint": "https://service.<region>.maxcompute.aliyun.com/api"}'},
        }

    def get_client(self) -> Any:
        if self.standin is not None:
            return open_standin(self.standin)
        if self.standin_fallback is not None and not connection_configured(self.maxcompute_conn_id):
            self.log.warning("no connection %r: running on the MaxCompute stand-in %s",
                             self.maxcompute_conn_id, self.standin_fallback)
            return open_standin(self.standin_fallback)
        if MaxComputeHook is not None:
            return MaxComputeHook(maxcompute_conn_id=self.maxcompute_conn_id).get_client(
                project=self.project, endpoint=self.endpoint
            )
        return self._own_client()

    def _own_client(self) -> Any:
        conn = self.get_connection(self.maxcompute_conn_id)
        extras = connection_extras(conn, self.maxcompute_conn_id)
        project, endpoint = self.project or extras.get("project"), self.endpoint or extras.get("endpoint")
        if not (conn.login and conn.password and project and endpoint):
            raise InvalidDeclarationError(
                f"connection {self.maxcompute_conn_id!r} needs login (access key id), password (access key "
                "secret) and the extras 'project' and 'endpoint'"
            )
        # pyodps is an optional dependency (the [maxcompute] extra): imported when a client is made.
        from odps import ODPS

        return ODPS(conn.login, conn.password, project=project, endpoint=endpoint)
