"""A backfill mapped over days, then a schema change once the loads are done: one run at a time."""

import pendulum
from airflow.sdk import DAG

from occflow.operators.delta import DeltaWriteOperator

DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]

with DAG("lint_mapped_then_alter", schedule="@daily", start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
         catchup=False, max_active_runs=1):
    load = DeltaWriteOperator.partial(
        task_id="load",
        table="lake.clicks",
        operation="insert_overwrite",
        path="/nonexistent/clicks",
        admission=False,
    ).expand(partitions=[{"ds": d} for d in DAYS])

    alter = DeltaWriteOperator(
        task_id="alter",
        table="lake.clicks",
        operation="alter_metadata",
        add_columns={"channel": "string"},
        path="/nonexistent/clicks",
        admission=False,
    )

    load >> alter
