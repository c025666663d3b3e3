"""Delta Lake on Spark via delta-spark: the user's jars, Delta's SQL extensions and catalog, the
exactly-once ledger (``DESCRIBE HISTORY``) and the commit tag as delta-spark carries it.

The jars: by default the manifest's ``io.delta:delta-spark_2.12:3.3.3`` and
``io.delta:delta-storage:3.3.3`` under PySpark 3.5, ``io.delta:delta-spark_2.13:4.3.1`` and
``io.delta:delta-storage:4.3.1`` under PySpark 4.1 (``scripts/jvm/pom.xml``, resolved by the
bootstrap into ``<sys.prefix>/share/occflow/jars/``: ``jvm_artifacts.py``). Users who bring their own (matched to
their cluster's Spark and Scala) name them in the config's ``jars`` or in
``OCCFLOW_DELTA_SPARK_JARS`` (comma-separated paths). Either way the list is checked against the
running PySpark before a session starts: a delta-spark and a delta-storage jar of one version,
none built for another Scala or Spark line.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...core.kinds import WinningCommit
from ..ledger import HISTORY_DEPTH, FoundCommit
from ..outcome import ErrorInfo, MetadataCommit, NeverRetry, WriteOutcome
from ..tags import APP_VERSION, CommitTag
from .formats import CommitInfo
from .identifiers import quote_table
from .jvm_artifacts import (
    DELTA_SPARK,
    DELTA_STORAGE,
    check_spark_jars,
    delta_jar_problems,
    jar,
    line_manifest,
    running_spark,
)
from .settings import SparkConfigError

JARS_ENV = "OCCFLOW_DELTA_SPARK_JARS"
EXTENSIONS = "io.delta.sql.DeltaSparkSessionExtension"
CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
#: The session conf delta-spark copies into each commit's ``commitInfo.userMetadata``.
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
#: ``DESCRIBE HISTORY`` operations that change the table's metadata and no data (Delta's
#: ``DeltaOperations``: AddColumns, ChangeColumn, ReplaceColumns, DropColumns, RenameColumn,
#: SetTableProperties, UnsetTableProperties).
METADATA_OPERATIONS = frozenset({
    "ADD COLUMNS", "CHANGE COLUMN", "REPLACE COLUMNS", "DROP COLUMNS", "RENAME COLUMN",
    "SET TBLPROPERTIES", "UNSET TBLPROPERTIES",
})


#: delta-spark's errors for a table whose protocol lists table features this delta-spark does not
#: implement, and which side of the protocol lists them (delta-spark 3.3.3
#: ``error/delta-error-classes.json``, SQLSTATE 56038: "Unsupported Delta read|write feature: table
#: "<tableNameOrPath>" requires reader|writer table feature(s) that are unsupported by Delta Lake
#: "<deltaVersion>": <unsupported>."). Raised before anything is written; no retry changes the jar.
UNSUPPORTED_FEATURE_ERRORS: Mapping[str, str] = {
    "DELTA_UNSUPPORTED_FEATURES_FOR_READ": "reader",
    "DELTA_UNSUPPORTED_FEATURES_FOR_WRITE": "writer",
}
_UNSUPPORTED_TEXT = re.compile(
    r'requires (?:reader|writer) table feature\(s\) that are unsupported by Delta Lake "(?P<delta>[^"]*)": '
    r"(?P<features>[^\n]*?)\.?\s*$",
    re.MULTILINE,
)


class UnsupportedTableFeature(NeverRetry):
    """The table's protocol needs features the session's delta-spark lacks: fail, never retry."""

    def __init__(self, table: str, side: str, features: str, delta_version: str) -> None:
        self.table, self.side, self.features, self.delta_version = table, side, features, delta_version
        super().__init__(
            f"{table}: the table's protocol needs the {side} table feature(s) {features}, which delta-spark "
            f"{delta_version or '(this version)'} does not support; nothing was written and a retry cannot "
            f"change that: run the write with a delta-spark that supports them (catalog.jars or {JARS_ENV}), "
            "or leave this table to the engine that added them"
        )


def unsupported_table_features(table: str, error: ErrorInfo | None) -> UnsupportedTableFeature | None:
    """The ``UnsupportedTableFeature`` a write's error is (``UNSUPPORTED_FEATURE_ERRORS``), naming
    the features as delta-spark listed them; ``None`` for any other error."""
    if error is None:
        return None
    text = "\n".join(error.messages)
    for error_class, side in UNSUPPORTED_FEATURE_ERRORS.items():
        if error.error_class != error_class and f"[{error_class}]" not in text:
            continue
        found = _UNSUPPORTED_TEXT.search(text)
        features = found.group("features").strip() if found else "(unnamed: see the engine's message)"
        return UnsupportedTableFeature(table, side, features, found.group("delta") if found else "")
    return None


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
                line = line_manifest()
                raise SparkConfigError(
                    f"Delta on Spark needs the delta-spark jars: {exc}; or bring your own: set {JARS_ENV} to "
                    f"comma-separated jar paths (delta-spark_{line.scala} and delta-storage for Spark {line.spark_line}) "
                    "or give catalog.jars"
                ) from None
        missing = [j for j in jars if "://" not in j and not Path(j).is_file()]
        if missing:
            raise SparkConfigError(f"Delta jars not found: {', '.join(missing)} (from {origin})")
        check_spark_jars(jars, origin=origin)
        problems = delta_jar_problems(jars)
        if problems:
            version, scala = running_spark()
            _, spark, storage = line_manifest(version).artifacts
            raise SparkConfigError(
                f"Delta jars from {origin} do not make a delta-spark for the running Spark {version} (Scala {scala}): "
                + "; ".join(problems) + f" (the manifest's: {spark.coordinate}, {storage.coordinate})"
            )
        return jars

    def prepare(self) -> None:
        return None

    def before(self, spark: Any, table: str) -> int | None:
        return latest_version(spark, table)

    def after(self, spark: Any, table: str, before: int | None) -> CommitInfo:
        """This job's commit after ``before``, as Delta's history lists it (version and metrics).

        Other writers may have committed since the job started: when the session carries
        occflow's tag (``spark.databricks.delta.commitInfo.userMetadata``, set while an
        exactly-once attempt runs), the commit with that user metadata is the job's own;
        otherwise the newest, said to be ambiguous when there are several."""
        rows = spark.sql(f"DESCRIBE HISTORY {quote_table(table)} LIMIT 20").collect()
        newer = [r for r in rows if before is None or int(r["version"]) > before]
        if not newer:
            return CommitInfo(tag={"commit": "none"})
        mine = _session_user_metadata(spark)
        own = [r for r in newer if mine is not None and r["userMetadata"] == mine]
        latest = max(own or newer, key=lambda r: int(r["version"]))
        metrics = dict(latest["operationMetrics"] or {})
        tag = {"delta_operation": str(latest["operation"])}
        if len(newer) > 1 and len(own) != 1:
            tag["commit"] = f"ambiguous: {len(newer)} commits since the job started"
        out_rows = metrics.get("numOutputRows") or metrics.get("numUpdatedRows") or metrics.get("numDeletedRows")
        version = int(latest["version"])
        return CommitInfo(
            version=version,
            rows=None if out_rows is None else int(out_rows),
            tag=tag,
            metadata=MetadataCommit(version=version) if str(latest["operation"]) in METADATA_OPERATIONS else None,
        )

    def lost(self, spark: Any, table: str, before: int | None, outcome: WriteOutcome) -> WriteOutcome:
        """A lost write's outcome, its winner named by version number.

        delta-spark prints the winner's commit info in its message (``errors.classify_error``
        read it), but delta-spark 3.x leaves the commit's version out of that JSON: the version
        is read from the table's history, the commit after ``before`` whose operation, read
        version and user metadata are the ones the message printed (the oldest such, as Delta's
        conflict checker meets the commits in order); the other commits since are ``others``."""
        found = outcome.classification
        if found is None or not found.is_conflict:
            return outcome
        winner = found.winning_commit
        if winner is not None and winner.version is not None:
            return outcome
        try:
            rows = spark.sql(f"DESCRIBE HISTORY {quote_table(table)} LIMIT {HISTORY_DEPTH}").collect()
        except Exception:  # the table went away: the outcome stays as the message gave it
            return outcome
        return outcome.with_winner(winner_in_history(rows, before, winner))
    def commit_ledger(self, spark: Any, table: str) -> DeltaSparkLedger:
        return DeltaSparkLedger(spark, table)


def _session_user_metadata(spark: Any) -> str | None:
    try:
        value = spark.conf.get(USER_METADATA_CONF, None)
    except Exception:  # a session without the conf API (a stub): no tag to match
        return None
    return str(value) if value else None


def winner_in_history(
    rows: Sequence[Any], before: int | None, printed: WinningCommit | None
) -> WinningCommit | None:
    """The winning commit among ``DESCRIBE HISTORY`` rows newer than ``before``, by version.

    ``printed`` is what the exception's ``Conflicting commit`` said (operation, read version,
    user metadata; delta-spark 3.x gives no version): the oldest newer commit that agrees with
    it on every field it printed wins. ``None`` only when nothing was printed and nothing is
    newer."""
    newer = sorted((r for r in rows if before is None or int(r["version"]) > before), key=lambda r: int(r["version"]))
    if not newer:
        return printed

    def agrees(row: Any) -> bool:
        if printed is None:
            return True
        if printed.operation is not None and str(row["operation"]) != printed.operation:
            return False
        read = printed.tag.get("readVersion")
        if read is not None and row["readVersion"] is not None and int(row["readVersion"]) != int(read):
            return False
        if printed.tagged:
            tag = _tag_of(row["userMetadata"])
            return tag is not None and (tag.dag_id, tag.task_id, tag.run_id, tag.try_number) == (
                printed.dag_id, printed.task_id, printed.run_id, printed.try_number
            )
        return True

    matching = [r for r in newer if agrees(r)] or newer
    chosen = matching[0]
    others = tuple(int(r["version"]) for r in newer if r is not chosen)
    base = printed or WinningCommit()
    return replace(
        base,
        version=int(chosen["version"]),
        operation=base.operation or str(chosen["operation"]),
        timestamp=base.timestamp or str(chosen["timestamp"]),
        others=others,
        basis=(
            "the conflicting commit delta-spark named in its exception, its version from the table's "
            f"history (the oldest of {len(matching)} matching commits since version {before})"
        ),
    )


def _tag_of(user_metadata: Any) -> CommitTag | None:
    """occflow's tag in a commit's user metadata; ``None`` for none or someone else's text."""
    if not user_metadata:
        return None
    try:
        props = json.loads(str(user_metadata))
    except ValueError:
        return None  # someone else's user metadata
    return CommitTag.from_properties(props) if isinstance(props, dict) else None


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
            found = _tag_of(row["userMetadata"])
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
        USER_METADATA_CONF: json.dumps(tag.properties(), sort_keys=True),
    }
