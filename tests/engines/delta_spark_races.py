"""Real delta-spark races, run in a Python process of their own (``spawn``): one JVM holds one
set of jars and extensions, and the test process's JVM is the Iceberg one.

Each race is deterministic: the losing writer starts its Delta transaction (reads its snapshot)
and is then held, by a Python UDF in its source query or, where no query runs, in the job
between ``startTransaction`` and ``commit`` (Py4J, ``OptimisticTransaction``); the winner
commits in another session of the same application; then the loser goes on and commits, and
Delta's conflict checker decides. The loser runs through ``SparkEngine.run`` on its own session:
its failure is the ``WriteOutcome`` the operator gets (the Py4J exception's Java class, Spark's
error class, occflow's classification and the winner by version).

Functions here return plain data (they cross a process boundary); assertions live in the test.
"""

from __future__ import annotations

import itertools
import os
import pathlib
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

HOLD_SECONDS = 60.0
_names = itertools.count()
_home: str | None = None


def delta_config(home: str) -> dict[str, Any]:
    """The session config of these races (and of the operator tests: the same config is the same
    engine, so a DAG's tasks run on this one session). Four task slots: the held writer's tasks
    wait in their UDF while the winner's run."""
    return {
        "table_format": "delta",
        "master": "local[4]",
        "home": home,
        "app_name": "occflow-delta-races",
        "conf": {"spark.sql.warehouse.dir": str(pathlib.Path(home) / "warehouse"), "spark.driver.memory": "768m"},
    }


def session(home: str | None = None) -> Any:
    """The one Delta session of this process."""
    global _home
    from occflow.engines.spark.target import spark_engine

    if _home is None:
        _home = home or tempfile.mkdtemp(prefix="occflow-delta-races-")
    spark = spark_engine(delta_config(_home)).session()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def engine() -> Any:
    from occflow.engines.spark.target import spark_engine

    session()
    assert _home is not None
    return spark_engine(delta_config(_home))


def start() -> dict[str, Any]:
    """Start the session; what it runs."""
    began = time.perf_counter()
    spark = session()
    return {
        "seconds": time.perf_counter() - began,
        "extensions": spark.conf.get("spark.sql.extensions"),
        "jars": spark.sparkContext.getConf().get("spark.jars"),
        "spark": spark.version,
    }


def new_table(props: str = "") -> str:
    """A partitioned Delta table: ids 1, 2, 4 in ds='a' (two files) and 3 in ds='b'."""
    spark = session()
    name = f"default.race_{next(_names)}"
    spark.sql(f"CREATE TABLE {name} (id BIGINT, ds STRING, v BIGINT) USING delta PARTITIONED BY (ds) {props}")
    spark.sql(f"INSERT INTO {name} VALUES (1, 'a', 1), (2, 'a', 2), (3, 'b', 3)")
    spark.sql(f"INSERT INTO {name} VALUES (4, 'a', 4)")
    return name


class Gate:
    """Files, so that a UDF in a Python worker process sees them too."""

    def __init__(self) -> None:
        folder = pathlib.Path(tempfile.mkdtemp(prefix="gate-", dir=_home))
        self.reached, self.opened = str(folder / "reached"), str(folder / "opened")

    def wait_reached(self, alive: Callable[[], bool]) -> None:
        deadline = time.monotonic() + HOLD_SECONDS
        while not os.path.exists(self.reached):
            if not alive():
                return  # the loser ended before its gate (it will say why)
            if time.monotonic() > deadline:
                raise TimeoutError("the held writer never reached its gate")
            time.sleep(0.02)

    def open(self) -> None:
        pathlib.Path(self.opened).touch()

    def hold_here(self) -> None:
        pathlib.Path(self.reached).touch()
        deadline = time.monotonic() + HOLD_SECONDS
        while not os.path.exists(self.opened) and time.monotonic() < deadline:
            time.sleep(0.02)

    def register_udf(self, spark: Any) -> None:
        """``gate(x)``: returns x, after holding until the gate opens (first rows only wait)."""
        from pyspark.sql.types import LongType

        reached, opened, limit = self.reached, self.opened, HOLD_SECONDS

        def hold(value):  # pickled by value into the Python workers: stdlib only
            import os as _os
            import pathlib as _pathlib
            import time as _time

            _pathlib.Path(reached).touch()
            deadline = _time.monotonic() + limit
            while not _os.path.exists(opened) and _time.monotonic() < deadline:
                _time.sleep(0.02)
            return value

        spark.udf.register("gate", hold, LongType())


def _py4j_seq(spark: Any, items: list[Any]) -> Any:
    jvm = spark._jvm
    java = jvm.java.util.ArrayList()
    for item in items:
        java.add(item)
    return jvm.scala.collection.JavaConverters.asScalaBufferConverter(java).asScala().toSeq()


def _manual_update(spark: Any) -> Any:
    return getattr(getattr(spark._jvm.org.apache.spark.sql.delta, "DeltaOperations$ManualUpdate$"), "MODULE$")


def _txn_job(table: str, gate: Gate, actions: Callable[[Any, Any], list[Any]]) -> Callable[[Any, Any], None]:
    """A callable job that starts a Delta transaction, holds at the gate, then commits
    ``actions(spark, txn)`` (computed from the transaction's own snapshot, before the hold)."""

    def job(spark: Any, context: Any) -> None:
        jvm = spark._jvm
        location = spark.sql(f"DESCRIBE DETAIL {table}").collect()[0]["location"]
        log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, location)
        txn = log.startTransaction()
        chosen = actions(spark, txn)
        gate.hold_here()
        txn.commit(_py4j_seq(spark, chosen), _manual_update(spark))

    return job


def _remove_files_of_a(spark: Any, txn: Any) -> list[Any]:
    # The snapshot's files, not txn.filterFiles: the transaction removes them without having
    # "read" them, so the only check left to fail is delete-against-delete.
    files = txn.snapshot().allFiles().collectAsList()
    return [f.remove() for f in files if f.partitionValues().get("ds").get() == "a"]


def _protocol_upgrade(spark: Any, txn: Any) -> list[Any]:
    return [spark._jvm.org.apache.spark.sql.delta.actions.Protocol.apply(1, 4)]


def _outcome_data(outcome: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"committed": outcome.committed, "version": outcome.version}
    if outcome.error is not None:
        data["exception_class"] = outcome.error.exception_class
        data["error_class"] = outcome.error.error_class
        data["cause_classes"] = list(outcome.error.cause_classes)
        data["message"] = outcome.error.messages[0] if outcome.error.messages else ""
    if outcome.classification is not None:
        found = outcome.classification
        data["kind"] = found.kind.value
        data["winning_commit"] = None if found.winning_commit is None else found.winning_commit.to_dict()
    return data


def race(
    loser_job: str | Callable[[Any, Any], None],
    winner_sql: str,
    table: str,
    operation: str,
    *,
    gate: Gate,
    loser_conf: Mapping[str, str] | None = None,
    winner_conf: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Run the held loser and the winner; the loser's outcome as ``SparkEngine.run`` reports it."""
    from occflow.core.classify import classify

    root = session()
    loser, winner = root.newSession(), root.newSession()
    gate.register_udf(loser)
    for key, value in (loser_conf or {}).items():
        loser.conf.set(key, value)
    for key, value in (winner_conf or {}).items():
        winner.conf.set(key, value)
    raised: list[BaseException] = []

    def job(spark: Any, context: Any) -> None:
        try:
            if callable(loser_job):
                loser_job(spark, context)
            else:
                spark.sql(loser_job)
        except BaseException as exc:
            raised.append(exc)
            raise

    box: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: box.setdefault("outcome", engine().run(job, table, operation, session=loser)), daemon=True
    )
    thread.start()
    gate.wait_reached(thread.is_alive)
    winner.sql(winner_sql)
    winner_version = int(winner.sql(f"DESCRIBE HISTORY {table} LIMIT 1").collect()[0]["version"])
    gate.open()
    thread.join(HOLD_SECONDS)
    assert not thread.is_alive(), "the held writer did not finish"
    data = _outcome_data(box["outcome"])
    data["winner_version"] = winner_version
    if raised:
        exc = raised[0]
        data["python_exception"] = f"{type(exc).__module__}.{type(exc).__qualname__}"
        data["classify_kind"] = classify(exc).kind.value  # occflow.classify on the raw exception
    return data


def retry(sql: str, table: str, operation: str, gate: Gate) -> dict[str, Any]:
    """The loser's job again, from a fresh snapshot (its gate is open: nothing holds it)."""
    fresh = session().newSession()
    gate.register_udf(fresh)
    return _outcome_data(engine().run(sql, table, operation, session=fresh))


def _policy(profile: str, operation: str, kind: str, partitions: int | None = 1) -> dict[str, Any]:
    from occflow.core.policy.derive import derive_policy

    policy = derive_policy(profile, operation, partitions=partitions).for_kind(kind)
    return {"action": policy.action.value, "then": None if policy.then is None else policy.then.action.value}


def rows(table: str) -> list[list[Any]]:
    return sorted([r["id"], r["ds"], r["v"]] for r in session().sql(f"SELECT id, ds, v FROM {table}").collect())


# ------------------------------------------------------------------------------ the six races


def concurrent_append() -> dict[str, Any]:
    """Two UPDATEs of partition a: the winner's rewrite adds files the loser's read covers.
    The loser then re-runs from a fresh snapshot, as the derived policy says: serial result."""
    table = new_table()
    gate = Gate()
    loser_sql = f"UPDATE {table} SET v = gate(v) + 100 WHERE ds = 'a'"
    data = race(loser_sql, f"UPDATE {table} SET v = v * 10 WHERE ds = 'a'", table, "update", gate=gate)
    data["policy"] = _policy("delta-write-serializable", "update", data["kind"])
    data["retry"] = retry(loser_sql, table, "update", gate)
    data["rows"] = rows(table)
    return data


def concurrent_delete_read() -> dict[str, Any]:
    """An UPDATE of partition a loses to a DELETE of the whole partition (files removed, none
    added); its retry from a fresh snapshot updates nothing."""
    table = new_table()
    gate = Gate()
    loser_sql = f"UPDATE {table} SET v = gate(v) + 100 WHERE ds = 'a'"
    data = race(loser_sql, f"DELETE FROM {table} WHERE ds = 'a'", table, "update", gate=gate)
    data["policy"] = _policy("delta-write-serializable", "update", data["kind"])
    data["retry"] = retry(loser_sql, table, "update", gate)
    data["rows"] = rows(table)
    return data


def concurrent_delete_delete() -> dict[str, Any]:
    """Two deletes of partition a's files: the loser removes files it did not read (the
    transaction's snapshot, not a tracked scan) that the winner's DELETE removed first."""
    table = new_table()
    gate = Gate()
    job = _txn_job(table, gate, _remove_files_of_a)
    data = race(job, f"DELETE FROM {table} WHERE ds = 'a'", table, "delete", gate=gate)
    data["policy"] = _policy("delta-write-serializable", "delete", data["kind"])
    data["rows"] = rows(table)
    return data


def metadata_changed() -> dict[str, Any]:
    """An INSERT ... SELECT (not blind: it reads the table) loses to a property change; its
    retry on the new metadata commits."""
    table = new_table()
    gate = Gate()
    loser_sql = f"INSERT INTO {table} SELECT gate(id) + 10, 'c', v FROM {table} WHERE ds = 'b'"
    data = race(loser_sql, f"ALTER TABLE {table} SET TBLPROPERTIES ('occflow.test' = 'changed')", table,
                "insert_into", gate=gate)
    data["policy"] = _policy("delta-write-serializable", "insert_into", data["kind"])
    data["retry"] = retry(loser_sql, table, "insert_into", gate)
    data["rows"] = rows(table)
    return data


def protocol_changed() -> dict[str, Any]:
    """Both upgrade the table's protocol: the winner to writer version 3 (SQL), the loser to 4
    (a transaction holding a Protocol action)."""
    table = new_table()
    gate = Gate()
    job = _txn_job(table, gate, _protocol_upgrade)
    data = race(job, f"ALTER TABLE {table} SET TBLPROPERTIES ('delta.minWriterVersion' = '3')", table,
                "insert_into", gate=gate)
    data["policy"] = _policy("delta-write-serializable", "insert_into", data["kind"])
    return data


def concurrent_transaction() -> dict[str, Any]:
    """Two writes with one txnAppId (``spark.databricks.delta.write.txnAppId`` / ``txnVersion``
    session confs): the second to commit finds the first's transaction id in the log."""
    table = new_table()
    gate = Gate()
    conf = {"spark.databricks.delta.write.txnAppId": "shared-app", "spark.databricks.delta.write.txnVersion": "7"}
    loser_sql = f"INSERT INTO {table} SELECT gate(id) + 20, 'c', v FROM {table} WHERE ds = 'b'"
    data = race(loser_sql, f"INSERT INTO {table} VALUES (9, 'd', 9)", table, "insert_into", gate=gate,
                loser_conf=conf, winner_conf=conf)
    data["policy"] = _policy("delta-write-serializable", "insert_into", data["kind"])
    data["rows"] = rows(table)
    return data
