"""``SparkTarget``: a table on a Spark session as the write flow runs writes on it (``WriteTarget``).

One engine (one session) per config per process, cached on the config's canonical form: every
attempt and every task of the process reuses the session.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ...core.declaration import WriteDeclaration
from ...core.observed import ObservedFootprint
from ...core.tablefacts import TableFacts
from ..ledger import CommitLedger, LeaseNotLive
from ..outcome import WriteOutcome
from ..target import AttemptContext
from .attempt_fence import attempt_window, in_session
from .ddl import create_table_sql
from .delta_spark import unsupported_table_features
from .facts import ENGINES as FACT_FORMATS
from .facts import spark_table_facts
from .iceberg import IcebergFormat
from .observed import observe_iceberg_snapshot
from .session import SparkEngine
from .submit_fence import LEASE_CHECKED_AT, CommitFence, commit_refusal

_log = logging.getLogger(__name__)


@functools.cache
def _engine(canonical_config: str) -> SparkEngine:
    return SparkEngine(json.loads(canonical_config))


def spark_engine(config: Mapping[str, Any]) -> SparkEngine:
    """One engine (one session) per config per process: attempts and tasks reuse the session."""
    return _engine(json.dumps(dict(config), sort_keys=True, default=str))


#: A Spark job: SQL text (checked), a callable ``(spark, job_context)`` or an application file.
SparkJob = str | Path | Callable[..., None]


@dataclass
class SparkTarget:
    """The table ``table`` on the Spark session ``config`` builds."""

    config: Mapping[str, Any]
    table: str
    params: Mapping[str, str] = field(default_factory=dict)
    #: The job of one attempt, given the attempt's declaration (SQL checked against it again).
    job_for: Callable[[WriteDeclaration], SparkJob] | None = field(default=None, repr=False)

    @property
    def engine(self) -> SparkEngine:
        return spark_engine(self.config)

    @property
    def engine_name(self) -> str:
        return self.engine.engine_name

    @property
    def table_format(self) -> str:
        return str(self.engine.format.name)

    @property
    def sql_catalog(self) -> str | None:
        return self.engine.config.sql_catalog

    def prepare(self) -> None:
        self.engine.session()

    def run_attempt(self, declaration: WriteDeclaration, attempt: AttemptContext) -> WriteOutcome:
        if self.job_for is None:
            raise ValueError(f"no job to run on {self.table}")
        job = self.job_for(declaration)
        engine = self.engine
        fence = self._commit_fence(attempt)
        with self._lease_window(fence, attempt):
            # Each attempt plans again: the engine's catalog does not cache tables, so the job
            # reads the table's current snapshot (the fresh snapshot in-task retries rely on).
            # before_commit runs right before the SQL statement that writes (a callable: before
            # it starts); on Iceberg and Delta the lease is checked once more inside the commit itself.
            outcome = engine.run(
                job,
                declaration.table,
                declaration.operation,
                params=dict(self.params),
                before_commit=attempt.before_commit,
            )
        refused = commit_refusal(outcome)
        if refused is not None:  # nothing was committed: the flow's lease-loss path, not a conflict
            raise LeaseNotLive(f"the write did not commit (refused inside its commit): {refused}", attempt.fence)
        unsupported = None if outcome.committed else unsupported_table_features(self.table, outcome.error)
        if unsupported is not None:  # the table needs a newer delta-spark than this session's: never retried
            raise unsupported
        if fence is None:
            return outcome
        return replace(outcome, tag={**outcome.tag, LEASE_CHECKED_AT: fence.checked_at})

    def _commit_fence(self, attempt: AttemptContext) -> CommitFence | None:
        """Where this attempt's lease is checked last (``None``: it runs under no lease); said
        in the log when it is not inside the commit, as for a spark-submit driver."""
        if attempt.fence is None:
            return None
        engine = self.engine
        found = in_session(engine.session(), engine.config)
        if not found.at_commit:
            _log.warning("Spark write to %s: %s", self.table, found.describe())
        return found

    def _lease_window(
        self, fence: CommitFence | None, attempt: AttemptContext
    ) -> contextlib.AbstractContextManager[object]:
        if fence is None or not fence.at_commit or attempt.fence is None:
            return contextlib.nullcontext()
        return attempt_window(self.engine.session(), attempt.fence, attempt.lease_live_until)

    def commit_ledger(self, only_if: Mapping[str, str] | None = None) -> CommitLedger | None:
        """The ledger the table format keeps (Iceberg snapshots, Delta history); ``None`` for
        plain Parquet/Hive tables. Spark commits name no task, so ``only_if`` does not apply."""
        engine = self.engine
        return engine.format.commit_ledger(engine.session(), self.table)

    def observe_commit(self, outcome: WriteOutcome) -> ObservedFootprint | None:
        """What the committed Iceberg snapshot really touched (its manifest entries); ``None``
        for the other table formats and for a commit with no snapshot to read."""
        fmt = self.engine.format
        if not isinstance(fmt, IcebergFormat) or outcome.snapshot_id is None:
            return None
        return observe_iceberg_snapshot(self.engine.session(), fmt.qualify(self.table), outcome.snapshot_id)

    def report_details(
        self, declaration: WriteDeclaration, outcome: WriteOutcome | None
    ) -> Mapping[str, Any]:
        return {}

    def table_facts(self, table_key: str) -> TableFacts | None:
        """The table's facts (partition columns, format, properties); ``None`` for formats
        that keep none occflow reads (plain Parquet/Hive)."""
        engine = self.engine
        if engine.format.name not in FACT_FORMATS:
            return None
        return spark_table_facts(engine.session(), table_key)

    def create(self, schema: Mapping[str, str], partition_by: Sequence[str], where: str) -> str:
        """``CREATE TABLE IF NOT EXISTS`` (and its namespace) in the session's table format;
        the statement that created the table."""
        engine = self.engine
        fmt = engine.format
        name = fmt.qualify(self.table) if hasattr(fmt, "qualify") else self.table
        statements = create_table_sql(fmt.name, name, schema, partition_by, where)
        spark = engine.session()
        for statement in statements:
            spark.sql(statement)
        return statements[-1]


__all__ = ["SparkJob", "SparkTarget", "spark_engine"]
