"""``occflow lint`` and ``occflow pools plan`` run as a user runs them, on DAG folders written here.

Each call is the installed ``occflow`` command in a fresh process (Airflow reads AIRFLOW_HOME once,
at import), over DAG files written to a temporary folder: delta-rs compactions that both commit
and duplicate rows, and folders that are missing, empty or do not import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.airflow

OCCFLOW = Path(sys.executable).parent / "occflow"

HEADER = '''
import pendulum
from airflow.sdk import DAG

from occflow.operators.delta import DeltaWriteOperator

START = pendulum.datetime(2024, 1, 1, tz="UTC")
'''

# Two teams compact the EU partition of one delta-rs table 20 minutes apart, one with the Delta
# format's default profile, one declaring the documented WriteSerializable profile; delta-rs does
# not check either compaction's removes against the other's, so both commit and the rows double.
COMPACTIONS = HEADER + '''
with DAG("orders_compaction", schedule="0 3 * * *", start_date=START, catchup=False, max_active_runs=1):
    DeltaWriteOperator(task_id="optimize_eu", table="lake.orders", operation="optimize",
                       partitions={"region": "eu"}, path="/nonexistent/orders")

with DAG("orders_tidy", schedule="20 3 * * *", start_date=START, catchup=False, max_active_runs=1):
    DeltaWriteOperator(task_id="compact_eu", table="lake.orders", operation="optimize",
                       partitions={"region": "eu"}, profile="delta-write-serializable",
                       path="/nonexistent/orders")
    # Independent of the compaction: a plain conflict with both (one of the two fails).
    DeltaWriteOperator(task_id="purge_eu", table="lake.orders", operation="delete", where={"test": True},
                       partitions={"region": "eu"}, path="/nonexistent/orders")

# The US partition at the same time: no overlap with the EU compactions.
with DAG("orders_us", schedule="0 3 * * *", start_date=START, catchup=False, max_active_runs=1):
    DeltaWriteOperator(task_id="optimize_us", table="lake.orders", operation="optimize",
                       partitions={"region": "us"}, path="/nonexistent/orders")

# Triggered by hand, two runs at once: each mapped compaction may meet itself.
with DAG("events_compaction", schedule=None, start_date=START, catchup=False, max_active_runs=2):
    DeltaWriteOperator.partial(task_id="compact_region", table="lake.events", operation="optimize",
                               profile="delta-write-serializable", path="/nonexistent/events",
                               ).expand(partitions=[{"region": "eu"}, {"region": "us"}])
'''

GOOD = HEADER + '''
with DAG("orders_load", schedule="0 3 * * *", start_date=START, catchup=False, max_active_runs=1):
    DeltaWriteOperator(task_id="optimize_eu", table="lake.orders", operation="optimize",
                       partitions={"region": "eu"}, path="/nonexistent/orders")
'''

# A MaxCompute-only operation on a Delta table: the declaration fails when the file is parsed.
UNKNOWN_OPERATION = HEADER + '''
with DAG("orders_merge_small_files", schedule="0 4 * * *", start_date=START, catchup=False):
    DeltaWriteOperator(task_id="merge_small_files", table="lake.orders", operation="small_file_merge",
                       partitions={"region": "eu"}, path="/nonexistent/orders")
'''

MISSING_MODULE = "import occflow_no_such_module  # noqa: F401\nfrom airflow.sdk import DAG\n"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("airflow_home")
    return {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "OCCFLOW_HOME": str(home / "occflow")}


def dag_folder(root: Path, **files: str) -> Path:
    root.mkdir()
    for name, text in files.items():
        (root / f"{name}.py").write_text(textwrap.dedent(text))
    return root


def occflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(OCCFLOW), *args], env=env, capture_output=True, text=True, timeout=600)


def error_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in done.stderr, done.stderr
    # Airflow re-emits a DAG's own warnings (e.g. EngineProfileWarning) on stderr: not errors.
    return [line for line in done.stderr.splitlines() if line.strip() and "[warning" not in line]


def test_lint_reports_admitted_compactions_as_serialized_and_exits_0(env, tmp_path):
    # Every task here keeps admission on (the default): admission refuses the two compactions
    # of region=eu together (delta-rs's matrix, whatever profile was declared), so the pairs
    # are information, not failures. Before issue 12 they were reported as failures (exit 1).
    folder = dag_folder(tmp_path / "dags", compactions=COMPACTIONS)
    done = occflow(env, "lint", str(folder), "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    found = {frozenset(f["tasks"]): (f["kind"], f["would_be"]) for f in report["findings"]}
    assert found == {
        frozenset({"orders_compaction.optimize_eu", "orders_tidy.compact_eu"}): ("serialized", "corrupts_data"),
        frozenset({"events_compaction.compact_region"}): ("serialized", "corrupts_data"),
        frozenset({"orders_compaction.optimize_eu", "orders_tidy.purge_eu"}): ("serialized", "conflict"),
        frozenset({"orders_tidy.compact_eu", "orders_tidy.purge_eu"}): ("serialized", "conflict"),
    }
    # The two mapped compactions (eu, us) meeting themselves in two runs are one finding.
    [mapped] = [f for f in report["findings"] if f["tasks"] == ["events_compaction.compact_region"]]
    assert mapped["footprints"] == ["partition region=eu", "partition region=us"]
    assert report["summary"]["by_kind"] == {"corrupts_data": 0, "conflict": 0, "serialized": 4}


def test_lint_reports_a_compaction_without_admission_beside_an_admitted_one_as_corrupting_data(env, tmp_path):
    unsafe = COMPACTIONS.replace('profile="delta-write-serializable",\n                       path="/nonexistent/orders"',
                                 'profile="delta-write-serializable", admission=False,\n'
                                 '                       allow_unsafe_concurrency=True, path="/nonexistent/orders"')
    assert unsafe != COMPACTIONS
    folder = dag_folder(tmp_path / "dags", compactions=unsafe)
    done = occflow(env, "lint", str(folder), "--format", "json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    kinds = {frozenset(f["tasks"]): f["kind"] for f in report["findings"]}
    assert kinds == {
        frozenset({"orders_compaction.optimize_eu", "orders_tidy.compact_eu"}): "corrupts_data",
        frozenset({"events_compaction.compact_region"}): "serialized",
        frozenset({"orders_compaction.optimize_eu", "orders_tidy.purge_eu"}): "serialized",
        frozenset({"orders_tidy.compact_eu", "orders_tidy.purge_eu"}): "conflict",
    }
    assert [f["kind"] for f in report["findings"]] == ["corrupts_data", "conflict", "serialized", "serialized"]
    [pair] = [f for f in report["findings"] if f["kind"] == "corrupts_data"]
    assert pair["footprints"] == ["partition region=eu"] and pair["protected"] is False
    assert any("within 60 min" in why for why in pair["together"])
    assert "orders_tidy.compact_eu runs without admission (admission=False)" in pair["reason"]
    duplicating = [c for c in pair["cells"] if c["effect"] == "duplicates_rows"]
    assert [(c["profile"], c["earlier"], c["later"]) for c in duplicating] == [("delta-rs", "optimize", "optimize")]
    assert "delta-rs" in duplicating[0]["source"]

    text = occflow(env, "lint", str(folder), "--exit-zero")
    assert text.returncode == 1, text.stderr  # corrupting data is never waived
    headers = [line for line in text.stdout.splitlines() if line and not line.startswith(" ")]
    assert headers[0].endswith("corrupts_data (error): orders_compaction.optimize_eu x orders_tidy.compact_eu "
                               "on lake.orders [partition region=eu]")
    assert "optimize then optimize -> both commit, duplicates_rows [delta-rs]" in text.stdout
    assert headers[-1].startswith("4 finding(s) (1 corrupts_data, 1 conflict, 2 serialized); 2 new")


def test_pools_plan_serialises_the_compactions_that_would_duplicate_rows(env, tmp_path):
    folder = dag_folder(tmp_path / "dags", compactions=COMPACTIONS)
    done = occflow(env, "pools", "plan", str(folder), "--format", "json")
    assert done.returncode == 0, done.stderr
    pools = json.loads(done.stdout)
    where = {t["task"]: (p["name"], t["pool_slots"], p["slots"]) for p in pools for t in p["tasks"]}
    corrupting = [pair for p in pools for pair in p["corrupts_data"]]
    assert sorted(map(tuple, corrupting)) == [
        ("events_compaction.compact_region[0]", "events_compaction.compact_region[0]"),
        ("events_compaction.compact_region[1]", "events_compaction.compact_region[1]"),
        ("orders_compaction.optimize_eu", "orders_tidy.compact_eu"),
    ]
    for a, b in corrupting:
        (pool_a, slots_a, size), (pool_b, slots_b, _) = where[a], where[b]
        assert pool_a == pool_b and slots_a + slots_b > size, (a, b, where)
    assert "orders_us.optimize_us" not in where


@pytest.mark.parametrize("command", [["lint"], ["pools", "plan"]])
def test_a_missing_folder_exits_2_with_one_line_naming_it(env, tmp_path, command):
    missing = tmp_path / "no_such_dags"
    done = occflow(env, *command, str(missing))
    assert done.returncode == 2
    assert error_lines(done) == [f"occflow: error: DAG folder '{missing}' does not exist"]
    assert done.stdout == ""


@pytest.mark.parametrize("command", [["lint"], ["pools", "plan"]])
def test_an_empty_folder_exits_2_with_one_line_naming_it(env, tmp_path, command):
    empty = tmp_path / "dags"
    empty.mkdir()
    done = occflow(env, *command, str(empty))
    assert done.returncode == 2, done.stdout
    assert error_lines(done) == [f"occflow: error: no DAG files (*.py, *.zip) in '{empty}'"]
    assert done.stdout == ""


def test_a_folder_whose_python_files_define_no_dag_exits_2(env, tmp_path):
    folder = dag_folder(tmp_path / "dags", helpers="RETENTION_DAYS = 7\n")
    done = occflow(env, "lint", str(folder))
    assert done.returncode == 2, done.stdout
    [line] = error_lines(done)
    assert str(folder) in line and "none defines a DAG" in line


@pytest.mark.parametrize("command", [["lint"], ["pools", "plan"]])
def test_dag_files_that_fail_to_import_exit_2_with_a_line_each_naming_file_and_error(env, tmp_path, command):
    folder = dag_folder(tmp_path / "dags", merge_small_files=UNKNOWN_OPERATION, missing=MISSING_MODULE)
    done = occflow(env, *command, str(folder))
    assert done.returncode == 2, done.stdout
    name = command[0]
    assert sorted(error_lines(done)) == [
        f"occflow {name}: cannot import {folder / 'merge_small_files.py'}: occflow.core.errors.UnknownOperationError: "
        "operation 'small_file_merge' is not in profile 'delta-rs'; it knows: insert_overwrite, "
        "truncate, insert_into, update, delete, merge, optimize, alter_metadata, vacuum",
        f"occflow {name}: cannot import {folder / 'missing.py'}: ModuleNotFoundError: "
        "No module named 'occflow_no_such_module'",
    ]
    assert done.stdout == ""  # nothing was read: no report that looks like a clean result


def test_lint_still_reports_what_imported_but_exits_2_when_a_file_did_not(env, tmp_path):
    folder = dag_folder(tmp_path / "dags", compactions=COMPACTIONS, missing=MISSING_MODULE)
    done = occflow(env, "lint", str(folder), "--format", "json")
    assert done.returncode == 2
    [line] = error_lines(done)
    assert line.startswith(f"occflow lint: cannot import {folder / 'missing.py'}: ModuleNotFoundError")
    report = json.loads(done.stdout)
    assert report["summary"]["by_kind"]["serialized"] == 4
    assert report["summary"]["import_errors"] == [line.removeprefix("occflow lint: ")]
