"""Delta Lake on Spark via delta-spark: the user's jars, Delta's SQL extensions and catalog, the
exactly-once ledger (``DESCRIBE HISTORY``) and the commit tag as delta-spark carries it.

The jars: by default the manifest's ``io.delta:delta-spark_2.12:3.3.3`` and
``io.delta:delta-storage:3.3.3`` (``scripts/jvm/pom.xml``, resolved by the bootstrap into
``<sys.prefix>/share/occflow/jars/``: ``jvm_artifacts.py``). Users who bring their own (matched to
their cluster's Spark and Scala) name them in the config's ``jars`` or in
``OCCFLOW_DELTA_SPARK_JARS`` (comma-separated paths). Either way the list is checked against the
running PySpark before a session starts: a delta-spark and a delta-storage jar of one version,
none built for another Scala or Spark line.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..ledger import HISTORY_DEPTH, FoundCommit
from ..outcome import WriteOutcome
from ..tags import APP_VERSION, CommitTag
from .formats import CommitInfo
from .identifiers import quote_table
from .jvm_artifacts import DELTA_SPARK, DELTA_STORAGE, check_spark_jars, delta_jar_problems, jar, running_spark
from .settings import SparkConfigError

JARS_ENV = "OCCFLOW_DELTA_SPARK_JARS"
EXTENSIONS = "io.delta.sql.DeltaSparkSessionExtension"
CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def jars_from_env() -> list[str]:
    value = os.environ.get(JARS_ENV, "")
    return [p.strip() for p in value.split(",") if p.strip()]


@dataclass(frozen=True)
class DeltaFormat:
    jar_paths: tuple[str, ...] = ()
    name: str = "delta"

    @classmethod
    def from_catalog(cls, catalog: Mapping[str, Any]) -> DeltaFormat:
        """From a ``SparkConfig``'s ``catalog`` settings (only ``jars``)."""
        unknown = sorted(set(catalog) - {"jars"})
        if unknown:
            raise SparkConfigError(f"unknown Delta catalog keys {unknown}; known keys: jars")
        listed = catalog.get("jars") or []
        if isinstance(listed, str):
            listed = [p for p in listed.split(",") if p.strip()]
        return cls(tuple(str(p) for p in listed))

    def spark_conf(self) -> dict[str, str]:
        return {"spark.sql.extensions": EXTENSIONS, "spark.sql.catalog.spark_catalog": CATALOG}

    def jars(self) -> list[str]:
        """catalog.jars, else ``$OCCFLOW_DELTA_SPARK_JARS``, else the manifest's delta-spark and
        delta-storage jars; checked against the running Spark (``SparkConfigError`` if they do
        not fit it)."""
        if self.jar_paths:
            jars, origin = list(self.jar_paths), "catalog.jars"
        elif jars_from_env():
            jars, origin = jars_from_env(), JARS_ENV
        else:
            try:
                return [jar(DELTA_SPARK), jar(DELTA_STORAGE)]
            except SparkConfigError as exc:
                raise SparkConfigError(
                    f"Delta on Spark needs the delta-spark jars: {exc}; or bring your own: set {JARS_ENV} to "
                    "comma-separated jar paths (delta-spark_2.12 and delta-storage for Spark 3.5) or give catalog.jars"
                ) from None
        missing = [j for j in jars if "://" not in j and not Path(j).is_file()]
        if missing:
            raise SparkConfigError(f"Delta jars not found: {', '.join(missing)} (from {origin})")
        check_spark_jars(jars, origin=origin)
        problems = delta_jar_problems(jars)
        if problems:
            version, scala = running_spark()
            raise SparkConfigError(
                f"Delta jars from {origin} do not make a delta-spark for the running Spark {version} (Scala {scala}): "
                + "; ".join(problems) + f" (the manifest's: {DELTA_SPARK.coordinate}, {DELTA_STORAGE.coordinate})"
            )
        return jars

    def prepare(self) -> None:
        return None

    def before(self, spark: Any, table: str) -> int | None:
        return latest_version(spark, table)

    def after(self, spark: Any, table: str, before: int | None) -> CommitInfo:
        """The newest commit after ``before`` (Delta's history names the version and its metrics)."""
        rows = spark.sql(f"DESCRIBE HISTORY {quote_table(table)} LIMIT 20").collect()
        newer = [r for r in rows if before is None or int(r["version"]) > before]
        if not newer:
            return CommitInfo(tag={"commit": "none"})
        latest = max(newer, key=lambda r: int(r["version"]))
        metrics = dict(latest["operationMetrics"] or {})
        tag = {"delta_operation": str(latest["operation"])}
        if len(newer) > 1:
            tag["commit"] = f"ambiguous: {len(newer)} commits since the job started"
        out_rows = metrics.get("numOutputRows") or metrics.get("numUpdatedRows") or metrics.get("numDeletedRows")
        return CommitInfo(
            version=int(latest["version"]),
            rows=None if out_rows is None else int(out_rows),
            tag=tag,
        )

    def lost(self, spark: Any, table: str, before: int | None, outcome: WriteOutcome) -> WriteOutcome:
        """A lost write's outcome as it is: delta-spark names the conflicting commit in its
        message, which ``errors.classify_error`` already read into the winner."""
        return outcome

    def commit_ledger(self, spark: Any, table: str) -> DeltaSparkLedger:
        return DeltaSparkLedger(spark, table)


def latest_version(spark: Any, table: str) -> int | None:
    """The table's latest version; None when the table does not exist yet."""
    try:
        rows = spark.sql(f"DESCRIBE HISTORY {quote_table(table)} LIMIT 1").collect()
    except Exception as exc:
        text = str(exc)
        if "TABLE_OR_VIEW_NOT_FOUND" in text or "not found" in text.lower() or "is not a Delta table" in text:
            return None
        raise
    return int(rows[0]["version"]) if rows else None


# ---------------------------------------------------------------------------------------------
# Exactly once: the ledger, and the tag as delta-spark's idempotent-write options


@dataclass(frozen=True)
class DeltaSparkLedger:
    """A delta-spark table: idempotent-write session confs + user metadata in the commit info.

    The session confs are per session: give each concurrent write its own ``spark.newSession()``.
    """

    spark: Any
    table: str
    engine: str = "spark-delta"

    def find_commit(self, tag: CommitTag) -> FoundCommit | None:
        for commit in self.tagged_commits():
            if commit.tag.write_id == tag.write_id:
                return commit
        return None

    def tagged_commits(self) -> Iterator[FoundCommit]:
        rows = self.spark.sql(f"DESCRIBE HISTORY {quote_table(self.table)} LIMIT {HISTORY_DEPTH}").collect()
        for row in rows:
            text = row["userMetadata"]
            if not text:
                continue
            try:
                props = json.loads(text)
            except ValueError:
                continue  # someone else's user metadata
            found = CommitTag.from_properties(props) if isinstance(props, dict) else None
            if found is not None:
                yield FoundCommit(self.engine, self.table, found, version=int(row["version"]),
                                  committed_at=str(row["timestamp"]))

    @contextlib.contextmanager
    def tagging(self, tag: CommitTag) -> Iterator[None]:
        conf = delta_spark_session_conf(tag)
        for key, value in conf.items():
            self.spark.conf.set(key, value)
        try:
            yield
        finally:
            for key in conf:
                self.spark.conf.unset(key)


def delta_spark_write_options(tag: CommitTag) -> dict[str, str]:
    """DataFrame writer options for delta-spark (idempotent writes + user metadata)."""
    return {
        "txnAppId": tag.app_id,
        "txnVersion": str(APP_VERSION),
        "userMetadata": json.dumps(tag.properties(), sort_keys=True),
    }


def delta_spark_session_conf(tag: CommitTag) -> dict[str, str]:
    """Session confs with the same effect for SQL writes (INSERT / MERGE / UPDATE / DELETE)."""
    return {
        "spark.databricks.delta.write.txnAppId": tag.app_id,
        "spark.databricks.delta.write.txnVersion": str(APP_VERSION),
        "spark.databricks.delta.commitInfo.userMetadata": json.dumps(tag.properties(), sort_keys=True),
    }
