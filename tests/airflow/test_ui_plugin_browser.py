"""The "Table writes" view in a real headless Chromium, over a real Airflow run.

A throwaway Airflow (scheduler, dag-processor, api-server, triggerer as processes, LocalExecutor,
started by scripts/run_examples.py's ``Airflow``) loads the plugin from its plugins folder and
runs one DAG on delta-rs tables:

- two mapped MERGE upserts (admission off) whose first attempt loses to an OPTIMIZE of the whole
  table that commits after their snapshot (``concurrent_delete_read``) and is retried;
- an INSERT OVERWRITE that holds its lease for ``HOLD`` seconds while a second overwrite of the
  same partition waits for it in the lease store's queue.

A second DAG in the same Airflow ends its writes three ways, each losing to a commit made by
another occflow task of the DAG (admission off for the races):

- a DELETE that fails fast: a task enabling deletion vectors changes the table's protocol
  between the DELETE's snapshot and its commit (``protocol_changed``);
- an OPTIMIZE that is skipped: a task deletes the partition it compacts (``concurrent_delete_read``);
- a MERGE that loses once to a task's append (``concurrent_append``), is retried and commits.

The browser logs in through the simple auth manager's own login form, opens the view while the
lease is held (live lease and queue) and after the runs (timeline with the conflicts, their
winner and the lease waits; the failed and skipped writes with their status and the totals),
opens it embedded in the Airflow UI and through a task instance's link, and saves screenshots
into docs/img/. The oracles are the DAGs' own reports read back through Airflow's REST API, the
tables' Delta logs read by version number, and the scene's timing, not the view's code.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
IMG = REPO / "docs" / "img"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
DAG_ID = "occflow_ui_scene"
HOLD = 45  # seconds the first overwrite holds its lease while the second waits
ENDS_ID = "occflow_ui_ends"

SCENE = '''
"""A scene for the Table writes view: upserts that lose to a compaction, and a lease held while
a second overwrite of the same partition waits for it."""
import pathlib
import time

import pendulum
import pyarrow as pa
from airflow.sdk import DAG, task
from deltalake import DeltaTable

from occflow.core.identifiers import canonical_location
from occflow.engines.deltars import DeltaRsTable
from occflow.hooks.spark import default_delta_location
from occflow.leases import cached_store
from occflow.operators.delta import DeltaWriteOperator

ORDERS, TARGETS = "ui.orders", "ui.targets"
REGIONS = ["eu", "us"]
HOLD = {hold}
MARKS = pathlib.Path({marks!r})


def upsert_rows(context, snapshot):
    region = context["ti"].task.partitions["region"]
    mark = MARKS / f"upsert-{{region}}"
    if not mark.exists():
        # First attempt: the snapshot is taken; wait until the compaction commits over it.
        mark.write_text("snapshot taken")
        path, deadline = default_delta_location(ORDERS), time.monotonic() + 300
        while DeltaTable(path).version() <= snapshot.version() and time.monotonic() < deadline:
            time.sleep(0.5)
    ids = list(range(30, 50))
    return pa.table({{"id": ids, "region": [region] * len(ids), "amount": [1000 + i for i in ids]}})


def held_rows(context, snapshot):
    time.sleep(HOLD)  # preparing the data while holding the lease
    return pa.table({{"id": [1, 2], "region": ["eu", "eu"], "amount": [10, 20]}})


def later_rows(context, snapshot):
    return pa.table({{"id": [1, 2, 3], "region": ["eu", "eu", "eu"], "amount": [11, 21, 31]}})


with DAG(
    "{dag_id}", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), catchup=False,
    max_active_tasks=8, default_args={{"retries": 1}},
):

    @task
    def create_tables() -> None:
        import shutil

        for name in (ORDERS, TARGETS):
            shutil.rmtree(default_delta_location(name), ignore_errors=True)
        orders = DeltaRsTable(default_delta_location(ORDERS))
        for chunk in range(6):  # small files: something for the compaction to do
            ids = list(range(chunk * 5, chunk * 5 + 5))
            data = pa.table({{"id": ids * 2, "region": ["eu"] * 5 + ["us"] * 5, "amount": ids * 2}})
            done = orders.create(data, partition_by=["region"]) if chunk == 0 else orders.append(data)
            assert done.committed, done.error
        targets = DeltaRsTable(default_delta_location(TARGETS))
        data = pa.table({{"id": [1], "region": ["eu"], "amount": [0]}})
        assert targets.create(data, partition_by=["region"]).committed

    @task
    def upserts_took_their_snapshot() -> None:
        deadline = time.monotonic() + 300
        while not all((MARKS / f"upsert-{{r}}").exists() for r in REGIONS):
            assert time.monotonic() < deadline, "the upserts never started"
            time.sleep(0.5)

    @task
    def first_overwrite_holds_its_lease() -> None:
        # The store files a delta-rs table under its location (symlinks resolved), not its name.
        key = canonical_location(str(pathlib.Path(default_delta_location(TARGETS)).resolve()))
        deadline = time.monotonic() + 300
        while not cached_store().leases(key):
            assert time.monotonic() < deadline, "the first overwrite never got its lease"
            time.sleep(0.5)

    upserts = DeltaWriteOperator.partial(
        task_id="upsert_region", table=ORDERS, operation="merge", data=upsert_rows, merge_keys=["id"],
        admission=False,
    ).expand(partitions=[{{"region": r}} for r in REGIONS])
    compact = DeltaWriteOperator(task_id="compact", table=ORDERS, operation="optimize")
    rewrite = DeltaWriteOperator(
        task_id="rewrite_eu", table=TARGETS, operation="insert_overwrite", partitions={{"region": "eu"}},
        data=held_rows,
    )
    again = DeltaWriteOperator(
        task_id="rewrite_eu_again", table=TARGETS, operation="insert_overwrite", partitions={{"region": "eu"}},
        data=later_rows,
    )
    created = create_tables()
    created >> upserts
    created >> upserts_took_their_snapshot() >> compact
    created >> rewrite
    created >> first_overwrite_holds_its_lease() >> again
'''


ENDS = '''
"""Three ends of a write, each losing to another occflow task's commit: failed fast, skipped,
retried then committed."""
import json
import pathlib
import time

import pendulum
import pyarrow as pa
from airflow.sdk import DAG, task
from deltalake import DeltaTable

from occflow.engines.deltars import DeltaRsTable, Where
from occflow.notifications import ConflictNotifier
from occflow.operators.delta import DeltaWriteOperator

MARKS = pathlib.Path({marks!r})
PATHS = {paths!r}


def keep_conflict(context):
    # The wrapped "notifier": the alert's structured dict, as a notifier's template would see it.
    (MARKS / ("conflict-" + context["ti"].task_id + ".json")).write_text(
        json.dumps(context["occflow_conflict"], default=str))


def after_another_commit(name, snapshot):
    """The first attempt says its snapshot is taken, then waits until another commit lands on it."""
    mark = MARKS / name
    if mark.exists():
        return
    mark.write_text("snapshot taken")
    deadline = time.monotonic() + 300
    while DeltaTable(PATHS[name]).version() <= snapshot.version() and time.monotonic() < deadline:
        time.sleep(0.5)


def delete_after_the_protocol_change(table, snapshot, partition, commit, context):
    after_another_commit("proto", snapshot)
    return table.delete(Where.equals(id=2), partition=partition, snapshot=snapshot, commit=commit)


def compact_after_the_purge(table, snapshot, partition, commit, context):
    after_another_commit("compact", snapshot)
    return table.optimize(partition=partition, snapshot=snapshot, commit=commit)


def merge_rows(context, snapshot):
    after_another_commit("merge", snapshot)
    return pa.table({{"id": [1, 9], "ds": ["a", "a"], "v": [7, 7]}})


def appended_rows(context, snapshot):
    return pa.table({{"id": [5], "ds": ["a"], "v": [1]}})


with DAG("{dag_id}", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), catchup=False,
         max_active_tasks=8):

    @task
    def create_tables() -> None:
        for name, path in PATHS.items():
            table = DeltaRsTable(path)
            data = pa.table({{"id": [1, 2, 3], "ds": ["a", "a", "b"], "v": [0, 0, 0]}})
            assert table.create(data, partition_by=["ds"]).committed
            for i in range(3 if name == "compact" else 0):  # small files for the compaction
                assert table.append(pa.table({{"id": [10 + i], "ds": ["a"], "v": [0]}})).committed

    @task
    def took_its_snapshot(name: str) -> None:
        deadline = time.monotonic() + 300
        while not (MARKS / name).exists():
            assert time.monotonic() < deadline, f"{{name}} never took its snapshot"
            time.sleep(0.5)

    created = create_tables()
    losers = [
        DeltaWriteOperator(task_id="delete_a", table="ui.ends_proto", path=PATHS["proto"], operation="delete",
                           partitions={{"ds": "a"}}, job=delete_after_the_protocol_change, admission=False,
                           on_failure_callback=ConflictNotifier(keep_conflict)),
        DeltaWriteOperator(task_id="compact_a", table="ui.ends_compact", path=PATHS["compact"],
                           operation="optimize", partitions={{"ds": "a"}}, job=compact_after_the_purge),
        DeltaWriteOperator(task_id="merge_a", table="ui.ends_merge", path=PATHS["merge"], operation="merge",
                           partitions={{"ds": "a"}}, data=merge_rows, merge_keys=["id"], admission=False),
    ]
    winners = [
        DeltaWriteOperator(task_id="enable_deletion_vectors", table="ui.ends_proto", path=PATHS["proto"],
                           operation="alter_metadata", properties={{"delta.enableDeletionVectors": "true"}},
                           admission=False),
        DeltaWriteOperator(task_id="purge_a", table="ui.ends_compact", path=PATHS["compact"], operation="delete",
                           partitions={{"ds": "a"}}, admission=False),
        DeltaWriteOperator(task_id="append_a", table="ui.ends_merge", path=PATHS["merge"], operation="insert_into",
                           data=appended_rows, admission=False),
    ]
    for name, loser, winner in zip(("proto", "compact", "merge"), losers, winners):
        created >> loser
        created >> took_its_snapshot.override(task_id=f"{{name}}_snapshot_taken")(name) >> winner
'''


def _load_run_examples():
    spec = importlib.util.spec_from_file_location("occflow_run_examples", REPO / "scripts" / "run_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Api:
    """Airflow's REST API and the plugin's endpoints, as a logged-in admin."""

    def __init__(self, base: str, username: str, password: str) -> None:
        import httpx

        self.base = base
        self.http = httpx.Client(base_url=base, timeout=120)
        response = self.http.post("/auth/token", json={"username": username, "password": password})
        response.raise_for_status()
        self.http.headers["Authorization"] = f"Bearer {response.json()['access_token']}"

    def get(self, path: str, **params):
        response = self.http.get(path, params=params)
        response.raise_for_status()
        return response.json()


def _wait(what: str, check, timeout: float, airflow, every: float = 2.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        airflow.check_alive()
        try:
            found = check()
        except Exception:  # noqa: BLE001 - the server is not up yet / the object not there yet
            found = None
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail(f"the browser test needs Debian's chromium and chromium-driver ({CHROMIUM}, {CHROMEDRIVER})")
    run_examples = _load_run_examples()
    home = tmp_path_factory.mktemp("ui-airflow")
    (home / "dags").mkdir()
    (home / "plugins").mkdir()
    (home / "marks").mkdir()
    (home / "dags" / "ui_scene.py").write_text(
        textwrap.dedent(SCENE.format(hold=HOLD, marks=str(home / "marks"), dag_id=DAG_ID))
    )
    paths = {name: str(home / "ends" / name) for name in ("proto", "compact", "merge")}
    (home / "dags" / "ui_ends.py").write_text(
        textwrap.dedent(ENDS.format(marks=str(home / "marks"), paths=paths, dag_id=ENDS_ID))
    )
    (home / "plugins" / "occflow_ui.py").write_text("from occflow.plugins import OccflowTableWritesPlugin  # noqa: F401\n")
    passwords = {"admin": "admin-pw", "viewer": "viewer-pw"}
    (home / "passwords.json").write_text(json.dumps(passwords))
    # Both DAGs at once: the tasks that wait for another one's commit hold their slots meanwhile.
    env = run_examples.airflow_env(home, parallelism=12)
    env.update(
        {
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "OCCFLOW_LEASE_HISTORY": "1",
        }
    )
    airflow = run_examples.Airflow(home, env)
    # This process's Airflow settings (tests/airflow/conftest.py) must not leak into the services.
    airflow.env = {**{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "OCCFLOW"))}, **env}
    base = f"http://127.0.0.1:{env['AIRFLOW__API__PORT']}"
    try:
        airflow.start()
        _wait("the api-server", lambda: Api(base, "admin", passwords["admin"]), 240, airflow)
        api = Api(base, "admin", passwords["admin"])
        _wait(f"the dag-processor to parse {DAG_ID}", lambda: api.get(f"/api/v2/dags/{DAG_ID}"), 240, airflow)
        _wait(f"the dag-processor to parse {ENDS_ID}", lambda: api.get(f"/api/v2/dags/{ENDS_ID}"), 240, airflow)
        run_id = f"ui__{time.strftime('%Y%m%dT%H%M%S')}"
        for dag_id in (DAG_ID, ENDS_ID):
            airflow.cli("dags", "unpause", dag_id)
            airflow.cli("dags", "trigger", dag_id, "--run-id", run_id)
        yield {"airflow": airflow, "api": api, "base": base, "run_id": run_id, "passwords": passwords, "home": home,
               "paths": paths}
    except BaseException:
        print(f"Airflow logs kept in {home}", file=sys.stderr)
        raise
    finally:
        airflow.stop()


def headless_chromium() -> webdriver.Chrome:  # noqa: F821 - selenium is imported on use
    """Debian's chromium, headless, driven by its chromedriver (no browser download)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1600,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(120)
    return driver


@pytest.fixture(scope="module")
def browser(scene):
    driver = headless_chromium()
    yield driver
    driver.quit()


def _login(driver, scene, user: str) -> None:
    """The simple auth manager's own login form, as a person would use it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    driver.delete_all_cookies()
    driver.get(f"{scene['base']}/auth/login?next=/occflow/")
    wait = WebDriverWait(driver, 60)
    wait.until(ec.presence_of_element_located((By.NAME, "username"))).send_keys(user)
    driver.find_element(By.NAME, "password").send_keys(scene["passwords"][user])
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait.until(lambda d: d.get_cookie("_token"))


def _shot(driver, name: str) -> Path:
    IMG.mkdir(parents=True, exist_ok=True)
    path = IMG / name
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    # The whole page, not only the window: the viewport is made as tall as the page.
    metrics = {"width": 1600, "height": min(max(height, 600), 3000), "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    driver.save_screenshot(str(path))
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return path


def _text(element) -> str:
    return " ".join(element.text.split())


def test_view_refuses_a_browser_that_is_not_logged_in(scene):
    import httpx

    with httpx.Client(base_url=scene["base"], timeout=120) as anonymous:
        for path in ("/occflow/", "/occflow/api/tables", "/occflow/api/timeline"):
            assert anonymous.get(path).status_code == 401
            assert anonymous.get(path, headers={"Authorization": "Bearer forged"}).status_code == 403


def test_live_lease_and_waiting_write_are_shown_while_the_run_holds_them(scene, browser):
    from selenium.webdriver.common.by import By

    api = scene["api"]

    def both():
        tables = api.get("/occflow/api/tables", table="ui.targets")["tables"]
        return tables and tables[0]["leases"] and tables[0]["waiting"] and tables[0]

    live = _wait("a held lease and a waiting write on ui.targets", both, 420, scene["airflow"])
    _login(browser, scene, "viewer")
    browser.get(f"{scene['base']}/occflow/?table=ui.targets")
    card = browser.find_element(By.CSS_SELECTOR, '[data-testid=table-card][data-table="ui.targets"]')
    leases = card.find_elements(By.CSS_SELECTOR, "[data-testid=lease-row]")
    waiting = card.find_elements(By.CSS_SELECTOR, "[data-testid=waiting-row]")
    assert [r.get_attribute("data-lease") for r in leases] == [live["leases"][0]["lease_id"]]
    assert "rewrite_eu" in _text(leases[0]) and "insert_overwrite" in _text(leases[0])
    assert "region=eu" in _text(leases[0]) and "rewrite_eu_again" not in _text(leases[0])
    assert len(waiting) == 1 and "rewrite_eu_again" in _text(waiting[0]) and "insert_overwrite" in _text(waiting[0])
    assert not browser.find_elements(By.CSS_SELECTOR, "button[data-release]")  # a viewer cannot release
    _shot(browser, "ui-table-writes-live.png")


def test_timeline_shows_the_conflicts_their_winner_and_the_lease_wait(scene, browser):
    from selenium.webdriver.common.by import By

    api, run_id = scene["api"], scene["run_id"]
    state = _wait(
        "the DAG run to end",
        lambda: (s := api.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")["state"]) in ("success", "failed") and s,
        900, scene["airflow"], every=3,
    )
    assert state == "success", f"DAG run {state}; logs in {scene['home']}"

    def report(task_id: str, map_index: int = -1):
        path = f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/return_value"
        return api.get(path, map_index=map_index, deserialize=True)["value"]

    compact = report("compact")
    upserts = [report("upsert_region", i) for i in (0, 1)]
    rewrites = [report("rewrite_eu"), report("rewrite_eu_again")]
    assert compact["committed"] and all(u["committed"] and u["attempts"] == 2 for u in upserts)

    _login(browser, scene, "viewer")
    browser.get(f"{scene['base']}/occflow/?dag_id={DAG_ID}")
    rows = {
        (r.get_attribute("data-task"), int(r.get_attribute("data-map-index"))): r
        for r in browser.find_elements(By.CSS_SELECTOR, "[data-testid=write-row]")
    }
    assert {("upsert_region", 0), ("upsert_region", 1), ("compact", -1), ("rewrite_eu", -1),
            ("rewrite_eu_again", -1)} <= set(rows)
    attempts = browser.find_elements(By.CSS_SELECTOR, '[data-testid=attempt-row][data-task="upsert_region"]')
    assert len(attempts) == 2
    for row, upsert in zip(attempts, upserts, strict=True):
        text = _text(row)
        # delta-rs rejects the MERGE because the OPTIMIZE added files (its own classification).
        kind = upsert["conflicts"][0]["kind"]
        assert kind in ("concurrent_append", "concurrent_delete_read")
        assert row.get_attribute("data-kind") == kind and f"attempt 1 lost: {kind}" in text
        # The winner is the compaction's commit, as the compaction's own report says.
        assert f"winner: v{compact['version']} OPTIMIZE" in text and "retry" in text
    for i, upsert in enumerate(upserts):
        cells = _text(rows[("upsert_region", i)])
        assert f"{upsert['wasted_seconds']:.1f}" in cells and "committed" in cells and "no lease" in cells
    # The second overwrite waited for the first one's lease; the first held it at least HOLD s.
    held = _text(rows[("rewrite_eu", -1)])
    waited = _text(rows[("rewrite_eu_again", -1)])
    assert f"fence {rewrites[0]['fence']}" in held and f"fence {rewrites[1]['fence']}" in waited
    held_s = float(held.split(", held ")[1].split(" s")[0])
    waited_s = float(waited.split("waited ")[1].split(" s")[0])
    assert held_s >= HOLD and 0 < waited_s <= held_s
    totals = _text(browser.find_element(By.CSS_SELECTOR, "[data-testid=totals]"))
    assert "2 conflicts" in totals
    _shot(browser, "ui-table-writes.png")

    # The task instance's link: the same page, its write highlighted.
    browser.get(f"{scene['base']}/occflow/write?dag_id={DAG_ID}&run_id={run_id}&task_id=upsert_region&map_index=1")
    focus = browser.find_element(By.ID, "focus")
    assert focus.get_attribute("data-task") == "upsert_region" and focus.get_attribute("data-map-index") == "1"


def _logged(path: str, version: int) -> dict:
    """The commit info of ``version`` as the engine wrote it in the table's Delta log."""
    for line in (Path(path) / "_delta_log" / f"{version:020d}.json").read_text().splitlines():
        action = json.loads(line)
        if "commitInfo" in action:
            return action["commitInfo"]
    raise AssertionError(f"version {version} of {path} has no commitInfo")


def _version_of(path: str, task_id: str) -> int:
    """The version holding ``task_id``'s commit, found in the Delta log by the tag in its commit
    info (what the engine recorded, not what occflow reported)."""
    from occflow.engines.tags import KEYS

    versions = sorted(int(f.stem) for f in (Path(path) / "_delta_log").glob("*.json"))
    found = [v for v in versions if _logged(path, v).get(KEYS["task_id"]) == task_id]
    assert len(found) == 1, (path, task_id, found)
    return found[0]


def test_failed_skipped_and_retried_writes_show_their_status_and_winner(scene, browser):
    from urllib.parse import quote

    from selenium.webdriver.common.by import By

    api, run_id, paths = scene["api"], scene["run_id"], scene["paths"]
    state = _wait(
        f"the {ENDS_ID} run to end",
        lambda: (s := api.get(f"/api/v2/dags/{ENDS_ID}/dagRuns/{run_id}")["state"]) in ("success", "failed") and s,
        600, scene["airflow"], every=3,
    )
    assert state == "failed", f"the fast-failed DELETE fails its run, got {state}; logs in {scene['home']}"

    def report(task_id: str):
        path = f"/api/v2/dags/{ENDS_ID}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/occflow_report"
        return api.get(path, deserialize=True)["value"]

    # loser: (its status, the kind delta-rs raised, its table, the winner's task, the winner's operation)
    ends = {
        "delete_a": ("failed", "protocol_changed", "proto", "enable_deletion_vectors", "SET TBLPROPERTIES"),
        "compact_a": ("skipped", "concurrent_delete_read", "compact", "purge_a", "DELETE"),
        "merge_a": ("committed", "concurrent_append", "merge", "append_a", "WRITE"),
    }
    reports = {task_id: report(task_id) for task_id in ends}
    assert [reports[t]["status"] for t in ends] == ["failed", "skipped", "committed"], reports

    _login(browser, scene, "viewer")
    browser.get(f"{scene['base']}/occflow/?dag_id={ENDS_ID}")
    rows = {r.get_attribute("data-task"): r for r in browser.find_elements(By.CSS_SELECTOR, "[data-testid=write-row]")}
    for task_id, (status, kind, table, winner_task, operation) in ends.items():
        winner_version = _version_of(paths[table], winner_task)
        assert _logged(paths[table], winner_version)["operation"] == operation
        row = rows[task_id]
        assert row.get_attribute("data-status") == status and status in _text(row), _text(row)
        [lost] = browser.find_elements(By.CSS_SELECTOR, f'[data-testid=attempt-row][data-task="{task_id}"]')
        assert lost.get_attribute("data-kind") == kind and f"attempt 1 lost: {kind}" in _text(lost)
        action = {"failed": "fail", "skipped": "skip", "committed": "retry"}[status]
        assert f"\u2192 {action}" in _text(lost), _text(lost)
        winner = _text(lost.find_element(By.CSS_SELECTOR, "[data-testid=winner]"))
        assert winner.startswith(f"v{winner_version} {operation}"), (winner, winner_version)
        link = lost.find_element(By.CSS_SELECTOR, "[data-testid=winner-task]")
        assert _text(link) == winner_task
        assert link.get_attribute("href").endswith(f"/dags/{ENDS_ID}/runs/{quote(run_id, safe='')}/tasks/{winner_task}")
    # The retried MERGE committed after the append: its version is the one its tag is in.
    merge_version = _version_of(paths["merge"], "merge_a")
    assert _logged(paths["merge"], merge_version)["operation"] == "MERGE" and f"v{merge_version}" in _text(rows["merge_a"])
    # Nothing of the failed DELETE or the skipped OPTIMIZE reached their tables.
    proto_versions = [int(f.stem) for f in (Path(paths["proto"]) / "_delta_log").glob("*.json")]
    assert max(proto_versions) == _version_of(paths["proto"], "enable_deletion_vectors")
    assert not any(_logged(paths["compact"], int(f.stem))["operation"] == "OPTIMIZE"
                   for f in (Path(paths["compact"]) / "_delta_log").glob("*.json"))

    totals = _text(browser.find_element(By.CSS_SELECTOR, "[data-testid=totals]"))
    assert _text(browser.find_element(By.CSS_SELECTOR, "[data-testid=total-failed]")) == "1 failed"
    assert _text(browser.find_element(By.CSS_SELECTOR, "[data-testid=total-skipped]")) == "1 skipped"
    assert "3 conflicts" in totals, totals
    wasted = float(re.search(r"([\d.]+) s wasted", totals).group(1))
    assert wasted > 0 and wasted == pytest.approx(sum(r["wasted_seconds"] for r in reports.values()), abs=0.15)
    _shot(browser, "ui-table-writes-ends.png")

    # The alert of the fast-failed write: its structured dict names the winner and the partitions.
    conflict = json.loads((scene["home"] / "marks" / "conflict-delete_a.json").read_text())
    proto_winner = _version_of(paths["proto"], "enable_deletion_vectors")
    assert conflict["kind"] == "protocol_changed" and conflict["status"] == "failed"
    assert conflict["winning_commit"]["version"] == proto_winner
    assert conflict["winning_commit"]["operation"] == "SET TBLPROPERTIES"
    assert conflict["winner_task"] == "enable_deletion_vectors"
    assert "ds" in str(conflict["partitions"]) and "a" in str(conflict["partitions"])


def test_view_is_reachable_from_the_airflow_ui(scene, browser):
    """The nav entry and the task instance tab embed the view in Airflow's own UI."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _login(browser, scene, "admin")
    run_id = scene["run_id"]
    browser.get(f"{scene['base']}/dags/{DAG_ID}/runs/{run_id}/tasks/upsert_region/mapped/0/plugin/occflow_task_write")
    frame = WebDriverWait(browser, 60).until(lambda d: d.find_element(By.CSS_SELECTOR, "iframe"))
    assert "/occflow/write?dag_id=" in frame.get_attribute("src") and "map_index=0" in frame.get_attribute("src")
    browser.switch_to.frame(frame)
    focus = WebDriverWait(browser, 60).until(lambda d: d.find_element(By.ID, "focus"))
    assert focus.get_attribute("data-task") == "upsert_region" and focus.get_attribute("data-map-index") == "0"
    browser.switch_to.default_content()
    _shot(browser, "ui-table-writes-task-instance.png")

    # The navigation entry: the whole view inside the Airflow UI.
    browser.get(f"{scene['base']}/plugin/occflow_table_writes")
    frame = WebDriverWait(browser, 60).until(lambda d: d.find_element(By.CSS_SELECTOR, "iframe"))
    assert frame.get_attribute("src").rstrip("/").endswith("/occflow")
    browser.switch_to.frame(frame)
    rows = WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, "[data-testid=write-row]"))
    assert {r.get_attribute("data-task") for r in rows} >= {"upsert_region", "compact", "rewrite_eu"}
    browser.switch_to.default_content()
