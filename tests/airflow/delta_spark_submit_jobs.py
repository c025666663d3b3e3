"""The two sides of the spark-submit Delta races (``test_operators_delta_spark_submit.py``).

- The loser's jobs (``update_day``, ``append_day``) run in a spark-submit driver: the operator
  names them ``"delta_spark_submit_jobs:<function>"`` and ships this file with ``--py-files``.
  Spark's built-in catalog is in-memory, so a driver first registers the table over its location
  (Delta's log there holds schema and data; registering commits nothing). On the first attempt
  only, the job's statement holds in a Python UDF (``gate``) after Delta has read its snapshot,
  until the competitor has committed.
- The competitor (``start_competitor``) is a thread of the test's Delta worker process (the
  process running ``dag.test()``): it waits for the driver to reach its gate, commits from a
  session of its own, then opens the gate. The driver then commits and Delta's conflict checker
  decides.

The gate is files (a UDF runs in the driver's Python workers, the competitor in another process).
"""

from __future__ import annotations

import json
import pathlib
import threading
import time
import traceback
from typing import Any

HOLD_SECONDS = 120.0  # the competitor's commit, on a loaded machine
#: How long the competitor waits for the driver's JVM to start and reach the gate.
START_SECONDS = 600.0
#: The session confs that carry a Delta write's transaction id (delta-spark's idempotent writes).
TXN_CONFS = ("spark.databricks.delta.write.txnAppId", "spark.databricks.delta.write.txnVersion")


def _register(spark: Any, context: Any) -> None:
    spark.sql(f"CREATE TABLE IF NOT EXISTS {context.table} USING delta LOCATION '{context.params['location']}'")


def _gate(spark: Any, context: Any) -> pathlib.Path:
    """Register ``gate(x)``: on the first attempt it holds until the competitor opens the gate."""
    from pyspark.sql.types import LongType

    gate = pathlib.Path(context.params["gate"])
    first = not (gate / "raced").exists()
    if first:
        (gate / "raced").touch()
    reached, opened, limit = str(gate / "reached"), str(gate / "opened"), HOLD_SECONDS

    def hold(value):  # pickled by value into the driver's Python workers: stdlib only
        import os as _os
        import pathlib as _pathlib
        import time as _time

        if first:
            _pathlib.Path(reached).touch()
            deadline = _time.monotonic() + limit
            while not _os.path.exists(opened) and _time.monotonic() < deadline:
                _time.sleep(0.02)
        return value

    spark.udf.register("gate", hold, LongType())
    return gate


def update_day(spark: Any, context: Any) -> None:
    """UPDATE the job's day: reads the partition's files, so a concurrent rewrite of them wins."""
    _register(spark, context)
    _gate(spark, context)
    spark.sql(f"UPDATE {context.table} SET amount = gate(amount) + 100 WHERE ds = '{context.params['ds']}'")


def append_day(spark: Any, context: Any) -> None:
    """INSERT ... SELECT into the job's day. Its Delta transaction id (occflow set it for this
    write: ``DeltaSparkLedger.tagging``) is left in the gate folder for the competitor to misuse."""
    _register(spark, context)
    gate = _gate(spark, context)
    txn = {key: spark.conf.get(key, None) for key in TXN_CONFS}
    (gate / "txn.json").write_text(json.dumps(txn))
    table, ds = context.table, context.params["ds"]
    spark.sql(f"INSERT INTO {table} SELECT gate(id) + 60, ds, amount FROM {table} WHERE ds = '{ds}'")


def append_rows(spark: Any, context: Any) -> None:
    """A plain append to the job's day (no race: the table itself is what is wrong)."""
    _register(spark, context)
    spark.sql(f"INSERT INTO {context.table} VALUES (7, '{context.params['ds']}', 7)")


# ------------------------------------------------------------------ the Delta worker's side

#: A writer feature no Delta release knows: the protocol says a writer must support it, so a
#: delta-spark that does not must refuse to write (the Delta protocol, "Table Features").
FUTURE_FEATURE = "futureFeatureX"


def prepare(config: dict[str, Any], table: str, gate: str, location: str, scenario: str) -> None:
    """The table at ``location`` (registered in this process's catalog), then the scenario's
    other side: a competitor for a race, or a newer protocol for ``future_feature``."""
    from occflow.operators.spark import spark_engine

    spark = spark_engine(config).session()
    spark.sql(f"CREATE TABLE {table} (id BIGINT, ds STRING, amount BIGINT) USING delta PARTITIONED BY (ds) "
              f"LOCATION '{location}'")
    spark.sql(f"INSERT INTO {table} VALUES (1, '2024-01-01', 1), (2, '2024-01-01', 2), (3, '2024-01-02', 3)")
    if scenario == "future_feature":
        require_future_writer_feature(location)
    else:
        start_competitor(config, table, gate, scenario)


def require_future_writer_feature(location: str) -> int:
    """Commit, by hand, the next version of the table's log: a protocol action upgrading it to
    writer version 7 with a writer feature no delta-spark has (the legacy writer features of
    version 2 kept, as the protocol requires). Returns the version written."""
    log = pathlib.Path(location) / "_delta_log"
    version = max(int(p.stem) for p in log.glob("*.json") if p.stem.isdigit()) + 1
    actions = [
        {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "UPGRADE PROTOCOL",
                        "operationParameters": {}, "isBlindAppend": True}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7,
                      "writerFeatures": ["appendOnly", "invariants", FUTURE_FEATURE]}},
    ]
    path = log / f"{version:020d}.json"
    with open(path, "x", encoding="utf-8") as handle:  # "x": never over a commit someone else wrote
        handle.write("\n".join(json.dumps(a) for a in actions) + "\n")
    return version



def _competing_update(other: Any, table: str, gate: pathlib.Path) -> None:
    other.sql(f"UPDATE {table} SET amount = amount * 10 WHERE ds = '2024-01-01'")


def _same_transaction_id(other: Any, table: str, gate: pathlib.Path) -> None:
    txn = json.loads((gate / "txn.json").read_text())
    if not all(txn.values()):
        raise AssertionError(f"the driver's session carries no Delta transaction id: {txn}")
    for key, value in txn.items():
        other.conf.set(key, value)
    other.sql(f"INSERT INTO {table} VALUES (50, '2024-01-02', 5)")


COMPETITORS = {"update": _competing_update, "same_transaction_id": _same_transaction_id}


def start_competitor(config: dict[str, Any], table: str, gate: str, which: str) -> None:
    """Once the driver holds at its gate, commit ``which`` from a new session of this process's
    Delta session, then open the gate; a failure is left in ``competitor.error`` (and the gate
    opened, so the driver does not wait out its hold)."""
    from occflow.operators.spark import spark_engine

    folder = pathlib.Path(gate)
    compete = COMPETITORS[which]
    other = spark_engine(config).session().newSession()

    def run() -> None:
        try:
            deadline = time.monotonic() + START_SECONDS
            while not (folder / "reached").exists():
                if time.monotonic() > deadline:
                    raise TimeoutError("the driver never reached its gate")
                time.sleep(0.05)
            compete(other, table, folder)
            (folder / "competitor.done").touch()
        except BaseException:  # noqa: BLE001 - reported through the file the test reads
            (folder / "competitor.error").write_text(traceback.format_exc())
        finally:
            (folder / "opened").touch()

    threading.Thread(target=run, name="occflow-delta-competitor", daemon=True).start()
