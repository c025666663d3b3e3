"""Read declared writes out of a DAG folder with Airflow's own DagBag.

A task declares its write with an ``occflow_write`` attribute holding a ``WriteDeclaration``
(occflow's write operators set it; any operator may carry one). occflow's operators also name
the engine that commits the write (``engine_name``), whose own matrix the linter applies too.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import multiprocessing
import os
import pickle
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from croniter import croniter

from ..core.declaration import WriteDeclaration
from ..core.errors import InvalidDeclarationError
from .planning import DeclaredTask

# Schedules are compared over the same stretch of calendar: 35 days (every daily, weekly and
# monthly pattern shows up) from a fixed Monday, so the result does not depend on today.
REFERENCE = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
HORIZON = dt.timedelta(days=35)
MAX_FIRINGS = 5000


class DagFolderError(InvalidDeclarationError):
    """The DAG folder cannot be linted: it is missing or holds no DAG."""


@dataclass(frozen=True)
class ScannedFolder:
    tasks: tuple[DeclaredTask, ...]
    dag_ids: tuple[str, ...]
    import_errors: dict[str, str]

    def import_problems(self) -> list[str]:
        """One line per DAG file that failed to import: its path and the error (no traceback)."""
        return [f"cannot import {path}: {_last_line(error)}" for path, error in sorted(self.import_errors.items())]


def _last_line(error: str) -> str:
    lines = error.strip().splitlines()
    return lines[-1] if lines else "(no message)"


def _firings(dag: Any) -> tuple[tuple[float, ...] | None, str]:
    """Start times (seconds after REFERENCE) of the DAG's runs, or None if not time-scheduled."""
    timetable = dag.timetable
    expression = getattr(timetable, "expression", None)
    delta = getattr(timetable, "delta", None)
    if isinstance(expression, str):
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
    """Every task in ``folder``'s DAGs that declares a write (``occflow_write``).

    A missing folder, or one without a DAG and without a file that failed to import, is a
    ``DagFolderError``: linting nothing must not pass. Files that fail to import are in
    ``import_errors``. The DAG files run in a child process: one that ends the interpreter
    (``os._exit(0)`` at import) is an error here, not a lint that passed with no report.
    """
    folder = Path(folder)
    if not folder.exists():
        raise DagFolderError(f"DAG folder {str(folder)!r} does not exist")
    context = multiprocessing.get_context("fork")
    received, sent = context.Pipe(duplex=False)
    child = context.Process(target=_scan_into, args=(folder, sent), daemon=True)
    child.start()
    sent.close()
    try:
        result = received.recv()
    except EOFError:
        child.join()
        raise DagFolderError(
            f"reading the DAG files in {str(folder)!r} ended the process (exit code {child.exitcode}) before "
            "it could report: a DAG file exits the interpreter when imported (os._exit, a signal)"
        ) from None
    finally:
        received.close()
    child.join()
    if isinstance(result, BaseException):
        raise result
    scanned: ScannedFolder = result
    return scanned


def _scan_into(folder: Path, sent: Any) -> None:
    """The child's side of ``scan_dag_folder``: the scan, or the error it raised, sent back."""
    try:
        found: Any = _scan(folder)
    except BaseException as exc:  # noqa: BLE001 - the parent raises it (or what it says)
        found = exc
    if not _picklable(found):
        found = DagFolderError(f"the scan of {str(folder)!r} cannot be sent back: {found!r:.300}")
    sent.send(found)
    sent.close()


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value)
    except Exception:  # noqa: BLE001 - any reason it cannot cross the pipe
        return False
    return True


def _scan(folder: Path) -> ScannedFolder:
    bag = _dag_bag(folder)
    if not bag.dags and not bag.import_errors:
        read = len(getattr(bag, "dagbag_stats", ()) or ())
        raise DagFolderError(
            f"no DAG in {str(folder)!r}: {read} file(s) read, none defines a DAG" if read
            else f"no DAG files (*.py, *.zip) in {str(folder)!r}"
        )
    tasks: list[DeclaredTask] = []
    for dag_id in sorted(bag.dags):
        dag = bag.dags[dag_id]
        firings, schedule = _firings(dag)
        for task in dag.tasks:
            for declared in _declared_writes(dag_id, task):
                tasks.append(
                    DeclaredTask(
                        dag_id=dag_id,
                        task_id=declared.task_id,
                        write=declared.write,
                        upstream=frozenset(task.get_flat_relative_ids(upstream=True)),
                        max_active_runs=int(dag.max_active_runs or 1),
                        firings=firings,
                        schedule=schedule,
                        pool=getattr(task, "pool", None),
                        engine=_engine(task),
                        admission=declared.admission,
                        lease_store=declared.lease_store,
                        source=getattr(dag, "fileloc", None),
                        map_index=declared.map_index,
                        mapped_unknown=declared.mapped_unknown,
                        max_active_tis_per_dag=_limit(task, "max_active_tis_per_dag"),
                        max_active_tis_per_dagrun=_limit(task, "max_active_tis_per_dagrun"),
                    )
                )
    return ScannedFolder(tuple(tasks), tuple(sorted(bag.dags)), dict(bag.import_errors))


def _dag_bag(folder: Path) -> Any:
    """Airflow's DagBag of ``folder``, read without Airflow's own log lines on our output."""
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    # Airflow logs to stdout; the CLI's stdout is its report (JSON may be piped on).
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
    # A file that fails to import is reported by the CLI in one line; Airflow would also log it,
    # with its traceback, through structlog (this setting) and the stdlib logger (below).
    os.environ.setdefault("AIRFLOW__LOGGING__NAMESPACE_LEVELS", "airflow.dag_processing=CRITICAL")
    with contextlib.redirect_stdout(sys.stderr):
        # Imported here, after the settings above: importing Airflow reads its configuration
        # and sets up its logging and ORM; the linter then needs no Airflow at import time.
        from airflow.dag_processing.dagbag import DagBag

        quiet = logging.getLogger("airflow.dag_processing")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)
        try:
            return DagBag(str(folder), safe_mode=False)
        finally:
            quiet.setLevel(level)


def _limit(task: Any, name: str) -> int | None:
    """One of the task's concurrency limits (a mapped task keeps it in ``partial_kwargs``)."""
    value = getattr(task, name, None)
    if value is None:
        value = (getattr(task, "partial_kwargs", None) or {}).get(name)
    return value if isinstance(value, int) else None


def _engine(task: Any) -> str | None:
    """The engine that commits the task's write, as occflow's operators name it.

    A mapped task has no operator instance at parse time: its class names the engine.
    """
    name = getattr(task, "engine_name", None)
    if not isinstance(name, str):
        name = getattr(getattr(task, "operator_class", None), "engine_name", None)
    return name if isinstance(name, str) else None


_UNKNOWN = "_mapped_over_upstream"  # marks the one instance standing for an unknown expansion
_DECLARATION_ARGS = ("table", "operation", "profile", "table_format", "partitions", "reads_whole_table", "path")
_ADMISSION_ARGS = ("admission", "lease_store_url", "allow_unsafe_concurrency")


@dataclass(frozen=True)
class _Declared:
    task_id: str
    write: WriteDeclaration
    admission: bool
    lease_store: str | None
    map_index: int | None = None
    # One record for every instance of a run: mapped over an upstream result (footprints not
    # known yet) or over arguments that leave the footprint alone.
    mapped_unknown: bool = False


def _declared_writes(dag_id: str, task: Any) -> list[_Declared]:
    """A task's declared write; a mapped task's, one per mapped instance.

    Airflow builds a mapped task without calling the operator's ``__init__``, so its declaration
    is rebuilt from ``.partial(...)`` and the literal ``.expand(...)`` values. An expansion over
    an upstream result is unknown at parse time: each instance is taken to touch the whole table.
    """
    write = getattr(task, "occflow_write", None)
    if write is not None:
        if not isinstance(write, WriteDeclaration):
            raise InvalidDeclarationError(
                f"{dag_id}.{task.task_id}: occflow_write must be a WriteDeclaration "
                f"(WriteDeclaration.create(...)), got {type(write).__name__}"
            )
        admission = getattr(task, "admission", False)
        store = getattr(task, "lease_store_url", None)
        return [_Declared(task.task_id, write, admission is True, store if isinstance(store, str) else None)]
    partial_kwargs = getattr(task, "partial_kwargs", None)
    operator_class = getattr(task, "operator_class", None)
    if not isinstance(partial_kwargs, dict) or "table" not in partial_kwargs:
        return []
    if not isinstance(operator_class, type) or not hasattr(operator_class, "default_table_format"):
        return []
    fixed = {k: partial_kwargs[k] for k in (*_DECLARATION_ARGS, *_ADMISSION_ARGS) if k in partial_kwargs}
    instances = _mapped_instances(getattr(getattr(task, "expand_input", None), "value", None))
    out = []
    for index, extra in enumerate(instances):
        args = {"admission": True, **fixed, **extra}  # occflow's operators admit by default
        if args.get("table_format") is None and not args.get("profile"):
            args["table_format"] = operator_class.default_table_format
        # The operator's own parse-time declaration where it has one (delta-rs adds the
        # table's location: its identity to admission), else the declaration's arguments alone.
        declared = getattr(operator_class, "parse_time_declaration", None)
        with warnings.catch_warnings():  # the DAG's import said them already, once
            warnings.simplefilter("ignore")
            write = declared({**args, "task_id": task.task_id}) if callable(declared) else None
        if not isinstance(write, WriteDeclaration):
            write = WriteDeclaration.create(
                args["table"],
                args["operation"],
                profile=args.get("profile"),
                table_format=args.get("table_format"),
                partitions=args.get("partitions"),
                reads_whole_table=bool(args.get("reads_whole_table", False)),
                allow_templates=True,
            )
        mapped = len(instances) > 1
        store = args.get("lease_store_url")
        out.append(_Declared(f"{task.task_id}[{index}]" if mapped else task.task_id, write,
                             args["admission"] is True, store if isinstance(store, str) else None,
                             index if mapped else None, mapped_unknown=bool(extra.get(_UNKNOWN))))
    return out


def _mapped_instances(expanded: Any) -> list[dict[str, Any]]:
    """The declaration arguments of each mapped instance (``[{}]``: one, nothing mapped)."""
    if not isinstance(expanded, dict):
        return [{}]
    mapped = {k: v for k, v in expanded.items() if k in (*_DECLARATION_ARGS, *_ADMISSION_ARGS)}
    if mapped and all(isinstance(v, list) for v in mapped.values()):
        return [dict(zip(mapped, values, strict=False)) for values in zip(*mapped.values(), strict=False)]
    if mapped:  # mapped over an upstream result: unknown footprint, assume the whole table
        unknown: dict[str, Any] = {"partitions": None, _UNKNOWN: True}
        if "admission" in mapped:
            unknown["admission"] = False  # unknown at parse time: not counted as protection
        return [unknown]
    # Mapped over other arguments (the data, the job): every instance writes the same footprint.
    return [{_UNKNOWN: True}] if expanded else [{}]

