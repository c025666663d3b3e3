"""Four SQL-only region MERGEs into one Iceberg table, side by side, as a user writes them: the
SQL names each region; ``partition_columns`` tells lint, at parse time, what the table is
partitioned by (``PARTITION_HINT`` is replaced by the tests)."""

import pendulum
from airflow.sdk import DAG

from occflow.operators.spark import SparkWriteOperator

PARTITION_HINT = {"partition_columns": ["region"]}

with DAG("lint_region_merges", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
         catchup=False, max_active_runs=1):
    for number, region in enumerate(("eu", "us", "ap", "la")):
        SparkWriteOperator(
            task_id=f"merge_{number}_{region}",
            table="db.sales",
            table_format="iceberg",
            job=(
                "MERGE INTO lake.db.sales t USING lake.db.sales_updates s "
                f"ON t.id = s.id AND t.region = '{region}' AND s.region = '{region}' "
                "WHEN MATCHED THEN UPDATE SET t.amount = s.amount "
                f"WHEN NOT MATCHED THEN INSERT (id, region, amount) VALUES (s.id, '{region}', s.amount)"
            ),
            admission=False,
            **PARTITION_HINT,
        )
