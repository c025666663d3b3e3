"""Dependent writes in a DAG that lets three runs overlap (max_active_runs=3), and a mapped
task over an upstream result (its instances' partitions are unknown until the run)."""

import pendulum
from airflow.sdk import DAG, task

from occflow.operators.delta import DeltaWriteOperator

with DAG("lint_runs_overlap", schedule="@hourly", start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
         catchup=False, max_active_runs=3):
    append = DeltaWriteOperator(
        task_id="append",
        table="lake.events",
        operation="insert_into",
        data=[{"v": 1}],
        path="/nonexistent/events",
        admission=False,
    )
    rewrite = DeltaWriteOperator(
        task_id="rewrite",
        table="lake.events",
        operation="insert_overwrite",
        data=[{"v": 2}],
        path="/nonexistent/events",
        admission=False,
    )
    append >> rewrite


with DAG("lint_mapped_from_upstream", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
         catchup=False, max_active_runs=1):

    @task
    def regions():
        return [{"region": "eu"}, {"region": "us"}]

    DeltaWriteOperator.partial(
        task_id="merge_region",
        table="lake.sales",
        operation="merge",
        path="/nonexistent/sales",
        admission=False,
    ).expand(partitions=regions())
