"""A schema change during writes on a delta-rs table.

Five mapped tasks append one batch each while an ``alter_metadata`` task adds a nullable
``channel`` column. An append whose snapshot predates the new column loses with
``metadata_changed`` and is retried in the task: the retry reads a fresh snapshot, builds its
batch on the table's current schema (the new column included, left empty) and commits. The
final task checks that every batch landed exactly once.

Each batch takes a few seconds to prepare (``PREPARE_SECONDS``) after its snapshot was read:
the window in which the schema change commits.
"""

from __future__ import annotations

import time

import pendulum
import pyarrow as pa
from airflow.sdk import DAG, task

from occflow.engines.deltars import DeltaRsTable
from occflow.hooks.spark import default_delta_location
from occflow.operators.delta import DeltaWriteOperator

TABLE = "web.clicks"
BATCHES = 5
ROWS_PER_BATCH = 100
PREPARE_SECONDS = 4.0


def batch_rows(context, snapshot) -> pa.Table:
    """One batch of clicks, shaped like the table's schema in this attempt's snapshot."""
    batch = int(context["ti"].map_index)
    time.sleep(PREPARE_SECONDS)
    ids = list(range(batch * ROWS_PER_BATCH, (batch + 1) * ROWS_PER_BATCH))
    columns = {"id": ids, "batch": [batch] * len(ids), "url": [f"/page/{i % 7}" for i in ids]}
    schema = pa.schema(snapshot.schema().to_arrow())
    for field in schema:
        if field.name not in columns:  # a column added since the batch was designed: left empty
            columns[field.name] = pa.nulls(len(ids), type=field.type)
    return pa.table({f.name: columns[f.name] for f in schema}, schema=schema)


with DAG(
    "occflow_delta_schema_change",
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
        seed = pa.table(
            {"id": pa.array([], pa.int64()), "batch": pa.array([], pa.int64()), "url": pa.array([], pa.string())}
        )
        outcome = DeltaRsTable(path).create(seed)
        if not outcome.committed:
            raise RuntimeError(f"create failed: {outcome.error}")

    appends = DeltaWriteOperator.partial(
        task_id="append_batch",
        table=TABLE,
        operation="insert_into",
        data=batch_rows,
        admission=False,  # let the race happen; with admission the ALTER waits for the appends
    ).expand(partitions=[None] * BATCHES)

    add_column = DeltaWriteOperator(
        task_id="add_channel_column",
        table=TABLE,
        operation="alter_metadata",
        add_columns={"channel": "string"},
        admission=False,
    )

    @task
    def verify(reports: list[dict]) -> dict:
        from deltalake import DeltaTable

        table = DeltaTable(default_delta_location(TABLE))
        rows = table.to_pyarrow_table().to_pylist()
        ids = [r["id"] for r in rows]
        if len(ids) != len(set(ids)):
            raise ValueError(f"duplicate rows in {TABLE}")
        if sorted(ids) != list(range(BATCHES * ROWS_PER_BATCH)):
            raise ValueError(f"{TABLE} holds {len(ids)} rows, expected {BATCHES * ROWS_PER_BATCH}")
        if "channel" not in table.schema().to_arrow().names:
            raise ValueError(f"{TABLE} lost the channel column")
        summary = {
            "table": TABLE,
            "rows": len(rows),
            "expected_rows": BATCHES * ROWS_PER_BATCH,
            "attempts": sum(r["attempts"] for r in reports),
            "conflicts": [c["kind"] for r in reports for c in r["conflicts"]],
            "actions": [d["action"] for r in reports for d in r["decisions"]],
        }
        print(f"occflow example summary: {summary}")
        return summary

    setup = create_table()
    setup >> [appends, add_column]
    checked = verify(appends.output)
    add_column >> checked
