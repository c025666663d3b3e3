"""``occflow leases``, ``occflow lint`` and ``occflow pools`` end to end.

lint and pools read tests/leases/dags with Airflow's DagBag and sync writes pools into a real
Airflow metadata database, in a throwaway AIRFLOW_HOME, each in a fresh process (Airflow reads
AIRFLOW_HOME once, at import).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from occflow.cli import main
from occflow.leases import LeaseRequest, LeaseStore

DAGS = Path(__file__).parent / "dags"


def test_leases_list_and_release_show_holders_and_are_idempotent(sqlite_url, capsys):
    store = LeaseStore.from_url(sqlite_url)
    lease = store.try_acquire(LeaseRequest.create("db.t", "update", "maxcompute-standard", ["ds=1"]))
    store.try_acquire(LeaseRequest.create("db.t", "delete", "maxcompute-standard", whole_table=True))
    assert main(["leases", "--store", sqlite_url, "list", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [le["lease_id"] for le in listed["leases"]] == [lease.lease_id]
    assert listed["leases"][0]["partitions"] == ["ds=1"]
    assert [w["operation"] for w in listed["waiting"]] == ["delete"]
    assert main(["leases", "--store", sqlite_url, "release", lease.lease_id]) == 0
    assert "released" in capsys.readouterr().out
    assert main(["leases", "--store", sqlite_url, "release", lease.lease_id]) == 0
    assert "not held" in capsys.readouterr().out
    assert store.leases() == []


def test_leases_with_an_unsupported_store_url_is_a_clear_error(capsys):
    assert main(["leases", "--store", "mysql://h/db", "list"]) == 2
    err = capsys.readouterr().err
    assert "unsupported lease store 'mysql'" in err and "postgresql://" in err


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow_home")
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS)}
    return home, env


def occflow(env, *args, timeout=600):
    return subprocess.run([sys.executable, "-m", "occflow.cli", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.airflow
def test_lint_reports_tasks_that_can_run_together_and_conflict_with_the_cell(airflow_home):
    _, env = airflow_home
    done = occflow(env, "lint", str(DAGS), "--format", "json")
    assert done.returncode == 1, done.stderr  # collisions found
    report = json.loads(done.stdout)
    found = {(c["first"], c["second"]): c for c in report["collisions"]}
    assert set(found) == {
        ("events_hourly.ingest", "events_hourly.ingest"),
        ("sales_daily.load_eu", "sales_daily.fix_prices"),
        ("sales_daily.load_us", "sales_daily.fix_prices"),
        ("sales_daily.dedupe", "sales_daily.fix_prices"),
        ("sales_daily.dedupe", "sales_maintenance.compact"),
        ("sales_daily.fix_prices", "sales_maintenance.compact"),
    }
    # The appends run side by side and the MERGE waits for them: no finding for those pairs.
    cross = found[("sales_daily.dedupe", "sales_maintenance.compact")]
    assert "within 60 min" in cross["why_together"]
    assert {(c["earlier"], c["later"]) for c in cross["cells"]} == {("merge", "optimize"), ("optimize", "merge")}
    assert all(c["later_fails"] and c["source"] for c in cross["cells"])
    hourly = found[("events_hourly.ingest", "events_hourly.ingest")]
    assert "max_active_runs=2" in hourly["why_together"]
    assert hourly["cells"][0]["source"].startswith("spec 001")
    # With a 20-minute window the 02:00 load and the 02:30 compaction no longer meet.
    narrow = json.loads(occflow(env, "lint", str(DAGS), "--format", "json", "--window", "20").stdout)
    assert not any(c["second"] == "sales_maintenance.compact" for c in narrow["collisions"])


@pytest.mark.airflow
@pytest.mark.slow
def test_pools_plan_then_sync_creates_and_updates_airflow_pools(airflow_home):
    home, env = airflow_home
    plan = occflow(env, "pools", "plan", str(DAGS), "--format", "json")
    assert plan.returncode == 0, plan.stderr
    pools = {p["name"]: p for p in json.loads(plan.stdout)}
    assert set(pools) == {"occflow_db.events", "occflow_db.sales"}
    sales = pools["occflow_db.sales"]
    slots = {t["task"]: t["pool_slots"] for t in sales["tasks"]}
    # Appends and the MERGE share (one slot each); the UPDATE and the OPTIMIZE take them all.
    assert sales["slots"] == 3
    assert slots == {"sales_daily.load_eu": 1, "sales_daily.load_us": 1, "sales_daily.dedupe": 1,
                     "sales_daily.fix_prices": 3, "sales_maintenance.compact": 3}
    assert pools["occflow_db.events"]["slots"] == 1

    migrate = subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], env=env,
                             capture_output=True, text=True, timeout=900)
    assert migrate.returncode == 0, migrate.stderr[-2000:]
    first = occflow(env, "pools", "sync", str(DAGS))
    assert first.returncode == 0, first.stderr
    assert "pool occflow_db.sales: 3 slot(s) created" in first.stdout
    second = occflow(env, "pools", "sync", str(DAGS))
    assert "pool occflow_db.sales: 3 slot(s) updated (was 3 slot(s))" in second.stdout
    listed = subprocess.run([str(Path(sys.executable).parent / "airflow"), "pools", "list", "-o", "json"],
                            env=env, capture_output=True, text=True, timeout=600)
    in_airflow = {p["pool"]: p for p in json.loads(listed.stdout)}
    assert int(in_airflow["occflow_db.sales"]["slots"]) == 3
    assert int(in_airflow["occflow_db.events"]["slots"]) == 1
    assert "occflow" in in_airflow["occflow_db.sales"]["description"]


EXAMPLES = Path(__file__).resolve().parents[2] / "dags_example"


@pytest.mark.airflow
def test_lint_reads_mapped_tasks_one_declaration_per_mapped_instance(airflow_home):
    # Airflow builds mapped tasks without calling the operator's __init__: the linter rebuilds
    # each instance's declaration from .partial(...) and the literal .expand(...) values.
    _, env = airflow_home
    done = occflow(env, "lint", str(EXAMPLES), "--format", "json")
    assert done.returncode == 1, done.stderr
    pairs = {(c["first"], c["second"]) for c in json.loads(done.stdout)["collisions"]}
    # MERGE upserts on four disjoint regions never collide with each other (each one only with
    # itself in a second concurrent run of the DAG) ...
    upserts = [(a, b) for a, b in pairs if "upsert_region[" in a and "upsert_region[" in b]
    assert upserts and all(a == b for a, b in upserts)
    # ... but each collides with the whole-table compaction next to it
    compactions = {a for a, b in pairs if b == "occflow_delta_merge_vs_compaction.compact" and a != b}
    assert compactions == {f"occflow_delta_merge_vs_compaction.upsert_region[{i}]" for i in range(4)}
    # the backfill's four days overwrite disjoint partitions: no collision among them
    assert not any("backfill_day[" in a and "backfill_day[" in b and a != b for a, b in pairs)
    assert ("occflow_iceberg_backfill.backfill_day[0]", "occflow_iceberg_backfill.backfill_day[0]") not in pairs


@pytest.mark.parametrize("where", ["missing.db", "no/such/dir/leases.db"])
def test_leases_against_a_missing_store_file_says_so_and_creates_nothing(tmp_path, capsys, where):
    path = tmp_path / where
    for verb in (["list"], ["reclaim"], ["release", "abc"]):
        assert main(["leases", "--store", f"sqlite:///{path}", *verb]) == 2
        err = capsys.readouterr().err
        assert str(path.parent if "/" in where else path) in err
        assert "does not exist" in err
    assert not path.exists() and not (tmp_path / "no").exists()
