"""Apache Iceberg on Spark: the table format (commit lookup in the snapshot metadata), the
exactly-once ledger, and the commit tag as Iceberg carries it (snapshot summary properties).

The catalog and its jars are in ``iceberg_catalog.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...core.errors import InvalidDeclarationError
from ...core.kinds import WinningCommit
from ..ledger import FoundCommit
from ..outcome import MetadataCommit, WriteOutcome
from ..tags import WRITE_ID, CommitTag
from .connect_tags import iceberg_session_tag, is_connect_session, session_write_id
from .formats import CommitInfo
from .iceberg_catalog import EXTENSIONS, IcebergCatalogConfig, jdbc_driver_jar, runtime_jars
from .identifiers import quote_table, split_table, sql_string
from .settings import SparkConfigError
from .winner import (
    iceberg_metadata_winner,
    iceberg_winner,
    metadata_entries,
    metadata_version,
    own_snapshot,
    snapshots_changing,
    snapshots_since,
)


@dataclass(frozen=True)
class SnapshotRef:
    """Where a table is: its current snapshot, and the metadata file that is current (a schema
    change makes a new one without a new snapshot)."""

    snapshot_id: int | None
    sequence_number: int | None = None
    metadata_file: str | None = None


@dataclass(frozen=True)
class IcebergFormat:
    catalog: IcebergCatalogConfig
    name: str = "iceberg"

    @classmethod
    def from_catalog(cls, catalog: Mapping[str, Any], home: Path) -> IcebergFormat:
        """From a ``SparkConfig``'s ``catalog`` settings; embedded defaults live under ``home``."""
        return cls(IcebergCatalogConfig.from_dict(dict(catalog)).resolved(home))

    def spark_conf(self) -> dict[str, str]:
        return {"spark.sql.extensions": EXTENSIONS, **self.catalog.spark_conf()}

    def jars(self) -> list[str]:
        jars = runtime_jars()
        driver = jdbc_driver_jar(self.catalog.uri) if self.catalog.uri else None
        if driver:
            jars.append(driver)
        return jars

    def prepare(self) -> None:
        self.catalog.prepare()

    def qualify(self, table: str) -> str:
        """``db.t`` → ``<catalog>.db.t``; an identifier naming its catalog is kept."""
        parts = split_table(table)
        return table if len(parts) >= 3 else f"{self.catalog.name}.{table}"

    def before(self, spark: Any, table: str) -> SnapshotRef | None:
        return current_snapshot(spark, self.qualify(table))

    def after(self, spark: Any, table: str, before: SnapshotRef | None) -> CommitInfo:
        """The snapshot this job committed: of those after ``before``, the one carrying the write id
        this thread's commits are tagged with (``winner.own_snapshot``), never merely the newest of
        this application, which another thread of it may have committed since."""
        name = self.qualify(table)
        current = current_snapshot(spark, name)
        since = None if before is None else before.snapshot_id
        if current is None or current.snapshot_id is None or current.snapshot_id == since:
            # No new snapshot: a schema or property change (a new metadata file), or nothing
            # at all (e.g. a DELETE that matched no row).
            metadata = metadata_commit(before, current)
            return CommitInfo(tag={} if metadata is not None else {"commit": "none"}, metadata=metadata)
        found = own_snapshot(snapshots_since(spark, name, since), _write_id_in_force(spark), _app_id(spark))
        chosen = found.snapshot
        if chosen is None:
            return CommitInfo(tag={"commit": found.basis})
        summary = chosen["summary"]
        tag = {"iceberg_operation": str(chosen["operation"]), "own_commit": found.basis}
        for key in ("added-records", "deleted-records", "added-data-files", "deleted-data-files"):
            if key in summary:
                tag[key] = str(summary[key])
        rows = summary.get("added-records")
        return CommitInfo(
            version=_sequence_number(spark, name, chosen["snapshot_id"]),
            snapshot_id=int(chosen["snapshot_id"]),
            rows=None if rows is None else int(rows),
            tag=tag,
        )

    def lost(self, spark: Any, table: str, before: SnapshotRef | None, outcome: WriteOutcome) -> WriteOutcome:
        """A lost write's outcome with the snapshot it lost to: the first snapshot after
        ``before`` (the attempt's starting snapshot, from :meth:`before`) that the failed
        validation checks (``winner.iceberg_winner``)."""
        kind = None if outcome.classification is None else outcome.classification.kind
        if kind is None or not kind.is_conflict:
            return outcome
        name = self.qualify(table)
        since = None if before is None else before.snapshot_id
        try:
            messages = outcome.error.messages if outcome.error is not None else ()
            changing = snapshots_changing(spark, name, messages)
            found = iceberg_winner(snapshots_since(spark, name, since), since, messages, changing)
            if found is not None and found.snapshot_id is not None:
                found = replace(found, version=_sequence_number(spark, name, found.snapshot_id))
            if found is None and before is not None and before.metadata_file is not None:
                # No snapshot since the start: the winner changed the metadata alone (a schema
                # change). A new session reads it: this one's catalog may cache the start.
                entries = metadata_entries(spark.newSession(), name)
                found = iceberg_metadata_winner(entries, before.metadata_file)
        except Exception as exc:  # noqa: BLE001 - naming the winner must not hide the conflict
            found = WinningCommit(basis=f"the snapshots could not be read to name the winner: {exc}")
        return outcome.with_winner(found)

    def commit_ledger(self, spark: Any, table: str) -> IcebergLedger:
        return IcebergLedger(spark, self.qualify(table))


def current_snapshot(spark: Any, table: str) -> SnapshotRef | None:
    """The table's current snapshot and sequence number; None when the table does not exist."""
    try:
        rows = spark.sql(
            "SELECT latest_snapshot_id, latest_sequence_number, file FROM "
            f"{quote_table(table)}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1"
        ).collect()
    except Exception as exc:
        if "TABLE_OR_VIEW_NOT_FOUND" in str(exc) or "not found" in str(exc).lower():
            return None
        raise
    if not rows:
        return SnapshotRef(None)
    sid, seq, file = rows[0][0], rows[0][1], rows[0][2]
    return SnapshotRef(None if sid is None else int(sid), None if seq is None else int(seq),
                       None if file is None else str(file))


def metadata_commit(before: SnapshotRef | None, after: SnapshotRef | None) -> MetadataCommit | None:
    """The metadata version a job committed without a snapshot: the current metadata file when
    it is not the one the job started on; ``None`` when the metadata did not change."""
    if after is None or after.metadata_file is None:
        return None
    if before is not None and before.metadata_file == after.metadata_file:
        return None
    return MetadataCommit(version=metadata_version(after.metadata_file), location=after.metadata_file)


def _sequence_number(spark: Any, table: str, snapshot_id: int) -> int | None:
    rows = spark.sql(
        f"SELECT latest_sequence_number FROM {quote_table(table)}.metadata_log_entries "
        f"WHERE latest_snapshot_id = {int(snapshot_id)} ORDER BY timestamp LIMIT 1"
    ).collect()
    return None if not rows or rows[0][0] is None else int(rows[0][0])


def _write_id_in_force(spark: Any) -> str | None:
    """The write id this thread's Iceberg commits carry (``iceberg_commit_properties``); on Spark
    Connect the session's (``connect_tags.py``). ``None`` when nothing is tagged, or on a runtime
    without Iceberg's ``CommitMetadata`` (whose commits then carry no tag either)."""
    if is_connect_session(spark):
        return session_write_id(spark)
    if getattr(spark, "_jvm", None) is None:
        return None
    try:
        props = _commit_properties_local(spark).get()
    except InvalidDeclarationError:
        return None
    value = None if props is None else props.get(WRITE_ID)
    return None if value is None else str(value)


def _app_id(spark: Any) -> str | None:
    try:
        return str(spark.sparkContext.applicationId)
    except Exception:  # Spark Connect: no SparkContext on the client
        return None


def pinned_session(spark: Any, catalog: str = "lake") -> Any:
    """A new session of ``spark``'s context whose ``catalog`` caches the tables it loads.

    A table it has read stays on that snapshot until this session writes it, however many
    commits other sessions or drivers make: its next write plans on the old snapshot and Iceberg
    validates it against everything committed since, as for a job that started back then. The
    conformance suite and the conflict tests use it to fix the commit order without sleeps.
    """
    if not catalog.isidentifier():
        raise SparkConfigError(f"catalog name must be an identifier, got {catalog!r}")
    session = spark.newSession()
    session.conf.set(f"spark.sql.catalog.{catalog}.cache-enabled", "true")
    session.conf.set(f"spark.sql.catalog.{catalog}.cache.expiration-interval-ms", "-1")
    return session


def set_commit_retries(spark: Any, table: str, retries: int) -> None:
    """Set ``commit.retry.num-retries`` on an existing table (0 = fail on the first lost race)."""
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise SparkConfigError(f"commit retries must be an integer >= 0, got {retries!r}")
    spark.sql(
        f"ALTER TABLE {quote_table(table)} SET TBLPROPERTIES ('commit.retry.num-retries' = '{int(retries)}')"
    )



# ---------------------------------------------------------------------------------------------
# Exactly once: the ledger, and the tag in the snapshot summary


@dataclass(frozen=True)
class IcebergLedger:
    """An Iceberg table on a Spark session: the tag is in the snapshot summary."""

    spark: Any
    table: str  # qualified: catalog.db.table
    engine: str = "spark-iceberg"

    def _rows(self, where: str) -> list[Any]:
        return list(
            self.spark.sql(
                f"SELECT snapshot_id, CAST(committed_at AS STRING) AS committed_at, summary "
                f"FROM {quote_table(self.table)}.snapshots WHERE {where} ORDER BY committed_at DESC"
            ).collect()
        )

    def _found(self, row: Any) -> FoundCommit | None:
        tag = CommitTag.from_properties(dict(row["summary"] or {}))
        if tag is None:
            return None
        snapshot_id = int(row["snapshot_id"])
        return FoundCommit(self.engine, self.table, tag, version=_sequence_number(self.spark, self.table, snapshot_id),
                           snapshot_id=snapshot_id, committed_at=row["committed_at"])

    def find_commit(self, tag: CommitTag) -> FoundCommit | None:
        rows = self._rows(f"try_element_at(summary, {sql_string(WRITE_ID)}) = {sql_string(tag.write_id)}")
        return None if not rows else self._found(rows[0])

    def tagged_commits(self) -> Iterator[FoundCommit]:
        for row in self._rows(f"try_element_at(summary, {sql_string(WRITE_ID)}) IS NOT NULL"):
            found = self._found(row)
            if found is not None:
                yield found

    def tagging(self, tag: CommitTag) -> contextlib.AbstractContextManager[None]:
        return iceberg_commit_properties(self.spark, tag)


def iceberg_write_options(tag: CommitTag) -> dict[str, str]:
    """DataFrame writer options: each ``snapshot-property.K`` lands in the snapshot summary."""
    return {f"snapshot-property.{k}": v for k, v in tag.properties().items()}


_COMMIT_METADATA = "org.apache.iceberg.spark.CommitMetadata"


def _commit_properties_local(spark: Any) -> Any:
    """Iceberg's per-thread commit properties (``CommitMetadata.COMMIT_PROPERTIES``).

    ``CommitMetadata.withCommitProperties(map, callable, exClass)`` sets this thread-local around
    a Java ``Callable``; from Python we set and clear it ourselves on the JVM thread PySpark
    pins to this Python thread, which is the thread that runs the SQL and its commit.
    """
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        raise InvalidDeclarationError(
            "tagging Iceberg SQL commits through CommitMetadata needs a classic Spark session (py4j); "
            "a Spark Connect session is tagged through its conf (iceberg_commit_properties)"
        )
    try:
        cls = jvm.org.apache.spark.util.Utils.classForName(_COMMIT_METADATA, True, False)
        field = cls.getDeclaredField("COMMIT_PROPERTIES")
        field.setAccessible(True)
        return field.get(None)
    except Exception as exc:
        raise InvalidDeclarationError(
            f"this Iceberg runtime has no {_COMMIT_METADATA}.COMMIT_PROPERTIES, so occflow cannot tag "
            f"its SQL commits: {exc}"
        ) from exc


def iceberg_commit_properties(spark: Any, tag: CommitTag) -> contextlib.AbstractContextManager[None]:
    """Every Iceberg commit this thread makes inside carries the tag in its snapshot summary; on
    Spark Connect, every commit of the session (``connect_tags.py``: no JVM on the client)."""
    if is_connect_session(spark):
        return iceberg_session_tag(spark, tag)
    return _thread_commit_properties(spark, tag)


@contextlib.contextmanager
def _thread_commit_properties(spark: Any, tag: CommitTag) -> Iterator[None]:
    local = _commit_properties_local(spark)
    props = spark._jvm.java.util.HashMap()
    for key, value in tag.properties().items():
        props.put(key, value)
    local.set(props)
    try:
        yield
    finally:
        local.remove()
