"""Read declared writes out of a DAG folder with Airflow's own DagBag.

A task declares its write with an ``occflow_write`` attribute holding a ``WriteDeclaration``
(occflow's write operators set it; any operator may carry one).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.declaration import WriteDeclaration
from ..core.errors import InvalidDeclarationError
from .planning import DeclaredTask

# Schedules are compared over the same stretch of calendar: 35 days (every daily, weekly and
# monthly pattern shows up) from a fixed Monday, so the result does not depend on today.
REFERENCE = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
HORIZON = dt.timedelta(days=35)
MAX_FIRINGS = 5000


@dataclass(frozen=True)
class ScannedFolder:
    tasks: tuple[DeclaredTask, ...]
    dag_ids: tuple[str, ...]
    import_errors: dict[str, str]


def _firings(dag: Any) -> tuple[tuple[float, ...] | None, str]:
    """Start times (seconds after REFERENCE) of the DAG's runs, or None if not time-scheduled."""
    timetable = dag.timetable
    expression = getattr(timetable, "expression", None)
    delta = getattr(timetable, "delta", None)
    if isinstance(expression, str):
        from croniter import croniter

        it = croniter(expression, REFERENCE - dt.timedelta(seconds=1))
        times: list[float] = []
        while len(times) < MAX_FIRINGS:
            t = it.get_next(dt.datetime)
            if t >= REFERENCE + HORIZON:
                break
            times.append((t - REFERENCE).total_seconds())
        return tuple(times), f"cron {expression}"
    if isinstance(delta, dt.timedelta) and delta.total_seconds() > 0:
        start = dag.start_date or REFERENCE
        step = delta.total_seconds()
        offset = ((start - REFERENCE).total_seconds()) % step  # runs are start + k*delta
        count = min(int(HORIZON.total_seconds() // step) + 1, MAX_FIRINGS)
        return tuple(offset + k * step for k in range(count)), f"every {delta}"
    name = type(timetable).__name__
    return None, {"NullTimetable": "manual", "OnceTimetable": "once"}.get(name, name)


def scan_dag_folder(folder: str | Path) -> ScannedFolder:
    """Every task in ``folder``'s DAGs that declares a write (``occflow_write``)."""
    folder = Path(folder)
    if not folder.exists():
        raise InvalidDeclarationError(f"DAG folder {str(folder)!r} does not exist")
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    # Airflow logs to stdout; the CLI's stdout is its report (JSON may be piped on).
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
    with contextlib.redirect_stdout(sys.stderr):
        from airflow.dag_processing.dagbag import DagBag

        bag = DagBag(str(folder), safe_mode=False)
    tasks: list[DeclaredTask] = []
    for dag_id in sorted(bag.dags):
        dag = bag.dags[dag_id]
        firings, schedule = _firings(dag)
        for task in dag.tasks:
            write = getattr(task, "occflow_write", None)
            if write is None:
                continue
            if not isinstance(write, WriteDeclaration):
                raise InvalidDeclarationError(
                    f"{dag_id}.{task.task_id}: occflow_write must be a WriteDeclaration "
                    f"(WriteDeclaration.create(...)), got {type(write).__name__}"
                )
            tasks.append(
                DeclaredTask(
                    dag_id=dag_id,
                    task_id=task.task_id,
                    write=write,
                    upstream=frozenset(task.get_flat_relative_ids(upstream=True)),
                    max_active_runs=int(dag.max_active_runs or 1),
                    firings=firings,
                    schedule=schedule,
                    pool=getattr(task, "pool", None),
                )
            )
    return ScannedFolder(tuple(tasks), tuple(sorted(bag.dags)), dict(bag.import_errors))


def describe_tasks(tasks: Sequence[DeclaredTask]) -> list[str]:
    return [f"{t.ident}: {t.write.operation.value} on {t.write.table}" for t in tasks]
