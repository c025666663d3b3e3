"""A DAG file that ends the interpreter when imported must not make ``occflow lint`` (or ``pools
plan``) pass with no report (issue 24): the DAG files run in a child process, and its death is a
clear error, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

OCCFLOW = [sys.executable, "-m", "occflow.cli"]
GOOD = '''
import pendulum
from airflow.sdk import DAG
from occflow.operators.delta import DeltaWriteOperator

with DAG("hostile_neighbour", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(task_id="compact_a", table="db.t", operation="optimize", admission=False,
                       allow_unsafe_concurrency=True, path="/tmp/occflow-lint-hostile/t")
    DeltaWriteOperator(task_id="compact_b", table="db.t", operation="optimize", admission=False,
                       allow_unsafe_concurrency=True, path="/tmp/occflow-lint-hostile/t")
'''


@pytest.mark.parametrize("command", [["lint"], ["pools", "plan"]])
@pytest.mark.parametrize("ending", ["import os\nos._exit(0)\n", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"])
def test_a_dag_file_that_ends_the_process_is_an_error_not_a_pass(tmp_path: Path, command: list[str], ending: str):
    (tmp_path / "a_good.py").write_text(GOOD)
    (tmp_path / "z_bye.py").write_text(ending)
    done = subprocess.run([*OCCFLOW, *command, str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert "ended the process" in done.stderr and "before it could report" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_same_folder_without_it_is_linted_in_the_child_and_reported(tmp_path: Path):
    (tmp_path / "a_good.py").write_text(GOOD)
    done = subprocess.run([*OCCFLOW, "lint", str(tmp_path)], capture_output=True, text=True, timeout=300)
    # two delta-rs OPTIMIZEs of one table without admission: a pair that corrupts data, exit 1
    assert done.returncode == 1, done.stderr[-2000:]
    assert "compact_a" in done.stdout and "compact_b" in done.stdout and "corrupts" in done.stdout


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ('table="db.t", path="/tmp/occflow-lint-ids/t"', 'table="`DB`.`T`", path="/tmp/occflow-lint-ids/t"'),
        ('table="db.events", path="/tmp/occflow-lint-ids/e"',
         'table="reporting.events_v2", path="/tmp/occflow-lint-ids/e/"'),
    ],
)
def test_one_table_under_two_names_is_one_table_to_lint(tmp_path: Path, first: str, second: str):
    """Issue 24: lint and pools plan compared table names as raw strings, so two spellings of one
    table (or two names for one path) were "0 findings" although the two OPTIMIZEs duplicate rows."""
    (tmp_path / "ids.py").write_text(f'''
import pendulum
from airflow.sdk import DAG
from occflow.operators.delta import DeltaWriteOperator

with DAG("one_table_two_names", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(task_id="compact_a", {first}, operation="optimize", admission=False,
                       allow_unsafe_concurrency=True)
    DeltaWriteOperator(task_id="compact_b", {second}, operation="optimize", admission=False,
                       allow_unsafe_concurrency=True)
''')
    done = subprocess.run([*OCCFLOW, "lint", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, (done.stdout[-2000:], done.stderr[-2000:])
    assert "compact_a" in done.stdout and "compact_b" in done.stdout and "corrupts" in done.stdout
