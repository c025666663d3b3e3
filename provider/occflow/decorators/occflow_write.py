"""``@task.occflow_write(...)``: the callable form of a write, as a TaskFlow decorator.

    @task.occflow_write(table="db.events", table_format="iceberg", operation="merge",
                        partitions={"ds": "{{ ds }}"})
    def upsert(spark, job):
        spark.sql(f"MERGE INTO lake.db.events t USING ... AND t.ds = '{job.params['ds']}' ...")

    upsert()                                   # one task
    upsert.expand(partitions=[{"ds": d} for d in days])   # one task per partition

The decorated function is the job: on Spark ``(spark, job_context)`` (``SparkWriteOperator``),
on delta-rs (``engine="delta-rs"``) ``(table, snapshot, partition, commit, context) ->
WriteOutcome`` (``DeltaWriteOperator``), on pyiceberg (``engine="pyiceberg"``) ``(table,
snapshot, commit, context) -> WriteOutcome`` (``PyIcebergWriteOperator``). Everything else is the operator's: the declaration is
validated when the DAG is parsed, and every attempt goes through admission, classification and
the conflict policy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..core.engines import EngineSpec, engine_specs
from ..core.errors import InvalidDeclarationError
from ..engines.registry import resolve
from ..operators.base import OccflowWriteOperator


def function_engines() -> tuple[EngineSpec, ...]:
    """The engines whose operator runs a Python function as its job (the engine registry's)."""
    return tuple(spec for spec in engine_specs() if spec.runs_functions)


def _function_engine(engine: str) -> EngineSpec:
    found = next((spec for spec in function_engines() if engine in (spec.name, *spec.aliases)), None)
    if found is None:
        names = tuple(spec.name for spec in function_engines())
        raise InvalidDeclarationError(f"@task.occflow_write: engine must be one of {names}, got {engine!r}")
    return found


class OccflowWriteTask:
    """What ``@task.occflow_write`` returns: call it to add the task, ``expand`` to map it."""

    def __init__(self, fn: Callable[..., Any], engine: str, operator_kwargs: dict[str, Any]) -> None:
        self.spec = _function_engine(engine)
        self.fn = fn
        self.engine = engine
        self.operator_kwargs = operator_kwargs
        functools.update_wrapper(self, fn)

    def _operator_class(self) -> type[OccflowWriteOperator]:
        """The engine's operator, as the engine registry names it (``core.engines``)."""
        operator = resolve(self.spec.operator)
        if not (isinstance(operator, type) and issubclass(operator, OccflowWriteOperator)):
            raise InvalidDeclarationError(
                f"engine {self.spec.name}: operator {self.spec.operator!r} is not an OccflowWriteOperator"
            )
        return operator

    def _kwargs(self, overrides: dict[str, Any]) -> dict[str, Any]:
        return {"task_id": self.fn.__name__, **self.operator_kwargs, **overrides, "job": self.fn}

    def __call__(self, **overrides: Any) -> Any:
        return self._operator_class()(**self._kwargs(overrides))

    def override(self, **overrides: Any) -> OccflowWriteTask:
        return OccflowWriteTask(self.fn, self.engine, {**self.operator_kwargs, **overrides})

    def expand(self, **mapped: Any) -> Any:
        """One task per mapped value (``partitions=[...]`` for a backfill)."""
        return self._operator_class().partial(**self._kwargs({})).expand(**mapped)


def occflow_write(
    python_callable: Callable[..., Any] | None = None, *, engine: str = "spark", **operator_kwargs: Any
) -> Any:
    """Decorate a job function into an occflow write task (see the module docstring)."""

    def wrap(fn: Callable[..., Any]) -> OccflowWriteTask:
        return OccflowWriteTask(fn, engine, operator_kwargs)

    if python_callable is not None:
        return wrap(python_callable)
    return wrap
