"""The example DAGs, run by real Airflow on real engines; each must end with correct data.

``dag.test()`` runs tasks one at a time (data correctness of each DAG); the real-scheduler runs
(``scripts/run_examples.py``: scheduler, dag-processor, api-server and triggerer as processes,
LocalExecutor running the mapped tasks in parallel) are where the writers race.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.airflow

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "dags_example"

# One embedded home for every Spark test in this process: a Spark application keeps the
# catalog it started with (see test_operators_spark.py).
os.environ.setdefault("OCCFLOW_HOME", tempfile.mkdtemp(prefix="occflow-home-"))


def _run_example(run_dag, name: str):
    return run_dag((EXAMPLES / f"{name}.py").read_text(), filename=f"example_{name}.py")


def test_merge_vs_compaction_example_ends_with_the_serial_result(run_dag):
    run = _run_example(run_dag, "delta_merge_vs_compaction")
    assert run.state == "success"
    summary = run.task("verify").xcom["return_value"]
    assert summary["rows"] == summary["expected_rows"] == 4 * 50
    for i in range(4):
        assert run.task("upsert_region", i).xcom["return_value"]["committed"]


def test_schema_change_example_keeps_every_batch_and_the_new_column(run_dag):
    run = _run_example(run_dag, "delta_schema_change")
    assert run.state == "success"
    summary = run.task("verify").xcom["return_value"]
    assert summary["rows"] == summary["expected_rows"] == 500


@pytest.mark.slow
@pytest.mark.spark
def test_iceberg_backfill_example_writes_every_day_exactly_once(run_dag):
    run = _run_example(run_dag, "iceberg_backfill")
    assert run.state == "success"
    summary = run.task("verify").xcom["return_value"]
    assert summary["rows"] == summary["expected_rows"] == 4 * 200
    reports = [run.task("backfill_day", i).xcom["return_value"] for i in range(4)]
    assert all(r["committed"] and r["snapshot_id"] for r in reports)
    assert len({r["snapshot_id"] for r in reports}) == 4


def test_delta_spark_example_declares_its_writes_on_one_table_without_spark(airflow_home):
    # The default pass: the DAG imports under a real DagBag (no Spark session starts at parse
    # time) and declares what its docs say; the slow test below runs it with its data checked.
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(EXAMPLES / "delta_spark_concurrent.py"))
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag("occflow_delta_spark_concurrent")
    writes = {t.task_id: t for t in dag.tasks if hasattr(t, "occflow_write")}
    assert sorted(writes) == ["add_channel_column", "compact", "upsert_day"]
    # The backfill is mapped over its days: its declaration is made per day at run time (the
    # slow test below checks what it wrote); here, what the partial says.
    backfill = dag.get_task("backfill_day")
    assert backfill.operator_class.__name__ == "SparkWriteOperator"
    assert backfill.partial_kwargs["operation"] == "insert_overwrite"
    assert backfill.partial_kwargs["table"] == "shop.daily_sales"
    assert {t.occflow_write.table for t in writes.values()} == {"shop.daily_sales"}
    assert {t.occflow_write.profile.name for t in writes.values()} == {"delta-write-serializable"}
    ops = {name: t.occflow_write.operation.value for name, t in writes.items()}
    assert ops == {"upsert_day": "merge", "compact": "optimize", "add_channel_column": "alter_metadata"}
    # The MERGE names its day in ON: one partition, so admission runs it beside the backfill.
    assert [dict(p) for p in writes["upsert_day"].occflow_write.partitions] == [{"ds": "2024-01-04"}]
    assert writes["compact"].occflow_write.partitions is None  # the whole table: it waits
    assert writes["add_channel_column"].admission is False
    assert all(writes[n].admission for n in ("upsert_day", "compact"))
    assert backfill.partial_kwargs.get("admission", True) is True
    assert dag.get_task("verify").trigger_rule == "all_done"


@pytest.mark.slow
@pytest.mark.spark
def test_main_command_runs_the_delta_spark_example_on_a_real_scheduler_with_correct_data(tmp_path):
    # The bootstrap resolves the jars (scripts/jvm/pom.xml): missing jars are a failure (naming the
    # coordinates), not a skip, and fail here before Airflow starts.
    from occflow.engines.spark.delta_spark import DeltaFormat

    DeltaFormat().jars()
    done = _main_command(tmp_path, "occflow_delta_spark_concurrent")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    # verify read the table back with Spark: every (ds, id) once, the serial amounts, the new column.
    assert "final row count of shop.daily_sales: 200 (a serial run gives 200): correct" in done.stdout
    assert all(f"backfill_day[{i}]" in done.stdout for i in range(3))
    history = next(line for line in done.stdout.splitlines() if "table history:" in line)
    assert "MERGE" in history and "ADD COLUMNS" in history and history.count("WRITE") >= 3


def _main_command(tmp_path: Path, dags: str) -> subprocess.CompletedProcess[str]:
    # Its own process: the script points Airflow at its own home before importing it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW") and k != "OCCFLOW_HOME"}
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "run_examples.py"), "--dags", dags, "--home", str(tmp_path / "home")],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )


@pytest.mark.slow
def test_main_command_runs_the_delta_examples_on_a_real_scheduler_with_correct_data(tmp_path):
    # The JVM-free examples share one scheduler: the nightly maintenance (pyiceberg) rides along.
    dags = "occflow_delta_merge_vs_compaction,occflow_delta_schema_change,occflow_nightly_maintenance"
    done = _main_command(tmp_path, dags)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "final row count of sales.orders: 200 (a serial run gives 200): correct" in done.stdout
    assert "final row count of web.clicks: 500 (a serial run gives 500): correct" in done.stdout
    assert "final row count of ops.hourly_metrics: 200 (a serial run gives 200): correct" in done.stdout
    # The mapped tasks ran side by side: the run reports each of them.
    assert all(f"upsert_region[{i}]" in done.stdout for i in range(4))


@pytest.mark.slow
@pytest.mark.spark
def test_main_command_runs_the_iceberg_backfill_on_a_real_scheduler_with_correct_data(tmp_path):
    done = _main_command(tmp_path, "occflow_iceberg_backfill")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "final row count of db.events_backfill: 800 (a serial run gives 800): correct" in done.stdout
