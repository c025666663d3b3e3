"""OpenLineage facets for occflow's write operators (docs/lineage.md).

The OpenLineage provider's ``DefaultExtractor`` calls ``get_openlineage_facets_on_complete`` /
``get_openlineage_facets_on_failure`` on an operator that has them, after the task ran, in the
task's own process. ``OpenLineageMixin`` answers with:

- the table as the output dataset: for delta-rs the table's path (namespace ``file`` or
  ``s3://bucket`` ...), with a ``symlinks`` facet naming the table; for Spark the table
  identifier in the namespace of its warehouse location;
- standard facets where one fits: ``version`` (the committed version / snapshot id),
  ``lifecycleStateChange`` (overwrite, truncate, alter), ``storage``, and as output facets
  ``outputStatistics`` (rows written) and ``subset`` (the partitions written);
- ``occflow_write`` (a dataset facet): operation, profile, engine, partitions, committed,
  version / snapshot;
- ``occflow_conflicts`` (a run facet): attempts, seconds wasted, and per lost attempt its
  conflict kind, the winning commit and what the policy did.

The data is the write report of the try (``OccflowWriteOperator.report``, also the task's XCom),
which the write flow keeps on the operator as ``occflow_report``; on a failure, the partial
report a ``ConflictFailure`` carries. Without a report (a task that
failed before it wrote) the dataset and the declaration are still given.

OpenLineage (``openlineage-python``, installed with ``apache-airflow-providers-openlineage``) is
imported only when the provider asks for facets: occflow runs without it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

from ..core.identifiers import unquoted_parts
from ..core.report import MalformedReport, WriteReport
from ..engines.spark import IcebergFormat, SparkConfig

#: Facet keys occflow adds (custom facets carry the project's prefix, as the OpenLineage spec asks).
WRITE_FACET = "occflow_write"
CONFLICTS_FACET = "occflow_conflicts"

#: Version of occflow's custom facets' schema (docs/lineage.md describes their fields).
FACET_SCHEMA_VERSION = "1-0-0"
_SCHEMA_URL = "urn:occflow:openlineage:facet:{version}:{name}"

#: Operations that change a dataset's lifecycle in OpenLineage's terms (``LifecycleStateChange``);
#: appends, merges, updates, deletes and compactions change rows, not the dataset's lifecycle.
LIFECYCLE_OF_OPERATION: Mapping[str, str] = {
    "insert_overwrite": "OVERWRITE",
    "truncate": "TRUNCATE",
    "alter_metadata": "ALTER",
}

#: OpenLineage storage layers (``StorageDatasetFacet.storageLayer``) per table format.
STORAGE_LAYER: Mapping[str, str] = {"delta": "delta", "iceberg": "iceberg"}

# Object-store schemes spelled differently by Hadoop clients; OpenLineage names one of each.
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}


class OpenLineageMixin:
    """``get_openlineage_facets_on_complete`` / ``_on_failure`` for an occflow write operator.

    Reads ``table``, ``operation``, ``partitions``, ``engine_name`` and ``occflow_write`` from the
    operator, and ``path`` (delta-rs) or ``session_config()`` (Spark) for the table's location.
    """

    #: This try's write report; the write flow publishes it (``OccflowWriteOperator.publish_report``).
    occflow_report: WriteReport | None = None
    # What the mixin reads of the write operator it is mixed into (``OccflowWriteOperator``).
    table: str
    operation: str
    profile: str
    partitions: Any
    engine_name: str
    occflow_write: Any

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return self._openlineage_lineage(task_instance, failed=False)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        return self._openlineage_lineage(task_instance, failed=True)

    # ------------------------------------------------------------------ what the write did

    def openlineage_report(self, task_instance: Any, failed: bool) -> WriteReport | None:
        """The write report of this try: the one the write flow kept on the operator
        (``occflow_report``), else on a failure the partial report of the exception that ended
        the try (``ConflictFailure.report``, ``WriteNotCommitted.report``); ``None`` when there is none.

        Not the XCom: the provider extracts in a forked child of the task process, where an
        XCom read through ``dag.test()``'s in-process API server hangs until the provider's
        ``execution_timeout`` kills the child and the event is lost."""
        kept = self.occflow_report
        if isinstance(kept, WriteReport):
            return kept
        if failed:
            for error in _causes(_task_exception(task_instance)):
                report = getattr(error, "report", None)
                if WriteReport.looks_like(report):
                    try:
                        return WriteReport.from_dict(report)
                    except MalformedReport:
                        continue
        return None

    # ------------------------------------------------------------------ where the table is

    def openlineage_location(self) -> tuple[str, str, tuple[str, str] | None]:
        """``(namespace, name, table)`` of the written dataset, after the OpenLineage naming spec;
        ``table`` is ``(namespace, identifier)`` for a ``symlinks`` facet, or ``None``. Each
        write operator says where its table is (``path_dataset`` / ``spark_table_location``);
        this default names the table under its engine."""
        return f"occflow://{self.engine_name}", str(self.table), None

    # ------------------------------------------------------------------ the facets

    def _openlineage_lineage(self, task_instance: Any, failed: bool) -> Any:
        # OpenLineage is optional: imported only when its provider asks for facets.
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.event_v2 import OutputDataset

        facets = _facet_types()
        report = self.openlineage_report(task_instance, failed)
        write = self._write_fields(report)
        namespace, name, table = self.openlineage_location()
        dataset_facets: dict[str, Any] = {WRITE_FACET: facets.OccflowWriteDatasetFacet(**write)}
        output_facets: dict[str, Any] = {}
        if table is not None:
            dataset_facets["symlinks"] = facets.SymlinksDatasetFacet(
                identifiers=[facets.Identifier(namespace=table[0], name=table[1], type="TABLE")]
            )
        layer = STORAGE_LAYER.get(self.occflow_write.profile.table_format)
        if layer is not None:
            dataset_facets["storage"] = facets.StorageDatasetFacet(
                storageLayer=layer, fileFormat="parquet" if layer == "delta" else None
            )
        if write["partitions"] is not None:
            output_facets["subset"] = facets.OutputSubsetOutputDatasetFacet(
                outputCondition=facets.PartitionSubsetCondition(
                    partitions=[facets.Partition(dimensions=dict(p)) for p in write["partitions"]]
                )
            )
        if write["committed"]:
            committed = write["version"] if write["version"] is not None else write["snapshotId"]
            if committed is not None:
                dataset_facets["version"] = facets.DatasetVersionDatasetFacet(datasetVersion=str(committed))
            lifecycle = LIFECYCLE_OF_OPERATION.get(write["operation"])
            if lifecycle is not None:
                dataset_facets["lifecycleStateChange"] = facets.LifecycleStateChangeDatasetFacet(
                    lifecycleStateChange=facets.LifecycleStateChange(lifecycle)
                )
            if report is not None and report.rows is not None:
                output_facets["outputStatistics"] = facets.OutputStatisticsOutputDatasetFacet(
                    rowCount=report.rows
                )
        run_facets: dict[str, Any] = {}
        if report is not None:
            run_facets[CONFLICTS_FACET] = facets.OccflowConflictsRunFacet(**conflict_fields(report))
        output = OutputDataset(
            namespace=namespace, name=name, facets=dataset_facets, outputFacets=output_facets
        )
        return OperatorLineage(outputs=[output], run_facets=run_facets)

    def _write_fields(self, report: WriteReport | None) -> dict[str, Any]:
        """The ``occflow_write`` facet's fields: from the report, else from the declaration."""
        if report is not None:
            return {
                "operation": report.operation,
                "profile": report.profile,
                "engine": report.engine,
                "partitions": _partition_list(report.partitions),
                "committed": report.committed,
                "version": report.version,
                "snapshotId": report.snapshot_id,
            }
        return {
            "operation": str(self.operation),
            "profile": str(self.profile),
            "engine": str(self.engine_name),
            "partitions": _partition_list(self.partitions),
            "committed": False,
            "version": None,
            "snapshotId": None,
        }


# ---------------------------------------------------------------------- pure helpers


def conflict_fields(report: WriteReport) -> dict[str, Any]:
    """The ``occflow_conflicts`` run facet's fields from a write report: per lost attempt the
    conflict kind, the winning commit (``None`` where the engine could not name it), and the
    action the policy took for it."""
    conflicts = [
        {
            "attempt": lost.attempt,
            "kind": lost.kind.value,
            "reason": lost.reason,
            "winner": None if lost.winner is None else winner_fields(lost.winner.to_dict()),
            "seconds": lost.seconds,
            "action": lost.action.value,
        }
        for lost in report.conflicts
    ]
    return {
        "attempts": report.attempts,
        "wastedSeconds": round(report.wasted_seconds, 3),
        "conflicts": conflicts,
        "leaseLosses": len(report.lease_lost),
    }


def winner_fields(winner: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The winning commit as the facet gives it: what identifies it, not the whole record."""
    if not winner:
        return None
    fields = {
        "version": winner.get("version"),
        "snapshotId": winner.get("snapshot_id"),
        "operation": winner.get("operation"),
        "timestamp": winner.get("timestamp"),
        "dagId": winner.get("dag_id"),
        "taskId": winner.get("task_id"),
        "runId": winner.get("run_id"),
        "tryNumber": winner.get("try_number"),
    }
    return {k: v for k, v in fields.items() if v is not None}


def path_dataset(path: str, table: str, derived_location: bool) -> tuple[str, str, tuple[str, str]]:
    """A table at a path (delta-rs), named by that path; its name lives in the warehouse its
    location was derived under (``<root>/<db>/<table>``, engines/deltars/location.py), else
    beside its path."""
    namespace, name = dataset_of_location(path)
    depth = len(unquoted_parts(table)) if derived_location else 1
    warehouse = location_uri(path).rsplit("/", depth)[0]
    return namespace, name, (warehouse, table)


def location_uri(location: str) -> str:
    """A table or warehouse location as a URI: a local path becomes ``file:///abs/path``;
    Hadoop's ``s3a://`` is OpenLineage's ``s3://``."""
    parts = urlsplit(location)
    if parts.scheme and parts.scheme != "file" and len(parts.scheme) > 1:  # not a Windows drive
        scheme = _SCHEME_ALIASES.get(parts.scheme, parts.scheme)
        return f"{scheme}://{parts.netloc}{parts.path}".rstrip("/")
    path = parts.path if parts.scheme == "file" else location
    return Path(os.path.abspath(path)).as_uri()


def dataset_of_location(location: str) -> tuple[str, str]:
    """``(namespace, name)`` of a dataset stored at ``location`` (OpenLineage naming spec):
    local files are namespace ``file`` with the absolute path as name; an object store is
    ``scheme://bucket`` with the key as name."""
    parts = urlsplit(location_uri(location))
    if parts.scheme == "file":
        return "file", parts.path
    return f"{parts.scheme}://{parts.netloc}", parts.path.lstrip("/")


def spark_table_location(config: Mapping[str, Any], table: str) -> tuple[str, str]:
    """``(namespace, name)`` of a table written through Spark: the Iceberg catalog's warehouse
    (or Spark's warehouse directory) as namespace, the catalog-qualified identifier as name."""
    spark = SparkConfig.from_dict(config)
    fmt = spark.table_format_spec()
    if isinstance(fmt, IcebergFormat):
        warehouse = fmt.catalog.warehouse
        namespace = location_uri(str(warehouse)) if warehouse else f"iceberg://{fmt.catalog.type}"
        return namespace, fmt.qualify(table)
    # Spark's own default: spark-warehouse under the driver's working directory.
    warehouse = spark.conf.get("spark.sql.warehouse.dir") or str(Path.cwd() / "spark-warehouse")
    return location_uri(warehouse), table if table.count(".") >= 2 else f"{spark.table_catalog}.{table}"


def _partition_list(partitions: Any) -> list[dict[str, Any]] | None:
    """Partitions as a list of ``{column: value}`` (one mapping is a list of one)."""
    if partitions is None:
        return None
    if isinstance(partitions, Mapping):
        return [dict(partitions)]
    if isinstance(partitions, Sequence) and not isinstance(partitions, str):
        return [dict(p) for p in partitions]
    return None


def _task_exception(task_instance: Any) -> BaseException | None:
    """The exception that ended the try: the task runner puts it in the context before it calls
    the listeners (``context["exception"]``)."""
    get_context = getattr(task_instance, "get_template_context", None)
    if not callable(get_context):
        return None
    try:
        error = get_context().get("exception")
    except Exception:  # noqa: BLE001 - a task instance without a runtime context
        return None
    return error if isinstance(error, BaseException) else None


def _causes(error: BaseException | None) -> Iterator[BaseException]:
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


@cache
def _facet_types() -> SimpleNamespace:
    """OpenLineage's facet classes and occflow's two custom ones, on first use (the optional
    dependency is imported here only)."""
    from openlineage.client.facet_v2 import (
        base_subset_dataset,
        dataset_version_dataset,
        lifecycle_state_change_dataset,
        output_statistics_output_dataset,
        storage_dataset,
        symlinks_dataset,
    )

    write_facet, conflicts_facet = _custom_facet_types()
    return SimpleNamespace(
        OccflowWriteDatasetFacet=write_facet,
        OccflowConflictsRunFacet=conflicts_facet,
        DatasetVersionDatasetFacet=dataset_version_dataset.DatasetVersionDatasetFacet,
        LifecycleStateChange=lifecycle_state_change_dataset.LifecycleStateChange,
        LifecycleStateChangeDatasetFacet=lifecycle_state_change_dataset.LifecycleStateChangeDatasetFacet,
        OutputStatisticsOutputDatasetFacet=output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet,
        OutputSubsetOutputDatasetFacet=base_subset_dataset.OutputSubsetOutputDatasetFacet,
        PartitionSubsetCondition=base_subset_dataset.PartitionSubsetCondition,
        Partition=base_subset_dataset.Partition,
        StorageDatasetFacet=storage_dataset.StorageDatasetFacet,
        SymlinksDatasetFacet=symlinks_dataset.SymlinksDatasetFacet,
        Identifier=symlinks_dataset.Identifier,
    )


def _custom_facet_types() -> tuple[type, type]:
    """``OccflowWriteDatasetFacet`` and ``OccflowConflictsRunFacet``: attrs classes, as
    OpenLineage's serializer expects (built once, by ``_facet_types``)."""
    # OpenLineage (and attrs with it) is optional: imported only when facets are asked for.
    import attr
    from openlineage.client.facet_v2 import DatasetFacet, RunFacet

    @attr.define
    class OccflowWriteDatasetFacet(DatasetFacet):
        """What occflow wrote on the dataset: operation, profile, engine, partitions, commit."""

        operation: str
        profile: str
        engine: str
        committed: bool
        partitions: list[dict[str, Any]] | None = attr.field(default=None)
        version: int | None = attr.field(default=None)
        snapshotId: int | None = attr.field(default=None)  # noqa: N815 - OpenLineage's camelCase

        @staticmethod
        def _get_schema() -> str:
            return _SCHEMA_URL.format(version=FACET_SCHEMA_VERSION, name="OccflowWriteDatasetFacet")

    @attr.define
    class OccflowConflictsRunFacet(RunFacet):
        """The write's attempts, seconds wasted on lost attempts, and each conflict met."""

        attempts: int
        wastedSeconds: float  # noqa: N815
        conflicts: list[dict[str, Any]] = attr.field(factory=list)
        leaseLosses: int = attr.field(default=0)  # noqa: N815

        @staticmethod
        def _get_schema() -> str:
            return _SCHEMA_URL.format(version=FACET_SCHEMA_VERSION, name="OccflowConflictsRunFacet")

    for cls in (OccflowWriteDatasetFacet, OccflowConflictsRunFacet):
        # Importable by name (module __getattr__ below): facets can be pickled.
        cls.__module__, cls.__qualname__ = __name__, cls.__name__
    return OccflowWriteDatasetFacet, OccflowConflictsRunFacet


def __getattr__(name: str) -> Any:
    """``OccflowWriteDatasetFacet`` / ``OccflowConflictsRunFacet`` (needs OpenLineage)."""
    if name in ("OccflowWriteDatasetFacet", "OccflowConflictsRunFacet"):
        return getattr(_facet_types(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CONFLICTS_FACET",
    "LIFECYCLE_OF_OPERATION",
    "WRITE_FACET",
    "OpenLineageMixin",
    "conflict_fields",
    "dataset_of_location",
    "location_uri",
    "spark_table_location",
    "winner_fields",
]
