"""``occflow pools plan|sync DAG_FOLDER``: plain Airflow pools that give admission's protection.

In Airflow's multi-team mode a pool can belong to a team, and the scheduler runs a team's task
only in a pool of its team or in a pool without one. So a planned pool keeps the team of its
tasks' DAGs when they are all one team's, and has no team when it keeps apart the writes of
several teams (or of DAGs without a team): a pool of one team would never run the others' tasks.
A DAG's team is its bundle's, read from Airflow's metadata (``[core] multi_team`` on), or
``--team`` for a folder that is one team's bundle.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..core.errors import OccflowError
from ..lint.planning import DeclaredTask, PlannedPool, plan_pools
from . import SUBCOMMANDS
from .lint import scan_for


@dataclass(frozen=True)
class TeamPool:
    """A planned pool and the team it belongs to (``None``: every team's tasks may run in it)."""

    pool: PlannedPool
    team: str | None
    teams_writing: tuple[str, ...] = ()  # the teams whose tasks it keeps apart, when several

    @property
    def warnings(self) -> tuple[str, ...]:
        if len(self.teams_writing) < 2:
            return self.pool.warnings
        shared = (
            f"its writes are DAGs of {', '.join(self.teams_writing)}: the pool has no team, so every "
            "team's task can take its slots, and all of them must admit in one lease store"
        )
        return (*self.pool.warnings, shared)

    def to_dict(self) -> dict[str, object]:
        return {**self.pool.to_dict(), "team": self.team, "warnings": list(self.warnings)}


def pools_by_team(pools: Sequence[PlannedPool], tasks: Sequence[DeclaredTask],
                  team_of_dag: Mapping[str, str | None]) -> list[TeamPool]:
    """Each pool with its team: the one team of all its tasks' DAGs, else none."""
    dag_of = {t.ident: t.dag_id for t in tasks}
    out = []
    for pool in pools:
        teams = {team_of_dag.get(dag_of[task]) for task, _ in pool.task_slots}
        named = tuple(sorted(t or "DAGs without a team" for t in teams))
        team = next(iter(teams)) if len(teams) == 1 else None
        out.append(TeamPool(pool, team, named if len(teams) > 1 else ()))
    return out


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("pools", help=SUBCOMMANDS["pools"].help)
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb, text in (("plan", "print the pools and each task's pool_slots"),
                       ("sync", "create or update the planned pools in Airflow (AIRFLOW_HOME's database)")):
        v = verbs.add_parser(verb, help=text)
        v.add_argument("dag_folder", metavar="DAG_FOLDER")
        v.add_argument("--window", type=float, default=60.0, metavar="MINUTES",
                       help="runs of two DAGs starting this close may overlap (default 60)")
        v.add_argument("--team", metavar="TEAM", default=None,
                       help="the folder's DAGs are this team's (Airflow multi-team); default: each DAG's "
                            "team from Airflow's metadata when [core] multi_team is on, else none")
        v.add_argument("--format", choices=["text", "json"], default="text")
        v.set_defaults(func=_plan if verb == "plan" else _sync)


def _multi_team_mode() -> bool:
    from airflow.configuration import conf  # only with Airflow's configuration: read AIRFLOW_HOME

    return bool(conf.getboolean("core", "multi_team", fallback=False))


def _check_team(args: argparse.Namespace) -> None:
    """``--team`` names a team, and sync gives one only where Airflow keeps it: checked before
    the DAG folder is read."""
    if args.team is None:
        return
    if not args.team.strip():
        raise OccflowError("--team must name a team, got an empty name")
    if args.func is _sync and not _multi_team_mode():
        raise OccflowError(
            f"--team {args.team!r} gives the pools a team but Airflow's [core] multi_team is off: Airflow keeps "
            "no team on a pool then; drop --team or turn multi-team mode on"
        )


def _teams(args: argparse.Namespace, tasks: Sequence[DeclaredTask]) -> dict[str, str | None]:
    dag_ids = sorted({t.dag_id for t in tasks})
    if args.team is not None:
        return dict.fromkeys(dag_ids, args.team)
    if not _multi_team_mode():
        return {}
    from airflow.models.dag import DagModel
    from sqlalchemy.exc import SQLAlchemyError

    try:
        return dict(DagModel.get_dag_id_to_team_name_mapping(dag_ids))
    except SQLAlchemyError as exc:
        raise OccflowError(
            f"[core] multi_team is on but the DAGs' teams cannot be read from Airflow's metadata ({exc}); "
            "run where AIRFLOW_HOME's database is, or give the folder's team with --team"
        ) from None


def _planned(args: argparse.Namespace) -> tuple[list[TeamPool] | None, int]:
    """The pools (None when no DAG could be read) and the exit code: 2 when a DAG file failed
    to import, since the plan then misses its tasks."""
    _check_team(args)
    scanned = scan_for("pools", args.dag_folder)
    if scanned is None:
        return None, 2
    pools = plan_pools(scanned.tasks, window=args.window * 60)
    return pools_by_team(pools, scanned.tasks, _teams(args, scanned.tasks)), 2 if scanned.import_errors else 0


def _show(pools: list[TeamPool], fmt: str) -> None:
    if fmt == "json":
        print(json.dumps([p.to_dict() for p in pools], indent=2))
        return
    for tp in pools:
        p = tp.pool
        team = f" (team {tp.team})" if tp.team else ""
        print(f"pool {p.name}{team}: {p.slots} slot(s) — {p.description}")
        for task, slots in p.task_slots:
            # In a one-slot pool every task (and every instance of a mapped one) runs alone.
            role = "one at a time" if p.slots == 1 else "runs alone" if slots == p.slots else "shares"
            print(f"    {task}: pool={p.name!r}, pool_slots={slots}" + (f"  ({role})" if role else ""))
        for first, second in p.corrupting:
            pair = first if first == second else f"{first} and {second}"
            print(f"    corrupts data if run together, never share slots: {pair}")
        for w in tp.warnings:
            print(f"    warning: {w}")
    print(f"{len(pools)} pool(s)")


def _plan(args: argparse.Namespace) -> int:
    pools, code = _planned(args)
    if pools is not None:
        _show(pools, args.format)
    return code


def _sync(args: argparse.Namespace) -> int:
    pools, code = _planned(args)
    if pools is None or code:
        return code  # never sync a plan made from part of the DAG folder
    # Only `sync` needs Airflow's ORM: importing it reads AIRFLOW_HOME's configuration.
    from airflow.models.pool import Pool

    for tp in pools:
        p = tp.pool
        existing = Pool.get_pool(p.name)
        # include_deferred=False: a task deferred while waiting for admission holds no slot.
        # team_name always given: Airflow sets it on update too, so a pool now shared loses its old team.
        Pool.create_or_update_pool(p.name, p.slots, p.description, include_deferred=False, team_name=tp.team)
        state = "created" if existing is None else f"updated (was {existing.slots} slot(s))"
        print(f"pool {p.name}: {p.slots} slot(s){f', team {tp.team}' if tp.team else ''} {state}")
    if args.format == "json":
        _show(pools, args.format)
    return 0
