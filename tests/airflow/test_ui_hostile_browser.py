"""Hostile and careless input through the live "Table writes" view, in headless Chromium.

A throwaway Airflow (scheduler, dag-processor, api-server, triggerer; LocalExecutor; started as
test_ui_plugin_browser.py starts it) runs with Airflow's own multi-team mode, so that the simple
auth manager can say "this user may read these DAGs and not those": DAG bundle ``team_b`` belongs
to team ``team_b``, and user ``viewer_a`` is a viewer of team ``team_a`` only. Airflow's own REST
API is the oracle that ``viewer_a`` may not read team B's DAG.

Hostile data is planted where a user can put it, and it really travels through Airflow:

- a DAG run whose run id carries markup, quotes and a right-to-left override (the deployment
  widened ``allowed_run_id_pattern``, as an operator may);
- a mapped ``DeltaWriteOperator`` whose partition values are markup, quotes, bidi controls,
  512-character text and random unicode/markup fuzz (seed printed, ``OCCFLOW_FUZZ_SEED`` replays it);
- tasks that return values claiming to be write reports: markup in every text the view shows,
  wrong types, huge (a 1 MB error, 400 lost attempts), nested 240 deep (Airflow's execution
  API refuses an XCom nested about 256 deep), and one that claims team
  B's table, fence and winning task;
- lease events of team B's DAG and of a script (no DAG), granted and released in the workers' lease
  store, and a live lease of team B.

DAG and task ids are not planted: Airflow refuses any that are not letters, digits, ``-_.``.

From the browser: no script ran (``window.__pwned`` stays undefined, dialogs are trapped, no
element from the payloads exists), each planted text is in the page as text, team B's leases and
winner are shown to the admin and not to ``viewer_a``, and every page renders (with the malformed
reports marked) for every user.
"""

from __future__ import annotations

import json
import os
import random
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_ui_plugin_browser import (
    CHROMEDRIVER,
    CHROMIUM,
    Api,
    _load_run_examples,
    _login,
    _wait,
    headless_chromium,
)

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

DAG_ID = "occflow_ui_hostile"
TEAM_B_DAG = "occflow_team_b_secret"
# What only team B's readers may see: its DAG, task, run, table and partition.
SECRETS = {"dag": TEAM_B_DAG, "task": "secret_task_b", "run": "secret_run_b",
           "table": "teamb.secret_orders", "partition": "secret-b-partition"}
SCRIPT = {"table": "teamb.script_only", "partition": "script-partition"}  # a lease no DAG can be named for

#: The hook every payload sets; an init script makes every dialog set it too.
HOOK = "window.__pwned"


def payload(tag: str) -> str:
    return f"<img src=x onerror=\"{HOOK}='{tag}'\">"


RUN_ID = f"r\"'><img src=x onerror={HOOK}=1> \u202e{payload('run')}"
HAND_VALUES = [
    payload("p1"),
    f"\"'><svg onload={HOOK}=2>",
    "\u202etxt.exe\u202c \u2066isolate\u2069 \u200bzero\u200dwidth",
    f"<iframe srcdoc=\"<img src=x onerror=parent.{HOOK}=3>\">",
    "' OR 1=1 -- &amp; &lt;b&gt; %2e%2e\\..",
    "A" * 500 + payload("long")[:12],  # 512 characters: the longest value a declaration accepts
]


def fuzz(seed: int, count: int, length: int, alphabet_extra: str = "") -> list[str]:
    """Random text mixing markup fragments with unicode from many blocks; no '/', '{', controls
    (a partition value refuses them, and '{' would be a Jinja template in ``partitions``)."""
    rng = random.Random(seed)
    pieces = ["<", ">", '"', "'", "&", "`", "=", " ", "<img src=x onerror=", "<svg onload=", "<script>",
              "javascript:", HOOK + "=1", "&#x3C;", "]]>", "-->", "\u202e", "\u202d", "\u2067", "\u200b",
              "\u0301", "\ufeff", "\U0001f600", "\u4e2d\u6587", "\u05e9\u05dc\u05d5\u05dd", "\u0627\u0644",
              "\u00e9", "\u0130", "\u2028", "\ufffd", alphabet_extra]
    out = []
    for _ in range(count):
        text = ""
        while len(text) < rng.randint(1, length):
            text += rng.choice(pieces) if rng.random() < 0.6 else chr(rng.choice(
                [rng.randint(0x20, 0x7e), rng.randint(0xa0, 0x2fff), rng.randint(0x3000, 0xd7ff),
                 rng.randint(0xe000, 0xfffd), rng.randint(0x10000, 0x1fbff)]))
        text = "".join(c for c in text if c not in "/{}" and c.isprintable() or c in "\u202e\u202d\u2067\u200b\ufeff")
        out.append(text.strip()[:512] or "x")
    return out


HOSTILE_DAG = '''
"""Hostile values in a real DAG: a mapped write over hostile partitions, tasks returning hostile reports."""
import json
import pathlib

import pendulum
import pyarrow as pa
from airflow.sdk import DAG, task

from occflow.engines.deltars import DeltaRsTable
from occflow.operators.delta import DeltaWriteOperator

SPEC = pathlib.Path({spec!r})
VALUES = json.loads(SPEC.read_text(encoding="utf-8"))["values"]
PATH = {path!r}


def reports():
    return json.loads(SPEC.read_text(encoding="utf-8"))["reports"]


with DAG("{dag_id}", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), catchup=False,
         max_active_tasks=4):

    @task
    def create_table() -> None:
        data = pa.table({{"id": [1, 2], "p": ["a", "b"]}})
        assert DeltaRsTable(PATH).create(data, partition_by=["p"]).committed

    compact = DeltaWriteOperator.partial(
        task_id="compact_hostile", table="hostile.t", path=PATH, operation="optimize",
    ).expand(partitions=[{{"p": v}} for v in VALUES])

    @task
    def markup_report():
        return reports()["markup"]

    @task
    def wrong_types_report():
        return reports()["wrong_types"]

    @task
    def huge_report():
        report = reports()["huge"]
        report["error"] = report["error"] * 20000  # about 1 MB
        report["lost_attempts"] = report["lost_attempts"] * 400
        return report

    @task
    def huge_malformed_report():
        report = reports()["huge_malformed"]
        report["table"] = report["table"] * 5000
        return report

    @task
    def deep_report():
        deep = {{"leaf": reports()["markup"]["operation"]}}
        for _ in range(240):  # Airflow's execution API refuses an XCom nested about 256 deep
            deep = {{"d": deep}}
        report = reports()["deep"]
        report.update(partitions=[{{"p": deep}}], tag={{"k": deep}}, observed_footprint=deep, engine_extra=deep)
        return report

    @task
    def claims_team_b():
        return reports()["claims_team_b"]

    @task
    def fuzz_report():
        return reports()["fuzz"]

    create_table() >> compact
    [markup_report(), wrong_types_report(), huge_report(), huge_malformed_report(), deep_report(),
     claims_team_b(), fuzz_report()]
'''

TEAM_B = '''
import pendulum
from airflow.sdk import DAG, task

with DAG("{dag_id}", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), catchup=False):

    @task
    def secret_task_b() -> None:
        pass

    secret_task_b()
'''


def _report(**fields):
    base = {"format": "occflow.write_report/1", "status": "committed", "table": "hostile.reports",
            "operation": "merge", "profile": "delta-rs", "engine": "deltars", "committed": True, "attempts": 2,
            "conflicts": [], "wasted_seconds": 1.5, "lost_attempts": []}
    return {**base, **fields}


def _lost(reason: str, **winner):
    return {"attempt": 1, "kind": "concurrent_append", "action": "retry", "reason": reason,
            "winning_commit": {"version": 3, "operation": "WRITE", "tagged": True, **winner}}


def hostile_reports(fuzzed: list[str], team_b_fence: int) -> tuple[dict, dict]:
    """The reports the DAG's tasks return, and per task the texts the view must show as text."""
    markup = {
        "table": f"db.t{payload('table')}</td></tr></table><script>{HOOK}='t'</script>",
        "operation": f"merge</script><script>{HOOK}='op'</script>",
        "reason": f"</textarea>{payload('reason')}"[:140],
        "winner_op": f"WRITE{payload('winop')}",
        "winner_task": f"\"'><svg onload={HOOK}='wt'>",
    }
    reports = {
        "markup": _report(table=markup["table"], operation=markup["operation"],
                          lost_attempts=[_lost(markup["reason"], operation=markup["winner_op"], dag_id=DAG_ID,
                                               task_id=markup["winner_task"], run_id=RUN_ID)]),
        "wrong_types": _report(attempts="3", conflicts="none", partitions={"p": payload("wrong")}),
        "huge": _report(error=payload("huge") * 2,
                        lost_attempts=[_lost(payload("hugereason"), task_id="t", dag_id=DAG_ID)]),
        "huge_malformed": _report(table=payload("hm"), attempts=[payload("hm-attempts")]),
        "deep": _report(),
        "claims_team_b": _report(table=SECRETS["table"], fence=team_b_fence,
                                 lost_attempts=[_lost("lost to team B", dag_id=TEAM_B_DAG, task_id=SECRETS["task"],
                                                      run_id=SECRETS["run"],
                                                      tag={"occflow.task_id": SECRETS["task"]})]),
        "fuzz": _report(table=fuzzed[0], operation=fuzzed[1],
                        lost_attempts=[_lost(fuzzed[2][:140], operation=fuzzed[3], task_id=fuzzed[4],
                                             dag_id=DAG_ID)]),
    }
    shown = {
        "markup_report": [markup["table"], markup["operation"], markup["reason"], markup["winner_op"],
                          markup["winner_task"]],
        "fuzz_report": [fuzzed[0], fuzzed[1], fuzzed[2][:140], fuzzed[3], fuzzed[4]],
    }
    return reports, shown


def _plant_leases(store_url: str) -> dict[str, int]:
    """Team B's and a script's leases in the workers' store, history recorded (what the store's API
    lets any holder record); one of team B's stays live."""
    from occflow.leases import Holder, LeaseRequest, LeaseStore

    store = LeaseStore.from_url(store_url, history=True)
    team_b = Holder(dag_id=TEAM_B_DAG, task_id=SECRETS["task"], run_id=SECRETS["run"], try_number=1)
    fences = {}
    try:
        for name, table, part, holder in (
            ("b", SECRETS["table"], SECRETS["partition"], team_b),
            ("script", SCRIPT["table"], SCRIPT["partition"], Holder()),
        ):
            lease = store.try_acquire(LeaseRequest.create(table, "optimize", "delta-rs", [{"ds": part}], holder=holder))
            assert lease is not None, name
            fences[name] = lease.fence
            store.release(lease)
        live = store.try_acquire(LeaseRequest.create(SECRETS["table"], "optimize", "delta-rs",
                                                     [{"ds": SECRETS["partition"] + "-live"}], holder=team_b,
                                                     ttl=3600))
        assert live is not None
        # Fences count per table: a grant is its table's and its fence.
        grants = {(e["table_name"], e["fence"]): e for e in store.history_events() if e["kind"] == "grant"}
        assert grants[(SECRETS["table"], fences["b"])]["dag_id"] == TEAM_B_DAG
        assert grants[(SCRIPT["table"], fences["script"])]["dag_id"] is None
    finally:
        store.dispose()
    return fences


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail(f"the browser test needs Debian's chromium and chromium-driver ({CHROMIUM}, {CHROMEDRIVER})")
    seed = int(os.environ.get("OCCFLOW_FUZZ_SEED") or time.time_ns() % 2**32)
    print(f"hostile UI fuzz seed: {seed} (replay with OCCFLOW_FUZZ_SEED={seed})", file=sys.stderr)
    values = HAND_VALUES + fuzz(seed, 8, 200)
    from occflow.core.declaration import WriteDeclaration

    for v in values:  # what the DAG declares must be what a declaration accepts (else: a parse error)
        WriteDeclaration.create("hostile.t", "optimize", table_format="delta", partitions={"p": v})
    run_examples = _load_run_examples()
    home = tmp_path_factory.mktemp("ui-hostile")
    for folder in ("dags", "team_b_dags", "plugins"):
        (home / folder).mkdir()
    env = run_examples.airflow_env(home, parallelism=6)
    fences = _plant_leases(env["OCCFLOW_LEASE_STORE_URL"])
    reports, shown = hostile_reports(fuzz(seed + 1, 5, 120), fences["b"])
    spec = home / "hostile_spec.json"
    spec.write_text(json.dumps({"values": values, "reports": reports}), encoding="utf-8")
    (home / "dags" / "ui_hostile.py").write_text(
        textwrap.dedent(HOSTILE_DAG.format(spec=str(spec), path=str(home / "hostile_t"), dag_id=DAG_ID)))
    (home / "team_b_dags" / "team_b.py").write_text(textwrap.dedent(TEAM_B.format(dag_id=TEAM_B_DAG)))
    (home / "plugins" / "occflow_ui.py").write_text("from occflow.plugins import OccflowTableWritesPlugin  # noqa: F401\n")
    passwords = {"admin": "admin-pw", "viewer": "viewer-pw", "viewer_a": "viewer-a-pw"}
    (home / "passwords.json").write_text(json.dumps(passwords))
    bundles = [
        {"name": "dags-folder", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
         "kwargs": {"path": str(home / "dags")}},
        {"name": "team_b", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
         "kwargs": {"path": str(home / "team_b_dags")}, "team_name": "team_b"},
    ]
    env.update({
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
        "AIRFLOW__CORE__MULTI_TEAM": "True",
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundles),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer,viewer_a:viewer:team_a",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        # A deployment that lets users name their runs freely (Airflow's default refuses markup).
        "AIRFLOW__SCHEDULER__ALLOWED_RUN_ID_PATTERN": r"^[^/?#%\\]+$",
        "OCCFLOW_LEASE_HISTORY": "1",
    })
    airflow = run_examples.Airflow(home, env)
    airflow.env = {**{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "OCCFLOW"))}, **env}
    base = f"http://127.0.0.1:{env['AIRFLOW__API__PORT']}"
    try:
        airflow.cli("db", "migrate", timeout=600)
        for team in ("team_a", "team_b"):
            airflow.cli("teams", "create", team)
        airflow.start()
        _wait("the api-server", lambda: Api(base, "admin", passwords["admin"]), 240, airflow)
        api = Api(base, "admin", passwords["admin"])
        for dag_id in (DAG_ID, TEAM_B_DAG):
            _wait(f"the dag-processor to parse {dag_id}", lambda d=dag_id: api.get(f"/api/v2/dags/{d}"), 240, airflow)
        airflow.cli("dags", "unpause", DAG_ID)
        airflow.cli("dags", "trigger", DAG_ID, "--run-id", RUN_ID)
        yield {"airflow": airflow, "api": api, "base": base, "passwords": passwords, "home": home, "seed": seed,
               "values": values, "reports": reports, "shown": shown, "fences": fences}
    except BaseException:
        print(f"Airflow logs kept in {home}; fuzz seed {seed}", file=sys.stderr)
        raise
    finally:
        airflow.stop()


@pytest.fixture(scope="module")
def browser(hostile):
    driver = headless_chromium()
    # Before any page script: a dialog a payload opens sets the hook instead of blocking.
    trap = f"window.alert = window.confirm = window.prompt = function (m) {{ {HOOK} = 'dialog: ' + m; }};"
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": trap})
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def ended(hostile):
    api = hostile["api"]
    from urllib.parse import quote

    path = f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(RUN_ID, safe='')}"
    state = _wait("the hostile run to end", lambda: (s := api.get(path)["state"]) in ("success", "failed") and s,
                  900, hostile["airflow"], every=3)
    tis = api.get(f"{path}/taskInstances", limit=100)["task_instances"]
    return {"state": state, "tis": {(t["task_id"], t["map_index"]): t["state"] for t in tis}}


def _open(driver, hostile, user: str, query: str = "") -> dict:
    """The view as ``user`` sees it: its text, the elements payloads would create, the hook."""
    _login(driver, hostile, user)
    driver.get(f"{hostile['base']}/occflow/{query}")
    time.sleep(1.5)  # an ``onerror`` of an image that failed to load fires after the load
    return driver.execute_script(
        """
        const all = [...document.querySelectorAll('*')];
        return {
          pwned: window.__pwned === undefined ? null : String(window.__pwned),
          injected: document.querySelectorAll('img,svg,iframe,object,embed,video,audio,math').length,
          handlers: all.filter(e => [...e.attributes].some(a => a.name.startsWith('on'))).map(e => e.tagName),
          scripts: [...document.scripts].map(s => s.textContent.slice(0, 60)),
          text: document.body.textContent,
          writes: [...document.querySelectorAll('[data-testid=write-row]')].map(r => r.dataset.task),
          malformed: document.querySelectorAll('[data-testid=malformed]').length,
          title: document.title,
        };
        """
    )


def _no_script_ran(seen: dict, who: str) -> None:
    assert seen["title"] == "Table writes - occflow", (who, seen["title"])
    assert seen["pwned"] is None, f"a payload ran for {who}: {seen['pwned']}"
    assert seen["injected"] == 0 and seen["handlers"] == [], (who, seen["injected"], seen["handlers"])
    # Only the page's own scripts: the release buttons' (a user who may edit) and the focus scroll.
    assert all(s.lstrip().startswith(("document.querySelectorAll(\"button[data-release]\")", "var f = document"))
               for s in seen["scripts"]), (who, seen["scripts"])


def test_airflow_itself_keeps_team_b_from_viewer_a(hostile):
    """The oracle for what follows: Airflow's own REST API, not the view's code."""
    passwords = hostile["passwords"]
    viewer_a = Api(hostile["base"], "viewer_a", passwords["viewer_a"])
    assert viewer_a.http.get(f"/api/v2/dags/{TEAM_B_DAG}").status_code == 403
    assert viewer_a.get(f"/api/v2/dags/{DAG_ID}")["dag_id"] == DAG_ID
    assert hostile["api"].get(f"/api/v2/dags/{TEAM_B_DAG}")["dag_id"] == TEAM_B_DAG


def test_hostile_values_reach_the_view_as_text_and_no_script_runs(hostile, ended, browser):
    expected_writes = {"compact_hostile", "markup_report", "wrong_types_report", "huge_report",
                       "huge_malformed_report", "deep_report", "claims_team_b", "fuzz_report"}
    reported = {t for (t, _), state in ended["tis"].items() if state in ("success", "failed")}
    assert expected_writes <= reported, (ended, hostile["seed"])
    for user in ("admin", "viewer", "viewer_a"):
        seen = _open(browser, hostile, user, f"?dag_id={DAG_ID}")
        _no_script_ran(seen, user)
        assert expected_writes <= set(seen["writes"]), (user, seen["writes"])
        text = seen["text"]
        assert RUN_ID in text, (user, hostile["seed"])
        for value in hostile["values"]:
            assert f"p={value}" in text, (user, value, hostile["seed"])
        for task_id, texts in hostile["shown"].items():
            for shown in texts:
                assert shown in text, (user, task_id, shown, hostile["seed"])
        # wrong types, the huge malformed one: marked, the rest of the page shown.
        assert seen["malformed"] == 2, (user, seen["malformed"])
        assert "2 malformed reports" in text


def test_the_view_renders_for_everyone_on_every_route(hostile, ended):
    """The same pages and the JSON routes, for each user: 200 with every hostile row."""
    for user in ("admin", "viewer", "viewer_a"):
        api = Api(hostile["base"], user, hostile["passwords"][user])
        for path in ("/occflow/", "/occflow/api/timeline", "/occflow/api/tables"):
            for params in ({}, {"dag_id": DAG_ID}, {"table": "hostile.t"}, {"run_id": RUN_ID}):
                response = api.http.get(path, params=params)
                assert response.status_code == 200, (user, path, params, response.text[:500])
        write = api.http.get("/occflow/api/write", params={"dag_id": DAG_ID, "run_id": RUN_ID,
                                                             "task_id": "deep_report"})
        assert write.status_code == 200 and write.json()["task_id"] == "deep_report", write.text[:300]


def test_team_b_leases_and_winner_are_shown_to_the_admin_not_to_viewer_a(hostile, ended, browser):
    everything = _open(browser, hostile, "admin")
    _no_script_ran(everything, "admin")
    # Shown to a reader of every DAG: team B's leases (live and past), its winner, the script's lease
    # (a run id is in links only, not in the text).
    for secret in (SECRETS["dag"], SECRETS["task"], SECRETS["table"], SECRETS["partition"], *SCRIPT.values()):
        assert secret in everything["text"], secret

    limited = _open(browser, hostile, "viewer_a")
    _no_script_ran(limited, "viewer_a")
    assert "claims_team_b" in limited["writes"]  # the report of a readable DAG is this reader's
    for secret in ("dag", "task", "run", "partition"):
        assert SECRETS[secret] not in limited["text"], secret
    # A lease no DAG can be named for may be any DAG's: not for a reader of some DAGs only.
    assert SCRIPT["table"] not in limited["text"] and SCRIPT["partition"] not in limited["text"]

    api = Api(hostile["base"], "viewer_a", hostile["passwords"]["viewer_a"])
    body = json.dumps([api.get("/occflow/api/timeline"), api.get("/occflow/api/tables"),
                       api.get("/occflow/api/timeline", table=SECRETS["table"])])
    for secret in ("dag", "task", "run", "partition"):
        assert SECRETS[secret] not in body, secret
    assert SCRIPT["table"] not in body
    # The claiming report's row: its commit, neither team B's lease nor its winner's task.
    [claim] = [e for e in api.get("/occflow/api/timeline", dag_id=DAG_ID)["entries"]
               if e["kind"] == "write" and e["task_id"] == "claims_team_b"]
    assert claim["lease"] is None and claim["conflicts"][0]["winner"] == "v3 WRITE"
    assert api.http.get("/occflow/", params={"dag_id": TEAM_B_DAG}).status_code == 403
    assert api.http.get("/occflow/api/timeline", params={"dag_id": TEAM_B_DAG}).status_code == 403
