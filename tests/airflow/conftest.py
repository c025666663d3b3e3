"""A real Airflow for the tests under tests/airflow: its own AIRFLOW_HOME, DB and DAG folder.

Airflow reads its configuration when it is first imported, so the environment is set here, at
import time of this conftest, before any test module imports ``airflow``. The metadata DB is
migrated once per session with the real ``airflow db migrate`` command.

Helpers (fixtures):

- ``airflow_home``: the session's AIRFLOW_HOME (``dags/`` is the configured DAG folder).
- ``run_dag(source, dag_id=None, filename=None, run_conf=None)``: writes ``source`` as a DAG file
  into the configured DAG folder (``dag.test()`` only runs DAGs found there), parses it with a
  real ``DagBag`` (an import error fails the test with Airflow's message), runs ``dag.test()``
  and returns a ``DagTestRun``: the run's state, and per task every try (state, start and end,
  the retry delay and reason the retry policy gave) and the XCom values.

Example::

    def test_something(run_dag):
        run = run_dag('''
            from airflow.sdk import DAG
            from airflow.providers.standard.operators.python import PythonOperator
            with DAG("demo", schedule=None):
                PythonOperator(task_id="t", python_callable=lambda: 1)
        ''')
        assert run.task("t").state == "success"
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

# ----------------------------------------------------------------- environment, before airflow

_HOME = Path(os.environ.get("OCCFLOW_TEST_AIRFLOW_HOME") or tempfile.mkdtemp(prefix="occflow-airflow-"))
_DAGS = _HOME / "dags"
_DAGS.mkdir(parents=True, exist_ok=True)

AIRFLOW_ENV: dict[str, str] = {
    "AIRFLOW_HOME": str(_HOME),
    "AIRFLOW__CORE__DAGS_FOLDER": str(_DAGS),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME / 'airflow.db'}",
    "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(_HOME / "logs"),
    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
    "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "1",
    # Retry delays in the tests are seconds long; the default caps would not matter, but a
    # task's own retry_delay default (300 s) must never be what a test waits for.
    "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "1",
    "AIRFLOW__CORE__DEFAULT_TASK_RETRIES": "0",
}

if "airflow" in sys.modules and os.environ.get("AIRFLOW_HOME") != str(_HOME):
    # Some module imported airflow before this conftest: its configuration is already fixed.
    raise RuntimeError(
        "airflow was imported before tests/airflow/conftest.py could point it at a test home; "
        "set OCCFLOW_TEST_AIRFLOW_HOME or run tests/airflow in its own pytest process"
    )
os.environ.update(AIRFLOW_ENV)

_AIRFLOW_BIN = Path(sys.executable).with_name("airflow")


# ----------------------------------------------------------------- results of one dag.test()


@dataclass(frozen=True)
class TryRecord:
    """One try of a task instance, as the metadata DB recorded it."""

    try_number: int
    state: str | None
    start_date: datetime | None
    end_date: datetime | None
    retry_delay_override: float | None = None
    retry_reason: str | None = None


@dataclass(frozen=True)
class TaskResult:
    task_id: str
    map_index: int
    state: str | None
    try_number: int
    tries: tuple[TryRecord, ...]
    xcom: Mapping[str, Any] = field(default_factory=dict)

    def gap_before_try(self, try_number: int) -> float:
        """Seconds between the end of try ``try_number - 1`` and the start of ``try_number``."""
        by_number = {t.try_number: t for t in self.tries}
        previous, this = by_number[try_number - 1], by_number[try_number]
        assert previous.end_date is not None and this.start_date is not None
        return (this.start_date - previous.end_date).total_seconds()


@dataclass(frozen=True)
class DagTestRun:
    dag_id: str
    run_id: str
    state: str | None
    tasks: Mapping[tuple[str, int], TaskResult]
    dag_file: Path

    def task(self, task_id: str, map_index: int = -1) -> TaskResult:
        try:
            return self.tasks[(task_id, map_index)]
        except KeyError:
            raise AssertionError(f"no task {task_id!r}[{map_index}] in run; have {sorted(self.tasks)}") from None


def _state(value: Any) -> str | None:
    return None if value is None else str(getattr(value, "value", value))


def _collect(dag_id: str, run_id: str, dag_file: Path, state: Any) -> DagTestRun:
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    tasks: dict[tuple[str, int], TaskResult] = {}
    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
        ).all()
        for ti in tis:
            history = session.scalars(
                select(TaskInstanceHistory).where(
                    TaskInstanceHistory.dag_id == dag_id,
                    TaskInstanceHistory.run_id == run_id,
                    TaskInstanceHistory.task_id == ti.task_id,
                    TaskInstanceHistory.map_index == ti.map_index,
                )
            ).all()
            tries = [
                TryRecord(
                    h.try_number,
                    _state(h.state),
                    h.start_date,
                    h.end_date,
                    getattr(h, "retry_delay_override", None),
                    getattr(h, "retry_reason", None),
                )
                for h in history
            ]
            tries.append(
                TryRecord(
                    ti.try_number,
                    _state(ti.state),
                    ti.start_date,
                    ti.end_date,
                    getattr(ti, "retry_delay_override", None),
                    getattr(ti, "retry_reason", None),
                )
            )
            xcoms = session.scalars(
                select(XComModel).where(
                    XComModel.dag_id == dag_id,
                    XComModel.run_id == run_id,
                    XComModel.task_id == ti.task_id,
                    XComModel.map_index == ti.map_index,
                )
            ).all()
            tasks[(ti.task_id, ti.map_index)] = TaskResult(
                task_id=ti.task_id,
                map_index=ti.map_index,
                state=_state(ti.state),
                try_number=ti.try_number,
                tries=tuple(sorted(tries, key=lambda t: t.try_number)),
                xcom={x.key: XComModel.deserialize_value(x) for x in xcoms},
            )
    return DagTestRun(dag_id, run_id, _state(state), tasks, dag_file)


# ----------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def airflow_home() -> Iterator[Path]:
    """AIRFLOW_HOME with a migrated metadata DB (``airflow db migrate``, once per session)."""
    if not _AIRFLOW_BIN.exists():
        pytest.fail(f"the airflow command is not next to {sys.executable}: install requirements.lock")
    done = subprocess.run(
        [str(_AIRFLOW_BIN), "db", "migrate"],
        env={**os.environ, **AIRFLOW_ENV},
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        pytest.fail(f"airflow db migrate failed ({done.returncode}):\n{done.stderr[-4000:]}")
    from airflow import settings

    settings.configure_orm()
    yield _HOME
    if not os.environ.get("OCCFLOW_TEST_AIRFLOW_HOME"):
        shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def dag_folder(airflow_home: Path) -> Path:
    return airflow_home / "dags"


def load_dag(dag_file: Path, dag_id: str | None = None) -> Any:
    """Parse ``dag_file`` with a real DagBag; an import error fails with Airflow's message."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(dag_file))
    if bag.import_errors:
        raise AssertionError(f"DAG file {dag_file} does not import:\n" + "\n".join(bag.import_errors.values()))
    if dag_id is None:
        if len(bag.dags) != 1:
            raise AssertionError(f"{dag_file} defines {sorted(bag.dags)}; pass dag_id")
        return next(iter(bag.dags.values()))
    return bag.dags[dag_id]


@pytest.fixture(scope="session")
def stored_xcom() -> Callable[[str, str, str, str], Any]:
    """Read one XCom value of a finished run from Airflow's metadata DB (as the UI reads it)."""

    def read(dag_id: str, run_id: str, task_id: str, key: str) -> Any:
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            stored = session.scalars(
                select(XComModel).where(XComModel.dag_id == dag_id, XComModel.run_id == run_id,
                                        XComModel.task_id == task_id, XComModel.key == key)
            ).one()
            return XComModel.deserialize_value(stored)

    return read


@pytest.fixture
def run_dag(dag_folder: Path) -> Callable[..., DagTestRun]:
    """Write a DAG file into the DAG folder, run ``dag.test()`` on it, return what happened."""

    def run(
        source: str,
        dag_id: str | None = None,
        filename: str | None = None,
        run_conf: dict[str, Any] | None = None,
    ) -> DagTestRun:
        name = filename or f"test_dag_{uuid.uuid4().hex[:10]}.py"
        dag_file = dag_folder / name
        dag_file.write_text(textwrap.dedent(source))
        dag = load_dag(dag_file, dag_id)
        dr = dag.test(run_conf=run_conf)
        return _collect(dag.dag_id, dr.run_id, dag_file, dr.state)

    return run


# ----------------------------------------------------------------- metrics


@dataclass
class StatsCall:
    method: str
    stat: str
    value: Any
    tags: Mapping[str, Any]


class CapturingStatsLogger:
    """A StatsLogger backend (Airflow's protocol) that keeps every call instead of sending it.

    Installed with Airflow's own ``Stats.initialize``; ``dag.test()`` runs tasks in this process,
    so what tasks and retry policies emit lands here.
    """

    def __init__(self) -> None:
        self.calls: list[StatsCall] = []

    def incr(self, stat: str, count: int = 1, rate: float = 1, *, tags: dict[str, Any] | None = None) -> None:
        self.calls.append(StatsCall("incr", stat, count, dict(tags or {})))

    def decr(self, stat: str, count: int = 1, rate: float = 1, *, tags: dict[str, Any] | None = None) -> None:
        self.calls.append(StatsCall("decr", stat, count, dict(tags or {})))

    def gauge(
        self, stat: str, value: float, rate: float = 1, delta: bool = False, *, tags: dict[str, Any] | None = None
    ) -> None:
        self.calls.append(StatsCall("gauge", stat, value, dict(tags or {})))

    def timing(self, stat: str, dt: Any, *, tags: dict[str, Any] | None = None) -> None:
        self.calls.append(StatsCall("timing", stat, dt, dict(tags or {})))

    def timer(self, *args: Any, **kwargs: Any) -> Any:
        from airflow.sdk._shared.observability.metrics.protocols import Timer

        return Timer()

    def named(self, prefix: str) -> list[StatsCall]:
        return [c for c in self.calls if c.stat.startswith(prefix)]


@pytest.fixture
def stats_capture() -> Iterator[CapturingStatsLogger]:
    """Route Airflow's ``Stats`` to a capturing backend for one test, then restore it."""
    from airflow.sdk._shared.observability.metrics import stats as stats_module

    backend = CapturingStatsLogger()
    previous = (stats_module._factory, stats_module._export_legacy_names)
    stats_module.initialize(factory=lambda: backend, export_legacy_names=False)
    try:
        yield backend
    finally:
        from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger

        stats_module.initialize(factory=previous[0] or NoStatsLogger, export_legacy_names=previous[1])
