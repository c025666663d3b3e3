"""``occflow lint`` as a CI gate: protected pairs are information, suppressions and a baseline
keep known findings from failing, and the exit code counts only new unprotected findings.

The DAG files are written to a temporary folder and read by Airflow's own DagBag, as the linter
reads them; ``occflow.cli.main`` runs in this process (tests/conftest.py points Airflow at the
test home before anything imports it), so each call takes a DagBag parse, not an Airflow start.
"""

from __future__ import annotations

import itertools
import json
import random
import textwrap
from pathlib import Path

import pytest

from occflow.cli import main

pytestmark = pytest.mark.airflow

HEADER = '''
import pendulum
from airflow.sdk import DAG

from occflow.operators.delta import DeltaWriteOperator

START = pendulum.datetime(2024, 1, 1, tz="UTC")
'''


def dag_file(name: str, body: str) -> str:
    return HEADER + f'''
with DAG("{name}", schedule=None, start_date=START, catchup=False, max_active_runs=1):
''' + textwrap.indent(textwrap.dedent(body), "    ")


# A DELETE and an UPDATE of one partition, no dependency between them: on delta-rs the later
# one fails (concurrent_append) unless something keeps them apart.
DELETE = ('DeltaWriteOperator(task_id="purge_eu", table="lake.orders", operation="delete", where={{"k": 1}},\n'
          '                   partitions={{"region": "eu"}}, path="/nonexistent/orders"{extra})\n')
UPDATE = ('DeltaWriteOperator(task_id="fix_eu", table="lake.orders", operation="update", set_values={{"v": 1}},\n'
          '                   partitions={{"region": "eu"}}, path="/nonexistent/orders"{extra})\n')
OPTIMIZE = ('DeltaWriteOperator(task_id="{task}", table="lake.orders", operation="optimize",\n'
            '                   partitions={{"region": "eu"}}, path="/nonexistent/orders"{extra})\n')
UNSAFE = ", admission=False, allow_unsafe_concurrency=True"


def write_dags(folder: Path, **files: str) -> Path:
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / f"{name}.py").write_text(text)
    return folder


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["lint", *args])
    out, err = capsys.readouterr()
    return code, out, err


def report(capsys: pytest.CaptureFixture[str], folder: Path, *args: str) -> tuple[int, dict]:
    code, out, err = run(capsys, str(folder), "--format", "json", *args)
    assert "Traceback" not in err, err
    return code, json.loads(out)


def pairs(doc: dict) -> dict[frozenset[str], str]:
    return {frozenset(f["tasks"]): f["kind"] for f in doc["findings"]}


def test_two_admitted_conflicting_writers_are_information_and_exit_0(capsys, tmp_path):
    folder = write_dags(tmp_path / "dags", orders=dag_file("orders", DELETE.format(extra="") + UPDATE.format(extra="")))
    code, doc = report(capsys, folder)
    assert code == 0
    [finding] = doc["findings"]
    assert (finding["kind"], finding["severity"], finding["protected"]) == ("serialized", "info", True)
    assert finding["tasks"] == ["orders.fix_eu", "orders.purge_eu"] and finding["would_be"] == "conflict"
    assert "Admission serializes them" in finding["reason"]
    assert doc["summary"]["by_kind"] == {"corrupts_data": 0, "conflict": 0, "serialized": 1}
    assert doc["summary"]["new"] == 0 and doc["summary"]["exit_code"] == 0


def test_one_writer_without_admission_leaves_the_pair_a_conflict_and_exits_1(capsys, tmp_path):
    body = DELETE.format(extra=", admission=False") + UPDATE.format(extra="")
    folder = write_dags(tmp_path / "dags", orders=dag_file("orders", body))
    code, doc = report(capsys, folder)
    assert code == 1
    [finding] = doc["findings"]
    assert (finding["kind"], finding["severity"], finding["protected"]) == ("conflict", "warning", False)
    assert "orders.purge_eu runs without admission" in finding["reason"]
    cells = {(c["earlier"], c["later"], c["exception"]) for c in finding["cells"]}
    assert ("delete", "update", "concurrent_append") in cells
    # --exit-zero waives a conflict ...
    assert run(capsys, str(folder), "--exit-zero")[0] == 0


@pytest.mark.parametrize("other", [UNSAFE, ""], ids=["neither_admitted", "only_one_admitted"])
def test_delta_rs_compactions_without_admission_corrupt_data_and_exit_1_even_with_exit_zero(capsys, tmp_path, other):
    body = OPTIMIZE.format(task="compact_a", extra=UNSAFE) + OPTIMIZE.format(task="compact_b", extra=other)
    folder = write_dags(tmp_path / "dags", orders=dag_file("orders", body))
    code, doc = report(capsys, folder, "--exit-zero")
    assert code == 1  # ... but never a pair that corrupts data
    [finding] = doc["findings"]
    assert (finding["kind"], finding["severity"]) == ("corrupts_data", "error")
    [cell] = finding["cells"]
    assert (cell["profile"], cell["earlier"], cell["later"], cell["effect"]) == (
        "delta-rs", "optimize", "optimize", "duplicates_rows")
    code, text, _ = run(capsys, str(folder))
    assert code == 1
    assert text.splitlines()[0].endswith("corrupts_data (error): orders: compact_a x compact_b on lake.orders "
                                         "[partition region=eu]")
    assert text.splitlines()[-1].startswith("1 finding(s) (1 corrupts_data, 0 conflict, 0 serialized); 1 new")


def test_a_pragma_with_a_reason_suppresses_and_is_listed(capsys, tmp_path):
    pragma = "# occflow: ignore[conflict] -- purges only run while loads are paused"
    body = f"{pragma}\n" + DELETE.format(extra=", admission=False") + UPDATE.format(extra="")
    folder = write_dags(tmp_path / "dags", orders=dag_file("orders", body))
    code, doc = report(capsys, folder)
    assert code == 0
    [finding] = doc["findings"]
    assert finding["kind"] == "conflict" and finding["suppressed"] is True and finding["new"] is False
    assert finding["suppression"]["by"] == "pragma"
    assert finding["suppression"]["reason"] == "purges only run while loads are paused"
    line = (folder / "orders.py").read_text().splitlines().index("    " + pragma) + 1
    assert finding["suppression"]["where"] == f"{folder / 'orders.py'}:{line}"
    # A pragma for another kind does not silence a conflict.
    (folder / "orders.py").write_text((folder / "orders.py").read_text().replace("[conflict]", "[corrupts_data]"))
    code, doc = report(capsys, folder)
    assert code == 1 and doc["findings"][0]["suppressed"] is False
    assert any("pragma silenced nothing" in u for u in doc["summary"]["unused_suppressions"])


@pytest.mark.parametrize("comment, problem", [
    ("# occflow: ignore[conflict]", "gives no reason"),
    ("# occflow: ignore -- because", "names no kind"),
    ("# occflow: ignore[conflicts] -- because", "not one of ['corrupts_data', 'conflict']"),
])
def test_a_malformed_pragma_exits_2_naming_the_line(capsys, tmp_path, comment, problem):
    body = f"{comment}\n" + DELETE.format(extra=", admission=False") + UPDATE.format(extra="")
    folder = write_dags(tmp_path / "dags", orders=dag_file("orders", body))
    code, out, err = run(capsys, str(folder))
    assert code == 2 and out == ""
    # Other suites may leave log handlers writing to stderr: the error line is the one occflow wrote.
    [message] = [m for m in err.strip().splitlines() if m.startswith("occflow: error:")]
    line = (folder / "orders.py").read_text().splitlines().index("    " + comment) + 1
    assert message.startswith(f"occflow: error: {folder / 'orders.py'}:{line}: pragma") and problem in message


def test_a_config_entry_suppresses_a_task_and_a_bad_one_exits_2(capsys, tmp_path):
    body = DELETE.format(extra=", admission=False") + UPDATE.format(extra="")
    folder = write_dags(tmp_path / "dags", orders=dag_file("orders", body))
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent('''
        [tool.occflow.lint]
        [[tool.occflow.lint.ignore]]
        task = "orders.fix_eu"
        kinds = ["conflict"]
        reason = "the fix runs by hand, never beside the purge"
    '''))
    code, doc = report(capsys, folder)
    assert code == 0
    [finding] = doc["findings"]
    assert finding["suppression"]["by"] == "config"
    assert finding["suppression"]["where"] == str(tmp_path / "pyproject.toml")
    (tmp_path / ".occflow-lint.toml").write_text('[[ignore]]\ntask = "orders.fix_eu"\nkinds = ["conflict"]\n')
    code, out, err = run(capsys, str(folder))
    assert code == 2 and out == ""
    assert ".occflow-lint.toml" in err and "ignore.0.reason: Field required" in err


def test_a_baseline_accepts_todays_findings_and_fails_only_on_a_new_one(capsys, tmp_path):
    body = DELETE.format(extra=", admission=False") + UPDATE.format(extra="")
    folder = write_dags(tmp_path / "dags", orders=dag_file("orders", body))
    baseline = tmp_path / "baseline.json"
    code, out, _ = run(capsys, str(folder), "--write-baseline", str(baseline))
    assert code == 0 and out.startswith(f"wrote 1 finding(s) to {baseline}")
    written = json.loads(baseline.read_text())
    assert [e["tasks"] for e in written["findings"]] == [["orders.fix_eu", "orders.purge_eu"]]
    code, doc = report(capsys, folder, "--baseline", str(baseline))
    assert code == 0 and doc["findings"][0]["in_baseline"] is True
    # Moving the tasks down the file keeps the fingerprint: it does not name lines.
    (folder / "orders.py").write_text((folder / "orders.py").read_text().replace("with DAG(", "\n\n\nwith DAG("))
    assert report(capsys, folder, "--baseline", str(baseline))[0] == 0
    # A new conflicting task: exit 1, and only its pairs (with the purge and the fix) are new.
    extra = "    " + OPTIMIZE.format(task="compact_eu", extra=UNSAFE).replace("\n    ", "\n        ")
    (folder / "orders.py").write_text((folder / "orders.py").read_text() + extra)
    code, doc = report(capsys, folder, "--baseline", str(baseline))
    assert code == 1
    new = [f["tasks"] for f in doc["findings"] if f["new"]]
    assert sorted(new) == [["orders.compact_eu", "orders.fix_eu"], ["orders.compact_eu", "orders.purge_eu"]]
    assert doc["summary"]["in_baseline"] == 1 and doc["summary"]["stale_baseline"] == []


def test_a_missing_baseline_exits_2(capsys, tmp_path):
    folder = write_dags(tmp_path / "dags", orders=dag_file("orders", DELETE.format(extra="")))
    code, out, err = run(capsys, str(folder), "--baseline", str(tmp_path / "nope.json"))
    assert code == 2 and out == "" and "does not exist (write one with --write-baseline)" in err


def test_json_findings_carry_the_documented_fields(capsys, tmp_path):
    body = DELETE.format(extra=", admission=False") + UPDATE.format(extra="")
    folder = write_dags(tmp_path / "dags", orders=dag_file("orders", body))
    _, doc = report(capsys, folder)
    [finding] = doc["findings"]
    for key, kind in {"kind": str, "severity": str, "dag_id": str, "tasks": list, "table": str, "cells": list,
                      "reason": str, "protected": bool, "suppressed": bool, "in_baseline": bool,
                      "fingerprint": str}.items():
        assert isinstance(finding[key], kind), key
    assert finding["dag_id"] == "orders" and finding["table"] == "lake.orders"
    assert len(finding["fingerprint"]) == 16
    assert set(doc["summary"]) >= {"by_kind", "new", "suppressed", "in_baseline", "exit_code", "import_errors"}


# ------------------------------------------------------------ random footprints, brute force

DS = ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"]
REGIONS = ["eu", "us"]
TEMPLATE = "{{ ds }}"


def random_spec(rng: random.Random) -> dict[str, str]:
    spec: dict[str, str] = {}
    if rng.random() < 0.8:
        spec["ds"] = rng.choice([*DS, TEMPLATE])
    if rng.random() < 0.7:
        spec["region"] = rng.choice(REGIONS)
    return spec


def cells_of(footprint: list[dict[str, str]] | None) -> set[tuple[str, str]]:
    """The concrete (ds, region) partitions a footprint may touch: a template may render to any day."""
    if footprint is None:
        return set(itertools.product(DS, REGIONS))
    return {(d, r) for spec in footprint for d, r in itertools.product(DS, REGIONS)
            if spec.get("ds", TEMPLATE) in (d, TEMPLATE) and spec.get("region", r) == r}


def random_dag(rng: random.Random, n: int) -> tuple[str, dict[str, list[list[dict[str, str]] | None]], dict[str, bool]]:
    """A DAG of delta-rs DELETEs on one table with random footprints (some mapped, some a list of
    partitions, some the whole table), no dependencies, random admission. Returns the DAG body,
    each task's instances' footprints and its admission."""
    lines, instances, admitted = [], {}, {}
    for i in range(n):
        task, admission = f"t{i}", rng.random() < 0.6
        admitted[task] = admission
        shape = rng.choices(["mapped", "list", "one", "whole"], weights=[3, 3, 3, 1])[0]
        common = (f'task_id="{task}", table="lake.t", operation="delete", where={{"k": 1}}, '
                  f'path="/nonexistent/t", admission={admission}')
        if shape == "mapped":
            specs = [random_spec(rng) or {"region": "eu"} for _ in range(rng.randint(2, 3))]
            lines.append(f"DeltaWriteOperator.partial({common}).expand(partitions={specs!r})")
            instances[task] = [[s] for s in specs]
        elif shape == "whole":
            lines.append(f"DeltaWriteOperator({common})")
            instances[task] = [None]
        else:
            specs = [random_spec(rng) or {"region": "us"} for _ in range(1 if shape == "one" else 2)]
            lines.append(f"DeltaWriteOperator({common}, partitions={specs!r})")
            instances[task] = [specs]
    return "\n".join(lines) + "\n", instances, admitted


def expected_findings(instances, admitted) -> dict[frozenset[str], str]:
    """Brute force: two instances collide when their concrete partitions intersect (every
    delta-rs DELETE pair conflicts); a pair is serialized only when both tasks take leases."""
    out: dict[frozenset[str], str] = {}
    flat = [(task, cells_of(fp)) for task, fps in instances.items() for fp in fps]
    for (a, ca), (b, cb) in itertools.combinations(flat, 2):
        if ca & cb:
            out[frozenset({f"random.{a}", f"random.{b}"})] = (
                "serialized" if admitted[a] and admitted[b] else "conflict")
    return out


@pytest.mark.parametrize("seed", range(8))
def test_findings_match_a_brute_force_over_concrete_partitions(capsys, tmp_path, seed):
    rng = random.Random(seed)
    body, instances, admitted = random_dag(rng, rng.randint(4, 7))
    folder = write_dags(tmp_path / "dags", random=dag_file("random", body))
    code, doc = report(capsys, folder)
    expected = expected_findings(instances, admitted)
    assert pairs(doc) == expected, body
    assert len(doc["findings"]) == len(expected)  # one finding per unordered pair of tasks
    assert code == (1 if "conflict" in expected.values() else 0)


def test_admitted_writers_on_different_lease_stores_are_not_protected(capsys, tmp_path):
    body = (DELETE.format(extra=', lease_store_url="sqlite:////tmp/a.db"')
            + UPDATE.format(extra=', lease_store_url="sqlite:////tmp/b.db"'))
    folder = write_dags(tmp_path / "dags", orders=dag_file("orders", body))
    code, doc = report(capsys, folder)
    assert code == 1
    [finding] = doc["findings"]
    assert finding["kind"] == "conflict" and "different stores" in finding["reason"]


def test_text_lists_suppressed_findings_only_with_show_all(capsys, tmp_path):
    pragma = "# occflow: ignore[conflict] -- purges only run while loads are paused"
    body = f"{pragma}\n" + DELETE.format(extra=", admission=False") + UPDATE.format(extra="")
    folder = write_dags(tmp_path / "dags", orders=dag_file("orders", body))
    code, text, _ = run(capsys, str(folder))
    assert code == 0
    assert text.splitlines() == ["1 finding(s) (0 corrupts_data, 1 conflict, 0 serialized); 0 new, 1 suppressed, "
                                 "0 in baseline; 2 declared write(s) in 1 DAG(s)"]
    code, text, _ = run(capsys, str(folder), "--show-all")
    assert "[suppressed: purges only run while loads are paused]" in text.splitlines()[0]
