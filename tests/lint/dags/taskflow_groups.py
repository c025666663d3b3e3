"""TaskFlow writes inside task groups, a setup and a teardown around them: one run at a time."""

import pendulum
from airflow.sdk import DAG, TaskGroup, task

from occflow.operators.delta import DeltaWriteOperator

with DAG("lint_taskflow_groups", schedule="@daily", start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
         catchup=False, max_active_runs=1):

    @task
    def create_scratch():
        return "/tmp/scratch"

    @task
    def drop_scratch(path):
        return path

    @task.occflow_write(engine="delta-rs", table="lake.orders", operation="merge", path="/nonexistent/orders",
                        admission=False)
    def upsert_eu(table, snapshot, partition, commit, context):
        raise NotImplementedError

    @task.occflow_write(engine="delta-rs", table="lake.orders", operation="delete", path="/nonexistent/orders",
                        admission=False)
    def purge_old(table, snapshot, partition, commit, context):
        raise NotImplementedError

    scratch = create_scratch()
    with TaskGroup("ingest") as ingest:
        upsert = upsert_eu()
    with TaskGroup("tidy") as tidy:
        purge = purge_old()
        compact = DeltaWriteOperator(
            task_id="compact",
            table="lake.orders",
            operation="optimize",
            path="/nonexistent/orders",
            admission=False,
            allow_unsafe_concurrency=True,
        )
        purge >> compact
    dropped = drop_scratch(scratch)
    scratch >> ingest >> tidy >> dropped.as_teardown(setups=scratch)
