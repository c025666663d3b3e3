"""Spark Connect clients of the Connect races (``test_spark4_connect_races.py``), each in a
``spawn`` worker of its own: PySpark makes a process that built a Connect session Connect-only,
and the two writers of a race are two clients, as two Airflow tasks on two workers would be.

The loser runs through occflow's write flow (``WriteFlow`` with ``SparkTarget`` over
``remote: sc://...``: what ``SparkWriteOperator.write`` runs after admission, with a task
instance's context so exactly-once tags the commit); the winner and the serial oracle are plain
SQL on the other client's session. No client here has a JVM: whatever occflow knows of the lost
race, it knows from what Connect returned. Functions return plain data (a process boundary).
"""

from __future__ import annotations

import datetime as dt
import logging
from types import SimpleNamespace
from typing import Any

PROFILE = "iceberg-serializable"

#: Both tables start as (1,a,1) (2,a,2) (4,a,4) (3,b,3); ``gate(x)`` holds the loser after it read
#: its snapshot (``delta_spark_races.Gate``: files the server's Python worker sees too).
LOSER_SQL = ("MERGE INTO {t} AS target USING (SELECT gate(id) AS id FROM {t} WHERE ds = 'a') AS source "
             "ON target.id = source.id WHEN MATCHED THEN UPDATE SET target.v = target.v + 100")
WINNER_SQL = "DELETE FROM {t} WHERE ds = 'a'"


def config(remote: str, home: str) -> dict[str, Any]:
    return {"remote": remote, "table_format": "iceberg", "home": home}


def _session(remote: str, home: str) -> Any:
    from occflow.engines.spark.target import spark_engine

    return spark_engine(config(remote, home)).session()


def start(remote: str, home: str) -> dict[str, Any]:
    """This client's Connect session (through ``SparkEngine``: its checks of the server)."""
    spark = _session(remote, home)
    return {"module": type(spark).__module__, "spark": spark.version, "jvm": _jvm_started()}


def _jvm_started() -> bool:
    """Whether this process launched a JVM (a Py4J gateway): a Connect client must not."""
    from pyspark import SparkContext

    return SparkContext._gateway is not None or SparkContext._active_spark_context is not None


def create_tables(remote: str, home: str, names: list[str]) -> None:
    spark = _session(remote, home)
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")
    for name in names:
        spark.sql(f"CREATE TABLE {name} (id BIGINT, ds STRING, v BIGINT) USING iceberg PARTITIONED BY (ds) "
                  "TBLPROPERTIES ('format-version' = '2')")
        spark.sql(f"INSERT INTO {name} VALUES (1, 'a', 1), (2, 'a', 2), (3, 'b', 3)")
        spark.sql(f"INSERT INTO {name} VALUES (4, 'a', 4)")


def _context(try_number: int) -> dict[str, Any]:
    """The part of an Airflow task context exactly-once reads: the task instance and its date."""
    ti = SimpleNamespace(dag_id="connect_race", task_id="merge_day", run_id="manual__connect",
                         map_index=-1, try_number=try_number)
    return {"ti": ti, "logical_date": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)}


def _flow(remote: str, home: str, table: str, job: Any, try_number: int) -> Any:
    from occflow.core.declaration import WriteDeclaration
    from occflow.core.policy import derive_policy
    from occflow.engines.spark.target import SparkTarget
    from occflow.operators.flow import WriteFlow
    from occflow.operators.history import WriteHistory

    return WriteFlow(
        declaration=WriteDeclaration.create(table, "merge", PROFILE),
        policy=derive_policy(PROFILE, "merge", None, replans_from_fresh_snapshot=True, partitions=None),
        target=SparkTarget(config(remote, home), table, job_for=lambda _: job),
        context=_context(try_number),
        log=logging.getLogger("occflow.test.connect_race"),
        history=WriteHistory(),
        try_number=try_number,
    )


def lose_and_retry(remote: str, home: str, table: str, gate: Any) -> dict[str, Any]:
    """The held MERGE through the write flow: its report, and what its first attempt raised as
    Connect returned it (the exception's class, error class, SQLSTATE, parameters, text)."""
    from occflow.core.classify import classify
    from occflow.engines.spark.errors import error_info

    spark = _session(remote, home)
    gate.register_udf(spark)  # held on the first attempt; open by the retry
    raised: list[BaseException] = []

    def job(session: Any, context: Any) -> None:
        try:
            session.sql(LOSER_SQL.format(t=table))
        except BaseException as exc:
            raised.append(exc)
            raise

    report = _flow(remote, home, table, job, try_number=1).run().to_dict()
    first: dict[str, Any] = {}
    if raised:
        exc = raised[0]
        info = error_info(exc)
        found = classify(exc)
        first = {
            "python_class": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "condition": exc.getCondition() if hasattr(exc, "getCondition") else None,
            "sql_state": exc.getSqlState() if hasattr(exc, "getSqlState") else None,
            "parameters": exc.getMessageParameters() if hasattr(exc, "getMessageParameters") else None,
            "text": str(exc),
            "has_java_exception": getattr(exc, "java_exception", None) is not None,
            "info": {"exception_class": info.exception_class, "cause_classes": list(info.cause_classes),
                     "error_class": info.error_class, "messages": list(info.messages)},
            "classify_kind": found.kind.value,
        }
    from occflow.operators.exactly_once import from_context

    tag = from_context(_context(1), "merge")
    return {"report": report, "first_error": first, "jvm": _jvm_started(),
            "write_id": None if tag is None else tag.write_id}


def later_try(remote: str, home: str, table: str) -> dict[str, Any]:
    """Try 2 of the same task instance: exactly-once looks for the write in the table (through
    the ``snapshots`` metadata table over Connect) before running the job again."""
    ran: list[bool] = []

    def job(session: Any, context: Any) -> None:
        ran.append(True)
        session.sql(LOSER_SQL.format(t=table))

    report = _flow(remote, home, table, job, try_number=2).run().to_dict()
    return {"report": report, "job_ran": bool(ran)}


def win(remote: str, home: str, table: str) -> None:
    _session(remote, home).sql(WINNER_SQL.format(t=table))


def serial_and_read(remote: str, home: str, table: str, twin: str, gate: Any) -> dict[str, Any]:
    """The serial oracle (winner, then loser, on the twin), and both tables read back: rows, and
    the raced table's snapshots with their summaries (Iceberg's own record)."""
    spark = _session(remote, home)
    gate.register_udf(spark)  # open: it holds nothing now
    spark.sql(WINNER_SQL.format(t=twin))
    spark.sql(LOSER_SQL.format(t=twin))

    def rows(name: str) -> list[list[Any]]:
        return sorted([r["id"], r["ds"], r["v"]] for r in spark.sql(f"SELECT id, ds, v FROM {name}").collect())

    return {"rows": rows(table), "serial_rows": rows(twin), "snapshots": snapshots(remote, home, table)}


def snapshots(remote: str, home: str, table: str) -> list[dict[str, Any]]:
    """The table's snapshots, oldest first, with their summaries (the ``snapshots`` metadata table)."""
    rows = _session(remote, home).sql(
        f"SELECT snapshot_id, parent_id, operation, summary FROM {table}.snapshots ORDER BY committed_at"
    ).collect()
    return [{"snapshot_id": int(r["snapshot_id"]), "parent_id": r["parent_id"], "operation": r["operation"],
             "summary": dict(r["summary"] or {})} for r in rows]


def second_tag_on_one_session(remote: str, home: str, table: str) -> dict[str, Any]:
    """Two writes tagging one Connect session at once: the second is refused (the tag is the
    session's conf); what the session carries during and after."""
    from occflow.core.errors import InvalidDeclarationError
    from occflow.engines.spark import IcebergLedger
    from occflow.engines.spark.connect_tags import session_write_id
    from occflow.engines.tags import CommitTag

    spark = _session(remote, home)
    ledger = IcebergLedger(spark, table)
    first = CommitTag.create("connect_race", "one", "manual__1", "insert_into")
    second = CommitTag.create("connect_race", "two", "manual__1", "insert_into")
    refused = None
    with ledger.tagging(first):
        during = session_write_id(spark)
        try:
            with ledger.tagging(second):
                pass
        except InvalidDeclarationError as exc:
            refused = str(exc)
        still = session_write_id(spark)
    return {"first": first.write_id, "second": second.write_id, "during": during, "refused": refused,
            "still": still, "after": session_write_id(spark)}
