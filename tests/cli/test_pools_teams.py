"""``occflow pools plan|sync`` and Airflow's teams (docs/assets.md, "Several teams").

The DAGs are tests/leases/dags, read with Airflow's DagBag. The oracle for a pool's team is the
scheduler's rule (Airflow 3.3, ``PoolSlotsAvailableDep``): a task of a team's DAG runs only in a
pool of that team or of none; a pool is given no wider scope than that rule needs. Sync against a
real multi-team metadata DB is tests/airflow/test_multi_team.py.
"""

from __future__ import annotations

from pathlib import Path

from occflow.cli import main

DAGS = Path(__file__).resolve().parents[1] / "leases" / "dags"


def _runs_in(pool_team: str | None, dag_team: str | None) -> bool:
    """Airflow's rule for a task of a DAG of ``dag_team`` in a pool of ``pool_team``."""
    return pool_team is None or pool_team == dag_team


def test_each_pool_runs_every_task_it_keeps_apart_and_keeps_a_single_teams_scope():
    from occflow.cli.lint import scan_for
    from occflow.cli.pools import pools_by_team
    from occflow.lint.planning import plan_pools

    scanned = scan_for("pools", str(DAGS))
    assert scanned is not None
    pools = plan_pools(scanned.tasks)
    dag_of = {t.ident: t.dag_id for t in scanned.tasks}
    for teams in (
        {"sales_daily": "alpha", "sales_maintenance": "alpha", "events_hourly": "beta"},
        {"sales_daily": "alpha", "sales_maintenance": "beta", "events_hourly": "beta"},
        {"sales_daily": "alpha", "sales_maintenance": None, "events_hourly": None},
    ):
        planned = pools_by_team(pools, scanned.tasks, teams)
        assert {tp.pool.name for tp in planned} == {"occflow_db.sales", "occflow_db.events"}
        for tp in planned:
            writers = {teams[dag_of[task]] for task, _ in tp.pool.task_slots}
            assert all(_runs_in(tp.team, w) for w in writers), (tp.pool.name, tp.team, writers)
            assert tp.team == (next(iter(writers)) if len(writers) == 1 else None)
            shared = [w for w in tp.warnings if "must admit in one lease store" in w]
            assert bool(shared) == (len(writers) > 1)


def test_plan_with_team_gives_the_folders_pools_that_team(capsys):
    assert main(["pools", "plan", str(DAGS), "--team", "alpha"]) == 0
    heads = [line for line in capsys.readouterr().out.splitlines() if line.startswith("pool ")]
    assert len(heads) == 2 and all(" (team alpha): " in line for line in heads), heads


def test_a_team_that_airflow_cannot_keep_or_names_nothing_is_refused_before_the_folder_is_read(capsys, monkeypatch):
    monkeypatch.setenv("AIRFLOW__CORE__MULTI_TEAM", "False")
    assert main(["pools", "sync", str(DAGS), "--team", "alpha"]) == 2
    out = capsys.readouterr()
    assert "multi_team is off" in out.err and "created" not in out.out and "updated" not in out.out
    assert main(["pools", "plan", str(DAGS), "--team", " "]) == 2
    assert "--team must name a team" in capsys.readouterr().err
