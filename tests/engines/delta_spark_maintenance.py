"""VACUUM against a running writer on real delta-spark, run in a Python process of its own
(``spawn``: one JVM holds one set of jars and extensions, and the test process's JVM is the
Iceberg one). The session is the races' (``delta_spark_races.session``).

The writer is an UPDATE of partition ``a`` whose condition holds a gate UDF: delta-spark has
taken its snapshot and found the files to rewrite when it reaches the gate, and reads them again
to rewrite them once the gate opens. Each job runs through ``SparkEngine.run``, so its failure is
the ``WriteOutcome`` the operator gets. Functions return plain data (they cross a process
boundary); assertions live in the test.
"""

from __future__ import annotations

import glob
import json
import threading
from typing import Any

import delta_spark_races as races

from occflow.engines.spark.identifiers import sql_string
from occflow.engines.spark.maintenance import RETENTION_CHECK, RETENTION_PROPERTY, DeltaVacuumJob

UPDATE_ADDS = 100
#: The running update of this process: its thread, gate and outcome.
_running: dict[str, Any] = {}


def start() -> dict[str, Any]:
    return races.start()


def new_table() -> str:
    """ids 1, 2, 4 in ds='a' (two files) and 3 in ds='b' (``delta_spark_races.new_table``)."""
    return races.new_table()


def _location(table: str) -> str:
    return str(races.session().sql(f"DESCRIBE DETAIL {table}").collect()[0]["location"]).removeprefix("file:")


def data_files(table: str) -> list[str]:
    """Every Parquet file under the table's root, as the file system has them."""
    root = _location(table)
    return sorted(p[len(root) :] for p in glob.glob(f"{root}/**/*.parquet", recursive=True))


def log_operations(table: str) -> list[str]:
    """The operation of every commit in the table's ``_delta_log``, by version."""
    out = []
    for path in sorted(glob.glob(f"{_location(table)}/_delta_log/*.json")):
        with open(path) as f:
            out += [json.loads(line)["commitInfo"]["operation"] for line in f if '"commitInfo"' in line]
    return out


def rows(table: str) -> list[list[Any]]:
    """Every row: a scan that reads every file the latest version names."""
    found = races.session().sql(f"SELECT id, ds, v FROM {table} ORDER BY id").collect()
    return [[r["id"], r["ds"], r["v"]] for r in found]


def retention_check_setting() -> str | None:
    return races.session().conf.get(RETENTION_CHECK, None)


def start_update(table: str) -> None:
    """The hourly UPDATE, held at its gate after delta-spark planned it on the current version."""
    engine = races.engine()
    gate = races.Gate()
    spark = races.session().newSession()
    gate.register_udf(spark)
    sql = f"UPDATE {table} SET v = v + {UPDATE_ADDS} WHERE ds = 'a' AND gate(id) IS NOT NULL"
    done: dict[str, Any] = {}

    def run() -> None:
        done["outcome"] = engine.run(sql, table, "update", session=spark)

    thread = threading.Thread(target=run, name="held-update", daemon=True)
    thread.start()
    gate.wait_reached(thread.is_alive)
    _running.update(thread=thread, gate=gate, done=done)


def finish_update() -> dict[str, Any]:
    """Open the gate: the UPDATE rewrites the files it planned on and commits, or fails."""
    _running["gate"].open()
    _running["thread"].join(races.HOLD_SECONDS)
    outcome = _running["done"]["outcome"]
    _running.clear()
    return _data(outcome)


def _data(outcome: Any) -> dict[str, Any]:
    data = races._outcome_data(outcome)
    data["error_text"] = "" if outcome.error is None else " ".join(outcome.error.messages)
    return data


def optimize(table: str) -> dict[str, Any]:
    return _data(races.engine().run(f"OPTIMIZE {table} WHERE ds = 'a'", table, "optimize"))


def vacuum(table: str, sql: str, allow_unsafe_retention: bool) -> dict[str, Any]:
    """``sql`` run as the operator runs a delta-spark VACUUM (``DeltaVacuumJob``)."""
    job = DeltaVacuumJob(sql, table, allow_unsafe_retention, where="nightly_vacuum")
    return _data(races.engine().run(job, table, "vacuum"))


def set_retention(table: str, interval: str) -> None:
    races.session().sql(
        f"ALTER TABLE {table} SET TBLPROPERTIES ('{RETENTION_PROPERTY}' = {sql_string(interval)})"
    )


def overwrite_a(table: str) -> None:
    """Rewrite partition ``a``: its two files are removed (still on disk, for a VACUUM to find)."""
    races.session().sql(f"INSERT OVERWRITE {table} PARTITION (ds = 'a') VALUES (9, 9)")
