"""The three shapes of a Spark write job: SQL text, a Python callable ``(spark, context)``, or a
PySpark application file; each says which operation it performs when it can tell."""

from __future__ import annotations

import importlib
import runpy
import sys
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.errors import InvalidDeclarationError
from ...core.operations import Operation, parse_operation
from ...core.sql import split_statements
from .iceberg_rewrite import run_statement


@dataclass(frozen=True)
class JobContext:
    """What a callable job is told about the write it performs."""

    table: str
    operation: Operation
    params: Mapping[str, str] = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)


@dataclass(frozen=True)
class SqlJob:
    """SQL text run statement by statement, split as ``core.sql`` splits it to check it (so a
    write task's check reads exactly the statements that run)."""

    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not split_statements(self.text):
            raise InvalidDeclarationError(f"SQL job has no statement: {self.text!r}")

    @property
    def statements(self) -> list[str]:
        return split_statements(self.text)

    def operation(self) -> Operation | None:
        """The first statement that is a write names the job's operation."""
        for statement in self.statements:
            try:
                return parse_operation(statement)
            except InvalidDeclarationError:
                continue
        return None

    def run(self, spark: Any, context: JobContext) -> None:
        for statement in self.statements:
            run_statement(spark, statement)

    def describe(self) -> str:
        return "sql: " + " ".join(self.text.split())[:200]


@dataclass(frozen=True)
class CallableJob:
    fn: Callable[[Any, JobContext], None]

    @classmethod
    def from_reference(cls, reference: str) -> CallableJob:
        """``package.module:function`` → the callable it names."""
        module_name, sep, attr = reference.partition(":")
        if not sep or not module_name or not attr:
            raise InvalidDeclarationError(
                f"callable reference {reference!r} must look like 'package.module:function'"
            )
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise InvalidDeclarationError(f"cannot import module {module_name!r} for job {reference!r}: {exc}") from exc
        target: Any = module
        for part in attr.split("."):
            if not hasattr(target, part):
                raise InvalidDeclarationError(f"module {module_name!r} has no attribute {attr!r}")
            target = getattr(target, part)
        if not callable(target):
            raise InvalidDeclarationError(f"{reference!r} is not callable")
        return cls(target)

    def operation(self) -> Operation | None:
        return None

    def run(self, spark: Any, context: JobContext) -> None:
        self.fn(spark, context)

    def describe(self) -> str:
        return f"callable: {getattr(self.fn, '__module__', '?')}.{getattr(self.fn, '__qualname__', repr(self.fn))}"


_argv_lock = threading.Lock()


@dataclass(frozen=True)
class ApplicationJob:
    """A PySpark application file. In-process it runs as ``__main__`` with ``sys.argv`` set and
    finds the engine's session through ``SparkSession.builder.getOrCreate()``."""

    path: str
    args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not str(self.path).endswith(".py"):
            raise InvalidDeclarationError(f"application file must be a .py file, got {self.path!r}")
        object.__setattr__(self, "path", str(self.path))
        object.__setattr__(self, "args", tuple(str(a) for a in self.args))

    def operation(self) -> Operation | None:
        return None

    def run(self, spark: Any, context: JobContext) -> None:
        if not Path(self.path).is_file():
            raise InvalidDeclarationError(f"application file {self.path!r} does not exist")
        with _argv_lock:  # sys.argv is process-wide; applications read it at start
            saved = sys.argv
            sys.argv = [self.path, *self.args]
            try:
                runpy.run_path(self.path, run_name="__main__")
            except SystemExit as exc:
                if exc.code not in (None, 0):
                    raise RuntimeError(f"application {self.path} exited with status {exc.code}") from exc
            finally:
                sys.argv = saved

    def describe(self) -> str:
        return f"application: {self.path} {' '.join(self.args)}".strip()


Job = SqlJob | CallableJob | ApplicationJob


def as_job(job: Job | str | Path | Callable[[Any, JobContext], None]) -> Job:
    """A string is SQL, a ``Path`` an application file, a callable a callable job."""
    if isinstance(job, (SqlJob, CallableJob, ApplicationJob)):
        return job
    if isinstance(job, Path):
        return ApplicationJob(str(job))
    if isinstance(job, str):
        return SqlJob(job)
    if callable(job):
        return CallableJob(job)
    raise InvalidDeclarationError(
        f"a job is SQL text, a callable (spark, context) or an application file Path; got {type(job).__name__}"
    )

