"""Run write jobs on Spark and return one ``WriteOutcome`` per job.

A job is SQL (one string, possibly several statements), a Python callable ``(spark, context)``,
or a PySpark application file. The table format decides the session's jars and SQL extensions
and how the committed version is found: Iceberg (``iceberg.py``), Delta via delta-spark
(``delta_spark.py``), or plain Parquet/Hive tables, which detect no conflicts at all.

PySpark is imported inside functions, so importing this module costs nothing and ``occflow``
stays usable where Spark is not installed.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import runpy
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from ..core.errors import InvalidDeclarationError
from ..core.kinds import Classification
from ..core.operations import Operation, parse_operation
from .outcome import ErrorInfo, WriteOutcome

log = logging.getLogger(__name__)

TABLE_FORMATS = ("iceberg", "delta", "parquet", "hive")


class SparkConfigError(InvalidDeclarationError):
    """A Spark configuration (or an Airflow connection's extras) that cannot be used."""


class NoConflictDetectionWarning(UserWarning):
    """The table format detects no write conflicts: only admission control protects the table."""


# ---------------------------------------------------------------------------------------------
# Configuration


def _str_mapping(value: object, what: str) -> Mapping[str, str]:
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, Mapping):
        raise SparkConfigError(f"{what} must be a mapping of strings, got {type(value).__name__}")
    out: dict[str, str] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not key:
            raise SparkConfigError(f"{what}: keys must be non-empty strings, got {key!r}")
        if isinstance(val, bool):
            out[key] = "true" if val else "false"
        elif isinstance(val, (str, int, float)):
            out[key] = str(val)
        else:
            raise SparkConfigError(f"{what}[{key!r}] must be a string or number, got {type(val).__name__}")
    return MappingProxyType(out)


def _str_tuple(value: object, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(p.strip() for p in value.split(",") if p.strip())
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise SparkConfigError(f"{what} must be a list of strings or a comma-separated string, got {value!r}")


@dataclass(frozen=True)
class SparkConfig:
    """Where and how write jobs run: master or Spark Connect URL, conf, table format, catalog.

    ``catalog`` holds the table format's catalog settings (for Iceberg see
    ``IcebergCatalogConfig``; Delta takes ``jars``). ``home`` is where the embedded default keeps
    its warehouse and catalog database (``$OCCFLOW_HOME`` or ``~/.occflow``).
    """

    master: str = "local[2]"
    remote: str | None = None
    app_name: str = "occflow"
    table_format: str = "iceberg"
    conf: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    catalog: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    jars: tuple[str, ...] = ()
    home: str | None = None

    def __post_init__(self) -> None:
        if self.table_format not in TABLE_FORMATS:
            raise SparkConfigError(
                f"unknown table_format {self.table_format!r}; known formats: {', '.join(TABLE_FORMATS)}"
            )
        if not isinstance(self.master, str) or not self.master:
            raise SparkConfigError(f"master must be a Spark master URL such as 'local[2]', got {self.master!r}")
        if self.remote is not None and not re.match(r"^sc://[^/\s]+", str(self.remote)):
            raise SparkConfigError(f"remote must be a Spark Connect URL 'sc://host:port', got {self.remote!r}")
        object.__setattr__(self, "conf", _str_mapping(self.conf, "conf"))
        if not isinstance(self.catalog, Mapping):
            raise SparkConfigError(f"catalog must be a mapping, got {type(self.catalog).__name__}")
        object.__setattr__(self, "catalog", MappingProxyType(dict(self.catalog)))
        object.__setattr__(self, "jars", _str_tuple(self.jars, "jars"))
        self.table_format_spec()  # validates the catalog settings now, not at the first job

    _KEYS = ("master", "remote", "app_name", "table_format", "conf", "catalog", "jars", "home")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> SparkConfig:
        """From a plain dict (an Airflow connection's extras); unknown keys are an error."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise SparkConfigError(f"Spark config must be a mapping, got {type(data).__name__}")
        unknown = sorted(set(data) - set(cls._KEYS))
        if unknown:
            raise SparkConfigError(
                f"unknown Spark config keys {unknown}; known keys: {', '.join(cls._KEYS)}"
            )
        kwargs = {k: v for k, v in data.items() if v is not None or k == "remote"}
        for key in ("master", "app_name", "table_format", "home"):
            if key in kwargs and not isinstance(kwargs[key], str):
                raise SparkConfigError(f"{key} must be a string, got {kwargs[key]!r}")
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "master": self.master,
            "remote": self.remote,
            "app_name": self.app_name,
            "table_format": self.table_format,
            "conf": dict(self.conf),
            "catalog": dict(self.catalog),
            "jars": list(self.jars),
            "home": self.home,
        }

    @property
    def home_dir(self) -> Path:
        return Path(self.home or os.environ.get("OCCFLOW_HOME") or Path.home() / ".occflow").expanduser()

    def table_format_spec(self) -> TableFormat:
        return table_format_for(self)

    def spark_conf(self) -> dict[str, str]:
        """Every Spark setting the session needs; the user's ``conf`` wins over our defaults."""
        fmt = self.table_format_spec()
        out = {
            "spark.app.name": self.app_name,
            # Small sessions: other Spark drivers share the machine, and writes are small.
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
        }
        out.update(fmt.spark_conf())
        jars = [*fmt.jars(), *self.jars]
        if jars:
            out["spark.jars"] = ",".join(jars)
        out.update(self.conf)
        return out


class TableFormat(Protocol):
    """What a table format adds to a session and how it finds the commit a job made."""

    @property
    def name(self) -> str: ...

    def spark_conf(self) -> dict[str, str]: ...

    def jars(self) -> list[str]: ...

    def prepare(self) -> None: ...

    def before(self, spark: Any, table: str) -> Any: ...

    def after(self, spark: Any, table: str, before: Any) -> CommitInfo: ...


@dataclass(frozen=True)
class CommitInfo:
    """What a job committed, as far as the table format records it."""

    version: int | None = None
    snapshot_id: int | None = None
    rows: int | None = None
    tag: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PlainFormat:
    """Parquet or Hive tables: Spark writes files with no commit protocol and no conflict check."""

    name: str = "parquet"

    def spark_conf(self) -> dict[str, str]:
        return {}

    def jars(self) -> list[str]:
        return []

    def prepare(self) -> None:
        return None

    def before(self, spark: Any, table: str) -> Any:
        message = (
            f"table {table} is a plain {self.name} table: the format detects no write conflicts, "
            "so concurrent writers silently overwrite or duplicate each other; only occflow's "
            "admission control protects it"
        )
        warnings.warn(message, NoConflictDetectionWarning, stacklevel=3)
        log.warning(message)
        return None

    def after(self, spark: Any, table: str, before: Any) -> CommitInfo:
        return CommitInfo(tag={"conflict_detection": "none"})


def table_format_for(config: SparkConfig) -> TableFormat:
    if config.table_format == "iceberg":
        from .iceberg import IcebergFormat

        return IcebergFormat.from_config(config)
    if config.table_format == "delta":
        from .delta_spark import DeltaFormat

        return DeltaFormat.from_config(config)
    if config.catalog:
        raise SparkConfigError(f"table_format {config.table_format!r} takes no catalog settings")
    return PlainFormat(name=config.table_format)


# ---------------------------------------------------------------------------------------------
# Table identifiers

_IDENT_PART = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*|`(?:[^`]|``)+`)$")


def split_table(table: str) -> list[str]:
    """The parts of ``catalog.db.table`` (backquoted parts allowed); anything else is an error."""
    if not isinstance(table, str) or not table.strip():
        raise InvalidDeclarationError(f"table identifier must be a non-empty string, got {table!r}")
    parts = re.findall(r"`(?:[^`]|``)+`|[^.`]+", table.strip())
    if ".".join(parts) != table.strip() or not all(_IDENT_PART.match(p) for p in parts):
        raise InvalidDeclarationError(
            f"bad table identifier {table!r}: expected dot-separated names of letters, digits and "
            "underscores (or `backquoted` names), e.g. lake.db.events"
        )
    return [p[1:-1].replace("``", "`") if p.startswith("`") else p for p in parts]


def quote_table(table: str) -> str:
    """The identifier with every part backquoted, safe to put into SQL."""
    return ".".join("`" + p.replace("`", "``") + "`" for p in split_table(table))


def sql_string(value: str) -> str:
    """A SQL string literal for ``value`` (Spark SQL escapes with backslashes)."""
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


# ---------------------------------------------------------------------------------------------
# Jobs


@dataclass(frozen=True)
class JobContext:
    """What a callable job is told about the write it performs."""

    table: str
    operation: Operation
    params: Mapping[str, str] = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)


def split_statements(text: str) -> list[str]:
    """SQL statements separated by ``;`` outside quotes and comments."""
    out: list[str] = []
    buf: list[str] = []
    i, quote = 0, ""
    while i < len(text):
        ch = text[i]
        if quote:
            buf.append(ch)
            if ch == "\\" and quote != "`" and i + 1 < len(text):
                buf.append(text[i + 1])
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"`":
            quote = ch
            buf.append(ch)
        elif text.startswith("--", i):
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            buf.append(text[i:end])
            i = end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = len(text) if end < 0 else end + 2
            buf.append(text[i:end])
            i = end
            continue
        elif ch == ";":
            out.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
        i += 1
    out.append("".join(buf))
    stripped = [s.strip() for s in out]
    return [s for s in stripped if re.sub(r"--[^\n]*|/\*.*?\*/", "", s, flags=re.DOTALL).strip()]


@dataclass(frozen=True)
class SqlJob:
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
            spark.sql(statement)

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


# ---------------------------------------------------------------------------------------------
# Errors as the engine raised them


def _java_throwable(exc: BaseException) -> Any:
    """The Java exception behind a PySpark error (Py4JJavaError or a captured exception)."""
    java = getattr(exc, "java_exception", None)
    if java is None:
        java = getattr(exc, "_origin", None)
    return java


def _java_error_class(throwable: Any) -> str | None:
    try:
        value = throwable.getErrorClass()
    except Exception:  # not a SparkThrowable: py4j raises when the method does not exist
        return None
    return str(value) if value else None


def error_info(exc: BaseException) -> ErrorInfo:
    """The exception class, error class and cause chain (Java's when Spark raised it)."""
    java = _java_throwable(exc)
    classes: list[str] = []
    messages: list[str] = []
    error_class: str | None = None
    if java is not None:
        seen = 0
        current = java
        while current is not None and seen < 20:
            try:
                classes.append(str(current.getClass().getName()))
                msg = current.getMessage()
                messages.append("" if msg is None else str(msg))
                error_class = error_class or _java_error_class(current)
                nxt = current.getCause()
            except Exception:  # the JVM went away under us: keep what we have
                break
            if nxt is None or nxt.equals(current):
                break
            current = nxt
            seen += 1
    if not classes:
        current_py: BaseException | None = exc
        while current_py is not None and len(classes) < 20:
            classes.append(f"{type(current_py).__module__}.{type(current_py).__qualname__}")
            messages.append(str(current_py))
            current_py = current_py.__cause__ or current_py.__context__
    if error_class is None:
        getter = getattr(exc, "getErrorClass", None)
        if callable(getter):
            try:
                value = getter()
                error_class = str(value) if value else None
            except Exception:
                error_class = None
    return ErrorInfo(
        exception_class=classes[0],
        messages=tuple(messages),
        error_class=error_class,
        cause_classes=tuple(classes[1:]),
    )


def classify_error(error: BaseException | ErrorInfo | str) -> Classification:
    """occflow's classification of the error. An ``ErrorInfo`` is passed whole, so the
    classifier sees its error class and exact exception class names, not only their text."""
    from ..core.classify import classify

    return classify(error)


# ---------------------------------------------------------------------------------------------
# The engine

_session_lock = threading.Lock()
# Settings fixed when the JVM starts: a running session with other values cannot serve the job.
_STATIC_KEYS = ("spark.sql.extensions", "spark.jars")


class SparkEngine:
    """Runs write jobs on one Spark session built from a ``SparkConfig``."""

    def __init__(self, config: SparkConfig | Mapping[str, Any] | None = None) -> None:
        self.config = config if isinstance(config, SparkConfig) else SparkConfig.from_dict(config)
        self.format = self.config.table_format_spec()
        self._spark: Any = None

    @property
    def engine_name(self) -> str:
        return f"spark-{self.format.name}"

    def session(self) -> Any:
        """The session, started on first use (the embedded default is a local session)."""
        with _session_lock:
            if self._spark is not None and not _stopped(self._spark):
                return self._spark
            self.format.prepare()
            from pyspark.sql import SparkSession

            if self.config.remote:
                builder = SparkSession.builder.remote(self.config.remote)
                for key, value in self.config.spark_conf().items():
                    if key not in _STATIC_KEYS and not key.startswith("spark.ui"):
                        builder = builder.config(key, value)
                self._spark = builder.getOrCreate()
                return self._spark
            builder = SparkSession.builder.master(self.config.master)
            conf = self.config.spark_conf()
            _check_running_context(conf)
            for key, value in conf.items():
                builder = builder.config(key, value)
            spark = builder.getOrCreate()
            running = spark.sparkContext.getConf()
            for key in _STATIC_KEYS:
                want = conf.get(key)
                have = running.get(key, None)
                if want is not None and have != want:
                    raise SparkConfigError(
                        f"a Spark session with other settings already runs in this process: {key} is "
                        f"{have!r} but this config needs {want!r}; stop that session first or run the "
                        "job through spark-submit (occflow.engines.submit)"
                    )
            self._spark = spark
            return spark

    def attach(self, spark: Any) -> None:
        """Use a session someone else started (spark-submit, a notebook) instead of building one."""
        self.format.prepare()
        with _session_lock:
            self._spark = spark

    def stop(self) -> None:
        with _session_lock:
            if self._spark is not None:
                self._spark.stop()
                self._spark = None

    def run(
        self,
        job: Job | str | Path | Callable[[Any, JobContext], None],
        table: str,
        operation: Operation | str | None = None,
        params: Mapping[str, str] | None = None,
        session: Any = None,
    ) -> WriteOutcome:
        """Run ``job`` as a write to ``table``; a failing job is a failed outcome, not an error.

        ``session`` runs the job on another session of the same context (the conformance suite
        uses one that still sees an older snapshot).
        """
        the_job = as_job(job)
        split_table(table)
        op = self._operation(the_job, operation)
        spark = session if session is not None else self.session()
        context = JobContext(table=table, operation=op, params=MappingProxyType(dict(params or {})))
        before = self.format.before(spark, table)
        start = time.perf_counter()
        try:
            the_job.run(spark, context)
        except Exception as exc:  # the job's failure is the outcome we report
            seconds = time.perf_counter() - start
            info = error_info(exc)
            return WriteOutcome(
                engine=self.engine_name,
                table=table,
                operation=op,
                committed=False,
                seconds=seconds,
                error=info,
                classification=classify_error(exc),
                tag={"job": the_job.describe(), "run_id": context.run_id},
            )
        seconds = time.perf_counter() - start
        commit = self.format.after(spark, table, before)
        return WriteOutcome(
            engine=self.engine_name,
            table=table,
            operation=op,
            committed=True,
            seconds=seconds,
            version=commit.version,
            snapshot_id=commit.snapshot_id,
            rows=commit.rows,
            tag={"job": the_job.describe(), "run_id": context.run_id, **commit.tag},
        )

    @staticmethod
    def _operation(job: Job, operation: Operation | str | None) -> Operation:
        if operation is not None:
            return parse_operation(operation)
        found = job.operation()
        if found is None:
            raise InvalidDeclarationError(
                f"cannot tell the operation of {job.describe()!r}: pass operation= "
                "(insert_into, insert_overwrite, update, delete, merge, ...)"
            )
        return found


def _check_running_context(conf: Mapping[str, str]) -> None:
    """A context already running in this process must have our jars and catalogs, or the job
    would silently write through another catalog (a catalog is fixed when first used)."""
    from pyspark import SparkContext

    running = SparkContext._active_spark_context
    if running is None:
        return
    have = running.getConf()
    for key, want in conf.items():
        if key in _STATIC_KEYS or key.startswith("spark.sql.catalog."):
            got = have.get(key, None)
            if got is not None and got != want:
                raise SparkConfigError(
                    f"a Spark session with other settings already runs in this process: {key} is "
                    f"{got!r} but this config needs {want!r}; use the same config (home, catalog), "
                    "stop that session first, or run the job through spark-submit (occflow.engines.submit)"
                )


def _stopped(spark: Any) -> bool:
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect sessions have no SparkContext
        return False
    return sc._jsc is None
