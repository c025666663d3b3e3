"""Iceberg conformance on real Spark: every ordered pair of operations, with the commit order fixed.

How the order is controlled (no sleeps, no races): each pair gets a fresh table with a
catalog whose table cache is on. The *later* job's session loads the table first, so its cached
table stays on snapshot S0. The *earlier* job then runs in a second session and commits S1.
Finally the later job runs on its cached S0: Spark plans its scan and writes its files on S0,
exactly as a job that started before the earlier commit would, and Iceberg's own commit path
refreshes to S1 and runs its own validation (``validateFromSnapshot(S0)``, conflicting data /
deletes, missing files) before the compare-and-swap in the JDBC catalog. Nothing of Iceberg is
re-implemented here: what is recorded is what Iceberg did.

Every operation touches the same partition ``ds = 'p'`` (a second partition ``q`` is left alone),
with predicates Iceberg cannot prune by column statistics, so "same partition" means the same
thing it means in the profile's matrix. Table maintenance works on the whole table.

A pair with a maintenance operation gets what that operation needs to do real work, before S0 is
pinned (``IcebergPairRunner._setup``): ``rewrite_manifests`` a second data manifest (one manifest alone is left as it
is), ``rewrite_position_deletes`` a position delete file in ``p`` (written by a merge-on-read DELETE;
the table goes back to copy-on-write, so the other job commits as in every other pair),
``remove_orphan_files`` a file in ``p``'s data directory that no metadata references, dated ten
days back (the procedure refuses an ``older_than`` under 24 hours). An earlier maintenance job that
did nothing (no manifest or delete file rewritten, the orphan still there) breaks the experiment.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from ...core.kinds import ConflictKind
from ...core.operations import Operation
from ...core.profiles import get_profile
from ..conformance import ConformanceRow, Observation, run_runner
from .config import SparkConfig
from .errors import error_info
from .iceberg_catalog import RUNTIME_JAR, IcebergCatalogConfig
from .identifiers import sql_string
from .session import SparkEngine

ENGINE = "spark-iceberg"
CATALOG = "occflow_conformance"
PARTITION = "p"
ISOLATION_PROFILES = {"serializable": "iceberg-serializable", "snapshot": "iceberg-snapshot"}

# The SQL of each canonical operation on partition ``p`` of table ``{t}`` (catalog-qualified)
# and ``{ident}`` (the name inside the catalog, for procedures). ``{role}`` is earlier / later,
# so two schema changes add different columns.
OPERATION_SQL: Mapping[Operation, str] = {
    Operation.INSERT_INTO: "INSERT INTO {t} VALUES (100, 'p', 100), (101, 'p', 101)",
    Operation.INSERT_OVERWRITE: "INSERT OVERWRITE {t} PARTITION (ds = 'p') SELECT 200 AS id, 200 AS v",
    # Iceberg's Spark tables do not support TRUNCATE ... PARTITION; truncating one partition is
    # the metadata-only delete of all its files, which is what this statement commits.
    Operation.TRUNCATE: "DELETE FROM {t} WHERE ds = 'p'",
    Operation.UPDATE: "UPDATE {t} SET v = v + 10 WHERE ds = 'p'",
    # A row-level delete: the modulo cannot be pushed into Iceberg, so it rewrites rows of p.
    Operation.DELETE: "DELETE FROM {t} WHERE ds = 'p' AND v % 2 = 0",
    Operation.MERGE: (
        "MERGE INTO {t} AS tgt USING (SELECT 1 AS id, 'p' AS ds, 50 AS v UNION ALL "
        "SELECT 300 AS id, 'p' AS ds, 300 AS v) AS src "
        "ON tgt.ds = 'p' AND tgt.id = src.id AND tgt.ds = src.ds "
        "WHEN MATCHED THEN UPDATE SET v = src.v WHEN NOT MATCHED THEN INSERT *"
    ),
    Operation.OPTIMIZE: (
        "CALL {catalog}.system.rewrite_data_files(table => '{ident}', where => 'ds = \"p\"', "
        "options => map('rewrite-all', 'true'))"
    ),
    Operation.ALTER_METADATA: "ALTER TABLE {t} ADD COLUMN note_{role} STRING",
    # Every snapshot but the current one: the shortest retention there is (the unsafe form,
    # which occflow's operators refuse unless told allow_unsafe_retention=True).
    Operation.EXPIRE_SNAPSHOTS: (
        "CALL {catalog}.system.expire_snapshots(table => '{ident}', "
        "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)"
    ),
    # older_than is four days back (above the 72-hour floor occflow checks), the orphan ten.
    Operation.REMOVE_ORPHAN_FILES: (
        "CALL {catalog}.system.remove_orphan_files(table => '{ident}', older_than => TIMESTAMP '{older_than}')"
    ),
    Operation.REWRITE_MANIFESTS: "CALL {catalog}.system.rewrite_manifests(table => '{ident}')",
    # rewrite-all: one delete file is below the action's min-input-files.
    Operation.REWRITE_POSITION_DELETES: (
        "CALL {catalog}.system.rewrite_position_delete_files(table => '{ident}', "
        "options => map('rewrite-all', 'true'))"
    ),
}

#: What an earlier maintenance job must have done for the pair to prove anything: the column of
#: the procedure's result that counts its work (``remove_orphan_files`` is checked on the file).
WORK_DONE: Mapping[Operation, str] = {
    Operation.REWRITE_MANIFESTS: "rewritten_manifests_count",
    Operation.REWRITE_POSITION_DELETES: "rewritten_delete_files_count",
}
ORPHAN_AGE = timedelta(days=10)
ORPHAN_OLDER_THAN = timedelta(days=4)

_counter = itertools.count()


def _sql(op: Operation, table: str, role: str) -> str:
    ident = table.split(".", 1)[1]
    older_than = (datetime.now(timezone.utc) - ORPHAN_OLDER_THAN).strftime("%Y-%m-%d %H:%M:%S")
    return OPERATION_SQL[op].format(t=table, ident=ident, catalog=CATALOG, role=role, older_than=older_than)


def _local_path(uri: str) -> Path:
    """A ``file:`` URI (or a plain path) of the local warehouse as a path."""
    parsed = urlparse(uri)
    return Path(unquote(parsed.path if parsed.scheme in ("file", "") else uri))


class IcebergPairRunner:
    """One isolation level of Iceberg on Spark, as a ``PairRunner`` of the conformance framework."""

    engine = ENGINE
    compare_with: tuple[str, ...] = ()

    def __init__(self, spark_engine: SparkEngine, workdir: Path, isolation: str = "serializable") -> None:
        if isolation not in ISOLATION_PROFILES:
            raise ValueError(f"isolation must be one of {', '.join(ISOLATION_PROFILES)}, got {isolation!r}")
        self.isolation = isolation
        self.label = isolation
        self.profile = ISOLATION_PROFILES[isolation]
        self.spark_engine = spark_engine
        self.workdir = Path(workdir)
        self.catalog = IcebergCatalogConfig(
            name=CATALOG,
            uri=f"jdbc:sqlite:{self.workdir / 'conformance_catalog.db'}",
            warehouse=str(self.workdir / "warehouse"),
            # The later session must keep seeing S0 after the earlier commit: see the module doc.
            cache_enabled=True,
            properties={"cache.expiration-interval-ms": "-1"},
        )
        self.catalog.prepare()
        self._orphan: Path | None = None

    def _session(self) -> Any:
        """A new session of the engine's Spark context with the conformance catalog registered."""
        session = self.spark_engine.session().newSession()
        for key, value in self.catalog.spark_conf().items():
            session.conf.set(key, value)
        return session

    def _create_table(self, session: Any, earlier: Operation, later: Operation) -> str:
        table = f"{CATALOG}.db.c_{earlier.value}_{later.value}_{next(_counter)}_{int(time.time())}"
        session.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
        level = sql_string(self.isolation)
        session.sql(
            f"CREATE TABLE {table} (id BIGINT, ds STRING, v INT) USING iceberg PARTITIONED BY (ds) "
            "TBLPROPERTIES ('format-version' = '2', "
            f"'write.update.isolation-level' = {level}, 'write.delete.isolation-level' = {level}, "
            f"'write.merge.isolation-level' = {level})"
        )
        session.sql(f"INSERT INTO {table} VALUES (1, 'p', 1), (2, 'p', 2), (3, 'p', 3), (4, 'p', 4), (5, 'q', 5)")
        self._orphan = None
        self._setup(session, table, {earlier, later})
        return table

    def _setup(self, session: Any, table: str, ops: set[Operation]) -> None:
        """What the pair's maintenance operations need to do real work (the module's docstring)."""
        if Operation.REWRITE_MANIFESTS in ops:
            session.sql(f"INSERT INTO {table} VALUES (6, 'q', 6)")  # a second data manifest
        if Operation.REWRITE_POSITION_DELETES in ops:
            session.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('write.delete.mode' = 'merge-on-read')")
            session.sql(f"DELETE FROM {table} WHERE ds = 'p' AND id = 2")
            session.sql(f"ALTER TABLE {table} UNSET TBLPROPERTIES ('write.delete.mode')")
        if Operation.REMOVE_ORPHAN_FILES in ops:
            first = session.sql(f"SELECT file_path FROM {table}.files WHERE partition.ds = 'p' LIMIT 1").collect()
            orphan = _local_path(str(first[0][0])).parent / f"orphan-{next(_counter)}.parquet"
            orphan.write_bytes(b"no metadata references this file")
            stamp = (datetime.now(timezone.utc) - ORPHAN_AGE).timestamp()
            os.utime(orphan, (stamp, stamp))
            self._orphan = orphan

    def _did_nothing(self, op: Operation, result: Any) -> str | None:
        """Why an earlier maintenance job proves nothing (it did no work), or None."""
        if op is Operation.REMOVE_ORPHAN_FILES and self._orphan is not None and self._orphan.exists():
            return f"remove_orphan_files left the orphan {self._orphan.name}"
        column = WORK_DONE.get(op)
        if column is not None:
            rows = result.collect()
            done = int(rows[0][column]) if rows else 0
            if done == 0:
                return f"{op.value} reports {column} = 0"
        return None

    def run_pair(self, earlier: Operation, later: Operation) -> Observation:
        start = time.perf_counter()
        earlier_session = self._session()
        later_session = self._session()
        table = self._create_table(earlier_session, earlier, later)
        try:
            # Pin the later job to S0: its catalog caches the table as it is now.
            later_session.sql(f"SELECT count(*) FROM {table}").collect()
            try:
                idle = self._did_nothing(earlier, earlier_session.sql(_sql(earlier, table, "earlier")))
            except Exception as exc:  # the experiment broke: report it, never count it
                info = error_info(exc)
                idle = f"{info.exception_class}: {info.messages[0] if info.messages else ''}"
            if idle is not None:
                return Observation(
                    later_committed=False,
                    earlier_committed=False,
                    earlier_error=idle,
                    seconds=time.perf_counter() - start,
                )
            outcome = self.spark_engine.run(_sql(later, table, "later"), table, later, session=later_session)
            left = self._orphan is not None and self._orphan.exists() and later is Operation.REMOVE_ORPHAN_FILES
        finally:
            _drop_quietly(earlier_session, table)
        seconds = time.perf_counter() - start
        if outcome.committed:
            note = "remove_orphan_files (later) left the orphan" if left else ""
            return Observation(later_committed=True, seconds=seconds, note=note)
        err = outcome.error
        text = None if err is None else f"{err.exception_class}: {_first_line(err.messages)}"
        kind = None if outcome.classification is None else outcome.classification.kind
        return Observation(later_committed=False, later_kind=kind, later_error=text, seconds=seconds)


def _first_line(messages: Sequence[str]) -> str:
    for message in messages:
        if message.strip():
            line = message.strip().splitlines()[0]
            # Data file paths differ on every run; the message is the same without them.
            return re.sub(r"file:[^\s,\]]+", "<file>", line)[:300]
    return ""


def _drop_quietly(session: Any, table: str) -> None:
    # Cleanup only: a leftover table in the conformance warehouse is harmless.
    with contextlib.suppress(Exception):
        session.sql(f"DROP TABLE IF EXISTS {table} PURGE")


def _default_engine(workdir: Path) -> SparkEngine:
    return SparkEngine(SparkConfig(home=str(Path(workdir) / "spark"), app_name="occflow-conformance"))


@contextmanager
def conformance_runners(workdir: Path, spark_engine: SparkEngine | None = None) -> Iterator[list[IcebergPairRunner]]:
    """Both isolation levels (the conformance framework's engine entry point)."""
    root = Path(workdir) / "spark-iceberg"
    root.mkdir(parents=True, exist_ok=True)
    own = spark_engine is None
    engine = spark_engine or _default_engine(root)
    try:
        yield [IcebergPairRunner(engine, root, iso) for iso in ISOLATION_PROFILES]
    finally:
        if own:
            engine.stop()


def conformance_meta() -> dict[str, str]:
    import pyspark  # optional heavy dependency

    return {"pyspark": str(pyspark.__version__), "iceberg": RUNTIME_JAR}


def run_iceberg_conformance(
    pairs: Iterable[tuple[Operation | str, Operation | str]] | None = None,
    isolation: str = "serializable",
    workdir: Path | None = None,
    spark_engine: SparkEngine | None = None,
) -> list[ConformanceRow]:
    """Run ``pairs`` (default: every pair of the profile's operations) and compare with the isolation's profile."""
    profile = get_profile(ISOLATION_PROFILES.get(isolation, f"iceberg-{isolation}"))
    only = None if pairs is None else [(profile.operation(a), profile.operation(b)) for a, b in pairs]
    with tempfile.TemporaryDirectory(prefix="occflow-iceberg-conformance-") as tmp:
        root = Path(workdir or tmp)
        own = spark_engine is None
        engine = spark_engine or _default_engine(root)
        try:
            runner = IcebergPairRunner(engine, root, isolation)
            result = run_runner(runner, only=only)
        finally:
            if own:
                engine.stop()
    return list(result.comparison(profile.name).rows)


__all__ = [
    "OPERATION_SQL",
    "ConformanceRow",
    "ConflictKind",
    "IcebergPairRunner",
    "conformance_runners",
    "run_iceberg_conformance",
]
