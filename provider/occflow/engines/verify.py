"""Verify before retry: find a logical write's commit in the table's own history.

A retry is only safe if the earlier attempt did not commit. Engines report "failed" for commits
that landed (a timeout after the log entry was written, Iceberg's
``CommitStateUnknownException``, a worker killed between the commit and the task's success), so
before a retry occflow asks the table whether a commit with this write's tag
(``occflow.engines.tags``) is there:

- found: the write is done; its version / snapshot is the outcome, the job does not run again;
- not found: the job runs, its commit tagged.

A ``CommitLedger`` is that question for one table on one engine: delta-rs (the ``txn`` map and
the commit history), Iceberg on Spark (the ``snapshots`` metadata table), delta-spark
(``DESCRIBE HISTORY``), MaxCompute (the project's job instances, through a client).

``ExactlyOnce.run`` wraps one attempt: verify first when asked, refuse an overwrite that a newer
logical date already overwrote, tag the commit, and verify a ``commit_state_unknown`` failure
instead of letting it be retried blindly.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ..core.errors import InvalidDeclarationError
from ..core.kinds import Classification, ConflictKind
from ..core.operations import Operation
from .outcome import WriteOutcome
from .tags import WRITE_ID, CommitTag, iceberg_commit_properties

#: What happens to an overwrite whose partition a newer logical date already overwrote.
STALE_OVERWRITE_ACTIONS = ("report", "skip", "apply")
STALE_OVERWRITE_ENV = "OCCFLOW_STALE_OVERWRITE"
#: How far back in a Delta history occflow looks for a tag (commits, newest first).
HISTORY_DEPTH = 1000


@dataclass(frozen=True)
class FoundCommit:
    """A commit that carries an occflow tag."""

    engine: str
    table: str
    tag: CommitTag
    version: int | None = None
    snapshot_id: int | None = None
    committed_at: str | None = None

    def outcome(self, operation: Operation, reason: str) -> WriteOutcome:
        """The write's outcome as the earlier attempt would have reported it."""
        tag = {"exactly_once": reason, "write_id": self.tag.write_id}
        if self.committed_at is not None:
            tag["committed_at"] = self.committed_at
        return WriteOutcome(
            engine=self.engine,
            table=self.table,
            operation=operation,
            committed=True,
            seconds=0.0,
            version=self.version,
            snapshot_id=self.snapshot_id,
            tag=tag,
        )

    def describe(self) -> str:
        where = f"version {self.version}" if self.version is not None else f"snapshot {self.snapshot_id}"
        return f"{where} of {self.table} ({self.tag.describe()})"


class CommitLedger(Protocol):
    """One table's commit history as far as occflow's tags are concerned."""

    @property
    def engine(self) -> str: ...

    @property
    def table(self) -> str: ...

    def find_commit(self, tag: CommitTag) -> FoundCommit | None:
        """The commit carrying ``tag``'s write id, or ``None`` if the write did not land."""
        ...

    def tagged_commits(self) -> Iterator[FoundCommit]:
        """Every commit in the table's history that carries an occflow tag, newest first."""
        ...

    def tagging(self, tag: CommitTag) -> contextlib.AbstractContextManager[None]:
        """Inside, the engine puts ``tag`` on every commit the job makes."""
        ...


class StaleOverwriteError(Exception):
    """An overwrite that a newer logical date's overwrite of the same partition already replaced."""

    def __init__(self, tag: CommitTag, newer: FoundCommit, action: str) -> None:
        super().__init__(
            f"not applying {tag.describe()}: {newer.describe()} overwrote the same data for a later "
            f"logical date; applying this one would replace fresher data with older data "
            f"(stale_overwrite={action!r}; set it to 'apply' to overwrite anyway)"
        )
        self.tag = tag
        self.newer = newer
        self.action = action


def newer_overwrite(ledger: CommitLedger, tag: CommitTag) -> FoundCommit | None:
    """The newest tagged overwrite of a partition ``tag`` also overwrites, for a later logical date."""
    if not tag.is_overwrite:
        return None
    for commit in ledger.tagged_commits():
        other = commit.tag
        if other.write_id != tag.write_id and other.is_overwrite and other.overlaps(tag) and other.is_later_than(tag):
            return commit
    return None


@dataclass(frozen=True)
class ExactlyOnce:
    """Runs attempts of one logical write so that it lands exactly once."""

    ledger: CommitLedger
    tag: CommitTag
    stale_overwrite: str = "report"

    def __post_init__(self) -> None:
        if self.stale_overwrite not in STALE_OVERWRITE_ACTIONS:
            raise InvalidDeclarationError(
                f"stale_overwrite must be one of {', '.join(STALE_OVERWRITE_ACTIONS)}, got {self.stale_overwrite!r}"
            )

    def verify(self, reason: str = "already committed by an earlier attempt") -> WriteOutcome | None:
        found = self.ledger.find_commit(self.tag)
        return None if found is None else found.outcome(self.tag.operation, reason)

    def run(self, attempt: Callable[[], WriteOutcome], *, verify_first: bool) -> WriteOutcome:
        """One attempt: verified first when ``verify_first`` (a retry), tagged, unknown states verified.

        Raises ``StaleOverwriteError`` (unless ``stale_overwrite='apply'``) instead of running an
        overwrite that would replace a newer logical date's data.
        """
        if verify_first:
            done = self.verify()
            if done is not None:
                return done
        if self.stale_overwrite != "apply":
            newer = newer_overwrite(self.ledger, self.tag)
            if newer is not None:
                raise StaleOverwriteError(self.tag, newer, self.stale_overwrite)
        try:
            with self.ledger.tagging(self.tag):
                outcome = attempt()
        except Exception as exc:
            from ..core.classify import classify

            raised = classify(exc)
            if raised.kind is not ConflictKind.COMMIT_STATE_UNKNOWN:
                raise
            return self._settle_unknown(None, raised, exc)
        if outcome.committed:
            return outcome
        found = outcome.classification
        if found is None or found.kind is not ConflictKind.COMMIT_STATE_UNKNOWN:
            return outcome
        return self._settle_unknown(outcome, found, None)

    def _settle_unknown(
        self, outcome: WriteOutcome | None, unknown: Classification, error: BaseException | None
    ) -> WriteOutcome:
        """``commit_state_unknown``: the table decides. Landed -> done; absent -> a plain failed commit."""
        done = self.verify("committed although the engine reported commit_state_unknown")
        if done is not None:
            return done
        verified = Classification(
            kind=ConflictKind.COMMIT_FAILED,
            engine=unknown.engine,
            reason=(
                f"commit state was unknown ({unknown.reason}); occflow checked {self.ledger.table} and "
                f"no commit carries write id {self.tag.write_id}: the write did not land, a retry is safe"
            ),
            exception_class=unknown.exception_class,
            error_class=unknown.error_class,
        )
        if outcome is not None:
            return replace(outcome, classification=verified, tag={**outcome.tag, "exactly_once": "verified absent"})
        from .deltars import error_info

        return WriteOutcome(
            engine=self.ledger.engine,
            table=self.ledger.table,
            operation=self.tag.operation,
            committed=False,
            seconds=0.0,
            error=None if error is None else error_info(error),
            classification=verified,
            tag={"exactly_once": "verified absent"},
        )


# ---------------------------------------------------------------------------------------------
# delta-rs


@dataclass(frozen=True)
class DeltaRsLedger:
    """A delta-rs table: the ``txn`` map answers "landed?", the history says which version."""

    delta: Any  # DeltaRsTable
    engine: str = "delta-rs"
    #: Tag only commits whose metadata holds these entries (``deltars.ambient_commit``).
    only_if: Mapping[str, str] | None = None

    @property
    def table(self) -> str:
        return str(self.delta.uri)

    def find_commit(self, tag: CommitTag) -> FoundCommit | None:
        if self.delta.app_version(tag.app_id) is None:
            return None
        for commit in self.tagged_commits():
            if commit.tag.write_id == tag.write_id:
                return commit
        # The txn action outlives log cleanup: the write landed, its version is no longer listed.
        return FoundCommit(self.engine, self.table, tag)

    def tagged_commits(self) -> Iterator[FoundCommit]:
        for entry in self.delta.load().history(HISTORY_DEPTH):
            found = CommitTag.from_properties(entry)
            if found is not None:
                yield FoundCommit(self.engine, self.table, found, version=int(entry["version"]),
                                  committed_at=str(entry.get("timestamp")))

    @contextlib.contextmanager
    def tagging(self, tag: CommitTag) -> Iterator[None]:
        from .deltars import ambient_commit

        with ambient_commit(tag.deltars_commit(), self.only_if):
            yield


# ---------------------------------------------------------------------------------------------
# Iceberg on Spark


@dataclass(frozen=True)
class IcebergLedger:
    """An Iceberg table on a Spark session: the tag is in the snapshot summary."""

    spark: Any
    table: str  # qualified: catalog.db.table
    engine: str = "spark-iceberg"

    def _rows(self, where: str) -> list[Any]:
        from .spark import quote_table

        return list(
            self.spark.sql(
                f"SELECT snapshot_id, CAST(committed_at AS STRING) AS committed_at, summary "
                f"FROM {quote_table(self.table)}.snapshots WHERE {where} ORDER BY committed_at DESC"
            ).collect()
        )

    def _found(self, row: Any) -> FoundCommit | None:
        tag = CommitTag.from_properties(dict(row["summary"] or {}))
        if tag is None:
            return None
        return FoundCommit(self.engine, self.table, tag, version=self._sequence_number(int(row["snapshot_id"])),
                           snapshot_id=int(row["snapshot_id"]), committed_at=row["committed_at"])

    def _sequence_number(self, snapshot_id: int) -> int | None:
        from .spark import quote_table

        rows = self.spark.sql(
            f"SELECT latest_sequence_number FROM {quote_table(self.table)}.metadata_log_entries "
            f"WHERE latest_snapshot_id = {int(snapshot_id)} ORDER BY timestamp LIMIT 1"
        ).collect()
        return None if not rows or rows[0][0] is None else int(rows[0][0])

    def find_commit(self, tag: CommitTag) -> FoundCommit | None:
        from .spark import sql_string

        rows = self._rows(f"try_element_at(summary, {sql_string(WRITE_ID)}) = {sql_string(tag.write_id)}")
        return None if not rows else self._found(rows[0])

    def tagged_commits(self) -> Iterator[FoundCommit]:
        from .spark import sql_string

        for row in self._rows(f"try_element_at(summary, {sql_string(WRITE_ID)}) IS NOT NULL"):
            found = self._found(row)
            if found is not None:
                yield found

    def tagging(self, tag: CommitTag) -> contextlib.AbstractContextManager[None]:
        return iceberg_commit_properties(self.spark, tag)


# ---------------------------------------------------------------------------------------------
# Delta on Spark (delta-spark)


@dataclass(frozen=True)
class DeltaSparkLedger:
    """A delta-spark table: idempotent-write session confs + user metadata in the commit info.

    The session confs are per session: give each concurrent write its own ``spark.newSession()``.
    """

    spark: Any
    table: str
    engine: str = "spark-delta"

    def find_commit(self, tag: CommitTag) -> FoundCommit | None:
        for commit in self.tagged_commits():
            if commit.tag.write_id == tag.write_id:
                return commit
        return None

    def tagged_commits(self) -> Iterator[FoundCommit]:
        from .spark import quote_table

        rows = self.spark.sql(f"DESCRIBE HISTORY {quote_table(self.table)} LIMIT {HISTORY_DEPTH}").collect()
        for row in rows:
            text = row["userMetadata"]
            if not text:
                continue
            try:
                props = json.loads(text)
            except ValueError:
                continue  # someone else's user metadata
            found = CommitTag.from_properties(props) if isinstance(props, dict) else None
            if found is not None:
                yield FoundCommit(self.engine, self.table, found, version=int(row["version"]),
                                  committed_at=str(row["timestamp"]))

    @contextlib.contextmanager
    def tagging(self, tag: CommitTag) -> Iterator[None]:
        conf = tag.delta_spark_session_conf()
        for key, value in conf.items():
            self.spark.conf.set(key, value)
        try:
            yield
        finally:
            for key in conf:
                self.spark.conf.unset(key)


# ---------------------------------------------------------------------------------------------
# MaxCompute (remote: reached through a client such as PyODPS)


class MaxComputeJobs(Protocol):
    """What occflow needs from a MaxCompute client: the settings of the project's recent jobs.

    MaxCompute keeps no per-commit properties on a table, so the tag lives in the job's settings
    (hints) and "landed?" is "did a successful job with this write id write the table?".
    """

    def successful_jobs(self, table: str) -> list[Mapping[str, Any]]:
        """Recent successful SQL jobs that wrote ``table``: ``{"id", "settings", "end_time"}``."""
        ...


@dataclass(frozen=True)
class MaxComputeLedger:
    jobs: MaxComputeJobs
    table: str
    engine: str = "maxcompute"

    def tagged_commits(self) -> Iterator[FoundCommit]:
        entries = sorted(self.jobs.successful_jobs(self.table), key=lambda j: str(j.get("end_time")), reverse=True)
        for job in entries:
            settings = {str(k)[len("odps."):]: v for k, v in dict(job.get("settings") or {}).items()
                        if str(k).startswith("odps.occflow.")}
            found = CommitTag.from_properties(settings)
            if found is not None:
                yield FoundCommit(self.engine, self.table, found, committed_at=str(job.get("end_time")))

    def find_commit(self, tag: CommitTag) -> FoundCommit | None:
        return next((c for c in self.tagged_commits() if c.tag.write_id == tag.write_id), None)

    @contextlib.contextmanager
    def tagging(self, tag: CommitTag) -> Iterator[None]:
        # The job runner passes tag.maxcompute_hints() with the SQL; nothing to set around it.
        yield


# ---------------------------------------------------------------------------------------------
# The operators' side


def stale_overwrite_action(operator: Any) -> str:
    """The operator's ``stale_overwrite`` attribute, else ``$OCCFLOW_STALE_OVERWRITE``, else report."""
    action = getattr(operator, "stale_overwrite", None) or os.environ.get(STALE_OVERWRITE_ENV) or "report"
    if action not in STALE_OVERWRITE_ACTIONS:
        raise InvalidDeclarationError(
            f"stale_overwrite must be one of {', '.join(STALE_OVERWRITE_ACTIONS)}, got {action!r}"
        )
    return str(action)


def ledger_for(operator: Any, table: str, only_if: Mapping[str, str] | None = None) -> CommitLedger | None:
    """The ledger of the table an occflow operator writes; ``None`` if its engine has none."""
    own = getattr(operator, "commit_ledger", None)
    if callable(own):
        ledger: CommitLedger | None = own(table)
        return ledger
    kind = type(operator).__name__
    if kind == "DeltaWriteOperator" or (hasattr(operator, "storage_options") and hasattr(operator, "path")):
        from .deltars import DeltaRsTable

        # Only the operator's own commits (its commit metadata names the task instance): a
        # data callable that writes the same table during the attempt is another writer.
        return DeltaRsLedger(DeltaRsTable(operator.path, operator.storage_options or None), only_if=only_if)
    if hasattr(operator, "session_config") and not hasattr(operator, "submit_job"):
        from ..operators.spark import spark_engine

        engine = spark_engine(operator.session_config())
        if engine.format.name == "iceberg":
            return IcebergLedger(engine.session(), engine.format.qualify(table))
        if engine.format.name == "delta":
            return DeltaSparkLedger(engine.session(), table)
    # spark-submit drivers commit in another process and plain Parquet/Hive tables keep no
    # history: their writes are not tagged (see docs/exactly-once.md).
    return None


def exactly_once_for(operator: Any, declaration: Any, context: Any) -> ExactlyOnce | None:
    """The exactly-once guard of a task's write, or ``None`` (outside a task, untaggable engine,
    or ``exactly_once = False`` on the operator)."""
    if getattr(operator, "exactly_once", True) is False:
        return None
    from .tags import from_context

    partitions = None if declaration.partitions is None else [dict(p) for p in declaration.partitions]
    tag = from_context(context, declaration.operation, partitions)
    if tag is None:
        return None
    # The keys DeltaWriteOperator's commit_metadata writes: they pick out the operator's commits.
    own_commit = {"occflow.dag_id": tag.dag_id, "occflow.task_id": tag.task_id, "occflow.run_id": tag.run_id}
    ledger = ledger_for(operator, declaration.table, own_commit)
    if ledger is None:
        return None
    return ExactlyOnce(ledger, tag, stale_overwrite_action(operator))


def try_number(context: Any) -> int:
    ti = context.get("ti") if hasattr(context, "get") else None
    value = getattr(ti, "try_number", None)
    return int(value) if isinstance(value, int) else 1
