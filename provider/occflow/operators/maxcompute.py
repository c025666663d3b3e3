"""``MaxComputeWriteOperator``: the occflow write flow for a MaxCompute SQL write, over PyODPS.

The table decides the matrix: ``transactional=true`` with a primary key (a Delta Table) follows
``maxcompute-transactional`` (specs 001, 002), any other table ``maxcompute-standard`` (spec 000),
read from the table's metadata before admission (``engines.maxcompute.facts``). The operation and
the partitions are derived from the SQL as for Spark SQL (``engines.maxcompute.sql``), compactions
included. Each attempt is one instance (``engines.maxcompute.writer``): tagged, reconnected to on a
retry while it still runs, its id and log view in XCom.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from ..core.declaration import WriteDeclaration
from ..core.errors import InvalidDeclarationError
from ..core.identifiers import table_parts, unquoted_parts
from ..core.profiles import get_profile
from ..engines.maxcompute import check_maxcompute_sql, read_maxcompute_write
from ..engines.maxcompute.target import MaxComputeTarget
from ..hooks.maxcompute import DEFAULT_CONN_ID, OccflowMaxComputeHook
from .assets import catalog_table_uri
from .base import OccflowWriteOperator
from .derived import settle

try:  # the Alibaba provider's log view link, where it is installed
    from airflow.providers.alibaba.cloud.links.maxcompute import MaxComputeLogViewLink

    _LINKS: tuple[Any, ...] = (MaxComputeLogViewLink(),)
    LOG_VIEW_KEY = MaxComputeLogViewLink.key
except ImportError:  # pragma: no cover - exercised where the provider is not installed
    _LINKS, LOG_VIEW_KEY = (), "maxcompute_log_view"

INSTANCE_ID_KEY = "maxcompute_instance_id"
_TEMPLATE_MARK = ("{{", "{%")
_PROFILES = ("maxcompute-standard", "maxcompute-transactional")


class MaxComputeWriteOperator(OccflowWriteOperator):
    """A MaxCompute SQL write under its table's conflict matrix.

    :param sql: one write statement (templated): INSERT OVERWRITE / INTO, UPDATE, DELETE, MERGE
        (held to UPDATE's row), TRUNCATE, ``ALTER TABLE ... [PARTITION (...)] COMPACT MINOR |
        MAJOR`` or ``... MERGE SMALLFILES``. ``operation`` and ``partitions`` may be left out:
        they are derived from it (partitions with the table's real partition columns).
    :param maxcompute_conn_id: the Alibaba provider's ``maxcompute`` connection (or occflow's
        ``occflow_maxcompute`` one where that provider is not installed).
    :param project, endpoint: override the connection's.
    :param hints: extra instance settings (``odps.sql.*``); occflow adds its commit tag to them.
    :param standin: ``memory:NAME`` or a project file: run on ``engines.maxcompute.StandInProject``
        (MaxCompute's rules on this machine) instead of a real project.
    :param standin_fallback: the same, only when the connection does not exist (decided when the
        task runs; the example DAG runs on a real project as soon as the connection is there).
    :param poll_interval: seconds between instance status checks.
    :param cancel_on_kill: stop the instance when the task is killed. Off by default: a retry
        reconnects to the running instance instead of submitting the write again.
    """

    template_fields: Sequence[str] = ("partitions", "sql", "hints")
    template_fields_renderers = {"sql": "sql"}
    operator_extra_links = _LINKS
    engine_name = "maxcompute"
    default_table_format = "maxcompute"

    def __init__(
        self,
        *,
        sql: str,
        maxcompute_conn_id: str = DEFAULT_CONN_ID,
        project: str | None = None,
        endpoint: str | None = None,
        hints: Mapping[str, str] | None = None,
        standin: str | None = None,
        standin_fallback: str | None = None,
        poll_interval: float = 1.0,
        cancel_on_kill: bool = False,
        **kwargs: Any,
    ) -> None:
        if not isinstance(sql, str) or not sql.strip():
            raise InvalidDeclarationError(
                f"{kwargs.get('task_id')}: sql must be one MaxCompute write statement"
            )
        self.derives = {
            "operation": kwargs.get("operation") is None,
            "partitions": "partitions" not in kwargs,
            "profile": kwargs.get("profile") is None,
        }
        if kwargs.get("operation") is None:
            kwargs["operation"] = _sql_operation(sql, str(kwargs.get("task_id")))
        if kwargs.get("profile") is None:
            # Until the table's facts are read (before admission): the MaxCompute matrix that knows
            # the operation (a compaction exists on transactional tables only).
            kwargs["profile"] = _provisional_profile(kwargs["operation"])
            kwargs.pop("table_format", None)
        super().__init__(**kwargs)
        self.sql = sql
        self.maxcompute_conn_id = maxcompute_conn_id
        self.project = project
        self.endpoint = endpoint
        self.hints = dict(hints or {})
        self.standin = standin
        self.standin_fallback = standin_fallback
        self.poll_interval = poll_interval
        self.cancel_on_kill = cancel_on_kill
        self._client: Any = None  # the project's client, made on first use in the task
        self._instance: Any = None  # the running attempt's instance (stopped by on_kill)
        if not _templated(sql):
            check_maxcompute_sql(sql, self.occflow_write, self.task_id)  # a DAG import error
        self.declare_table_outlet()

    def openlineage_location(self) -> tuple[str, str, tuple[str, str] | None]:
        """``maxcompute://<project>`` and the table: the project is the table's first part
        (``project.table``), else ``project=``, else the connection (not read at parse time)."""
        return maxcompute_dataset(self.table, self.project, self.maxcompute_conn_id)

    def table_asset_uri(self) -> str | None:
        namespace, name, _ = self.openlineage_location()
        return catalog_table_uri("maxcompute", namespace, name)

    @classmethod
    def parse_time_declaration(cls, kwargs: Mapping[str, Any]) -> WriteDeclaration | None:
        """A mapped task's fixed SQL and declaration, checked at DAG parse time on the MaxCompute
        matrix that knows the operation."""
        sql, where = kwargs.get("sql"), str(kwargs.get("task_id"))
        if not isinstance(sql, str) or "table" not in kwargs:
            return None
        operation = kwargs.get("operation") or _sql_operation(sql, where)
        declared = WriteDeclaration.create(
            kwargs["table"],
            operation,
            profile=kwargs.get("profile") or _provisional_profile(operation),
            partitions=kwargs.get("partitions"),
            allow_templates=True,
        )
        if not _templated(sql):
            check_maxcompute_sql(sql, declared, where)
        return declared

    # ------------------------------------------------------------------ declare

    def client(self) -> Any:
        if self._client is None:
            hook = OccflowMaxComputeHook(
                self.maxcompute_conn_id,
                project=self.project,
                endpoint=self.endpoint,
                standin=self.standin,
                standin_fallback=self.standin_fallback,
            )
            self._client = hook.get_client()
        return self._client

    def declare(self) -> WriteDeclaration:
        declaration = super().declare()
        try:
            return self.declare_from_table(declaration)
        except InvalidDeclarationError as exc:
            raise AirflowFailException(f"{self.task_id}: {exc}; nothing ran") from exc

    def declare_from_table(self, declaration: WriteDeclaration) -> WriteDeclaration:
        """The declaration the rendered SQL and the table's facts give (see the module docstring)."""
        facts = self._target(declaration).table_facts()
        derived = read_maxcompute_write(self.sql, facts.partition_columns, facts.partition_column_types)
        check_maxcompute_sql(self.sql, replace(declaration, partitions=None), self.task_id)
        profile = facts.profile(derived.operation) if self.derives["profile"] else declaration.profile
        if not self.derives["profile"]:
            facts.check_declared_profile(profile, derived.operation)
        if derived.operation not in profile.operations:
            raise InvalidDeclarationError(
                f"{derived.operation.value} is not a write on {facts.table}: its matrix {profile.name} knows "
                f"{', '.join(o.value for o in profile.operations)} ({'; '.join(facts.why())})"
            )
        declaration = declaration.with_typed_partitions(facts.partition_column_types, facts.engine)
        settled = settle(declaration, derived, profile, facts, derive_partitions=self.derives["partitions"])
        self.profile = settled.declaration.profile.name  # the retry policy follows the table's matrix
        self.log.info("declared from the SQL and the table: %s", "; ".join(settled.why))
        return settled.declaration

    # ------------------------------------------------------------------ one attempt

    def _target(self, declaration: WriteDeclaration, context: Any = None) -> MaxComputeTarget:
        return MaxComputeTarget(
            self.client(),
            declaration.table,
            self.sql,
            hints=self.hints,
            poll_interval=self.poll_interval,
            exactly_once=self.exactly_once is not False,
            on_instance=lambda instance, again: self._publish(context, instance, again),
        )

    def write_target(self, declaration: WriteDeclaration, context: Any) -> MaxComputeTarget:
        return self._target(declaration, context)

    def _publish(self, context: Any, instance: Any, reconnected: bool) -> None:
        """The instance id and its log view in XCom (the Alibaba provider's link reads the latter)."""
        self._instance = instance
        link = instance.get_logview_address()
        what = "reconnected to the running instance" if reconnected else "submitted instance"
        self.log.info("%s %s; log view: %s", what, instance.id, link)
        ti = context.get("ti") if hasattr(context, "get") else None
        if ti is not None:
            ti.xcom_push(key=INSTANCE_ID_KEY, value=str(instance.id))
            ti.xcom_push(key=LOG_VIEW_KEY, value=link)

    def on_kill(self) -> None:
        instance = self._instance
        if self.cancel_on_kill and instance is not None:
            instance.stop()


def maxcompute_dataset(table: str, project: str | None, conn_id: str) -> tuple[str, str, None]:
    """The OpenLineage dataset (and so the asset) of a MaxCompute table: namespace
    ``maxcompute://<project>``, name the table within the project."""
    parts = unquoted_parts(table)
    if len(parts) >= 2:
        return f"maxcompute://{parts[0]}", ".".join(table_parts(table)[1:]), None
    return f"maxcompute://{project or conn_id}", table, None


def _templated(sql: str) -> bool:
    return any(m in sql for m in _TEMPLATE_MARK)


def _sql_operation(sql: str, where: str) -> str:
    try:
        return read_maxcompute_write(sql, None).operation.value
    except InvalidDeclarationError as exc:
        hint = " (it holds a template: declare operation=...)" if _templated(sql) else ""
        raise InvalidDeclarationError(
            f"{where}: the operation cannot be derived from the SQL{hint}: {exc}"
        ) from None


def _provisional_profile(operation: str) -> str:
    for name in _PROFILES:
        try:
            get_profile(name).operation(operation)
        except InvalidDeclarationError:
            continue
        return name
    return _PROFILES[0]  # the declaration names the operation it does not know
