"""The example DAGs, run by real Airflow on real engines; each must end with correct data.

``dag.test()`` runs tasks one at a time; the real-scheduler runs (LocalExecutor, tasks in
parallel) are in ``test_example_dags_scheduler.py`` and in ``scripts/run_examples.py``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.airflow

EXAMPLES = Path(__file__).resolve().parents[2] / "dags_example"


@pytest.fixture(scope="module")
def occflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Embedded warehouse, Iceberg catalog and Delta tables of these runs, in a temp dir."""
    home = tmp_path_factory.mktemp("occflow-home")
    old = os.environ.get("OCCFLOW_HOME")
    os.environ["OCCFLOW_HOME"] = str(home)
    yield home
    if old is None:
        os.environ.pop("OCCFLOW_HOME", None)
    else:
        os.environ["OCCFLOW_HOME"] = old


def _run_example(run_dag, name: str):
    return run_dag((EXAMPLES / f"{name}.py").read_text(), filename=f"example_{name}.py")


@pytest.mark.spark
def test_iceberg_backfill_example_writes_every_day_exactly_once(run_dag, occflow_home):
    run = _run_example(run_dag, "iceberg_backfill")
    assert run.state == "success"
    summary = run.task("verify").xcom["return_value"]
    assert summary["rows"] == summary["expected_rows"] == 6 * 200
    reports = [run.task("backfill_day", i).xcom["return_value"] for i in range(6)]
    assert all(r["committed"] and r["snapshot_id"] for r in reports)
    # Serial dag.test: each day commits its own snapshot, all distinct.
    assert len({r["snapshot_id"] for r in reports}) == 6
