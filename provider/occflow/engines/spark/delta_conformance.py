"""Delta conformance on real delta-spark: every ordered pair of the Delta profiles' operations,
the later job planned on the snapshot before the earlier commit and committing after it.

One local SparkSession with Delta's extensions serves every cell (a fresh table per cell, unique
name). Eight runners: ``delta.isolationLevel`` Serializable / WriteSerializable, a table
partitioned by ``ds`` or not, ``delta.enableDeletionVectors`` on or off.

How the order is fixed (no sleeps, no races):

- a *data* job that comes later (INSERT INTO, INSERT OVERWRITE, TRUNCATE, UPDATE, DELETE, MERGE)
  runs its real SQL statement in a thread, with a Python UDF (``occflow_conformance_gate``) in
  its source or condition. delta-spark starts the statement's transaction (its snapshot) before
  it executes the query, so the UDF runs after the snapshot was taken: it marks "started" and
  blocks until a gate file exists. The earlier job then runs and commits on the main thread,
  the gate opens, and the later statement writes and commits; Delta's own conflict checker runs
  against the earlier commit. Whether the later job really planned on the old snapshot is checked,
  not assumed: a later commit whose ``readVersion`` (``DESCRIBE HISTORY``) is not the version
  before the earlier commit makes the cell invalid.
- OPTIMIZE, ALTER TABLE and the protocol upgrade have no query to put a UDF in (their commands
  take the latest snapshot and commit at once). For them the later job takes its snapshot S0
  (``DeltaLog.update()``) before the earlier job runs, and afterwards runs Delta's own code on
  S0: OPTIMIZE is ``OptimizeExecutor(spark, S0, ...).optimize()`` (what ``OPTIMIZE ... WHERE``
  runs, with the snapshot it would have taken); ALTER is what
  ``AlterTableSetPropertiesDeltaCommand`` does (``startTransaction(S0)``, ``updateMetadata``,
  ``commit(SetTableProperties)``); the upgrade is that too with a ``delta.feature.*`` property
  (a Protocol action) after reading every file (``filterFiles()``), as REORG ... APPLY (UPGRADE
  ...) reads every file it rewrites. Nothing of the conflict check is re-implemented: every
  commit goes through ``OptimisticTransaction.commit`` and its ``ConflictChecker``.

Every job works on partition ``ds = 'p'`` (``q`` holds a row no job touches); on the
unpartitioned table the same statements' ``ds = 'p'`` is a data predicate, and TRUNCATE /
OPTIMIZE / INSERT OVERWRITE take the whole table. The earlier TRUNCATE is the metadata-only
``DELETE ... WHERE ds = 'p'``; the later one needs a UDF, so it deletes every row of ``p`` row by
row (same read set, same removed files, no file added).

VACUUM (``RETAIN 0 HOURS``, Delta's check off) has no snapshot to pin: its two empty commits start at
the latest version (``VacuumCommand.logVacuumStart``); a later VACUUM runs after the earlier commit.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ...core.errors import InvalidDeclarationError
from ...core.kinds import ConflictKind
from ...core.operations import Operation
from ...core.profiles import get_profile
from ..conformance import Observation, parse_pair, render_json, run_runners
from .config import SparkConfig
from .delta_pinned import PinnedDelta
from .errors import classify_error, error_info
from .jvm_artifacts import DELTA_SPARK
from .maintenance import retention_check_off
from .session import SparkEngine

ENGINE = "delta-spark"
GATE_FUNCTION = "occflow_conformance_gate"
#: How long a later job may wait at its gate, and the runner for it to get there (seconds).
GATE_TIMEOUT = 300.0
ISOLATION_PROFILES: Mapping[str, str] = {
    "Serializable": "delta-serializable",
    "WriteSerializable": "delta-write-serializable",
}
#: The property the later upgrade sets: a table feature neither table layout has yet.
UPGRADE_FEATURE = "delta.feature.timestampNtz"

_counter = itertools.count()


@dataclass(frozen=True)
class Layout:
    """One table configuration a runner measures."""

    isolation: str
    partitioned: bool
    deletion_vectors: bool

    @property
    def label(self) -> str:
        dv = "deletion vectors" if self.deletion_vectors else "no deletion vectors"
        return f"delta-spark {self.isolation}, {'partitioned' if self.partitioned else 'unpartitioned'}, {dv}"


#: Every configuration of the full run, in report order.
LAYOUTS: tuple[Layout, ...] = tuple(
    Layout(iso, part, dv)
    for iso in ("WriteSerializable", "Serializable")
    for part in (True, False)
    for dv in (False, True)
)


# The later job's UDF, run in a Python worker: say it started, then wait for the gate file. Built
# from source in a namespace no worker can import, so cloudpickle ships it by value (the worker
# need not have occflow installed).
_GATE_SOURCE = f"""
def gate(value, path):
    import os, time
    marker = path + ".started"
    if not os.path.exists(marker):
        with open(marker, "a"):
            pass
    deadline = time.time() + {GATE_TIMEOUT!r}
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.02)
    return value
"""


def _gate_function() -> Any:
    namespace: dict[str, Any] = {"__name__": "occflow_conformance_gate_udf"}
    exec(_GATE_SOURCE, namespace)  # noqa: S102 - our own constant source, see above
    return namespace["gate"]


def _statement(op: Operation, table: str, role: str, layout: Layout, gate: str | None) -> str:
    """The SQL of ``op`` by ``role`` on partition ``p``; ``gate`` (a path) wraps the job's source
    or condition in the gate UDF."""
    base = 100 if role == "earlier" else 200

    def g(expr: str) -> str:
        return expr if gate is None else f"{GATE_FUNCTION}({expr}, '{gate}')"

    def cond(extra: str = "") -> str:
        parts = ["ds = 'p'", *([extra] if extra else []), *([f"{g('id')} IS NOT NULL"] if gate else [])]
        return " AND ".join(parts)

    if op is Operation.INSERT_INTO:
        return f"INSERT INTO {table} SELECT {g('id')} AS id, ds, v FROM VALUES ({base + 1}, 'p', {base}) AS s(id, ds, v)"
    if op is Operation.INSERT_OVERWRITE:
        rows = f"VALUES ({base + 1}, {base}), ({base + 2}, {base}) AS s(id, v)"
        if layout.partitioned:
            return f"INSERT OVERWRITE {table} PARTITION (ds = 'p') SELECT {g('id')} AS id, v FROM {rows}"
        return f"INSERT OVERWRITE {table} SELECT {g('id')} AS id, 'p' AS ds, v FROM {rows}"
    if op is Operation.TRUNCATE:
        if gate is None:
            return f"DELETE FROM {table} WHERE ds = 'p'" if layout.partitioned else f"DELETE FROM {table}"
        return f"DELETE FROM {table} WHERE {cond() if layout.partitioned else g('id') + ' IS NOT NULL'}"
    if op is Operation.UPDATE:
        return f"UPDATE {table} SET v = v + {base} WHERE {cond()}"
    if op is Operation.DELETE:
        # "id <> k" cannot be pruned by file statistics: every file holding p's rows is read.
        keep = 1 if role == "earlier" else 2
        return f"DELETE FROM {table} WHERE {cond(f'id <> {keep}')}"
    if op is Operation.MERGE:
        key = 1 if role == "earlier" else 2
        return (
            f"MERGE INTO {table} AS tgt USING (SELECT {g('id')} AS id, 'p' AS ds, v FROM VALUES "
            f"({key}, {base}), ({base + 5}, {base}) AS s(id, v)) AS src "
            "ON tgt.ds = 'p' AND tgt.id = src.id "
            "WHEN MATCHED THEN UPDATE SET v = src.v WHEN NOT MATCHED THEN INSERT *"
        )
    if op is Operation.OPTIMIZE:
        return f"OPTIMIZE {table} WHERE ds = 'p'" if layout.partitioned else f"OPTIMIZE {table}"
    if op is Operation.ALTER_METADATA:
        return f"ALTER TABLE {table} SET TBLPROPERTIES ('occflow.conformance.{role}' = '1')"
    if op is Operation.UPGRADE_PROTOCOL:
        return f"ALTER TABLE {table} SET TBLPROPERTIES ('{UPGRADE_FEATURE}' = 'supported')"
    if op is Operation.VACUUM:  # the unsafe retention users run (Delta's own check off: maintenance.py)
        return f"VACUUM {table} RETAIN 0 HOURS"
    raise InvalidDeclarationError(f"delta-spark conformance has no job for operation {op.value!r}")


@dataclass(frozen=True)
class Divergence:
    """A measured cell where delta-spark does something else than the profile says, and why the
    profile stays as it is (``None`` in a layout field: any value). ``observed`` is the kind the
    later job fails with (``None``: it commits)."""

    earlier: Operation
    later: Operation
    observed: ConflictKind | None
    why: str
    isolation: str | None = None
    partitioned: bool | None = None
    deletion_vectors: bool | None = None

    def covers(self, layout: Layout, earlier: Operation, later: Operation, obs: Observation) -> bool:
        return (
            (self.earlier, self.later) == (earlier, later)
            and obs.valid
            and obs.later_kind == self.observed
            and obs.later_fails == (self.observed is not None)
            and self.isolation in (None, layout.isolation)
            and self.partitioned in (None, layout.partitioned)
            and self.deletion_vectors in (None, layout.deletion_vectors)
        )


#: Every divergence measured on delta-spark (docs/conformance/delta-spark.md), with the reason
#: the profile keeps its cell. A divergence not listed here is unexplained: the report says so.
NO_WRITE_SERIALIZABLE = (
    "delta-spark (OSS) has no WriteSerializable table level: delta.isolationLevel defaults to Serializable and "
    "accepts only 'Serializable' (DeltaConfigs.ISOLATION_LEVEL: 'must be Serializable'), so a table that sets "
    "nothing runs Serializable and a blind append fails the later read-modify-write (ConcurrentAppend), exactly "
    "as in the Serializable runners. The profile keeps Delta's documented WriteSerializable (spec 003/004, "
    "delta-rs); a delta-spark table is a delta-serializable table"
)
OPTIMIZE_RETRIES = (
    "OPTIMIZE's first commit attempt (on the pinned snapshot) gets the conflict, but delta-spark's "
    "OptimizeExecutor.commitAndRetry retries it on a fresh transaction when every file it compacts is still "
    "live, so the compaction survives a concurrent metadata-only change. The profile stays conservative (the "
    "conflict checker and spec 004 fail every write concurrent with a metadata change; delta-rs does not retry): "
    "admission keeps the two apart, which costs an OPTIMIZE a wait, never a lost write"
)
VACUUM_DELETED_ITS_FILE = (
    "the harm the cell names (deletes_files_in_use), seen in the log: on a table without partitions the writer's "
    "task had opened its file in the table's root before its gate, and VACUUM RETAIN 0 HOURS deleted it as "
    "untracked; the writer fails (TASK_WRITE_FAILED, not a conflict: never retried). Admission keeps the two apart"
)
EXPLAINED: tuple[Divergence, ...] = (
    *(Divergence(Operation.VACUUM, later, ConflictKind.NOT_A_CONFLICT, VACUUM_DELETED_ITS_FILE, partitioned=False)
      for later in (Operation.INSERT_INTO, Operation.INSERT_OVERWRITE)),
    *(Divergence(Operation.INSERT_INTO, later, ConflictKind.CONCURRENT_APPEND, NO_WRITE_SERIALIZABLE, isolation="WriteSerializable")
      for later in (Operation.INSERT_OVERWRITE, Operation.TRUNCATE, Operation.UPDATE, Operation.DELETE, Operation.MERGE)),
    Divergence(Operation.ALTER_METADATA, Operation.OPTIMIZE, None, OPTIMIZE_RETRIES),
    Divergence(Operation.UPGRADE_PROTOCOL, Operation.OPTIMIZE, None, OPTIMIZE_RETRIES),
)

#: The note prefix of an explained divergence (the report's *why* column).
EXPLAINED_PREFIX = "explained divergence: "
UNEXPLAINED = "UNEXPLAINED divergence from the profile"


def explain(layout: Layout, profile: str, earlier: Operation, later: Operation, obs: Observation) -> str:
    """The note for ``obs`` against ``profile``'s cell: empty when they agree, the reason of a
    listed divergence, or ``UNEXPLAINED``."""
    cell = get_profile(profile).cell(earlier, later)
    if obs.valid and cell.later_fails == obs.later_fails and (not obs.later_fails or obs.later_kind in cell.kinds):
        return ""
    for known in EXPLAINED:
        if known.covers(layout, earlier, later, obs):
            return EXPLAINED_PREFIX + known.why
    return UNEXPLAINED


#: Operations whose later job runs Delta's own code on a pinned snapshot (no query for a UDF).
PINNED = (Operation.OPTIMIZE, Operation.ALTER_METADATA, Operation.UPGRADE_PROTOCOL)


@dataclass
class DeltaSparkPairRunner:
    """Runs pairs on fresh delta-spark tables of one ``Layout`` (a ``PairRunner``)."""

    spark_engine: SparkEngine
    workdir: Path
    layout: Layout
    engine: str = ENGINE
    profile: str = field(init=False)
    compare_with: tuple[str, ...] = ()
    label: str = field(init=False)

    def __post_init__(self) -> None:
        if self.layout.isolation not in ISOLATION_PROFILES:
            raise InvalidDeclarationError(
                f"unknown delta.isolationLevel {self.layout.isolation!r}; use one of {', '.join(ISOLATION_PROFILES)}"
            )
        self.profile = ISOLATION_PROFILES[self.layout.isolation]
        self.label = self.layout.label
        self.workdir = Path(self.workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)

    @property
    def spark(self) -> Any:
        spark = self.spark_engine.session()
        _register_gate(spark)
        return spark

    def _create(self, spark: Any, earlier: Operation, later: Operation) -> str:
        table = f"default.dc_{next(_counter)}_{uuid.uuid4().hex[:8]}"
        layout = self.layout
        props = {"delta.enableDeletionVectors": "true" if layout.deletion_vectors else "false"}
        if layout.isolation != "WriteSerializable":
            # delta-spark accepts only 'Serializable' for the property ("delta.isolationLevel must be
            # Serializable"): WriteSerializable is the level of a table that does not set it.
            props["delta.isolationLevel"] = layout.isolation
        tblprops = ", ".join(f"'{k}' = '{v}'" for k, v in props.items())
        partition = "PARTITIONED BY (ds) " if layout.partitioned else ""
        # Round-robin into two files: p's rows 1-4 land in both, q's row 5 in one of them.
        spark.sql(
            f"CREATE TABLE {table} USING delta {partition}TBLPROPERTIES ({tblprops}) AS "
            "SELECT /*+ REPARTITION(2) */ CAST(id AS BIGINT) AS id, ds, CAST(v AS BIGINT) AS v FROM VALUES "
            "(1, 'p', 1), (2, 'p', 2), (3, 'p', 3), (4, 'p', 4), (5, 'q', 5) AS s(id, ds, v)"
        )
        return table

    def run_pair(self, earlier: Operation, later: Operation) -> Observation:
        spark = self.spark
        start = time.perf_counter()
        table = self._create(spark, earlier, later)
        try:
            obs = self._run(spark, table, earlier, later, start)
            why = explain(self.layout, self.profile, earlier, later, obs)
            return obs if not why else replace(obs, note=f"{why} ({obs.note})" if obs.note else why)
        finally:
            with contextlib.suppress(Exception):  # cleanup only
                spark.sql(f"DROP TABLE IF EXISTS {table}")

    def _run(self, spark: Any, table: str, earlier: Operation, later: Operation, start: float) -> Observation:
        layout = self.layout
        gate = str(self.workdir / f"gate-{uuid.uuid4().hex}")
        later_error: list[BaseException] = []
        jvm = PinnedDelta(spark)
        worker: threading.Thread | None = None
        pinned: tuple[Any, Any, Any] = (None, None, None)
        if later in PINNED:
            pinned = jvm.snapshot(table)
        elif later is not Operation.VACUUM:  # VACUUM has no snapshot to pin: see the docstring
            later_sql = _statement(later, table, "later", layout, gate)

            def run_later() -> None:
                try:
                    spark.sql(later_sql).collect()
                except BaseException as exc:  # noqa: BLE001 - the later job's failure is the observation
                    later_error.append(exc)

            worker = threading.Thread(target=run_later, name="occflow-conformance-later", daemon=True)
            worker.start()
            deadline = time.time() + GATE_TIMEOUT
            while not os.path.exists(gate + ".started") and worker.is_alive() and time.time() < deadline:
                time.sleep(0.02)
            if not os.path.exists(gate + ".started"):
                Path(gate).touch()
                worker.join(GATE_TIMEOUT)
                return _invalid(start, "the later job never reached its gate (it did not wait for the earlier commit)"
                                + (f": {_text(later_error[0])}" if later_error else ""))
        try:
            with retention_check_off(spark) if earlier is Operation.VACUUM else contextlib.nullcontext():
                spark.sql(_statement(earlier, table, "earlier", layout, None)).collect()
        except Exception as exc:  # the experiment broke: report it, never count it
            Path(gate).touch()
            if worker is not None:
                worker.join(GATE_TIMEOUT)
            return _invalid(start, _text(exc))
        Path(gate).touch()
        if worker is not None:
            worker.join(GATE_TIMEOUT)
            if worker.is_alive():
                return _invalid(start, f"the later job did not finish within {GATE_TIMEOUT:.0f} s")
        else:
            try:
                if later is Operation.OPTIMIZE:
                    jvm.optimize(pinned, layout.partitioned)
                elif later is Operation.ALTER_METADATA:
                    jvm.set_properties(pinned, {"occflow.conformance.later": "1"}, read_all=False)
                elif later is Operation.VACUUM:
                    with retention_check_off(spark):
                        spark.sql(_statement(later, table, "later", layout, None)).collect()
                else:
                    jvm.set_properties(pinned, {UPGRADE_FEATURE: "supported"}, read_all=True)
            except Exception as exc:  # noqa: BLE001 - the later job's failure is the observation
                later_error.append(exc)
        return _observed(spark, table, later, later_error, start)


def _observed(spark: Any, table: str, later: Operation, later_error: list[BaseException], start: float) -> Observation:
    """What the later job did, from its own failure and the table's history."""
    seconds = time.perf_counter() - start
    history = spark.sql(f"DESCRIBE HISTORY {table}").select("version", "readVersion", "operation", "isBlindAppend").collect()
    versions = sorted((int(r["version"]), r["readVersion"], str(r["operation"]), r["isBlindAppend"]) for r in history)
    note = "; ".join(
        f"v{v} {op}" + ("" if rv is None else f" (read v{rv})") + (", blind append" if blind else "")
        for v, rv, op, blind in versions[1:]
    )
    if later_error:
        failure = later_error[0]
        return Observation(later_committed=False, later_kind=classify_error(failure).kind,
                           later_error=_text(failure), seconds=seconds, note=note)
    if len(versions) < 3:
        # OPTIMIZE with nothing to compact commits nothing: it did not conflict, and did no work.
        note = (note + "; " if note else "") + "the later job committed nothing (no files to rewrite)"
        return Observation(later_committed=True, seconds=seconds, note=note)
    last_read = versions[-1][1]
    if last_read is not None and int(last_read) != 0:
        if later is Operation.OPTIMIZE:
            # Pinned on v0 by construction: a later read version is OPTIMIZE's own retry
            # (OptimizeExecutor.commitAndRetry) after its first commit attempt conflicted.
            note += f"; OPTIMIZE's first attempt (read v0) conflicted and Delta retried it on v{last_read}"
        elif later is not Operation.VACUUM:  # its commits start at the latest version by design
            return _invalid(
                start, f"the later job read v{last_read}, not the snapshot before the earlier commit (v0)"
            )
    return Observation(later_committed=True, seconds=seconds, note=note)


def _invalid(start: float, why: str) -> Observation:
    return Observation(later_committed=False, earlier_committed=False, earlier_error=why, seconds=time.perf_counter() - start)


def _text(exc: BaseException) -> str:
    info = error_info(exc)
    message = ""
    for line in info.messages:
        if line.strip():
            message = line.strip().splitlines()[0]
            break
    message = re.sub(r"file:[^\s,\]]+", "<file>", message)
    message = re.sub(r"dc_\d+_[0-9a-f]{8}", "<table>", message)
    return f"{info.exception_class}: {message}"[:300]


_registered: set[int] = set()


def _register_gate(spark: Any) -> None:
    if id(spark) in _registered:
        return
    spark.udf.register(GATE_FUNCTION, _gate_function(), "bigint")
    _registered.add(id(spark))


def default_config(workdir: Path) -> SparkConfig:
    """The embedded session: local, enough task slots that a later job blocked at its gate (one
    slot per file it scans) leaves room for the earlier job."""
    return SparkConfig(
        table_format="delta",
        home=str(Path(workdir) / "spark"),
        app_name="occflow-delta-conformance",
        master="local[6]",
        conf={
            "spark.sql.warehouse.dir": str(Path(workdir) / "warehouse"),
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "false",
            "spark.databricks.delta.snapshotPartitions": "2",
        },
    )


@contextlib.contextmanager
def conformance_runners(
    workdir: Path, spark_engine: SparkEngine | None = None, layouts: Sequence[Layout] = LAYOUTS
) -> Iterator[list[DeltaSparkPairRunner]]:
    """One runner per table configuration (the conformance framework's engine entry point)."""
    root = Path(workdir) / "delta-spark"
    root.mkdir(parents=True, exist_ok=True)
    own = spark_engine is None
    engine = spark_engine or SparkEngine(default_config(root))
    try:
        yield [DeltaSparkPairRunner(engine, root / "gates", layout) for layout in layouts]
    finally:
        if own:
            engine.stop()
            shutil.rmtree(root, ignore_errors=True)


def conformance_meta() -> dict[str, str]:
    import pyspark  # optional heavy dependency

    return {"pyspark": str(pyspark.__version__), "delta-spark": DELTA_SPARK.coordinate}


__all__ = ["ENGINE", "LAYOUTS", "ConflictKind", "DeltaSparkPairRunner", "Layout", "conformance_meta", "conformance_runners"]


def parse_layout(text: str) -> Layout:
    """``"WriteSerializable,partitioned,dv"`` (or ``unpartitioned`` / ``no-dv``) -> the layout."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3 or parts[0] not in ISOLATION_PROFILES or parts[1] not in ("partitioned", "unpartitioned") \
            or parts[2] not in ("dv", "no-dv"):
        raise InvalidDeclarationError(
            f"layout {text!r} is not ISOLATION,partitioned|unpartitioned,dv|no-dv (e.g. Serializable,partitioned,dv)"
        )
    return Layout(parts[0], parts[1] == "partitioned", parts[2] == "dv")


def main(argv: Sequence[str] | None = None) -> int:
    """Some pairs on some layouts, the report as JSON (the test suite's subset, in a JVM of its own)."""
    parser = argparse.ArgumentParser(prog="python -m occflow.engines.spark.delta_conformance")
    parser.add_argument("--layout", action="append", required=True, help="ISOLATION,partitioned|unpartitioned,dv|no-dv")
    parser.add_argument("--pair", action="append", required=True, metavar="EARLIER:LATER")
    args = parser.parse_args(argv)
    layouts = [parse_layout(text) for text in args.layout]
    only = [parse_pair(text) for text in args.pair]
    with tempfile.TemporaryDirectory(prefix="occflow-delta-conformance-") as tmp:
        report = run_runners(
            ENGINE,
            lambda workdir: conformance_runners(workdir, layouts=layouts),
            Path(tmp),
            only=only,
            meta=conformance_meta,
        )
    print(render_json(report))
    return 0


if __name__ == "__main__":  # pragma: no cover - the test suite runs it in a subprocess
    raise SystemExit(main())
