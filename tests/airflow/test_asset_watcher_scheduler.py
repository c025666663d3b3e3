"""``OutsideCommitTrigger`` in an ``AssetWatcher`` on a real scheduler (scripts/run_examples.py's
``Airflow``: scheduler, dag-processor, api-server, triggerer; LocalExecutor), one start, which
also serves the asset view's screenshot (docs/assets.md): the example DAGs (dags_example/, not
run) are added to its DAG folder once the watcher's scene is over, and headless Chromium opens
Airflow's own asset pages.

The table's asset is watched for outside commits and is the outlet of an occflow write. A
producer (``@once``) makes an occflow commit; then the test writes with delta-rs's own writer,
outside Airflow. The consumer, scheduled on the asset, must run for the outside commit with an
event naming its version, and the occflow commit must be one event (the operator's), not a second
one from the watcher. Oracles: the table's ``_delta_log`` (which version carries occflow's tag),
Airflow's metadata DB (asset events, consumer runs, what they were triggered by, and the
watcher's watermark in the asset state store).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
from scheduler_harness import query, run_examples, wait_for

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

PRODUCER, CONSUMER = "occflow_watch_producer", "occflow_watch_consumer"
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "dags_example"
IMG = REPO / "docs" / "img"

DAG_SOURCE = '''
import pendulum
import pyarrow as pa
from airflow.sdk import DAG, Asset, AssetWatcher, task

from occflow.operators.delta import DeltaWriteOperator
from occflow.triggers.table import OutsideCommitTrigger

PATH, URI = {path!r}, {uri!r}
# The watcher starts at version 1, the producer's: it must skip that occflow commit.
TABLE = Asset(uri=URI, name=URI, watchers=[
    AssetWatcher(name="outside_commits", trigger=OutsideCommitTrigger("delta", PATH, start_version=1, poll_interval=1))])


def rows(context, snapshot):
    return pa.table({{"id": pa.array([1], pa.int64()), "ds": ["occflow"]}})


with DAG({producer!r}, schedule="@once", start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), catchup=False):
    # The watched asset itself as the outlet: Airflow keeps one definition of an asset (the last
    # DAG's it reads), and the operator's own outlet for the table has no watcher.
    DeltaWriteOperator(task_id="write", table="lake.watched", path=PATH, operation="insert_into", data=rows,
                       outlets=[TABLE])


with DAG({consumer!r}, schedule=[TABLE], start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), catchup=False):

    @task
    def read_events(**context):
        return [{{"source_dag_id": e.source_dag_id, "extra": e.extra}}
                for evs in context["triggering_asset_events"].values() for e in evs]

    read_events()
'''


def _tagged_versions(path: Path) -> set[int]:
    """The versions whose ``commitInfo`` carries occflow's tag (delta-rs's log, read here)."""
    from occflow.engines.tags import WRITE_ID

    return {int(f.stem) for f in (path / "_delta_log").glob("*.json")
            for line in f.read_text().splitlines() if WRITE_ID in (json.loads(line).get("commitInfo") or {})}


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    examples = run_examples()
    home = tmp_path_factory.mktemp("watch-airflow")
    (home / "dags").mkdir()
    path = Path(os.path.realpath(home / "watched"))
    write_deltalake(str(path), pa.table({"id": pa.array([0], pa.int64()), "ds": ["created"]}))  # version 0
    (home / "dags" / "watched.py").write_text(textwrap.dedent(DAG_SOURCE.format(
        path=str(path), uri=path.as_uri(), producer=PRODUCER, consumer=CONSUMER)))
    env = examples.airflow_env(home, parallelism=4)
    env.update({"AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
                "OCCFLOW_LEASE_STORE_URL": f"sqlite:///{home / 'leases.db'}",
                # Airflow adds a watcher's trigger when it parses the DAG again (default: 30 s later).
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
                # The screenshot's browser is every user's admin: no login form in the picture.
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True"})
    airflow = examples.Airflow(home, env)
    airflow.env = {**{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "OCCFLOW"))}, **env}
    db = home / "airflow.db"

    def events():
        return [(source, json.loads(extra or "{}")) for source, extra in query(
            db, "SELECT e.source_dag_id, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
                "WHERE a.uri = ? ORDER BY e.id", path.as_uri())]

    def consumer_runs():
        return query(db, "SELECT run_id, state FROM dag_run WHERE dag_id = ?", CONSUMER)

    try:
        airflow.start()
        wait_for("the producer's occflow commit", lambda: query(
            db, "SELECT 1 FROM dag_run WHERE dag_id = ? AND state = 'success'", PRODUCER), 240, airflow)
        # The watcher has looked past the occflow commit (version 1) once its watermark says so.
        wait_for("the watcher's watermark at version 1", lambda: any(
            json.loads(v).get("version") == 1 for (v,) in query(db, "SELECT value FROM asset_state_store")),
            120, airflow, every=0.5)
        write_deltalake(str(path), pa.table({"id": pa.array([2], pa.int64()), "ds": ["outside"]}), mode="append")
        outside_version = DeltaTable(str(path)).version()
        wait_for("the watcher's event for the outside commit", lambda: any(
            e.get("from_trigger") for _, e in events()), 60, airflow, every=0.5)
        wait_for("the consumer runs ending", lambda: (runs := consumer_runs()) and len(
            [r for r in runs if r[1] in ("success", "failed")]) == len(runs) and sum(
            len(json.loads(v)) for (v,) in query(db, "SELECT value FROM xcom WHERE dag_id = ?", CONSUMER)) >= 2,
            120, airflow, every=0.5)
        yield {
            "home": home,
            "db": db,
            "airflow": airflow,
            "base": f"http://127.0.0.1:{env['AIRFLOW__API__PORT']}",
            "path": path,
            "outside_version": outside_version,
            "events": events(),
            "runs": consumer_runs(),
            "reads": [json.loads(v) for (v,) in query(db, "SELECT value FROM xcom WHERE dag_id = ?", CONSUMER)],
            "watermarks": [json.loads(v) for (v,) in query(db, "SELECT value FROM asset_state_store")],
        }
    except BaseException:
        print(f"Airflow logs kept in {home}", file=sys.stderr)
        raise
    finally:
        airflow.stop()


def test_an_outside_commit_fires_the_watcher_and_the_consumer_reads_its_version(watched):
    outside = watched["outside_version"]
    assert outside == 2 and outside not in _tagged_versions(watched["path"])
    from_watcher = [e for _, e in watched["events"] if e.get("from_trigger")]
    assert [e["payload"]["version"] for e in from_watcher] == [outside]
    assert from_watcher[0]["payload"]["location"] == str(watched["path"])
    assert all(state == "success" for _, state in watched["runs"]), watched["runs"]
    read = [e for run in watched["reads"] for e in run]
    assert [e["extra"]["payload"]["version"] for e in read if e["extra"].get("from_trigger")] == [outside]


def test_the_occflow_commit_is_one_event_from_its_operator_not_a_second_from_the_watcher(watched):
    tagged = _tagged_versions(watched["path"])
    assert tagged == {1}  # the producer's commit, as delta-rs logged it
    by_producer = [e for source, e in watched["events"] if source == PRODUCER]
    assert [e["version"] for e in by_producer] == [1]
    assert not [e for _, e in watched["events"] if e.get("from_trigger") and e["payload"]["version"] in tagged]
    read = [e for run in watched["reads"] for e in run]
    assert sorted(e["source_dag_id"] or "watcher" for e in read) == sorted([PRODUCER, "watcher"])


def test_the_watermark_is_in_airflows_asset_state_store(watched):
    assert {"location": str(watched["path"]), "version": watched["outside_version"]} in watched["watermarks"]


def test_the_asset_views_show_the_example_tables_and_the_watched_tables_graph_and_watermark(watched):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    from test_ui_plugin_browser import _shot, headless_chromium

    db, airflow, base = watched["db"], watched["airflow"], watched["base"]
    # Added now, once the watcher's scene is over: parsed only (schedule=None), their tables are assets.
    for example in EXAMPLES.glob("*.py"):
        (watched["home"] / "dags" / example.name).write_text(example.read_text())
    files = len(list(EXAMPLES.glob("*.py")))
    examples = "SELECT dag_id FROM dag WHERE fileloc NOT LIKE '%watched.py'"
    wait_for("the example DAGs parsed", lambda: len({f for (f,) in query(
        db, "SELECT DISTINCT fileloc FROM dag WHERE fileloc NOT LIKE '%watched.py'")}) >= files, 180, airflow)
    # The oracle: the tables the example DAGs' tasks write, as Airflow's metadata records them.
    tables = {uri for (uri,) in query(db, "SELECT DISTINCT a.uri FROM asset a JOIN task_outlet_asset_reference r "
                                          f"ON r.asset_id = a.id WHERE r.dag_id IN ({examples})")}
    assert len(tables) >= files, tables

    def page_says(*texts):
        return lambda d: all(t in d.find_element(By.TAG_NAME, "body").text for t in texts)

    driver = headless_chromium()
    try:
        driver.get(f"{base}/assets")
        WebDriverWait(driver, 90).until(page_says(*tables))  # each listed under its name, its URI
        _shot(driver, "assets-example-tables.png")
        (asset_id,) = query(db, "SELECT id FROM asset WHERE uri = ?", watched["path"].as_uri())[0]
        driver.get(f"{base}/assets/{asset_id}")
        WebDriverWait(driver, 90).until(page_says(PRODUCER, CONSUMER))  # the graph: who writes, who runs on it
        _shot(driver, "assets-watched-table-graph.png")
        driver.get(f"{base}/assets/{asset_id}/asset-state-store")
        WebDriverWait(driver, 90).until(page_says("occflow.outside_commits.watermark"))
        _shot(driver, "assets-watcher-watermark.png")
    finally:
        driver.quit()
