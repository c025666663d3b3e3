"""Airflow multi-team mode (``[core] multi_team``): one lease store for every team, and pools that
follow Airflow's team rule (docs/assets.md, "Several teams").

A real multi-team deployment (one triggerer, executor and bundle per team) cannot start here, so
this uses Airflow's own pieces in one process: its environment-variable secrets backend
(``AIRFLOW_CONN__<TEAM>___<ID>``, which gives a team's tasks its own copy), its metadata DB's
``team`` / ``dag_bundle`` / ``connection.team_name`` / ``slot_pool.team_name`` rows, and a real
delta-rs write under ``dag.test()``. The oracles: Airflow's own resolution (a team's task really
gets the other store from Airflow's backend), delta-rs's log (nothing written), and the pools as
Airflow stores them, checked against the scheduler's rule (a team's task runs only in a pool of
its team or of none).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

pytestmark = pytest.mark.airflow

DAGS = Path(__file__).resolve().parents[1] / "leases" / "dags"


@pytest.fixture
def multi_team(monkeypatch, airflow_home):
    monkeypatch.setenv("AIRFLOW__CORE__MULTI_TEAM", "True")
    monkeypatch.delenv("OCCFLOW_LEASE_STORE_URL", raising=False)
    monkeypatch.setenv("OCCFLOW_LEASE_STORE_CONN_ID", "occflow_leases")
    return monkeypatch


def test_a_team_scoped_store_connection_is_refused_naming_the_variable(multi_team, tmp_path):
    from airflow.secrets.environment_variables import EnvironmentVariablesBackend

    from occflow.leases import resolve_store_url
    from occflow.leases.config import TeamScopedStoreError

    multi_team.setenv("AIRFLOW_CONN_OCCFLOW_LEASES", f"sqlite:///{tmp_path / 'shared.db'}")
    multi_team.setenv("AIRFLOW_CONN__ALPHA___OCCFLOW_LEASES", f"sqlite:///{tmp_path / 'alpha.db'}")
    # Airflow's own backend gives team alpha's tasks the other store: the split is real.
    backend = EnvironmentVariablesBackend()
    assert backend.get_conn_value("occflow_leases", team_name="alpha").endswith("alpha.db")
    assert backend.get_conn_value("occflow_leases").endswith("shared.db")
    with pytest.raises(TeamScopedStoreError, match=r"AIRFLOW_CONN__ALPHA___OCCFLOW_LEASES \(team ALPHA\)"):
        resolve_store_url()
    # Without multi-team mode Airflow never reads the team's variable: one store, resolved.
    multi_team.setenv("AIRFLOW__CORE__MULTI_TEAM", "False")
    assert resolve_store_url() == f"sqlite:///{tmp_path / 'shared.db'}"


def test_a_store_connection_owned_by_a_team_in_the_metadata_is_refused(multi_team, tmp_path):
    from airflow.models.connection import Connection
    from airflow.models.team import Team
    from airflow.utils.session import create_session

    from occflow.leases import resolve_store_url
    from occflow.leases.config import TeamScopedStoreError

    multi_team.setenv("OCCFLOW_LEASE_STORE_CONN_ID", "occflow_team_leases")
    with create_session() as session:
        session.merge(Team(name="alpha"))
        session.flush()  # the connection's team must exist first (a foreign key)
        session.add(Connection(conn_id="occflow_team_leases", uri=f"sqlite:///{tmp_path / 'a.db'}", team_name="alpha"))
    try:
        with pytest.raises(TeamScopedStoreError, match="belongs to team 'alpha'"):
            resolve_store_url()
    finally:
        with create_session() as session:
            session.query(Connection).filter(Connection.conn_id == "occflow_team_leases").delete()


def test_a_write_with_a_team_scoped_store_fails_before_it_writes(multi_team, run_dag, tmp_path):
    from deltalake import DeltaTable

    from occflow.engines.deltars import DeltaRsTable

    multi_team.setenv("AIRFLOW_CONN_OCCFLOW_LEASES", f"sqlite:///{tmp_path / 'shared.db'}")
    multi_team.setenv("AIRFLOW_CONN__BETA___OCCFLOW_LEASES", f"sqlite:///{tmp_path / 'beta.db'}")
    path = tmp_path / "t"
    assert DeltaRsTable(str(path)).create(pa.table({"id": pa.array([1], pa.int64())})).committed
    run = run_dag(f'''
import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from occflow.operators.delta import DeltaWriteOperator

with DAG("team_scoped_store", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(task_id="append", table="t", path={str(path)!r}, operation="insert_into",
                       data=pa.table({{"id": pa.array([2], pa.int64())}}))
''')
    assert run.task("append").state == "failed"
    error = run.task("append").xcom["occflow_report"]["error"]
    assert error.startswith("ended before its first attempt: TeamScopedStoreError") and "AIRFLOW_CONN__BETA___" in error
    assert DeltaTable(str(path)).version() == 0  # nothing written
    assert not (tmp_path / "shared.db").exists() and not (tmp_path / "beta.db").exists()  # no store opened


def test_pools_sync_gives_a_pool_its_writers_team_and_none_when_teams_share_it(multi_team, capsys):
    from airflow.models.dag import DagModel
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.pool import Pool
    from airflow.models.team import Team
    from airflow.utils.session import create_session

    from occflow.cli import main

    dags = {"sales_daily": "alpha", "sales_maintenance": "beta", "events_hourly": "alpha"}
    with create_session() as session:
        teams = {name: session.merge(Team(name=name)) for name in ("alpha", "beta")}
        for name, team in teams.items():
            bundle = session.merge(DagBundleModel(name=f"occflow_{name}_bundle"))
            bundle.teams = [team]
        for dag_id, team in dags.items():
            session.flush()
            session.merge(DagModel(dag_id=dag_id, bundle_name=f"occflow_{team}_bundle"))
    try:
        assert main(["pools", "sync", str(DAGS)]) == 0
        out = capsys.readouterr().out
        with create_session() as session:
            stored = {p.pool: p.team_name for p in session.query(Pool).filter(Pool.pool.like("occflow_%"))}
            team_of = DagModel.get_dag_id_to_team_name_mapping(list(dags), session=session)
        assert team_of == dags  # Airflow's own reading of the DAGs' teams
        assert main(["pools", "plan", str(DAGS), "--format", "json"]) == 0
        planned = json.loads(capsys.readouterr().out)
        for pool in planned:
            writers = {team_of[t["task"].split(".")[0]] for t in pool["tasks"]}
            # The scheduler's rule: a team's task runs only in a pool of its team or of none.
            assert stored[pool["name"]] in (None, *writers) and all(
                stored[pool["name"]] in (None, w) for w in writers), pool
            # And a pool is no wider than it must be: one team's writes keep that team.
            assert stored[pool["name"]] == (next(iter(writers)) if len(writers) == 1 else None)
        shared = [p for p in planned if p["team"] is None]
        assert shared and any("alpha, beta" in w for p in shared for w in p["warnings"]), planned
        assert "pool occflow_db.events: 1 slot(s), team alpha created" in out, out
    finally:
        with create_session() as session:
            session.query(Pool).filter(Pool.pool.like("occflow_%")).delete(synchronize_session=False)
            session.query(DagModel).filter(DagModel.dag_id.in_(list(dags))).delete(synchronize_session=False)
            for name in ("alpha", "beta"):
                bundle = session.get(DagBundleModel, f"occflow_{name}_bundle")
                if bundle is not None:
                    bundle.teams = []
                    session.delete(bundle)
