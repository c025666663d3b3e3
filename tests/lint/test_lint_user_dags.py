"""``occflow lint`` and ``occflow pools plan`` follow Airflow's own dependency graph on DAGs
written the way users write them (tests/lint/dags/: mapped tasks, TaskFlow, task groups, a setup
and a teardown), say when ``max_active_runs`` is why a DAG meets itself, list ``info`` findings
only when asked, and give every finding a line (issue 26).

``occflow.cli.main`` runs in this process (tests/conftest.py points Airflow at the test home).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from occflow.cli import main

pytestmark = pytest.mark.airflow

DAGS = Path(__file__).parent / "dags"
EXAMPLES = Path(__file__).resolve().parents[2] / "dags_example"


def folder_of(tmp_path: Path, *names: str, **replaced: tuple[str, str]) -> Path:
    """A DAG folder holding the named fixture files, each with one text replaced if asked."""
    folder = tmp_path / "dags"
    folder.mkdir(parents=True)
    for name in names:
        text = (DAGS / f"{name}.py").read_text()
        if name in replaced:
            old, new = replaced[name]
            assert old in text, (name, old)
            text = text.replace(old, new)
        (folder / f"{name}.py").write_text(text)
    return folder


def lint_json(capsys, folder: Path, *args: str) -> tuple[int, dict]:
    code = main(["lint", str(folder), "--format", "json", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, json.loads(out)


def by_tasks(doc: dict) -> dict[frozenset[str], dict]:
    return {frozenset(f["tasks"]): f for f in doc["findings"]}


def test_a_task_downstream_of_a_mapped_task_is_not_run_beside_it(capsys, tmp_path):
    folder = folder_of(tmp_path, "mapped_then_alter")
    code, doc = lint_json(capsys, folder)
    assert code == 0 and doc["findings"] == [], doc["findings"]
    assert doc["summary"]["declared_writes"] == 4  # load[0..2] and alter
    assert main(["pools", "plan", str(folder), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []  # alter does not "run alone": nothing collides


def test_without_the_dependency_the_mapped_load_and_the_alter_collide(capsys, tmp_path):
    folder = folder_of(tmp_path, "mapped_then_alter", mapped_then_alter=("    load >> alter\n", ""))
    code, doc = lint_json(capsys, folder)
    assert code == 1
    [finding] = doc["findings"]
    assert finding["tasks"] == ["lint_mapped_then_alter.alter", "lint_mapped_then_alter.load"]
    assert finding["together"] == ["same DAG, no dependency path between them"]


def test_taskflow_writes_in_task_groups_between_a_setup_and_a_teardown_follow_the_graph(capsys, tmp_path):
    code, doc = lint_json(capsys, folder_of(tmp_path, "taskflow_groups"))
    assert code == 0 and doc["findings"] == [], doc["findings"]
    assert doc["summary"]["declared_writes"] == 3


def test_task_groups_side_by_side_collide_and_point_at_the_taskflow_function(capsys, tmp_path):
    folder = folder_of(tmp_path, "taskflow_groups", taskflow_groups=(
        "scratch >> ingest >> tidy >> dropped", "scratch >> [ingest, tidy] >> dropped"))
    code, doc = lint_json(capsys, folder)
    assert code == 1
    found = by_tasks(doc)
    pair = found[frozenset({"lint_taskflow_groups.ingest.upsert_eu", "lint_taskflow_groups.tidy.purge_old"})]
    assert pair["together"] == ["same DAG, no dependency path between them"]
    source = (folder / "taskflow_groups.py").read_text().splitlines()
    path, line = pair["location"].rsplit(":", 1)
    assert Path(path).name == "taskflow_groups.py"
    assert source[int(line) - 1].lstrip().startswith("@task.occflow_write")


def test_a_dag_meeting_itself_says_max_active_runs_is_the_reason(capsys, tmp_path):
    code, doc = lint_json(capsys, folder_of(tmp_path, "runs_overlap"))
    assert code == 1
    found = by_tasks(doc)
    dependent = found[frozenset({"lint_runs_overlap.append", "lint_runs_overlap.rewrite"})]
    [why] = dependent["together"]
    assert "append is upstream of rewrite within a run, not across runs" in why
    assert "max_active_runs=3 lets runs overlap (max_active_runs=1 would keep them apart)" in why
    [itself] = found[frozenset({"lint_runs_overlap.rewrite"})]["together"]
    assert itself.startswith("two runs of the DAG at once, each running the task, because max_active_runs=3")
    assert "because max_active_runs=3" in found[frozenset({"lint_runs_overlap.rewrite"})]["reason"]


def test_with_one_run_at_a_time_dependent_writes_never_meet(capsys, tmp_path):
    folder = folder_of(tmp_path, "runs_overlap", runs_overlap=("max_active_runs=3", "max_active_runs=1"))
    code, doc = lint_json(capsys, folder)
    assert not any("lint_runs_overlap" in f["dag_id"] for f in doc["findings"])


def test_instances_of_a_task_mapped_over_an_upstream_result_run_side_by_side(capsys, tmp_path):
    code, doc = lint_json(capsys, folder_of(tmp_path, "runs_overlap"))
    mapped = by_tasks(doc)[frozenset({"lint_mapped_from_upstream.merge_region"})]
    assert mapped["together"] == ["instances of the mapped task run side by side in one run "
                                  "(max_active_tis_per_dagrun is not 1)"]
    one_at_a_time = folder_of(tmp_path / "limited", "runs_overlap", runs_overlap=(
        'task_id="merge_region",', 'task_id="merge_region", max_active_tis_per_dagrun=1,'))
    code, doc = lint_json(capsys, one_at_a_time)
    assert frozenset({"lint_mapped_from_upstream.merge_region"}) not in by_tasks(doc)


def test_pools_plan_keeps_a_self_colliding_mapped_task_to_one_instance_at_a_time(capsys, tmp_path):
    assert main(["pools", "plan", str(folder_of(tmp_path, "runs_overlap"))]) == 0
    out = capsys.readouterr().out
    assert "pool occflow_lake.sales: 1 slot(s)" in out
    assert "lint_mapped_from_upstream.merge_region: pool='occflow_lake.sales', pool_slots=1  (one at a time)" in out


def test_info_findings_are_listed_only_when_asked(capsys):
    assert main(["lint", str(EXAMPLES)]) == 1
    default = capsys.readouterr().out
    assert " (info): " not in default and " (warning): " in default
    summary = default.strip().splitlines()[-1]
    assert re.search(r"\d+ serialized\)", summary)  # still counted
    assert main(["lint", str(EXAMPLES), "--min-severity", "info"]) == 1
    assert " serialized (info): " in capsys.readouterr().out
    code, doc = lint_json(capsys, EXAMPLES, "--min-severity", "warning")
    assert code == 1 and {f["severity"] for f in doc["findings"]} == {"warning"}
    code, doc = lint_json(capsys, EXAMPLES)  # JSON lists everything unless told
    assert "info" in {f["severity"] for f in doc["findings"]}


def test_every_finding_has_a_line_even_for_task_ids_built_in_a_loop(capsys, tmp_path):
    folder = folder_of(tmp_path, "mapped_then_alter", "runs_overlap", "taskflow_groups", taskflow_groups=(
        "scratch >> ingest >> tidy >> dropped", "scratch >> [ingest, tidy] >> dropped"))
    (folder / "loop.py").write_text('''
import pendulum
from airflow.sdk import DAG

from occflow.operators.delta import DeltaWriteOperator

with DAG(dag_id="lint_loop", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
         max_active_runs=1):
    for region in ("eu", "us"):
        DeltaWriteOperator(task_id=f"purge_{region}", table="lake.loop", operation="delete", where={"k": 1},
                           path="/nonexistent/loop", admission=False)
''')
    shutil.copytree(EXAMPLES, folder / "examples")
    code, doc = lint_json(capsys, folder)
    assert doc["findings"]
    for f in doc["findings"]:
        assert re.fullmatch(r".+\.py:\d+", f["location"]), f
    [loop] = [f for f in doc["findings"] if f["dag_id"] == "lint_loop"]
    assert loop["location"].endswith("loop.py:7")  # the DAG's line: the task ids are f-strings
    main(["lint", str(folder), "--min-severity", "info"])
    heads = [line for line in capsys.readouterr().out.splitlines() if re.search(r"\((error|warning|info)\): ", line)]
    assert heads and all(re.match(r"\S+\.py:\d+: ", line) for line in heads), heads


def test_sql_only_merges_with_a_partition_hint_are_their_regions_at_parse_time(capsys, tmp_path):
    """Issue 26: four region MERGEs given only as SQL ran side by side without conflict but were
    the whole table at parse time (10 false findings). With ``partition_columns`` the derivation
    runs at parse time: no finding; two MERGEs of one region are found."""
    folder = folder_of(tmp_path, "region_merges")
    code, doc = lint_json(capsys, folder)
    assert code == 0 and doc["findings"] == [], doc["findings"]
    assert doc["summary"]["declared_writes"] == 4

    same = folder_of(tmp_path / "same", "region_merges",
                     region_merges=('("eu", "us", "ap", "la")', '("eu", "us", "eu", "la")'))
    code, doc = lint_json(capsys, same)
    found = [f for f in doc["findings"] if f["severity"] != "info"]
    assert code == 1 and len(found) == 1, doc["findings"]
    assert all(t.endswith("_eu") for t in found[0]["tasks"]), found

    blind = folder_of(tmp_path / "blind", "region_merges",
                      region_merges=('{"partition_columns": ["region"]}', "{}"))
    code, doc = lint_json(capsys, blind)
    assert code == 1 and len([f for f in doc["findings"] if f["severity"] != "info"]) == 6  # whole table
