"""The write flow every occflow write operator shares.

``execute`` reads as the flow in docs/architecture.md, each step a call into the layer that owns it:

1. declare  - the rendered declaration (partition values validated again after templating)
2. admit    - a lease from the lease store; not admitted -> defer on a trigger (frees the slot)
3. run      - one attempt of the job on the engine, from a fresh snapshot (subclasses)
4. classify - ``occflow.core.classify`` on the engine's error
5. policy   - ``WritePolicy.decide``: retry in the task, reschedule, skip, fail, default
6. report   - the outcome to XCom (version / snapshot, attempts, conflicts, wasted seconds), metrics,
              and what the commit really touched (``observe_commit``) against the declaration

Subclasses say only how one attempt runs (``run_attempt``) and which engine it is.

Steps 3-5 are one plain loop (``run_with_policy``), not ``tenacity.Retrying``: what follows each
attempt depends on the classified kind and on the stage the policy reached (retry, then
reschedule, then fail), which tenacity's retry / stop / wait callbacks would each re-derive.

Right before each commit the engine calls ``before_commit()`` (docs/exactly-once.md): the write
already in the table (another live try) settles the attempt as committed; a lease that is not
live any more aborts it uncommitted, and the task goes back through admission (reschedule).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, NoReturn

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowRescheduleException,
    AirflowSkipException,
    AirflowTaskTimeout,
)

from ..core.classify import classify
from ..core.declaration import WriteDeclaration
from ..core.errors import InvalidDeclarationError, conflict_error
from ..core.kinds import Classification, ConflictKind
from ..core.observed import ObservedFootprint
from ..core.policy import Action, Decision, WritePolicy, derive_policy, overrides_to_dict
from ..engines.ledger import AlreadyCommitted, StaleOverwriteError
from ..engines.outcome import WriteOutcome
from . import admission
from .exactly_once import BeforeCommit, LeaseLapsed, exactly_once_for, try_number
from .history import WriteHistory, emit_metrics, load_history, observed_report, store_history
from .lineage import OpenLineageMixin
from .links import TableHistoryLink, WriteCommitLink
from .messages import attempt_line, committed_by, engine_message, fitted_to_engine, sentence, why

#: Aborts for a lease that was not live at the commit, per task instance, before the task fails
#: (for Airflow's retries) instead of going back through admission once more.
MAX_LEASE_LOSSES = 3


class WriteLost(Exception):
    """One attempt did not commit: carries the engine's outcome (or exception) and its class."""

    def __init__(self, classification: Classification, outcome: WriteOutcome | None, error: BaseException | None):
        self.engine_message = engine_message(outcome, error)
        super().__init__(f"{classification.kind.value}: {self.engine_message}")
        self.classification = classification
        self.outcome = outcome
        self.error = error


class ConflictFailure(AirflowFailException):
    """The policy said fail fast: retrying cannot help (or may write twice). Airflow will not retry.

    ``report`` is the task's write report; ``conflict`` the typed occflow conflict exception,
    so a notifier can explain the conflict without parsing text.
    """

    def __init__(self, message: str, report: dict[str, Any], conflict: BaseException | None = None) -> None:
        super().__init__(message)
        self.report = report
        self.conflict = conflict

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.report, self.conflict))


class WriteNotCommitted(RuntimeError):
    """The engine failed with an error that is not a conflict: Airflow's ordinary retries decide.

    ``report`` is the task's write report (its ``error`` is the engine's message), for notifiers."""

    def __init__(self, message: str, report: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.report = report or {}

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.report))


class LeaseLostFailure(AirflowException):
    """The lease was not live at the commit ``MAX_LEASE_LOSSES`` times: Airflow's retries decide."""


class OccflowWriteOperator(OpenLineageMixin, BaseOperator):
    """A write on a lakehouse table that knows its table format's conflict matrix.

    :param table: the table identifier (``catalog.db.table``); validated at DAG parse time.
    :param operation: canonical name (``insert_overwrite``) or SQL spelling (``MERGE INTO``).
    :param profile: a profile name (``iceberg-serializable``), or give ``table_format``.
    :param table_format: ``iceberg`` / ``delta`` / ... -> the format's default profile.
    :param partitions: the partitions written, e.g. ``{"ds": "{{ ds }}"}`` (templated) or a list
        of them; ``None`` = the whole table.
    :param reads_whole_table: a MERGE/UPDATE/DELETE whose condition names no partition.
    :param policy_overrides: per conflict kind, an action name or a policy dict
        (``{"concurrent_append": "reschedule"}``); see ``occflow policy PROFILE OPERATION``.
    :param admission: take a lease before writing (``True``); ``False`` writes without one.
    :param lease_store_url: SQLAlchemy URL of the lease store (default: env / embedded SQLite).
    :param lease_ttl: seconds a lease lives without a heartbeat (heartbeats run while writing).
    :param admission_poll_interval: seconds between safety checks while waiting for admission
        (a lease let go on the table wakes the waiting task at once; this covers a lost wake-up).
    :param admission_wait_seconds: seconds a write that is not admitted at once waits for a
        lease in its worker before it defers (0: defer at once). Skips Airflow's deferral round
        trip for short waits, holding the worker slot meanwhile.
    :param admission_resume_settle_seconds: seconds after a deferral before the task is resumed
        (guards against an Airflow 3.3 race that kills a task resumed very soon; 0: off).
    """

    template_fields: Sequence[str] = ("partitions",)
    ui_color = "#dff0d8"
    # Buttons to the commit and the table's history where the engine has a URL (``links.py``).
    operator_extra_links = (WriteCommitLink(), TableHistoryLink())
    engine_name = "unknown"
    default_table_format: str | None = None  # the format when neither profile nor table_format is given

    def __init__(
        self,
        *,
        table: str,
        operation: str,
        profile: str | None = None,
        table_format: str | None = None,
        partitions: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        reads_whole_table: bool = False,
        policy_overrides: Mapping[str, Any] | None = None,
        admission: bool = True,
        lease_store_url: str | None = None,
        lease_ttl: float = 300.0,
        admission_poll_interval: float = 2.0,
        admission_wait_seconds: float = 0.0,
        admission_resume_settle_seconds: float = 10.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        # Parse time: a bad table, operation, profile or partition spec fails the DAG import.
        self.occflow_write = WriteDeclaration.create(
            table,
            operation,
            profile=profile,
            table_format=table_format,
            partitions=partitions,
            reads_whole_table=reads_whole_table,
            allow_templates=True,
        )
        self.table = table
        self.operation = self.occflow_write.operation.value
        self.profile = self.occflow_write.profile.name
        self.partitions = partitions
        self.reads_whole_table = reads_whole_table
        self.policy_overrides = overrides_to_dict(policy_overrides)
        # Validate the overrides now as well: a refused override is a DAG error, not a run error.
        derive_policy(self.profile, self.operation, self.policy_overrides)
        self.admission = admission
        self.lease_store_url = lease_store_url
        self.lease_ttl = lease_ttl
        self.admission_poll_interval = admission_poll_interval
        self.admission_wait_seconds = admission_wait_seconds
        self.admission_resume_settle_seconds = admission_resume_settle_seconds

    @classmethod
    def partial(cls, **kwargs: Any) -> Any:  # type: ignore[override]
        """Like ``BaseOperator.partial``, but the declaration's fixed parts are checked now.

        Airflow builds mapped tasks without calling ``__init__`` at parse time; a bad table or
        operation in ``.partial(...)`` must still fail the DAG import, not the first mapped task.
        """
        from airflow.sdk.bases.operator import partial as airflow_partial

        if "table" in kwargs and "operation" in kwargs:
            table_format = kwargs.get("table_format")
            if table_format is None and not kwargs.get("profile"):
                table_format = cls.default_table_format
            declared = WriteDeclaration.create(
                kwargs["table"],
                kwargs["operation"],
                profile=kwargs.get("profile"),
                table_format=table_format,
                partitions=kwargs.get("partitions"),
                reads_whole_table=kwargs.get("reads_whole_table", False),
                allow_templates=True,
            )
            derive_policy(declared.profile, declared.operation, overrides_to_dict(kwargs.get("policy_overrides")))
        return airflow_partial(cls, **kwargs)

    # ------------------------------------------------------------------ the flow

    def execute(self, context: Any) -> dict[str, Any]:
        declaration = self.declare()
        lease = admission.admit(self, declaration, context)  # defers when not admitted
        return self.write(declaration, lease, context)

    def execute_admitted(self, context: Any, event: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Resumed by the admission trigger: the lease was granted while the task was deferred."""
        declaration = self.declare()
        lease = admission.lease_from_event(self, event)
        return self.write(declaration, lease, context)

    def declare(self) -> WriteDeclaration:
        """The declaration with rendered partition values, validated again (no templates left)."""
        try:
            declaration = WriteDeclaration.create(
                self.table,
                self.operation,
                profile=self.profile,
                partitions=self.partitions,
                reads_whole_table=self.reads_whole_table,
                allow_templates=False,
            )
            for spec in declaration.partitions or ():
                for column, value in spec.items():
                    if isinstance(value, str) and (not value.strip() or "{{" in value or "{%" in value):
                        raise InvalidDeclarationError(
                            f"partition value for {column!r} rendered to {value!r}: a partition value "
                            "must be a non-empty value with no template left in it"
                        )
            return declaration
        except InvalidDeclarationError as exc:
            # Before any write: a rendered value that is not a partition value fails for good.
            raise AirflowFailException(f"{self.task_id}: invalid rendered declaration: {exc}") from exc

    def write_policy(self) -> WritePolicy:
        # occflow's operators re-plan every attempt from a fresh snapshot (run_attempt loads it).
        return derive_policy(self.profile, self.operation, self.policy_overrides, replans_from_fresh_snapshot=True)

    def write(self, declaration: WriteDeclaration, lease: Any, context: Any) -> dict[str, Any]:
        policy = self.write_policy()
        # Starting the engine (a JVM, a session) is not an attempt: no conflict can waste it.
        self.prepare_engine(declaration, context)
        history = load_history(context)
        self._metrics_since = (len(history.conflicts), len(history.decisions), history.wasted_seconds)
        try:
            with admission.keep(self, lease) as keeper:
                self.lease_keeper = keeper  # what before_commit() checks, and whose fence is stamped
                outcome = self.run_with_policy(declaration, policy, history, context)
        finally:
            admission.release(self, lease)
        report = self.report(declaration, outcome, history)
        report.update(observed_report(self, declaration, outcome))  # logs a write beyond its declaration
        store_history(context, None)
        emit_metrics(report, self._metrics_since)
        if outcome.tag.get("exactly_once"):  # found in the table, not written again by this try
            self.log.info(
                "%s on %s was already committed by %s (version=%s snapshot=%s): this try (%d) wrote nothing; %s",
                declaration.operation.value, declaration.table, committed_by(outcome.tag), report["version"],
                report["snapshot_id"], try_number(context), outcome.tag["exactly_once"],
            )
            return report
        self.log.info(
            "committed %s on %s: version=%s snapshot=%s after %d attempt(s), %d conflict(s), %.1fs wasted",
            declaration.operation.value, declaration.table, report["version"], report["snapshot_id"],
            report["attempts"], len(report["conflicts"]), report["wasted_seconds"],
        )
        return report

    def run_with_policy(
        self, declaration: WriteDeclaration, policy: WritePolicy, history: WriteHistory, context: Any
    ) -> WriteOutcome:
        """Run -> classify -> decide -> act, until an attempt commits or a decision ends this try."""
        # Exactly once (docs/exactly-once.md): commits carry the write's tag; a retry, and every
        # attempt of a later try, first looks for it in the table and succeeds if it is there.
        keeper = getattr(self, "lease_keeper", None)
        guard = exactly_once_for(self, declaration, context, None if keeper is None else keeper.fence)
        self._before_commit = BeforeCommit(keeper, guard)
        later_try = try_number(context) > 1
        while True:
            try:
                return self._attempt(declaration, context, history, guard, later_try)
            except LeaseLapsed as lapsed:
                self.abort_lease_lost(declaration, lapsed, history, context)  # raises
            except WriteLost as lost:
                elapsed = time.time() - history.first_started
                decision = fitted_to_engine(policy.decide(lost.classification, history.attempts, elapsed),
                                            self.engine_name)
                self._record(history, lost, decision)
                if decision.action is not Action.RETRY:
                    self.act_on(declaration, decision, lost, history, context)  # raises
            # Retry in the task, outside the handler: the next attempt's errors are its own.
            time.sleep(decision.delay_seconds)

    def _attempt(
        self, declaration: WriteDeclaration, context: Any, history: WriteHistory, guard: Any, later_try: bool
    ) -> WriteOutcome:
        """One attempt from a fresh snapshot: the committed outcome, or ``WriteLost`` (classified)."""
        history.attempts += 1
        started = time.monotonic()
        attempt = history.attempts
        try:
            if guard is None:
                outcome = self.run_attempt(declaration, context, attempt)
            else:
                done = self._found_committed(guard) if later_try or attempt > 1 else None
                outcome = done or guard.run(lambda: self.run_attempt(declaration, context, attempt),
                                            verify_first=False)
        except StaleOverwriteError as stale:
            raise (AirflowSkipException if stale.action == "skip" else AirflowFailException)(str(stale)) from stale
        except (AirflowFailException, AirflowSkipException, AirflowTaskTimeout, InvalidDeclarationError):
            raise
        except LeaseLapsed:
            history.wasted_seconds += time.monotonic() - started
            raise
        except AlreadyCommitted as done:  # the job's own Delta txn id is in the table already: done
            by = {} if done.found is None else {"committed_by": done.found.by}
            return WriteOutcome(engine=self.engine_name, table=declaration.table, operation=declaration.operation,
                                committed=True, seconds=0.0, tag={"exactly_once": str(done), **by})
        except Exception as exc:
            # An engine that raises instead of returning an outcome: classified the same way.
            history.wasted_seconds += time.monotonic() - started
            raise WriteLost(classify(exc), None, exc) from exc
        if outcome.committed:
            return outcome
        # The whole attempt is thrown away: preparing its input as much as the engine call.
        history.wasted_seconds += time.monotonic() - started
        found = outcome.classification or classify(outcome.error)
        raise WriteLost(found, outcome, None)

    @staticmethod
    def _found_committed(guard: Any) -> WriteOutcome | None:
        """A retry or a later try first looks for its write in the table (``ExactlyOnce.verify``)."""
        found = guard.ledger.find_commit(guard.tag)
        if found is None:
            return None
        outcome: WriteOutcome = found.outcome(guard.tag.operation, "already committed by an earlier attempt")
        outcome.tag["committed_by"] = found.by  # the log says "already committed by try N"
        return outcome

    def before_commit(self) -> None:
        """The check right before a commit; engines call it as late as their API allows.

        Raises ``AlreadyCommitted`` (another live try committed this write: settled, not written
        again) or ``LeaseLapsed`` (the lease is not live: aborted uncommitted). A no-op outside
        ``write`` (no lease, no tag)."""
        check = getattr(self, "_before_commit", None)
        if check is not None:
            check()

    @property
    def commit_fence(self) -> int | None:
        """The fencing token of the running write's lease (``None`` without admission)."""
        keeper = getattr(self, "lease_keeper", None)
        return None if keeper is None else int(keeper.fence)

    def abort_lease_lost(
        self, declaration: WriteDeclaration, lapsed: LeaseLapsed, history: WriteHistory, context: Any
    ) -> NoReturn:
        """The lease was not live at the commit: nothing was committed. Not a conflict: the task
        goes back through admission for a fresh lease (reschedule), or fails after
        ``MAX_LEASE_LOSSES`` such aborts, for Airflow's retries."""
        history.lease_losses.append({"attempt": history.attempts, "fence": lapsed.fence, "reason": str(lapsed)})
        emit_metrics(self.report(declaration, None, history, committed=False), self._metrics_since)
        message = f"attempt {history.attempts} of {declaration.operation.value} on {declaration.table} aborted before its commit: {lapsed}"
        if len(history.lease_losses) >= MAX_LEASE_LOSSES:
            store_history(context, None)
            raise LeaseLostFailure(f"{message} ({len(history.lease_losses)} times; failing for Airflow's retries)") from lapsed
        store_history(context, history)
        when = _utcnow() + timedelta(seconds=max(float(self.admission_poll_interval), 1.0))
        self.log.warning("%s; rescheduling until %s to be admitted again", message, when.isoformat())
        raise AirflowRescheduleException(when) from lapsed

    def act_on(
        self, declaration: WriteDeclaration, decision: Decision, lost: WriteLost, history: WriteHistory, context: Any
    ) -> NoReturn:
        """Turn a decision that ends this try into what Airflow understands: reschedule, skip,
        fail fast, or (not a conflict) the engine's own error for Airflow's ordinary retries."""
        partial = self.report(declaration, lost.outcome, history, committed=False)
        partial["error"] = lost.engine_message
        emit_metrics(partial, self._metrics_since)
        if decision.action is Action.RESCHEDULE:
            store_history(context, history)
            raise AirflowRescheduleException(_utcnow() + timedelta(seconds=max(decision.delay_seconds, 1.0)))
        store_history(context, None)
        if decision.action is Action.SKIP:
            raise AirflowSkipException(decision.reason)
        if decision.action is Action.FAIL:
            kind = lost.classification.kind
            winner = lost.classification.winning_commit
            conflict = conflict_error(kind, str(lost), winner) if kind.is_conflict else None
            raise ConflictFailure(
                f"{declaration.operation.value} on {declaration.table} lost with {kind.value} and occflow "
                f"will not retry it: {sentence(why(decision))} "
                f"(attempts {history.attempts}, {history.wasted_seconds:.1f}s wasted; engine: {lost.engine_message})",
                partial,
                conflict,
            ) from lost
        # DEFAULT: not a conflict. The engine's own error goes to Airflow's ordinary retries.
        if lost.error is not None:
            raise lost.error
        raise WriteNotCommitted(
            f"{declaration.operation.value} on {declaration.table} failed (not a conflict): {lost.engine_message}",
            partial,
        )

    def _record(self, history: WriteHistory, lost: WriteLost, decision: Decision) -> None:
        cls = lost.classification
        if cls.is_conflict:
            history.conflicts.append(
                {
                    "attempt": history.attempts,
                    "kind": cls.kind.value,
                    "reason": cls.reason,
                    "winning_commit": cls.to_dict()["winning_commit"],
                    "seconds": None if lost.outcome is None else round(lost.outcome.seconds, 3),
                    "error": lost.engine_message,
                }
            )
        history.decisions.append(
            {
                "attempt": history.attempts,
                "kind": cls.kind.value,
                "action": decision.action.value,
                "delay_seconds": decision.delay_seconds,
                "reason": decision.reason,
            }
        )
        self.log.warning("%s", attempt_line(history.attempts, self.operation, self.table, decision,
                                            cls.kind, lost.engine_message))

    def report(
        self,
        declaration: WriteDeclaration,
        outcome: WriteOutcome | None,
        history: WriteHistory,
        committed: bool | None = None,
    ) -> dict[str, Any]:
        """The XCom payload: what was written, where, after how many attempts and conflicts
        (kept as ``occflow_report`` too, for the OpenLineage facets: ``lineage.py``)."""
        self.occflow_report = report = {
            "table": declaration.table,
            "operation": declaration.operation.value,
            "profile": declaration.profile.name,
            "partitions": None if declaration.partitions is None else [dict(p) for p in declaration.partitions],
            "engine": self.engine_name,
            "committed": bool(outcome is not None and outcome.committed) if committed is None else committed,
            "version": None if outcome is None else outcome.version,
            "snapshot_id": None if outcome is None else outcome.snapshot_id,
            "rows": None if outcome is None else outcome.rows,
            "seconds": None if outcome is None else round(outcome.seconds, 3),
            "attempts": history.attempts,
            "conflicts": list(history.conflicts),
            "decisions": list(history.decisions),
            "wasted_seconds": round(history.wasted_seconds, 3),
            "tag": {} if outcome is None else dict(outcome.tag),
            "error": None,  # the engine's message when the write did not commit (``engine_message``)
            "fence": self.commit_fence,
            "lease_lost": list(history.lease_losses),
            # What the commit touched, and what of it the declaration did not cover (``core.observed``)
            "observed_footprint": None,
            "footprint_exceeded": None,
        }
        return report

    # ------------------------------------------------------------------ engine-specific

    def prepare_engine(self, declaration: WriteDeclaration, context: Any) -> None:
        """Start what every attempt shares (a Spark session); not timed as an attempt."""

    def run_attempt(self, declaration: WriteDeclaration, context: Any, attempt: int) -> WriteOutcome:
        """Run the job once from a fresh snapshot; return the engine's outcome."""
        raise NotImplementedError(f"{type(self).__name__} must implement run_attempt")

    def observe_commit(self, outcome: WriteOutcome) -> ObservedFootprint | None:
        """What the committed ``outcome`` really touched, read from the engine's log or metadata
        (``None``: this engine cannot say, or the commit has no version to read)."""
        return None


def _utcnow() -> Any:
    from airflow.sdk import timezone

    return timezone.utcnow()


__all__ = [
    "MAX_LEASE_LOSSES",
    "ConflictFailure",
    "ConflictKind",
    "LeaseLostFailure",
    "OccflowWriteOperator",
    "WriteHistory",
    "WriteLost",
    "WriteNotCommitted",
]
