"""``occflow lint`` and ``occflow pools plan`` meet one table under one identity whoever declared
it: a ``DeltaWriteOperator`` (keyed by its location) and a hand-made ``WriteDeclaration`` on a
plain operator (keyed by its name, which leads to the location the operator writes it at, or by
the location it names) pair; two tables of one name in two places do not.

The oracle for "one table" is the file system: the operator's table really is at the path the
hand-made name leads to (a real delta-rs table is created there and found by both), and the
pairs' verdict is the delta-rs matrix's own cell (DELETE beside DELETE fails).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from occflow.cli import main
from occflow.core.profiles import get_profile

pytestmark = pytest.mark.airflow

DAG = '''
import dataclasses
from airflow.sdk import DAG
from airflow.providers.standard.operators.python import PythonOperator
from occflow.core.declaration import WriteDeclaration
from occflow.operators.delta import DeltaWriteOperator

def job():
    pass

with DAG("ops", schedule=None):
    # At the location its name leads to under $OCCFLOW_HOME (no path).
    DeltaWriteOperator(task_id="op_default", table="lake.t", operation="DELETE", where={{"v": 0}})
    # The same name, somewhere else: another table.
    DeltaWriteOperator(task_id="op_elsewhere", table="lake.t", path={elsewhere!r}, operation="DELETE",
                       where={{"v": 0}})

with DAG("by_hand", schedule=None):
    # The documented way for a plain operator: a declaration by name.
    named = PythonOperator(task_id="named", python_callable=job)
    named.occflow_write = WriteDeclaration.create("lake.t", "DELETE", table_format="delta")
    # A declaration that names its location (another name, the same place as op_elsewhere).
    placed = PythonOperator(task_id="placed", python_callable=job)
    placed.occflow_write = dataclasses.replace(
        WriteDeclaration.create("lake.archive", "DELETE", table_format="delta"), location={elsewhere!r})
'''


@pytest.fixture
def folder(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("OCCFLOW_HOME", str(home))
    elsewhere = tmp_path / "elsewhere" / "t"
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "one_table.py").write_text(DAG.format(elsewhere=str(elsewhere)))
    return dags, home, elsewhere


def _findings(capsys, dags: Path) -> dict[frozenset[str], dict]:
    code = main(["lint", str(dags), "--format", "json", "--exit-zero"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    assert out.strip(), (code, err)
    doc = json.loads(out)
    assert code in (0, 1), doc
    return {frozenset(f["tasks"]): f for f in doc["findings"]}


def test_an_operators_write_and_a_hand_made_declaration_of_one_table_pair(capsys, folder):
    from occflow.cli.lint import name_location

    dags, home, elsewhere = folder
    # The file system says these are one table: the name leads to the directory the operator
    # writes when it is given no path (a real table made there is found through the name).
    at = Path(name_location("lake.t"))
    assert at.is_relative_to(home.resolve())
    from deltalake import write_deltalake

    write_deltalake(str(at), pa.table({"v": [0]}))
    assert DeltaTable(name_location("lake.t")).version() == 0
    # And the matrix says two DELETEs of one table conflict (the later one fails).
    assert get_profile("delta-rs").cell("delete", "delete").later_fails

    found = _findings(capsys, dags)
    assert frozenset({"ops.op_default", "by_hand.named"}) in found, sorted(found)
    assert frozenset({"ops.op_elsewhere", "by_hand.placed"}) in found, sorted(found)

    assert main(["pools", "plan", str(dags), "--format", "json"]) == 0
    pools = json.loads(capsys.readouterr().out)
    pool_of = {t["task"]: p["name"] for p in pools for t in p["tasks"]}
    assert pool_of["ops.op_default"] == pool_of["by_hand.named"]
    assert pool_of["ops.op_elsewhere"] == pool_of["by_hand.placed"]


def test_the_identity_is_not_merely_the_name(capsys, folder):
    dags, _home, _elsewhere = folder
    found = _findings(capsys, dags)
    # Same name, two places: two tables, whoever declared them.
    for pair in ({"ops.op_default", "ops.op_elsewhere"}, {"by_hand.named", "ops.op_elsewhere"},
                 {"by_hand.named", "by_hand.placed"}, {"ops.op_default", "by_hand.placed"}):
        assert frozenset(pair) not in found, (pair, sorted(found))
