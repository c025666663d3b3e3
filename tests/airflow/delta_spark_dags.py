"""Runs a DAG with ``dag.test()`` in a Python process of its own that holds a delta-spark session
(``test_operators_delta_spark.py``): the test process's JVM is the Iceberg one, and one JVM holds
one set of jars and extensions. The Airflow home and metadata DB are the test run's (the
environment is inherited); what the run did comes back as plain data.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
_home: str | None = None


def delta_config() -> dict[str, Any]:
    """One config, so one engine and one session for every task of every DAG in this process.
    Four task slots: a job held in its UDF leaves room for the competitor's tasks."""
    global _home
    if _home is None:
        _home = tempfile.mkdtemp(prefix="occflow-delta-operators-")
    return {
        "table_format": "delta",
        "master": "local[4]",
        "home": _home,
        "app_name": "occflow-delta-operators",
        "conf": {"spark.sql.warehouse.dir": f"{_home}/warehouse", "spark.driver.memory": "768m"},
    }


def start() -> float:
    from occflow.engines.spark.target import spark_engine

    began = time.perf_counter()
    spark_engine(delta_config()).session().sparkContext.setLogLevel("ERROR")
    return time.perf_counter() - began


def _airflow_conftest() -> Any:
    name = "_occflow_airflow_conftest_child"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _HERE / "conftest.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def run_dag(source: str, dag_folder: str) -> dict[str, Any]:
    """Write ``source`` into the DAG folder, run ``dag.test()``; each task's state, tries and XComs."""
    helpers = _airflow_conftest()
    dag_file = Path(dag_folder) / f"test_dag_{uuid.uuid4().hex[:10]}.py"
    dag_file.write_text(textwrap.dedent(source))
    dag = helpers.load_dag(dag_file)
    dr = dag.test()
    run = helpers._collect(dag.dag_id, dr.run_id, dag_file, dr.state)
    return {
        "state": run.state,
        "tasks": {
            task_id: {"state": t.state, "tries": len(t.tries), "xcom": dict(t.xcom)}
            for (task_id, _), t in run.tasks.items()
        },
    }
