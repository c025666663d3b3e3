"""Run write jobs on Spark and return one ``WriteOutcome`` per job.

A job is SQL (one string, possibly several statements), a Python callable ``(spark, context)``,
or a PySpark application file (``jobs.py``). The table format decides the session's jars and SQL
extensions and how the committed version is found: Iceberg (``iceberg.py``), Delta via
delta-spark (``delta_spark.py``), or plain Parquet/Hive tables, which detect no conflicts at all.

PySpark is imported inside functions, so importing this module costs nothing and ``occflow``
stays usable where Spark is not installed.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ...core.errors import InvalidDeclarationError
from ...core.operations import Operation, parse_operation
from ...core.secrets import is_secret_name
from ..ledger import CommitRefused
from ..outcome import WriteOutcome
from . import connect, submit_files
from .attempt_fence import session_conf
from .config import SparkConfig
from .errors import classify_error, error_info
from .iceberg_rewrite import run_statement
from .identifiers import split_table
from .jobs import Job, JobContext, SqlJob, as_job
from .settings import SparkConfigError

_session_lock = threading.Lock()
# Settings fixed when the JVM starts: a running session with other values cannot serve the job.
_STATIC_KEYS = ("spark.sql.extensions", "spark.jars")
_ADVICE = "stop that session first, or run the job through spark-submit (occflow.engines.spark.submit)"


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
            if self.config.remote:
                # Over Connect the server's jars and extensions serve the job: it must answer, and
                # have the format's, before anything runs or is made here (connect.py).
                connect.check_answers(self.config.remote)
            self.format.prepare()
            from pyspark.sql import SparkSession  # optional heavy dependency

            if self.config.remote:
                builder = SparkSession.builder.remote(self.config.remote)
                for key, value in {**connect.CLIENT_CONF, **self.config.spark_conf()}.items():
                    if key not in _STATIC_KEYS and not key.startswith("spark.ui"):
                        builder = builder.config(key, value)
                spark = builder.getOrCreate()
                try:
                    connect.check_server(spark, self.config.remote, self.format.name, self.format.spark_conf())
                except SparkConfigError:
                    spark.stop()  # a session that cannot serve the job is not left behind
                    raise
                self._spark = spark
                return spark
            builder = SparkSession.builder.master(self.config.master)
            # The log settings act only when this call starts the JVM; a running one keeps its own.
            # On Iceberg the catalog, on Delta the log store, checks each attempt's lease inside its
            # commit (attempt_fence.py).
            conf = session_conf({**self.config.spark_conf(), **self.config.driver_log_conf()}, self.config)
            _check_running_context(conf)
            secret = {k: v for k, v in conf.items() if is_secret_name(k)}
            for key, value in conf.items():
                if key not in secret:
                    builder = builder.config(key, value)
            with _secrets_in_a_private_file(secret):
                spark = builder.getOrCreate()
            # getOrCreate hands back a running session as it is: its jars and extensions must be ours.
            _refuse_other_settings(
                spark.sparkContext.getConf(), conf, _STATIC_KEYS, unset_differs=True, advice=_ADVICE
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
        before_commit: Callable[[], None] | None = None,
    ) -> WriteOutcome:
        """Run ``job`` as a write to ``table``; a failing job is a failed outcome, not an error.

        ``session`` runs the job on another session of the same context (the conformance suite
        uses one that still sees an older snapshot). ``before_commit`` runs right before the
        SQL statement that writes (see ``_run_job``); the ``CommitRefused`` it raises is let
        through, not reported as the job's failure.
        """
        the_job = as_job(job)
        split_table(table)
        op = self._operation(the_job, operation)
        spark = session if session is not None else self.session()
        context = JobContext(table=table, operation=op, params=MappingProxyType(dict(params or {})))
        before = self.format.before(spark, table)
        start = time.perf_counter()
        try:
            _run_job(the_job, spark, context, before_commit)
        except CommitRefused:
            raise  # a refused commit is the caller's decision, not the job's failure
        except Exception as exc:  # the job's failure is the outcome we report
            seconds = time.perf_counter() - start
            info = error_info(exc)
            lost = WriteOutcome(
                engine=self.engine_name,
                table=table,
                operation=op,
                committed=False,
                seconds=seconds,
                error=info,
                classification=classify_error(exc),
                tag={"job": the_job.describe(), "run_id": context.run_id},
            )
            # The format names the commit the attempt lost to (Iceberg: the snapshot after ours).
            return self.format.lost(spark, table, before, lost)
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
            metadata_commit=commit.metadata,
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


def _run_job(job: Job, spark: Any, context: JobContext, before_commit: Callable[[], None] | None) -> None:
    """Run ``job`` with ``before_commit`` as late as Spark lets us: right before a SQL job's last
    write statement (its commit is that statement's), and before anything else runs for a
    callable or an application, whose commits happen inside code we do not see."""
    if before_commit is None:
        job.run(spark, context)
        return
    if not isinstance(job, SqlJob):
        before_commit()
        job.run(spark, context)
        return
    statements = job.statements
    writes = [i for i, text in enumerate(statements) if _is_write(text)]
    last = writes[-1] if writes else len(statements) - 1
    for index, statement in enumerate(statements):
        if index == last:
            before_commit()
        run_statement(spark, statement)


#: PySpark reads spark-submit's own arguments for the session's JVM from this variable.
SUBMIT_ARGS_ENV = "PYSPARK_SUBMIT_ARGS"


@contextlib.contextmanager
def _secrets_in_a_private_file(secret: Mapping[str, str]) -> Iterator[None]:
    """While a local session starts its JVM: the secret settings (a key, a token, a password)
    reach it in a 0600 properties file, not on spark-submit's command line where PySpark's
    gateway puts every ``--conf`` (readable in ``/proc`` by any local user). The file keeps
    Spark's own ``spark-defaults.conf`` first (``--properties-file`` replaces it) and is removed
    once the JVM has read it."""
    from pyspark.find_spark_home import _find_spark_home  # optional heavy dependency

    current = os.environ.get(SUBMIT_ARGS_ENV)
    if not secret or "--properties-file" in (current or ""):
        yield
        return
    folder = Path(tempfile.mkdtemp(prefix="occflow-spark-"))
    path = folder / "secret.properties"
    spark_submit = str(Path(_find_spark_home()) / "bin" / "spark-submit")  # type: ignore[no-untyped-call]
    defaults = submit_files.spark_defaults(spark_submit, os.environ)
    submit_files.write_private(path, (defaults + "\n\n" if defaults else "") + submit_files.java_properties(secret))
    os.environ[SUBMIT_ARGS_ENV] = f"--properties-file {shlex.quote(str(path))} {current or 'pyspark-shell'}"
    try:
        yield
    finally:
        if current is None:
            os.environ.pop(SUBMIT_ARGS_ENV, None)
        else:
            os.environ[SUBMIT_ARGS_ENV] = current
        shutil.rmtree(folder, ignore_errors=True)


def _is_write(statement: str) -> bool:
    try:
        parse_operation(statement)
    except InvalidDeclarationError:
        return False
    return True


def _check_running_context(conf: Mapping[str, str]) -> None:
    """A context already running in this process must have our jars and catalogs, or the job
    would silently write through another catalog (a catalog is fixed when first used)."""
    from pyspark import SparkContext  # optional heavy dependency

    running = SparkContext._active_spark_context
    if running is None:
        return
    keys = [key for key in conf if key in _STATIC_KEYS or key.startswith("spark.sql.catalog.")]
    # A setting the running context lacks is not in the way: a catalog registers on first use.
    advice = f"use the same config (home, catalog), {_ADVICE}"
    _refuse_other_settings(running.getConf(), conf, keys, unset_differs=False, advice=advice)


def _refuse_other_settings(
    running: Any, conf: Mapping[str, str], keys: Iterable[str], *, unset_differs: bool, advice: str
) -> None:
    """Raise ``SparkConfigError`` naming the first of ``keys`` whose value in the running context's
    conf (``running``) is not the one ``conf`` needs; an unset value differs if ``unset_differs``."""
    for key in keys:
        want, got = conf.get(key), running.get(key, None)
        if want is None or got == want or (got is None and not unset_differs):
            continue
        raise SparkConfigError(
            f"a Spark session with other settings already runs in this process: {key} is "
            f"{got!r} but this config needs {want!r}; {advice}"
        )


def _stopped(spark: Any) -> bool:
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect sessions have no SparkContext
        return False
    return sc._jsc is None

