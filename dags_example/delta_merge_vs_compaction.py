"""MERGE upserts racing a compaction on one partitioned Delta table (delta-rs).

Four mapped tasks upsert into their own ``region`` partition; each names its partition in the
MERGE condition, so upserts into different regions never conflict with each other. An OPTIMIZE
of the whole table runs at the same time and rewrites the small files the upserts read. A MERGE
that loses to the compaction (``concurrent_delete_read``) is retried in the task from a fresh
snapshot; a compaction that loses to an upsert is skipped (the next compaction picks the new
files up). Admission is off for the upserts so the race is visible; with admission on (the
default) the compaction would wait for the upserts instead of racing them. The compaction keeps
admission on: on delta-rs two compactions of the same files both commit and duplicate rows, so
occflow refuses to run one without a lease unless the DAG opts in (``allow_unsafe_concurrency``).

After the compaction, the nightly maintenance: a VACUUM at the table's retention (one week: it
deletes no file a running job could still read; a shorter one is refused unless the task says
``allow_unsafe_retention=True``). It holds the whole table while it runs, so admission keeps it
apart from every write that takes a lease (docs/maintenance.md).

The source of each upsert takes a few seconds to compute (``PREPARE_SECONDS``), as a real
transformation would: that is the window in which the compaction commits.
"""

from __future__ import annotations

import time

import pendulum
import pyarrow as pa
from airflow.sdk import DAG, task

from occflow.engines.deltars import DeltaRsTable
from occflow.hooks.spark import default_delta_location
from occflow.operators.delta import DeltaWriteOperator

TABLE = "sales.orders"
REGIONS = ["eu", "us", "apac", "latam"]
INITIAL_PER_REGION = 40  # ids 0..39, written as 8 small files per region
UPSERT_IDS = range(30, 50)  # 10 updated (30..39), 10 inserted (40..49) per region
PREPARE_SECONDS = 4.0


def upsert_rows(context, snapshot) -> pa.Table:
    """The upsert source for the task's region, computed after the attempt's snapshot was read."""
    region = context["ti"].task.partitions["region"]
    time.sleep(PREPARE_SECONDS)
    ids = list(UPSERT_IDS)
    return pa.table({"id": ids, "region": [region] * len(ids), "amount": [1000 + i for i in ids]})


with DAG(
    "occflow_delta_merge_vs_compaction",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_tasks=6,
    tags=["occflow", "example", "delta"],
    doc_md=__doc__,
) as dag:

    @task
    def create_table() -> None:
        import shutil

        path = default_delta_location(TABLE)
        shutil.rmtree(path, ignore_errors=True)
        table = DeltaRsTable(path)
        first = True
        for chunk in range(8):  # many small files: something for the compaction to do
            ids = list(range(chunk * 5, chunk * 5 + 5))
            data = pa.table(
                {
                    "id": [i for _ in REGIONS for i in ids],
                    "region": [r for r in REGIONS for _ in ids],
                    "amount": [i for _ in REGIONS for i in ids],
                }
            )
            outcome = table.create(data, partition_by=["region"]) if first else table.append(data)
            if not outcome.committed:
                raise RuntimeError(f"setup write failed: {outcome.error}")
            first = False

    upserts = DeltaWriteOperator.partial(
        task_id="upsert_region",
        table=TABLE,
        operation="merge",
        data=upsert_rows,
        merge_keys=["id"],
        admission=False,
    ).expand(partitions=[{"region": r} for r in REGIONS])

    compaction = DeltaWriteOperator(
        task_id="compact",
        table=TABLE,
        operation="optimize",
    )

    nightly_vacuum = DeltaWriteOperator(
        task_id="nightly_vacuum",
        table=TABLE,
        operation="vacuum",
        trigger_rule="all_done",  # after the compaction, whether it committed or was skipped
    )

    @task(trigger_rule="all_done")
    def verify(reports: list[dict]) -> dict:
        from airflow.sdk import get_current_context
        from deltalake import DeltaTable

        # The compaction pushes no report when its policy skipped it.
        compacted = get_current_context()["ti"].xcom_pull(task_ids="compact")
        vacuumed = get_current_context()["ti"].xcom_pull(task_ids="nightly_vacuum")
        if not vacuumed or not vacuumed["committed"]:
            raise ValueError(f"the nightly VACUUM of {TABLE} did not commit: {vacuumed}")
        reports = [*reports, compacted, vacuumed]

        rows = DeltaTable(default_delta_location(TABLE)).to_pyarrow_table().to_pylist()
        keys = [(r["region"], r["id"]) for r in rows]
        if len(keys) != len(set(keys)):
            raise ValueError(f"duplicate rows in {TABLE}")
        expected = {
            (region, i): (1000 + i if i in UPSERT_IDS else i)
            for region in REGIONS
            for i in [*range(INITIAL_PER_REGION), *UPSERT_IDS]
        }
        actual = {(r["region"], r["id"]): r["amount"] for r in rows}
        if actual != expected:
            missing = sorted(set(expected) - set(actual))[:5]
            wrong = sorted(k for k in expected if k in actual and actual[k] != expected[k])[:5]
            raise ValueError(f"{TABLE} differs from the serial result: missing {missing}, wrong {wrong}")
        summary = {
            "table": TABLE,
            "rows": len(rows),
            "expected_rows": len(expected),
            "attempts": sum(r["attempts"] for r in reports if r),
            "conflicts": [c["kind"] for r in reports if r for c in r["conflicts"]],
            "actions": [d["action"] for r in reports if r for d in r["decisions"]],
            "compaction": "committed" if compacted else "skipped",
            "vacuum": "committed",
        }
        print(f"occflow example summary: {summary}")
        return summary

    setup = create_table()
    setup >> [upserts, compaction]
    checked = verify(upserts.output)
    compaction >> nightly_vacuum >> checked
