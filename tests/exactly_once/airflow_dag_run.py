"""Run one DAG file with real Airflow (``dag.test()``) in this process and print what happened.

    python tests/exactly_once/airflow_dag_run.py AIRFLOW_HOME DAG_FILE [DAG_FILE ...]

It reuses tests/airflow/conftest.py's environment, parsing and result collection, in a process of
its own, so its Airflow home never meets another test's. Prints one line ``OCCFLOW-RESULT <json>`` with, per DAG:
the run's state and per task its state, tries and XCom return value.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path


def main(home: str, dag_files: list[str]) -> int:
    os.environ["OCCFLOW_TEST_AIRFLOW_HOME"] = home
    path = Path(__file__).resolve().parents[1] / "airflow" / "conftest.py"
    spec = importlib.util.spec_from_file_location("occflow_airflow_test_env", path)
    assert spec is not None and spec.loader is not None
    env = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = env  # dataclasses look their module up while it executes
    spec.loader.exec_module(env)  # sets AIRFLOW_HOME & co. before airflow is imported
    if not (Path(home) / ".migrated").exists():
        done = subprocess.run([str(env._AIRFLOW_BIN), "db", "migrate"], env={**os.environ, **env.AIRFLOW_ENV},
                              capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            print(done.stderr[-4000:], file=sys.stderr)
            return 3
        (Path(home) / ".migrated").write_text("yes")
    from airflow import settings

    settings.configure_orm()
    out = {}
    for dag_file in dag_files:
        target = env._DAGS / Path(dag_file).name
        target.write_text(Path(dag_file).read_text())
        dag = env.load_dag(target)
        run = dag.test()
        result = env._collect(dag.dag_id, run.run_id, target, run.state)
        out[dag.dag_id] = {
            "state": result.state,
            "tasks": {
                task_id: {"state": t.state, "tries": len(t.tries), "xcom": t.xcom.get("return_value")}
                for (task_id, _), t in result.tasks.items()
            },
        }
    print("OCCFLOW-RESULT " + json.dumps(out, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
