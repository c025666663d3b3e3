"""The Spark 4 compatibility races, run in a ``spawn`` worker of their own per table format (one
JVM holds one set of jars and SQL extensions): Iceberg's and Delta's Spark 4.1 runtimes.

Each race is the one ``tests/engines/delta_spark_races.py`` runs on Spark 3.5, with its ``Gate``:
the loser reads its snapshot and is held in a Python UDF of its source query while the winner
commits in another session of the same application; then the loser commits and the format's own
conflict check decides. The loser runs through ``SparkEngine.run`` (what the operator gets: the
exception class, Spark's error class, occflow's classification, the winner) and, when the
policy derived from the profile's matrix says retry, runs again from a fresh snapshot.

The oracle is not occflow's: the same two statements run one after the other on a twin table
(winner, then loser), and the raced table's rows must equal the twin's.

Functions here return plain data (they cross a process boundary); assertions live in the test.
"""

from __future__ import annotations

import itertools
import tempfile
import threading
from typing import Any

import delta_spark_races as delta_races

HOLD_SECONDS = delta_races.HOLD_SECONDS
_names = itertools.count()
_state: dict[str, Any] = {}

#: The profile whose matrix gives each format's policy (occflow's defaults for the two formats).
PROFILES = {"iceberg": "iceberg-serializable", "delta": "delta-write-serializable"}

#: The races: (loser SQL, its operation, winner SQL). ``{t}`` is the table; ``gate(x)`` holds the
#: loser after it has read its snapshot. Both tables start as (1,a,1) (2,a,2) (4,a,4) (3,b,3).
RACES: dict[str, tuple[str, str, str]] = {
    # An overwrite of partition a (reading a) against an append to partition a.
    "append_vs_overwrite": (
        "INSERT OVERWRITE {t} PARTITION (ds = 'a') SELECT gate(id), v + 100 FROM {t} WHERE ds = 'a'",
        "insert_overwrite",
        "INSERT INTO {t} VALUES (5, 'a', 5)",
    ),
    # A MERGE updating partition a against a DELETE of partition a.
    "merge_vs_delete": (
        "MERGE INTO {t} AS target USING (SELECT gate(id) AS id FROM {t} WHERE ds = 'a') AS source "
        "ON target.id = source.id WHEN MATCHED THEN UPDATE SET target.v = target.v + 100",
        "merge",
        "DELETE FROM {t} WHERE ds = 'a'",
    ),
}


def _config(table_format: str, home: str) -> dict[str, Any]:
    # Four task slots: the held loser's tasks wait in their UDF while the winner's run.
    return {
        "table_format": table_format,
        "master": "local[4]",
        "home": home,
        "app_name": f"occflow-spark4-{table_format}",
        "conf": {"spark.sql.warehouse.dir": f"{home}/warehouse", "spark.driver.memory": "768m"},
    }


def engine() -> Any:
    from occflow.engines.spark.target import spark_engine

    return spark_engine(_config(_state["format"], _state["home"]))


def start(table_format: str) -> dict[str, Any]:
    """This worker's session for ``table_format``; what it runs."""
    _state["format"], _state["home"] = table_format, tempfile.mkdtemp(prefix=f"occflow-spark4-{table_format}-")
    # delta_spark_races' Gate keeps its files under its home: this worker's.
    delta_races._home = _state["home"]
    spark = engine().session()
    spark.sparkContext.setLogLevel("ERROR")
    if table_format == "iceberg":
        spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")
    return {
        "spark": spark.version,
        "extensions": spark.conf.get("spark.sql.extensions"),
        "jars": spark.sparkContext.getConf().get("spark.jars"),
    }


def _new_table() -> str:
    spark = engine().session()
    if _state["format"] == "iceberg":
        name = f"lake.db.race_{next(_names)}"
        using = "USING iceberg PARTITIONED BY (ds) TBLPROPERTIES ('format-version' = '2')"
    else:
        name = f"default.race_{next(_names)}"
        using = "USING delta PARTITIONED BY (ds)"
    spark.sql(f"CREATE TABLE {name} (id BIGINT, ds STRING, v BIGINT) {using}")
    spark.sql(f"INSERT INTO {name} VALUES (1, 'a', 1), (2, 'a', 2), (3, 'b', 3)")
    spark.sql(f"INSERT INTO {name} VALUES (4, 'a', 4)")
    return name


def _rows(table: str) -> list[list[Any]]:
    spark = engine().session()
    return sorted([r["id"], r["ds"], r["v"]] for r in spark.sql(f"SELECT id, ds, v FROM {table}").collect())


def _outcome(outcome: Any) -> dict[str, Any]:
    data = delta_races._outcome_data(outcome)
    data["snapshot_id"] = outcome.snapshot_id
    return data


def race(name: str) -> dict[str, Any]:
    """Race ``RACES[name]`` on a fresh table; the loser's outcome, the policy, the retry's outcome,
    the raced table's rows and the serial twin's."""
    from occflow.core.classify import classify

    loser_sql, operation, winner_sql = RACES[name]
    table, twin = _new_table(), _new_table()
    root = engine().session()
    loser, winner = root.newSession(), root.newSession()
    gate = delta_races.Gate()
    gate.register_udf(loser)
    raised: list[BaseException] = []

    def job(spark: Any, context: Any) -> None:
        try:
            spark.sql(loser_sql.format(t=table))
        except BaseException as exc:
            raised.append(exc)
            raise

    box: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: box.setdefault("outcome", engine().run(job, table, operation, session=loser)), daemon=True
    )
    thread.start()
    gate.wait_reached(thread.is_alive)
    winner.sql(winner_sql.format(t=table))
    gate.open()
    thread.join(HOLD_SECONDS)
    assert not thread.is_alive(), "the held writer did not finish"
    data = _outcome(box["outcome"])
    data["python_exception"] = ""
    if raised:
        exc = raised[0]
        data["python_exception"] = f"{type(exc).__module__}.{type(exc).__qualname__}"
        data["classify_kind"] = classify(exc).kind.value
    data["policy"] = None
    if "kind" in data:
        data["policy"] = delta_races._policy(PROFILES[_state["format"]], operation, data["kind"])
    data["retry"] = None
    if not data["committed"] and data["policy"] is not None and data["policy"]["action"] == "retry":
        fresh = root.newSession()
        gate.register_udf(fresh)  # open: it holds nothing now
        data["retry"] = _outcome(engine().run(loser_sql.format(t=table), table, operation, session=fresh))
    data["rows"] = _rows(table)
    # The serial oracle: winner, then loser, one after the other, on the twin.
    serial = root.newSession()
    gate.register_udf(serial)
    serial.sql(winner_sql.format(t=twin))
    serial.sql(loser_sql.format(t=twin))
    data["serial_rows"] = _rows(twin)
    return data
