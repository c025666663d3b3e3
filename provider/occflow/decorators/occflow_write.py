"""``@task.occflow_write(...)``: the callable form of a write, as a TaskFlow decorator.

    @task.occflow_write(table="db.events", table_format="iceberg", operation="merge",
                        partitions={"ds": "{{ ds }}"})
    def upsert(spark, job):
        spark.sql(f"MERGE INTO lake.db.events t USING ... AND t.ds = '{job.params['ds']}' ...")

    upsert()                                   # one task
    upsert.expand(partitions=[{"ds": d} for d in days])   # one task per partition

The decorated function is the job: on Spark ``(spark, job_context)`` (``SparkWriteOperator``),
on delta-rs (``engine="delta-rs"``) ``(table, snapshot, partition, commit, context) ->
WriteOutcome`` (``DeltaWriteOperator``). Everything else is the operator's: the declaration is
validated when the DAG is parsed, and every attempt goes through admission, classification and
the conflict policy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..core.errors import InvalidDeclarationError
from ..operators.delta import DeltaWriteOperator
from ..operators.spark import SparkWriteOperator

ENGINES = ("spark", "delta-rs")


class OccflowWriteTask:
    """What ``@task.occflow_write`` returns: call it to add the task, ``expand`` to map it."""

    def __init__(self, fn: Callable[..., Any], engine: str, operator_kwargs: dict[str, Any]) -> None:
        if engine not in ENGINES:
            raise InvalidDeclarationError(f"@task.occflow_write: engine must be one of {ENGINES}, got {engine!r}")
        self.fn = fn
        self.engine = engine
        self.operator_kwargs = operator_kwargs
        functools.update_wrapper(self, fn)

    def _operator_class(self) -> type[Any]:
        return DeltaWriteOperator if self.engine == "delta-rs" else SparkWriteOperator

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
