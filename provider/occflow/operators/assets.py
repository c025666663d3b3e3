"""Airflow assets for occflow's writes (docs/assets.md).

Every write operator declares its table as an outlet ``Asset`` when the DAG is parsed, and a
committed write emits one asset event per partition key (one event on an unpartitioned write)
whose ``extra`` says what was committed. Here: the asset's URI, the URI normalisation occflow
registers for the schemes Airflow has none for (``provider_info.py``: ``asset-uris``), the key
format a written partition travels as, and the event's ``extra``.

URIs follow the OpenLineage dataset occflow emits for the same write (``lineage.py``), so one
table is one asset whichever operator or DAG writes it:

- a table at a location (delta-rs): the location, ``file:///abs/path`` or ``s3://bucket/key``;
- a table in a Spark catalog: ``iceberg://`` / ``delta://`` + the warehouse's host and path
  (OpenLineage's namespace) + ``/`` + the catalog-qualified identifier (OpenLineage's name);
- a MaxCompute table: ``maxcompute://<project>/<table>``.

Partition keys: one partition column's value is the key as it is (``2024-01-01``); several are
their values in column order joined by ``|``, the delimiter of Airflow's ``ProductMapper``
(``2024-01-01|eu``), so a consumer maps each part with its own mapper.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, quote, unquote, urlsplit

from airflow.sdk import Asset
from airflow.sdk.definitions.asset import AssetUriRef
from airflow.sdk.exceptions import AirflowFailException

from ..core.errors import InvalidDeclarationError
from ..core.identifiers import canonical_table
from ..core.report import WriteReport
from ..provider_info import ASSET_SCHEMES
from .exactly_once import from_context, try_number

#: The schemes occflow registers with Airflow (``asset-uris`` in provider info): a table named in
#: a catalog, not at a location Airflow has a scheme for (``file``, ``s3`` ... are Airflow's).
TABLE_SCHEMES = ASSET_SCHEMES

#: Airflow's ``ProductMapper`` splits a multi-column key on this by default.
KEY_DELIMITER = "|"

#: Airflow stores a partition key in a 250-character column (``OutletEventAccessor``).
MAX_KEY_LENGTH = 250


# ---------------------------------------------------------------------- URIs


def catalog_table_uri(scheme: str, namespace: str, identifier: str) -> str:
    """``scheme://<host><path>/<identifier>`` for a table named ``identifier`` in the catalog
    whose OpenLineage namespace is ``namespace`` (a warehouse URI such as ``file:///wh`` or
    ``s3://bucket/wh``, or a bare authority such as a MaxCompute project); a local warehouse's
    host is ``localhost``."""
    if scheme not in TABLE_SCHEMES:
        raise InvalidDeclarationError(f"asset scheme must be one of {TABLE_SCHEMES}, got {scheme!r}")
    parts = urlsplit(namespace) if "://" in namespace else SplitResult("", namespace, "", "", "")
    # A local warehouse (``file:///wh``) has no host; ``localhost`` keeps the ``//`` that
    # urllib (and so Airflow's normalisation) drops from a URI with an empty host.
    where = f"{parts.netloc or 'localhost'}{parts.path.rstrip('/')}"
    return f"{scheme}://{where}/{quote(canonical_table(identifier), safe='.`')}"


def sanitize_table_uri(uri: SplitResult) -> SplitResult:
    """The URI normalisation Airflow calls for occflow's schemes (provider info's ``asset-uris``
    ``handler``): the table identifier, the last path segment, lower-cased and unquoted as the
    engines resolve it, so ``iceberg:///wh/lake.DB.Events`` and ``.../lake.db.events`` are one
    asset; a URI that names no table is refused, saying what the form is."""
    head, _, last = uri.path.rpartition("/")
    if not last:
        raise ValueError(
            f"{uri.scheme}:// asset URI {uri.geturl()!r} names no table: the form is "
            f"{uri.scheme}://<warehouse host and path, or project>/<table identifier>"
        )
    try:
        table = canonical_table(unquote(last))
    except InvalidDeclarationError as exc:
        raise ValueError(f"{uri.scheme}:// asset URI {uri.geturl()!r}: {exc}") from None
    return uri._replace(path=f"{head}/{quote(table, safe='.`')}")


def table_asset(uri: str) -> Asset:
    """The table's outlet: an ``Asset`` named by its URI (a name is unique in Airflow as a URI
    is, and two operators on one table then agree on both)."""
    normalised = Asset(uri=uri).uri  # Airflow's normalisation (and occflow's, for its schemes)
    return Asset(name=normalised, uri=normalised)


def with_table_outlet(outlets: Iterable[Any], asset: Asset) -> list[Any]:
    """``outlets`` with the table's asset added, unless the user's own outlets name it already
    (by URI: an ``Asset`` or ``Asset.ref(uri=...)``); the user's own object is kept as given."""
    current = list(outlets)
    if any(names_asset(o, asset) for o in current):
        return current
    return [*current, asset]


def names_asset(outlet: Any, asset: Asset) -> bool:
    """Whether an outlet is the table's asset (an ``Asset`` with its URI, or a ref to the URI)."""
    if isinstance(outlet, Asset):
        return outlet.uri == asset.uri
    return isinstance(outlet, AssetUriRef) and Asset(uri=outlet.uri).uri == asset.uri


# ---------------------------------------------------------------------- partition keys


def key_text(value: Any) -> str:
    """One partition value as key text: dates and times in ISO form (what a temporal mapper's
    ``input_format`` is set to parse), everything else as ``str``."""
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    return str(value)


def partition_key(spec: Mapping[str, Any], columns: Sequence[str] | None = None) -> str:
    """The Airflow partition key of one written partition: its values in ``columns`` order (the
    spec's own order when ``None``), joined by ``|``."""
    order = list(columns) if columns else list(spec)
    missing = [c for c in order if c not in spec]
    if missing or len(order) != len(spec):
        raise InvalidDeclarationError(
            f"partition {dict(spec)} has columns {sorted(spec)}; the key's columns are {order}"
        )
    parts = [key_text(spec[c]) for c in order]
    for column, part in zip(order, parts, strict=True):
        if KEY_DELIMITER in part:
            raise InvalidDeclarationError(
                f"partition value {part!r} of {column!r} holds {KEY_DELIMITER!r}, the key's delimiter: "
                "it cannot travel as an Airflow partition key"
            )
    key = KEY_DELIMITER.join(parts)
    if not key.strip() or len(key) > MAX_KEY_LENGTH:
        raise InvalidDeclarationError(
            f"partition key {key!r} must be non-empty and at most {MAX_KEY_LENGTH} characters (Airflow's limit)"
        )
    return key


def partitions_from_key(key: Any, columns: Sequence[str]) -> dict[str, str]:
    """The partition a DAG run's ``partition_key`` names, for ``columns``: one value per column,
    split on ``|``. A key that does not split into one non-empty value per column is an error
    naming the key, the columns and the form expected."""
    form = KEY_DELIMITER.join(f"<{c}>" for c in columns)
    if not isinstance(key, str) or not key.strip():
        raise InvalidDeclarationError(
            f"partition_key_columns={list(columns)} needs the DAG run's partition key ({form}), "
            f"and this run has {key!r}: schedule the DAG on CronPartitionTimetable or "
            "PartitionedAssetTimetable, or trigger it with a partition key"
        )
    values = key.split(KEY_DELIMITER)
    if len(values) != len(columns) or any(not v.strip() for v in values):
        raise InvalidDeclarationError(
            f"partition key {key!r} does not parse for the columns {list(columns)}: expected {form} "
            f"({len(columns)} non-empty value(s) joined by {KEY_DELIMITER!r}), got {len(values)} value(s)"
        )
    return dict(zip(columns, values, strict=True))


def checked_key_columns(columns: Any, where: str) -> tuple[str, ...] | None:
    """``partition_key_columns`` as a tuple of column names (DAG parse time); ``None`` when unset."""
    if columns is None:
        return None
    if isinstance(columns, str) or not isinstance(columns, Sequence) or not columns:
        raise InvalidDeclarationError(
            f"{where}: partition_key_columns must be a non-empty list of column names, got {columns!r}"
        )
    bad = [c for c in columns if not (isinstance(c, str) and c.strip())]
    if bad or len(set(columns)) != len(columns):
        raise InvalidDeclarationError(
            f"{where}: partition_key_columns must name distinct columns, got {list(columns)!r}"
        )
    return tuple(columns)


# ---------------------------------------------------------------------- the event


@dataclass(frozen=True)
class TableEvent:
    """The asset event one committed write emits: its ``extra`` and its partition keys (none on
    an unpartitioned table: the event then carries the DAG run's key, if any, as Airflow does)."""

    extra: dict[str, Any]
    partition_keys: tuple[str, ...]


def committed_here(report: WriteReport, try_number: int) -> bool:
    """Whether this try's write put a new commit in the table: committed, not found there as
    another try's commit (exactly-once), and with a commit the engine names (a version, a
    snapshot, a metadata version or, where the engine numbers none, an instance)."""
    if not report.committed:
        return False
    if report.committed_by is not None and report.committed_by != f"try {try_number}":
        return False  # another try's commit: that try's event, not this one's
    return commit_identity(report) != {}


def commit_identity(report: WriteReport) -> dict[str, Any]:
    """What names the commit: the version / snapshot id the engine committed, or a schema
    change's metadata version, or MaxCompute's instance (a standard table numbers no version)."""
    found: dict[str, Any] = {}
    if report.version is not None:
        found["version"] = report.version
    if report.snapshot_id is not None:
        found["snapshot_id"] = report.snapshot_id
    if report.metadata_commit is not None and report.metadata_commit.version is not None:
        found["metadata_version"] = report.metadata_commit.version
    engine = report.engine_details.get(report.engine)
    if isinstance(engine, Mapping) and engine.get("instance_id"):
        found["instance_id"] = engine["instance_id"]
    return found


def table_event(
    report: WriteReport,
    try_number: int,
    key_columns: Sequence[str] | None = None,
    commit_tag: Mapping[str, str] | None = None,
) -> TableEvent | None:
    """The event of this try's write, or ``None`` when it committed nothing here. ``commit_tag``
    is occflow's tag the commit carries (``engines.tags``: write id, task, try, fence), the
    engine's own labels of the commit go as ``engine_commit``."""
    if not committed_here(report, try_number):
        return None
    partitions = [dict(p) for p in report.partitions or ()]
    extra: dict[str, Any] = {
        "table": report.table,
        "engine": report.engine,
        "operation": report.operation,
        "version": report.version,
        "snapshot_id": report.snapshot_id,
        **{k: v for k, v in commit_identity(report).items() if k not in ("version", "snapshot_id")},
        "commit_tag": dict(commit_tag or {}),
        "engine_commit": dict(report.tag),
        "partitions": partitions or None,
        "rows": report.rows,
        "attempts": report.attempts,
        "attempts_lost": len(report.lost),
        "conflicts": [lost.kind.value for lost in report.conflicts],
        "wasted_seconds": round(report.wasted_seconds, 3),
    }
    try:
        keys = tuple(dict.fromkeys(partition_key(p, key_columns) for p in partitions))
    except InvalidDeclarationError as exc:
        # The write is committed: its event goes out, unpartitioned, saying why (never a failed
        # task after a commit: a retry would find the commit and emit nothing at all).
        keys = ()
        extra["partition_key_error"] = str(exc)
    return TableEvent(extra=extra, partition_keys=keys)


# ---------------------------------------------------------------------- the operator's side


class TableAssetsMixin:
    """The table's asset on a write operator: its outlet (declared at parse time), its event
    (emitted when the write committed), and the partition taken from the run's key.

    Reads ``outlets``, ``log``, ``task_id``, ``partitions``, ``partition_key_columns`` and the
    try's ``occflow_report`` of the write operator it is mixed into (``OccflowWriteOperator``).
    """

    outlets: list[Any]
    log: Any
    task_id: str
    partitions: Any
    partition_key_columns: tuple[str, ...] | None
    occflow_report: WriteReport | None  # this try's report (``OccflowWriteOperator.publish_report``)
    _table_asset: Asset | None = None

    @classmethod
    def parse_time_asset_uri(cls, kwargs: Mapping[str, Any]) -> str | None:
        """The table's asset URI from a mapped task's fixed arguments; ``None`` (no outlet
        added) where they leave it open. An engine operator that can tell says so."""
        return None

    def table_asset_uri(self) -> str | None:
        """The table's asset URI, known at DAG parse time without I/O (docs/assets.md); ``None``
        when it is not (the engine operator says; a templated location, say)."""
        return None

    def declare_table_outlet(self) -> None:
        """The table as an outlet of the task (a subclass calls this at the end of its
        ``__init__``, once its location is set); a user's own outlet naming it is kept, not
        duplicated."""
        uri = self.table_asset_uri()
        self._table_asset = None if uri is None else table_asset(uri)
        if self._table_asset is not None:
            self.outlets = with_table_outlet(self.outlets, self._table_asset)

    def _table_outlet(self) -> Any:
        """The outlet that names the table: the user's own object if they gave one, else occflow's."""
        asset = self._table_asset
        if asset is None:
            return None
        return next((o for o in self.outlets if names_asset(o, asset)), None)

    def emit_table_event(self, context: Any) -> None:
        """The committed write's asset event, through ``outlet_events``: ``extra`` says what was
        committed, the written partitions go as partition keys. Airflow emits an event for every
        outlet of a successful task; a try that committed nothing (found another try's commit in
        the table, changed nothing) drops the table's outlet before it succeeds, so none is
        emitted for it (failed and skipped tries emit none anyway)."""
        outlet = self._table_outlet()
        events = context.get("outlet_events") if hasattr(context, "get") else None
        if outlet is None or events is None:  # no table asset, or not run by Airflow's task runner
            return
        report = self.occflow_report
        event = None
        if report is not None:
            tag = from_context(context, report.operation, _partition_list(report.partitions), report.fence)
            event = table_event(
                report, try_number(context), self.partition_key_columns, None if tag is None else tag.properties()
            )
        if event is None:
            self.outlets = [o for o in self.outlets if o is not outlet]
            self.log.info("the write committed nothing in this try: no asset event for %s", self._table_asset)
            return
        accessor = events[outlet]
        accessor.extra.update(event.extra)
        if event.partition_keys:
            accessor.add_partitions(list(event.partition_keys))
        self.log.info(
            "asset event for %s: %s %s, partition key(s) %s",
            self._table_asset, event.extra["operation"],
            {k: event.extra.get(k) for k in ("version", "snapshot_id") if event.extra.get(k) is not None},
            list(event.partition_keys) or "none",
        )

    def take_partitions_from_run(self, context: Any) -> None:
        """``partition_key_columns``: the partition written is the one the DAG run's
        ``partition_key`` names; a run without a key, or a key that does not parse for the
        columns, fails the try before anything is admitted or written."""
        columns = self.partition_key_columns
        if columns is None:
            return
        dag_run = context.get("dag_run") if hasattr(context, "get") else None
        key = getattr(dag_run, "partition_key", None)
        if key is None and hasattr(context, "get"):
            key = context.get("partition_key")
        try:
            self.partitions = partitions_from_key(key, columns)
        except InvalidDeclarationError as exc:
            raise AirflowFailException(f"{self.task_id}: {exc}; nothing was written") from exc



def key_placeholder(columns: Sequence[str], partitions: Any, where: str) -> dict[str, str]:
    """The parse-time partitions of a write that takes its partition from the run's key: one
    partition on ``columns``, its values known when the run is (templates, as lint reads them)."""
    if partitions is not None:
        raise InvalidDeclarationError(
            f"{where}: give partitions or partition_key_columns, not both (the run's partition key "
            "is the partition written)"
        )
    return {column: "{{ partition_key }}" for column in columns}


def _partition_list(partitions: Any) -> list[dict[str, Any]] | None:
    return None if partitions is None else [dict(p) for p in partitions]


def as_list(outlets: Any) -> list[Any]:
    if outlets is None:
        return []
    return list(outlets) if isinstance(outlets, (list, tuple)) else [outlets]


__all__ = [
    "KEY_DELIMITER",
    "TABLE_SCHEMES",
    "TableAssetsMixin",
    "TableEvent",
    "as_list",
    "catalog_table_uri",
    "checked_key_columns",
    "commit_identity",
    "committed_here",
    "key_placeholder",
    "partition_key",
    "partitions_from_key",
    "sanitize_table_uri",
    "table_asset",
    "table_event",
    "with_table_outlet",
]
