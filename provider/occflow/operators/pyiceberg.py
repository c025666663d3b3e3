"""``PyIcebergWriteOperator``: the occflow write flow on Iceberg through pyiceberg (no JVM), on a
catalog an Airflow ``iceberg`` connection names (SQL on SQLite or PostgreSQL, REST)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowFailException

from ..core.declaration import WriteDeclaration
from ..core.errors import InvalidDeclarationError
from ..core.profiles import get_profile
from ..engines.pyiceberg.catalog import CatalogConfig
from ..engines.pyiceberg.target import PyIcebergJob, PyIcebergTarget, PyIcebergWrite, profile_of
from .assets import catalog_table_uri
from .base import OccflowWriteOperator

#: The connection the operator reads its catalog from by default (the ``iceberg`` connection
#: type's default id in ``apache-airflow-providers-apache-iceberg``).
DEFAULT_CONN_ID = "iceberg_default"
#: The profile a table with no isolation property follows (pyiceberg's default level).
DEFAULT_PROFILE = "pyiceberg-serializable"
#: The table formats the operator takes for "Iceberg through pyiceberg".
_OWN_FORMATS = (None, "iceberg", "pyiceberg")


class PyIcebergWriteOperator(OccflowWriteOperator):
    """A write on an Iceberg table through pyiceberg, under the table's measured conflict matrix
    (``pyiceberg-serializable`` / ``pyiceberg-snapshot``, docs/engines-pyiceberg.md).

    :param table: ``namespace.table`` in the catalog (also the declaration's table).
    :param iceberg_conn_id: the Airflow connection of the catalog (type ``iceberg``: host = the
        catalog URI, a REST endpoint or a SQLAlchemy URL; login / password = a REST catalog's
        OAuth2 client; extra = the other ``load_catalog`` properties, ``warehouse`` ...).
    :param catalog: the catalog's ``load_catalog`` properties instead of a connection.
    :param catalog_name: the catalog's name (default: the connection id). A SQL catalog keys its
        tables by it: every writer and reader of a table must use the same name.
    :param data: rows (a pyarrow table) or ``data(context, snapshot)`` returning them, called on
        every attempt with that attempt's fresh table (a retry writes what a fresh read gives).
    :param where: ``{column: value}`` filter for an overwrite / delete / truncate, ANDed with the
        declared partition.
    :param overwrite_mode: ``filter`` (replace the declared partition / ``where``) or ``dynamic``
        (replace every partition the data has rows in).
    :param merge_keys: upsert key columns (operation ``merge``).
    :param add_columns: ``{column: iceberg type}`` for ``alter_metadata`` (a schema change).
    :param job: ``job(table, snapshot, commit, context) -> WriteOutcome`` instead of the built-in
        operations (what ``@task.occflow_write(engine="pyiceberg")`` decorates).
    :param older_than_hours: operation ``expire_snapshots``: expire the snapshots older than this
        (default: the table's ``history.expire.max-snapshot-age-ms``, 5 days). Less than that is
        refused, naming the value and the minimum, unless ``allow_unsafe_retention=True``.
    :param retain_last: ``expire_snapshots`` keeps this many of the newest snapshots whatever their
        age (default: the table's ``history.expire.min-snapshots-to-keep``, 1).
    :param allow_unsafe_retention: let an ``expire_snapshots`` run below the safe retention: a
        write that started on a snapshot it expires fails its commit ("Cannot find starting
        snapshot"; admission still keeps every write of the table apart from the expire,
        docs/maintenance.md).

    Without a profile, the table's isolation properties pick it at run time (before admission).
    """

    template_fields: Sequence[str] = ("partitions", "where")
    engine_name = "pyiceberg"
    default_table_format = "iceberg"

    def __init__(
        self,
        *,
        iceberg_conn_id: str = DEFAULT_CONN_ID,
        catalog: Mapping[str, str] | None = None,
        catalog_name: str | None = None,
        data: Any = None,
        where: Mapping[str, Any] | None = None,
        overwrite_mode: str = "filter",
        merge_keys: Sequence[str] = (),
        add_columns: Mapping[str, str] | None = None,
        job: PyIcebergJob | None = None,
        older_than_hours: float | None = None,
        retain_last: int | None = None,
        allow_unsafe_retention: bool = False,
        **kwargs: Any,
    ) -> None:
        self.profile_given = bool(kwargs.get("profile"))
        super().__init__(**_pyiceberg_defaults(kwargs))
        self.occflow_write = pyiceberg_declaration(self.occflow_write, self.task_id)
        self.iceberg_conn_id = iceberg_conn_id
        self.catalog = dict(catalog) if catalog else None
        self.catalog_name = catalog_name or iceberg_conn_id
        if self.catalog is not None:
            CatalogConfig(self.catalog_name, self.catalog)  # a catalog missing its uri fails the DAG import
        self.data = data
        self.where = dict(where) if where else None
        self.overwrite_mode = overwrite_mode
        self.merge_keys = tuple(merge_keys)
        self.add_columns = dict(add_columns) if add_columns else None
        self.job = job
        self.older_than_hours = older_than_hours
        self.retain_last = retain_last
        self.allow_unsafe_retention = allow_unsafe_retention
        self._write().check(self.occflow_write.operation, self.task_id)
        self.declare_table_outlet()

    @classmethod
    def parse_time_declaration(cls, kwargs: Mapping[str, Any]) -> WriteDeclaration | None:
        declared = super().parse_time_declaration(_pyiceberg_defaults(kwargs))
        return None if declared is None else pyiceberg_declaration(declared, str(kwargs.get("task_id")))

    def table_asset_uri(self) -> str | None:
        """``iceberg://<warehouse, or the connection id>/<table>`` (no I/O at parse time)."""
        warehouse = (self.catalog or {}).get("warehouse")
        return catalog_table_uri("iceberg", str(warehouse or self.iceberg_conn_id), self.table)

    def catalog_config(self) -> CatalogConfig:
        """The catalog: the ``catalog`` properties, else the Airflow connection's fields."""
        if self.catalog is not None:
            return CatalogConfig(self.catalog_name, self.catalog)
        conn = BaseHook.get_connection(self.iceberg_conn_id)
        return CatalogConfig.from_connection(self.catalog_name, conn.host, conn.login, conn.password, conn.extra_dejson)

    def _write(self) -> PyIcebergWrite:
        return PyIcebergWrite(
            data=self.data, merge_keys=self.merge_keys, where=self.where, add_columns=self.add_columns,
            overwrite_mode=self.overwrite_mode, job=self.job, older_than_hours=self.older_than_hours,
            retain_last=self.retain_last, allow_unsafe_retention=self.allow_unsafe_retention,
        )

    def _target(self) -> PyIcebergTarget:
        return PyIcebergTarget(self.catalog_config(), self.table, self._write())

    def declare(self) -> WriteDeclaration:
        """The rendered declaration on the profile the table's isolation properties give (a
        declared one they contradict is refused), partitions typed by the table's columns, and
        the columns the write names checked: all before admission, nothing written."""
        declaration = super().declare()
        try:
            target = self._target()
            facts = target.table_facts()
            if facts is not None:
                measured = profile_of(facts.properties)
                if not self.profile_given:
                    declaration = replace(declaration, profile=get_profile(measured))
                target.check_profile(declaration, facts)
                # pyiceberg's own binding of a value to the column's type (core.partvalues
                # CastRules.PYICEBERG, measured on real pyiceberg): {"p": "07"} on an INT is p=7.
                declaration = declaration.with_typed_partitions(facts.partition_column_types, "pyiceberg")
            declaration = replace(declaration, engine_profile=declaration.profile.name)
            target.check_columns(declaration)
        except InvalidDeclarationError as exc:
            raise AirflowFailException(f"{self.task_id}: {exc}; nothing was written") from exc
        return declaration

    def write_target(self, declaration: WriteDeclaration, context: Any) -> PyIcebergTarget:
        return self._target()


def _pyiceberg_defaults(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """No profile and an Iceberg table format (or none): pyiceberg's measured default profile
    (the table's own properties replace it at run time)."""
    out = dict(kwargs)
    if not out.get("profile") and out.get("table_format") in _OWN_FORMATS:
        out.pop("table_format", None)
        out["profile"] = DEFAULT_PROFILE
    return out


def pyiceberg_declaration(declared: WriteDeclaration, where: str) -> WriteDeclaration:
    """``declared`` on pyiceberg's measured matrix: a profile of another format, or Java Iceberg's
    matrix (which pyiceberg does not follow), is refused naming the right one."""
    if not declared.profile.name.startswith("pyiceberg-"):
        raise InvalidDeclarationError(
            f"{where}: profile {declared.profile.name!r} is not what pyiceberg does; PyIcebergWriteOperator writes "
            "Iceberg tables through pyiceberg: profile 'pyiceberg-serializable' or 'pyiceberg-snapshot' (or none: "
            "the table's isolation properties pick it)"
        )
    return replace(declared, engine_profile=declared.profile.name)


__all__ = ["DEFAULT_CONN_ID", "DEFAULT_PROFILE", "PyIcebergWriteOperator", "pyiceberg_declaration"]
