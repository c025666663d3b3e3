"""Concurrent writes on one partition of a MaxCompute Delta table, and on a standard table.

On the transactional table (``transactional=true`` with a primary key: spec 001's matrix) an
INSERT INTO, an UPDATE, a MINOR and a MAJOR COMPACT all write partition ``ds=2024-01-01``; on a
standard table (spec 000's matrix) an INSERT INTO and an INSERT OVERWRITE write the same day. The
tasks run side by side; admission keeps apart the pairs whose later job MaxCompute would fail
(INSERT INTO and UPDATE, a MAJOR COMPACT and either) and lets the others run together (a MINOR
COMPACT beside INSERT INTO: smart conflict resolution; INSERT INTO beside INSERT OVERWRITE on the
standard table). The matrix each table follows is read from the table itself, not declared.

Where it runs: with an Airflow connection ``maxcompute_default`` (the Alibaba provider's), on that
project; the tables are created there if missing. Without one, on occflow's MaxCompute stand-in
(``occflow.engines.maxcompute.StandInProject``, a file under ``$OCCFLOW_HOME``), which commits
through occflow's reference engine with MaxCompute's rules. ``verify`` then compares the tables'
rows with a serial re-run of the committed jobs in commit order.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, task

from occflow.core.reference import ReferenceTable
from occflow.engines.maxcompute import StandInProject
from occflow.hooks.maxcompute import DEFAULT_CONN_ID, OccflowMaxComputeHook, connection_configured
from occflow.hooks.spark import embedded_home
from occflow.operators.maxcompute import MaxComputeWriteOperator

DELTA_TABLE = "mc_demo.orders"
STANDARD_TABLE = "mc_demo.daily_totals"
DAY = "2024-01-01"
OTHER_DAY = "2024-01-02"
#: The stand-in project (no connection): one file shared by every worker process.
STANDIN = os.environ.get("OCCFLOW_MAXCOMPUTE_STANDIN") or str(embedded_home() / "maxcompute" / "standin.bin")
#: Seconds each stand-in job runs, so that the tasks overlap as real jobs would.
JOB_SECONDS = {"insert_into": 1.0, "update": 1.5, "minor_compact": 2.0, "major_compact": 2.5, "insert_overwrite": 1.5}


def standin() -> str | None:
    """The stand-in, unless the connection exists (asked when a task runs, never at parse time)."""
    return None if connection_configured(DEFAULT_CONN_ID) else STANDIN


def _create_real_tables(client) -> None:
    client.execute_sql(
        f"CREATE TABLE IF NOT EXISTS {DELTA_TABLE} (id BIGINT NOT NULL PRIMARY KEY, amount BIGINT) "
        "PARTITIONED BY (ds STRING) TBLPROPERTIES ('transactional' = 'true')"
    )
    client.execute_sql(f"CREATE TABLE IF NOT EXISTS {STANDARD_TABLE} (region STRING, amount BIGINT) PARTITIONED BY (ds STRING)")
    for table in (DELTA_TABLE, STANDARD_TABLE):
        client.execute_sql(f"ALTER TABLE {table} ADD IF NOT EXISTS PARTITION (ds = '{DAY}')")


def _create_standin_tables() -> None:
    os.makedirs(os.path.dirname(STANDIN), exist_ok=True)
    for leftover in (STANDIN, STANDIN + ".lock"):
        if os.path.exists(leftover):
            os.remove(leftover)
    project = StandInProject(STANDIN, job_seconds=JOB_SECONDS)
    days = [{"ds": DAY}, {"ds": OTHER_DAY}]
    project.create_table(DELTA_TABLE, partition_columns=["ds"], partitions=days, transactional=True, primary_key=["id"])
    project.create_table(STANDARD_TABLE, partition_columns=["ds"], partitions=days)
    for table in (DELTA_TABLE, STANDARD_TABLE):  # yesterday's data, and a first load of the day
        for day in (OTHER_DAY, DAY):
            instance = project.run_sql(f"INSERT INTO {table} PARTITION (ds = '{day}') SELECT * FROM mc_demo.staged")
            project.finish(instance.id)
            instance.wait_for_success()


def serial_rows(project, table: str) -> dict[str, dict[str, int]]:
    """The committed jobs of ``table`` re-run one at a time, in commit order, on a fresh table."""
    live = project.reference(table)
    fresh = ReferenceTable(live.profile.name, partitions=list(live.snapshot().rows))
    for commit in project.history(table):
        fresh.begin(commit.operation, sorted(commit.footprint.write_partitions or ()), txn_id=commit.txn_id).commit()
    return {p: dict(r) for p, r in fresh.snapshot().rows.items()}


with DAG(
    "occflow_maxcompute_transactional",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_tasks=8,
    tags=["occflow", "example", "maxcompute"],
    doc_md=__doc__,
) as dag:

    @task
    def create_tables() -> str:
        if standin() is None:
            _create_real_tables(OccflowMaxComputeHook(DEFAULT_CONN_ID).get_client())
            return "maxcompute_default"
        _create_standin_tables()
        return STANDIN

    common = {"partitions": {"ds": DAY}, "standin_fallback": STANDIN, "poll_interval": 0.2, "admission_wait_seconds": 60.0, "retries": 1}
    writes = [
        MaxComputeWriteOperator(
            task_id="insert_day", table=DELTA_TABLE, **common,
            sql=f"INSERT INTO {DELTA_TABLE} PARTITION (ds = '{DAY}') SELECT id, amount FROM mc_demo.staged",
        ),
        MaxComputeWriteOperator(
            task_id="update_day", table=DELTA_TABLE, **common,
            sql=f"UPDATE {DELTA_TABLE} SET amount = amount + 1 WHERE ds = '{DAY}'",
        ),
        MaxComputeWriteOperator(
            task_id="minor_compact", table=DELTA_TABLE, **common,
            sql=f"ALTER TABLE {DELTA_TABLE} PARTITION (ds = '{DAY}') COMPACT minor",
        ),
        MaxComputeWriteOperator(
            task_id="major_compact", table=DELTA_TABLE, **common,
            sql=f"ALTER TABLE {DELTA_TABLE} PARTITION (ds = '{DAY}') COMPACT major",
        ),
        MaxComputeWriteOperator(
            task_id="append_totals", table=STANDARD_TABLE, **common,
            sql=f"INSERT INTO {STANDARD_TABLE} PARTITION (ds = '{DAY}') SELECT region, amount FROM mc_demo.staged",
        ),
        MaxComputeWriteOperator(
            task_id="overwrite_totals", table=STANDARD_TABLE, **common,
            sql=f"INSERT OVERWRITE TABLE {STANDARD_TABLE} PARTITION (ds = '{DAY}') SELECT region, amount FROM mc_demo.staged",
        ),
    ]

    @task
    def verify(**context) -> dict:
        reports = {w.task_id: context["ti"].xcom_pull(task_ids=w.task_id) for w in writes}
        if standin() is None:
            return {"table": DELTA_TABLE, "reports": reports}  # a real project: see the reports
        project = OccflowMaxComputeHook(standin=STANDIN).get_client()
        rows = {t: project.rows(t) for t in (DELTA_TABLE, STANDARD_TABLE)}
        expected = {t: serial_rows(project, t) for t in (DELTA_TABLE, STANDARD_TABLE)}
        if rows != expected:
            raise AssertionError(f"the tables differ from the serial result: {rows} != {expected}")
        count = sum(len(r) for t in rows.values() for r in t.values())
        return {
            "table": f"{DELTA_TABLE} + {STANDARD_TABLE}",
            "rows": count,
            "expected_rows": sum(len(r) for t in expected.values() for r in t.values()),
            "compaction": {k: (v or {}).get("maxcompute") for k, v in reports.items() if "compact" in k},
            "reports": reports,
        }

    create_tables() >> writes >> verify()
