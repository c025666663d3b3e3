"""DAGs of bench/scheduler_bench.py: one per (shape, lease store, mode), each on its own table.

Shapes:
- ``short``: a delta-rs DAG of short commits (well under a second) on one table partitioned by
  ``ds``: 8 upserts (MERGE, two per day on days 1-4), a backfill (INSERT OVERWRITE of days 1-3),
  a purge (DELETE of day 4) and an UPDATE on day 2: 13 writes that start together.
- ``expensive``: 8 MERGEs, four per day on two days, whose source takes ``SLOW_SECONDS`` to
  compute after the attempt read its snapshot: a lost attempt wastes that long.

Modes: ``racing`` (``admission=False``: conflicts are retried by occflow's policy), ``defaults``
(admission with the operator's defaults) and ``old`` (admission as before issue 25:
``old_admission.OldAdmissionWrite``). The stores' URLs come from the environment.
"""

from __future__ import annotations

import os
import shutil
import time
from datetime import timedelta

import pendulum
import pyarrow as pa
from airflow.sdk import DAG, task
from old_admission import OldAdmissionWrite

from occflow.engines.deltars import DeltaRsTable
from occflow.hooks.spark import default_delta_location
from occflow.operators.delta import DeltaWriteOperator

STORES = {"sqlite": os.environ.get("OCCFLOW_BENCH_SQLITE_URL"), "postgresql": os.environ.get("OCCFLOW_BENCH_PG_URL")}
MODES = ("racing", "defaults", "old")
SLOW_SECONDS = float(os.environ.get("OCCFLOW_BENCH_SLOW_SECONDS", "5"))
ROWS_PER_DAY = 50


def rows(ds: str, ids: range, value: int) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "ds": [ds] * len(ids),
                     "v": pa.array([value] * len(ids), pa.int64())})


def upsert(day: str, first: int, value: int, slow: float = 0.0):
    def source(context, snapshot):
        time.sleep(slow)  # the job's own work, after its snapshot was read
        return rows(day, range(first, first + 20), value)
    return source


def write(mode: str, store: str, **kwargs):
    common = {"retries": 2, "retry_delay": timedelta(seconds=5)}
    if mode == "racing":
        return DeltaWriteOperator(admission=False, **common, **kwargs)
    if mode == "old":
        return OldAdmissionWrite(lease_store_url=STORES[store], **common, **kwargs)
    return DeltaWriteOperator(lease_store_url=STORES[store], **common, **kwargs)


def short_writes(mode: str, store: str, table: str) -> list:
    out = []
    for d in range(1, 5):
        for n, first in enumerate((10, 30)):
            out.append(write(mode, store, task_id=f"upsert_d{d}_{n}", table=table, operation="merge",
                             partitions={"ds": str(d)}, merge_keys=["id"], data=upsert(str(d), first, 100 + n)))
    for d in range(1, 4):
        out.append(write(mode, store, task_id=f"backfill_d{d}", table=table, operation="insert_overwrite",
                         partitions={"ds": str(d)}, data=rows(str(d), range(ROWS_PER_DAY), 7)))
    out.append(write(mode, store, task_id="purge_d4", table=table, operation="delete", partitions={"ds": "4"}))
    out.append(write(mode, store, task_id="update_d2", table=table, operation="update", partitions={"ds": "2"},
                     where={"id": 1}, set_values={"v": -1}))
    return out


def expensive_writes(mode: str, store: str, table: str) -> list:
    return [
        write(mode, store, task_id=f"merge_d{d}_{n}", table=table, operation="merge", partitions={"ds": str(d)},
              merge_keys=["id"], data=upsert(str(d), 5 * n, 200 + n, SLOW_SECONDS))
        for d in (1, 2) for n in range(4)
    ]


SHAPES = {"short": short_writes, "expensive": expensive_writes}

for shape, writes in SHAPES.items():
    for store in STORES:
        for mode in MODES:
            table = f"bench.sched_{shape}_{store}_{mode}"
            with DAG(f"occflow_sched_{shape}_{store}_{mode}", schedule=None, catchup=False,
                     start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), max_active_tasks=32,
                     tags=["occflow", "bench"]) as dag:

                @task
                def create_table(table=table):
                    path = default_delta_location(table)
                    shutil.rmtree(path, ignore_errors=True)
                    days = [rows(str(d), range(ROWS_PER_DAY), 0) for d in range(1, 5)]
                    DeltaRsTable(path).create(pa.concat_tables(days), partition_by=["ds"])

                create_table() >> writes(mode, store, table)
            globals()[dag.dag_id] = dag
