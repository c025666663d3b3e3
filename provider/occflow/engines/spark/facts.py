"""A table's facts as a Spark session reads them: Iceberg (``DESCRIBE TABLE EXTENDED``'s
partitioning and table properties, the older partition specs that still have live files, and the
session's runtime file filter) and Delta through delta-spark (``DESCRIBE DETAIL``); for both,
the types of the partition columns from ``DESCRIBE TABLE EXTENDED``'s column rows."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from collections.abc import Mapping
from typing import Any

from ...core.engines import SPARK
from ...core.errors import InvalidDeclarationError
from ...core.partvalues import readable_types
from ...core.tablefacts import OlderSpec, TableFacts
from .identifiers import quote_table, split_table

#: Spark's table providers whose facts occflow reads, and the engine that commits to each: the
#: Spark spec's committers (``core.engines.SPARK``).
ENGINES = {c.table_format: c.name for c in SPARK.commits}


def spark_table_facts(spark: Any, table: str) -> TableFacts:
    """The facts of ``table`` (``catalog.db.table``) in ``spark``'s catalogs.

    An identity partition field is a partition column; a transform (``days(ts)``,
    ``bucket(16, id)``) is recorded in ``partition_transforms``. A table whose provider is
    neither Iceberg nor Delta is an error naming it.
    """
    quoted = quote_table(table)  # every part back-quoted: the name reaches SQL only this way
    try:
        rows = spark.sql(f"DESCRIBE TABLE EXTENDED {quoted}").collect()
    except Exception as exc:  # noqa: BLE001 - Spark's analysis errors differ by catalog
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidDeclarationError(f"cannot read the table facts of {table} on Spark: {first}") from exc
    described = _described(rows)
    provider = described.get("Provider", "").lower()
    if provider == "iceberg":
        return _iceberg_facts(spark, table, quoted, rows)
    if provider == "delta":
        return _delta_facts(spark, table, quoted, rows)
    raise InvalidDeclarationError(
        f"table {table} is a {provider or 'table of unknown provider'} table: occflow reads the facts "
        "of Iceberg and Delta tables (their formats detect conflicts)"
    )


def _described(rows: list[Any]) -> dict[str, str]:
    """``DESCRIBE TABLE EXTENDED``'s key rows (``Provider``, ...), the first of each key."""
    out: dict[str, str] = {}
    for row in rows:
        key, value = str(row["col_name"] or "").strip(), str(row["data_type"] or "").strip()
        if key and key not in out:
            out[key] = value
    return out


def column_types(rows: list[Any], columns: tuple[str, ...]) -> dict[str, str]:
    """The types of ``columns`` (lower-cased) as ``DESCRIBE TABLE EXTENDED``'s first section
    lists them (one row per column, Spark's ``simpleString``: ``int``, ``date``, ``decimal(10,2)``),
    kept where ``core.partvalues`` reads the type."""
    wanted = {c.lower() for c in columns}
    types: dict[str, str] = {}
    for row in rows:
        key, value = str(row["col_name"] or "").strip(), str(row["data_type"] or "").strip()
        if not key or key.startswith("#"):
            break  # the column rows end at the first blank or section row
        if key.lower() in wanted:
            types[key.lower()] = value
    return readable_types(types)


def partition_fields(rows: list[Any]) -> list[str]:
    """The partition fields ``DESCRIBE TABLE EXTENDED`` lists. Spark prints them two ways: all
    identity, as Hive's ``# Partition Information`` (a ``# col_name`` header, then one row per
    column); with a transform, as ``# Partitioning`` (``Part 0  ds``, ``Part 1  days(ts)``)."""
    fields: list[str] = []
    section = ""
    for row in rows:
        key, value = str(row["col_name"] or "").strip(), str(row["data_type"] or "").strip()
        if key == "# col_name":
            continue  # the column header of "# Partition Information"
        if key.startswith("#"):
            section = key if key in ("# Partition Information", "# Partitioning") else ""
            continue
        if not key:
            section = ""
        elif section == "# Partition Information":
            fields.append(key)
        elif section == "# Partitioning" and key.startswith("Part "):
            fields.append(value)
    return fields


def _iceberg_facts(spark: Any, table: str, quoted: str, rows: list[Any]) -> TableFacts:
    fields = partition_fields(rows)
    identity = tuple(_unquote(f) for f in fields if "(" not in f)
    transforms = tuple(f for f in fields if "(" in f)
    properties = {str(r["key"]): str(r["value"]) for r in spark.sql(f"SHOW TBLPROPERTIES {quoted}").collect()}
    return TableFacts(
        table=table,
        table_format="iceberg",
        engine=ENGINES["iceberg"],
        partition_columns=identity,
        properties=properties,
        partition_transforms=transforms,
        features=(f"format-version={properties['format-version']}",) if "format-version" in properties else (),
        partition_column_types=column_types(rows, identity),
        older_specs=older_specs(spark, quoted),
        runtime_filter_check=runtime_filter_check(spark, table),
    )


#: Spark's switch for the runtime group filter of a group-based row-level command (SQLConf
#: RUNTIME_ROW_LEVEL_OPERATION_GROUP_FILTER_ENABLED, Spark 3.4+, default true): when on, Spark
#: hands Iceberg's SparkCopyOnWriteScan.filter the files that match, and that method first checks
#: that the scan's snapshot is still the table object's current one.
GROUP_FILTER = "spark.sql.optimizer.runtime.rowLevelOperationGroupFilter.enabled"
#: An Iceberg catalog's table cache (CatalogProperties.CACHE_ENABLED, default true). The check
#: above fails only when the table object moved under the scan: one cached object that another
#: write through the same session committed to. Measured on Spark 3.5.9 + Iceberg 1.10.2 (a
#: MERGE of ds=A held inside its runtime filter while an append to ds=B commits): fails with the
#: cache on and both writes in one session; commits with the cache off, with the append in
#: another session, or with the group filter off (tests/engines/test_iceberg_runtime_filtering_setting.py).
CATALOG_CACHE = "spark.sql.catalog.{catalog}.cache-enabled"
# More live partitions of an old spec than this are not listed: the facts keep "not known".
_MAX_OLD_PARTITIONS = 1000


def runtime_filter_check(spark: Any, table: str) -> bool:
    """Whether a copy-on-write UPDATE / DELETE / MERGE through ``spark`` on ``table`` has its scan
    checked by Iceberg's runtime file filter against a table object that other commits through
    this session move: the group filter on and the table's catalog caching tables, as this
    session's settings say (unset: Spark's and Iceberg's defaults, both true)."""
    catalog = split_table(table)[0]
    group_filter = _flag(spark.conf.get(GROUP_FILTER, None), default=True)
    cached = _flag(spark.conf.get(CATALOG_CACHE.format(catalog=catalog), None), default=True)
    return group_filter and cached


def _flag(value: str | None, *, default: bool) -> bool:
    # Spark reads a boolean setting case-insensitively and refuses anything else when it is used.
    return default if value is None else str(value).strip().lower() == "true"


def older_specs(spark: Any, quoted: str) -> tuple[OlderSpec, ...]:
    """The partition specs other than the current one that still have live data files: the spec
    ids of the live files from the ``partitions`` metadata table, each spec's fields from the
    table's current metadata file (``partition-specs``, source columns by id in its current schema,
    so a renamed column is named as it is now). A metadata file that cannot be read makes every
    spec with live files an older one whose partitions are not known: never narrower."""
    try:
        live = spark.sql(f"SELECT spec_id, partition FROM {quoted}.partitions").collect()
    except Exception as exc:  # noqa: BLE001 - Spark's AnalysisException, whichever Spark
        if "spec_id" in str(exc) or "partition" in str(exc):
            # The table has had no partition field in any spec (the metadata table then has no
            # partition columns): every spec is the same, unpartitioned one.
            return ()
        raise
    spec_ids = {int(r["spec_id"]) for r in live}
    if not spec_ids:
        return ()
    metadata = _current_metadata(spark, quoted)
    if metadata is None:
        return tuple(OlderSpec(i, (), None) for i in sorted(spec_ids))
    current = int(metadata.get("default-spec-id", 0))
    columns = _schema_columns(metadata)
    specs = {int(spec["spec-id"]): spec.get("fields") or [] for spec in metadata.get("partition-specs") or []}
    out = []
    for spec_id in sorted(spec_ids - {current}):
        fields = specs.get(spec_id)
        if fields is None:
            out.append(OlderSpec(spec_id, (), None))
            continue
        identity = {str(f["name"]): columns.get(int(f["source-id"]), str(f["name"])) for f in fields if f.get("transform") == "identity"}
        shown = tuple(
            identity[str(f["name"])] if str(f["name"]) in identity else f"{f.get('transform')}({columns.get(int(f['source-id']), '?')})"
            for f in fields
            if f.get("transform") != "void"
        )
        rows = [r["partition"] for r in live if int(r["spec_id"]) == spec_id]
        out.append(OlderSpec(spec_id, shown, _live_partitions(rows, identity)))
    return tuple(out)


def _current_metadata(spark: Any, quoted: str) -> Mapping[str, Any] | None:
    """The table's current metadata file (the newest ``metadata_log_entries`` row), as JSON."""
    try:
        row = spark.sql(f"SELECT file FROM {quoted}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1").collect()
        if not row:
            return None
        text = spark.read.option("wholetext", "true").text(str(row[0]["file"])).collect()[0][0]
        found = json.loads(text)
    except Exception:  # noqa: BLE001 - compressed or unreadable metadata: the caller keeps "not known"
        return None
    return found if isinstance(found, Mapping) else None


def _schema_columns(metadata: Mapping[str, Any]) -> dict[int, str]:
    """Field id -> top-level column name (lower-cased) in the current schema."""
    wanted = metadata.get("current-schema-id", 0)
    schemas = metadata.get("schemas") or ([metadata["schema"]] if "schema" in metadata else [])
    schema = next((s for s in schemas if s.get("schema-id", 0) == wanted), schemas[0] if schemas else {})
    return {int(f["id"]): str(f["name"]).lower() for f in schema.get("fields") or []}


def _live_partitions(rows: list[Any], identity: Mapping[str, str]) -> tuple[dict[str, str], ...] | None:
    """Each live partition's identity values (column -> value as a key spells it); ``None`` when
    there are too many to list or one holds a NULL or a value not keyed here."""
    if len(rows) > _MAX_OLD_PARTITIONS:
        return None
    out = []
    for row in rows:
        values = row.asDict() if row is not None else {}
        spec: dict[str, str] = {}
        for name, column in identity.items():
            text = _key_text(values.get(name))
            if text is None:
                return None
            spec[column] = text
        out.append(spec)
    return tuple(out)


def _key_text(value: object) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, decimal.Decimal)):
        return str(value)
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value.isoformat()
    return None  # NULL, timestamps, binary: not keyed here


def _delta_facts(spark: Any, table: str, quoted: str, rows: list[Any]) -> TableFacts:
    detail = spark.sql(f"DESCRIBE DETAIL {quoted}").collect()[0].asDict(recursive=True)
    features = sorted({*(detail.get("tableFeatures") or ())})
    partitioned = tuple(str(c) for c in detail.get("partitionColumns") or ())
    properties = {str(k): str(v) for k, v in (detail.get("properties") or {}).items()}
    return TableFacts(
        table=table,
        table_format="delta",
        engine=ENGINES["delta"],
        partition_columns=partitioned,
        properties=properties,
        features=tuple(features),
        partition_column_types=column_types(rows, partitioned),
        physical_columns=_physical_columns(spark, str(detail.get("location") or ""), partitioned, properties),
    )


def _physical_columns(spark: Any, location: str, partitioned: tuple[str, ...], properties: Mapping[str, str]) -> dict[str, str]:
    """Under Delta column mapping, each partition column's physical name where it differs from its
    name (a rename changes the name only). Spark's schema drops Delta's column-mapping metadata, so
    it is read from the table's own metadata (its ``schemaString``) through the session's JVM."""
    if properties.get("delta.columnMapping.mode", "none").strip().lower() not in ("name", "id") or not location:
        return {}
    if getattr(spark, "_jvm", None) is None:  # Spark Connect: no JVM here; keyed by logical names as before
        return {}
    log = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, location)
    fields = json.loads(str(log.unsafeVolatileSnapshot().metadata().schemaString()))["fields"]
    wanted = {c.lower() for c in partitioned}
    named = {str(f["name"]): str((f.get("metadata") or {}).get("delta.columnMapping.physicalName") or f["name"]) for f in fields}
    return {name: physical for name, physical in named.items() if name.lower() in wanted and physical != name}


def _unquote(name: str) -> str:
    """A partition field as Spark prints it: back-quoted when the name needs quoting."""
    if len(name) >= 2 and name.startswith("`") and name.endswith("`"):
        return name[1:-1].replace("``", "`")
    return name
