"""Exactly once for spark-submit drivers, on the caller's side: the tag the next driver is
given, and the ledger of the table the drivers write (``submit.py`` is the channel itself)."""

from __future__ import annotations

import contextlib
import contextvars
import gzip
import json
import sqlite3
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..ledger import CommitLedger, FoundCommit
from ..tags import CommitTag
from .config import SparkConfig
from .iceberg import IcebergFormat
from .session import SparkEngine
from .submit import SubmitError

# ---------------------------------------------------------------------------------------------
# Exactly once on the caller's side: the tag of the next submission, and the table's ledger

_SUBMIT_TAG: contextvars.ContextVar[CommitTag | None] = contextvars.ContextVar("occflow_submit_tag", default=None)


def submit_tag() -> CommitTag | None:
    """The tag ``SubmitLedger.tagging`` set for the drivers submitted inside it (``None`` outside)."""
    return _SUBMIT_TAG.get()


class SubmitLedger:
    """The exactly-once ledger of a table that spark-submit drivers write, read from the caller.

    ``tagging(tag)`` does not tag anything itself: inside it, ``submit_tag()`` is the tag the next
    driver is given (``submit_job(tag=...)``), and the driver tags its commit. ``find_commit`` /
    ``tagged_commits`` read the table's history: an Iceberg table in a JDBC catalog on a local
    (``file:``) warehouse from the catalog database and the metadata file it points to; any other
    table through the format's own ledger on a local Spark session (``local[1]``, the same
    catalog settings), started on first use.
    """

    def __init__(self, config: SparkConfig | Mapping[str, Any] | None, table: str) -> None:
        self.config = config if isinstance(config, SparkConfig) else SparkConfig.from_dict(config)
        self.format = self.config.table_format_spec()
        self.table = self.format.qualify(table) if isinstance(self.format, IcebergFormat) else table
        self.engine = "spark-submit"
        self._session_ledger: CommitLedger | None = None

    @contextlib.contextmanager
    def tagging(self, tag: CommitTag) -> Iterator[None]:
        token = _SUBMIT_TAG.set(tag)
        try:
            yield
        finally:
            _SUBMIT_TAG.reset(token)

    def find_commit(self, tag: CommitTag) -> FoundCommit | None:
        for found in self.tagged_commits():
            if found.tag.write_id == tag.write_id:
                return found
        return None

    def tagged_commits(self) -> Iterator[FoundCommit]:
        metadata = self._iceberg_metadata()
        if metadata is None:
            yield from self._spark_ledger().tagged_commits()
            return
        snapshots = sorted(metadata.get("snapshots") or (), key=lambda s: s.get("timestamp-ms", 0), reverse=True)
        for snap in snapshots:
            tag = CommitTag.from_properties(snap.get("summary") or {})
            if tag is None:
                continue
            committed = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(int(snap.get("timestamp-ms", 0)) / 1000))
            yield FoundCommit(self.engine, self.table, tag, version=snap.get("sequence-number"),
                              snapshot_id=int(snap["snapshot-id"]), committed_at=committed)

    # -- reading the table's history -------------------------------------------------------

    def _iceberg_metadata(self) -> dict[str, Any] | None:
        """The table's current metadata JSON, or ``None`` when this catalog is not one we read
        directly (then the Spark ledger answers)."""
        if not isinstance(self.format, IcebergFormat):
            return None
        catalog = self.format.catalog
        if catalog.type != "jdbc" or not catalog.uri:
            return None
        parts = self.table.split(".")
        namespace, name = ".".join(parts[1:-1]), parts[-1]
        location = _jdbc_metadata_location(catalog.uri, dict(catalog.properties), catalog.name, namespace, name)
        if location is None:
            return {"snapshots": []}  # no such table (yet): no write of it has landed
        if not location.startswith(("file:", "/")):
            return None  # an object store: read through Spark, which has the file system for it
        path = location[len("file:"):] if location.startswith("file:") else location
        while path.startswith("//"):
            path = path[1:]
        text = Path(path).read_bytes()
        if path.endswith(".gz"):
            text = gzip.decompress(text)
        data = json.loads(text)
        return data if isinstance(data, dict) else None

    def _spark_ledger(self) -> CommitLedger:
        if self._session_ledger is None:
            local = SparkConfig.from_dict({**self.config.to_dict(), "master": "local[1]",
                                           "app_name": "occflow-submit-ledger"})
            engine = SparkEngine(local)
            ledger = engine.format.commit_ledger(engine.session(), self.table)
            if ledger is None:
                raise SubmitError(f"{self.table}: table format {self.format.name} keeps no commit history")
            self._session_ledger = ledger
        return self._session_ledger


def _jdbc_metadata_location(
    uri: str, properties: Mapping[str, str], catalog: str, namespace: str, name: str
) -> str | None:
    """``metadata_location`` of one table in Iceberg's JDBC catalog table ``iceberg_tables``."""
    query = (
        "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = {p} AND table_namespace = {p} "
        "AND table_name = {p}"
    )
    args = (catalog, namespace, name)
    if uri.startswith("jdbc:sqlite:"):
        path = uri[len("jdbc:sqlite:"):].split("?", 1)[0]
        with contextlib.closing(sqlite3.connect(path, timeout=60)) as conn:
            row = conn.execute(query.format(p="?"), args).fetchone()
        return None if row is None else str(row[0])
    if uri.startswith("jdbc:postgresql:"):
        import psycopg2  # optional: the PostgreSQL driver (apache-airflow[postgres])

        parsed = urlsplit(uri[len("jdbc:"):])
        query_args = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        conn = psycopg2.connect(
            host=parsed.hostname or "localhost", port=parsed.port or 5432, dbname=parsed.path.lstrip("/"),
            user=properties.get("jdbc.user") or query_args.get("user"),
            password=properties.get("jdbc.password") or query_args.get("password"),
        )
        try:
            with conn.cursor() as cur:
                cur.execute(query.format(p="%s"), args)  # values as parameters, never in the text
                row = cur.fetchone()
        finally:
            conn.close()
        return None if row is None else str(row[0])
    raise SubmitError(f"cannot read the Iceberg JDBC catalog at {uri}: only SQLite and PostgreSQL are read directly")
