"""Test DAGs (Airflow DAG files) whose tasks declare their writes with ``occflow_write``."""

import pendulum
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from occflow.core.declaration import WriteDeclaration

START = pendulum.datetime(2024, 1, 1, tz="UTC")


def writes(task_id, table, operation, profile, partitions=None):
    task = EmptyOperator(task_id=task_id)
    task.occflow_write = WriteDeclaration.create(
        table, operation, profile, partitions=partitions, allow_templates=True
    )
    return task


# Daily load at 02:00: two appends side by side, then a MERGE that depends on them, and an
# independent UPDATE of the whole table that nothing orders against the appends.
with DAG("sales_daily", schedule="0 2 * * *", start_date=START, catchup=False, max_active_runs=1) as sales_daily:
    load_eu = writes("load_eu", "db.sales", "insert_into", "iceberg-serializable", {"ds": "{{ ds }}"})
    load_us = writes("load_us", "db.sales", "insert_into", "iceberg-serializable", {"ds": "{{ ds }}"})
    dedupe = writes("dedupe", "db.sales", "merge", "iceberg-serializable", {"ds": "{{ ds }}"})
    fix_prices = writes("fix_prices", "db.sales", "update", "iceberg-serializable")
    [load_eu, load_us] >> dedupe

# Nightly compaction at 02:30, within an hour of the load: OPTIMIZE vs MERGE/UPDATE collide.
with DAG("sales_maintenance", schedule="30 2 * * *", start_date=START, catchup=False, max_active_runs=1) as sales_maintenance:
    compact = writes("compact", "db.sales", "optimize", "iceberg-serializable")

# Weekly report rebuild on Sunday 14:00 on another table: collides with nothing.
with DAG("reports_weekly", schedule="0 14 * * 0", start_date=START, catchup=False) as reports_weekly:
    rebuild = writes("rebuild", "db.reports", "insert_overwrite", "maxcompute-standard", {"ds": "2024-01-01"})
    append = writes("append", "db.reports", "insert_into", "maxcompute-standard", {"ds": "2024-01-01"})

# Hourly MaxCompute inserts on a literal partition, far from the daily 02:00 window for db.sales.
with DAG("events_hourly", schedule="15 * * * *", start_date=START, catchup=False, max_active_runs=2) as events:
    ingest = writes("ingest", "db.events", "insert_into", "maxcompute-transactional", {"ds": "2024-01-01"})
