"""occflow's own code warns about nothing on the path a user takes first.

In a fresh Python process (so that import-time warnings are not hidden by an earlier import),
with every warning recorded: import every occflow module, parse the example DAGs as the
dag-processor does (a ``DagBag``), and run the delta-rs schema-change example with ``dag.test()``.
A warning issued from occflow's package or an example DAG fails the test, with its file, line,
category and message. Warnings that third-party libraries issue from their own code are not this
test's business (a deprecated Airflow API that occflow calls is: Airflow attributes such a
warning to its caller).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.airflow

REPO = Path(__file__).resolve().parents[2]

_SCRIPT = r"""
import importlib, json, os, pkgutil, sys, warnings
from pathlib import Path

# occflow's package, the example DAGs and the copy of one in Airflow's DAG folder
OWN = [str(Path(p).resolve()) for p in sys.argv[1:4]]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import occflow
    for info in pkgutil.walk_packages(occflow.__path__, "occflow."):
        # Scripts, not modules: the CLI's entry point and the driver spark-submit runs.
        if not info.name.endswith("__main__") and info.name != "occflow.engines.spark.driver":
            importlib.import_module(info.name)
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=OWN[1])
    assert not bag.import_errors, bag.import_errors
    # dag.test() runs a DAG from Airflow's DAG folder: the same example, copied there.
    copied = DagBag(dag_folder=sys.argv[3])
    run = copied.dags["occflow_delta_schema_change"].test()
    assert str(getattr(run.state, "value", run.state)) == "success", run.state
own = [
    {"file": w.filename, "line": w.lineno, "category": w.category.__name__, "message": str(w.message)}
    for w in caught if any(str(Path(w.filename).resolve()).startswith(root) for root in OWN)
]
print(json.dumps(own))
"""


def test_occflow_issues_no_warning_importing_parsing_and_running_an_example(dag_folder: Path, tmp_path: Path):
    import occflow

    # The name and text test_example_dags.py gives this example in the shared DAG folder.
    copy = dag_folder / "example_delta_schema_change.py"
    copy.write_text((REPO / "dags_example" / "delta_schema_change.py").read_text())
    env = {**os.environ, "OCCFLOW_HOME": str(tmp_path / "occflow"),
           "OCCFLOW_LEASE_STORE_URL": f"sqlite:///{tmp_path / 'leases.db'}"}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(Path(occflow.__file__).parent), str(REPO / "dags_example"), str(copy)],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    own = json.loads(done.stdout.strip().splitlines()[-1])
    assert own == [], "occflow's own code warned:\n" + "\n".join(
        f"  {w['file']}:{w['line']}: {w['category']}: {w['message']}" for w in own
    )
