"""``WriteFlow``: one write task's run, from its lease to its report (docs/architecture.md).

The operator declares the write and is admitted (or defers); then one ``WriteFlow`` owns the
run: the declaration, the policy, the lease, the engine's ``WriteTarget``, what the task
instance spent so far (``WriteHistory``) and the log. ``run()`` is the loop

    attempt -> classify -> decide -> act

until an attempt commits or a decision ends the try. Every end pushes one typed
``WriteReport`` (committed, failed, skipped or rescheduled) through ``publish`` before it
returns or raises, so the view, the notifier and OpenLineage see failed and skipped writes too.

The loop is a plain loop, not ``tenacity.Retrying``: what follows each attempt depends on the
classified kind and on the stage the policy reached (retry, then reschedule, then fail), which
tenacity's retry / stop / wait callbacks would each re-derive.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, NoReturn

from airflow.sdk import timezone
from airflow.sdk.exceptions import (
    AirflowFailException,
    AirflowRescheduleException,
    AirflowSkipException,
    AirflowTaskTimeout,
)

from ..core.classify import classify
from ..core.declaration import WriteDeclaration
from ..core.errors import InvalidDeclarationError, conflict_error
from ..core.fencing import CommitFence
from ..core.kinds import Classification
from ..core.observed import excess
from ..core.policy import Action, Decision, WritePolicy
from ..core.ranges import spec_json
from ..core.report import LeaseLoss, LostAttempt, WriteReport, WriteStatus
from ..engines.ledger import AlreadyCommitted, LeaseNotLive, StaleOverwriteError
from ..engines.outcome import NeverRetry, WriteOutcome
from ..engines.tags import KEYS
from ..engines.target import AttemptContext, TaskRef, WriteTarget
from ..leases import LeaseKeeper
from .exactly_once import BeforeCommit, ExactlyOnce, GateClosed, from_context
from .history import WriteHistory, emit_metrics, store_history
from .messages import attempt_line, commit_text, engine_message, fitted_to_engine, sentence, why
from .taskref import task_ref
from .write_ends import ConflictFailure, GateTimeoutFailure, LeaseLostFailure, WriteNotCommitted

#: Aborts for a lease that was not live at the commit, per task instance, before the task fails
#: (for Airflow's retries) instead of going back through admission once more.
MAX_LEASE_LOSSES = 3


class WriteLost(Exception):
    """One attempt did not commit: carries the engine's outcome (or exception) and its class."""

    def __init__(
        self, classification: Classification, outcome: WriteOutcome | None, error: BaseException | None
    ):
        self.engine_message = engine_message(outcome, error)
        super().__init__(f"{classification.kind.value}: {self.engine_message}")
        self.classification = classification
        self.outcome = outcome
        self.error = error


@dataclass(frozen=True)
class FlowSettings:
    """What the operator's parameters say about the run (beyond the declaration)."""

    exactly_once: bool = True
    stale_overwrite: str = "report"
    reschedule_after_lease_loss: float = 2.0
    #: ``BeforeCommit``'s: seconds a commit may wait at its gate, and when the wait ends anyway.
    gate_timeout: float | None = None
    gate_deadline: float | None = None


@dataclass
class WriteFlow:
    """One write's run: attempt -> classify -> decide -> act, and its report."""

    declaration: WriteDeclaration
    policy: WritePolicy
    target: WriteTarget
    context: Any
    log: logging.Logger
    history: WriteHistory
    settings: FlowSettings = field(default_factory=FlowSettings)
    keeper: LeaseKeeper | None = None
    #: Where each end's report goes (XCom, the operator's OpenLineage facets).
    publish: Callable[[WriteReport], None] = field(default=lambda report: None, repr=False)
    task: TaskRef | None = None
    try_number: int = 1

    def __post_init__(self) -> None:
        self._metrics_since = (len(self.history.lost), self.history.wasted_seconds)
        self._ended = False  # whether this try's end was published (``_end``, ``_committed``)
        self._grant_to_start: float | None = None
        self._guard = self._exactly_once()
        self.before_commit = BeforeCommit(self.keeper, self._guard, self.settings.gate_timeout, self.settings.gate_deadline)

    @property
    def fence(self) -> int | None:
        return None if self.keeper is None else int(self.keeper.fence)

    def _since_grant(self, now: float) -> float | None:
        """Seconds from the lease's grant to ``now`` (``time.monotonic()``), on this process's
        clock: the lease is anchored here (``valid_until``) and its grant and expiry are both on
        the store's clock, so no two clocks are compared. ``None`` without a lease or an anchor."""
        lease = None if self.keeper is None else self.keeper.lease
        if lease is None or lease.valid_until is None:
            return None
        granted = lease.valid_until - (lease.expires - lease.acquired).total_seconds()
        return round(max(now - granted, 0.0), 3)

    def _live_until(self) -> float | None:
        """Until when (epoch seconds) the lease is certainly live, as its keeper knows it; ``None``
        without admission. 0 once the keeper lost it."""
        keeper = self.keeper
        if keeper is None:
            return None
        deadline = keeper.deadline
        if keeper.lost.is_set() or deadline is None:
            return 0.0
        return time.time() + (deadline - time.monotonic())

    def _commit_fence(self) -> CommitFence | None:
        """What the commit carries to fence out stalled writers whose leases lapsed; ``None``
        without admission."""
        keeper = self.keeper
        return None if keeper is None else keeper.store.commit_fence(keeper.lease)

    # ------------------------------------------------------------------ the loop

    def run(self) -> WriteReport:
        """The committed write's report; any other end raises what Airflow understands, after
        its report was published: also an end the flow did not choose (Airflow's
        ``execution_timeout``, a fail or skip raised by the user's job, an error of occflow's
        own), published here before it goes on up."""
        try:
            return self._loop()
        except BaseException as end:
            if not self._ended:
                status = WriteStatus.SKIPPED if isinstance(end, AirflowSkipException) else WriteStatus.FAILED
                self._end(status, error=ended_by(end))
            raise

    def _loop(self) -> WriteReport:
        later_try = self.try_number > 1
        while True:
            try:
                outcome = self._attempt(later_try)
            except (LeaseNotLive, GateClosed) as refused:
                self._abort_before_commit(refused)  # raises
            except WriteLost as lost:
                elapsed = time.time() - self.history.first_started
                decision = fitted_to_engine(
                    self.policy.decide(lost.classification, self.history.attempts, elapsed),
                    self.target.engine_name,
                )
                self._record(lost, decision)
                if decision.action is not Action.RETRY:
                    self._act_on(decision, lost)  # raises
            else:
                return self._committed(outcome)
            # Retry in the task, outside the handler: the next attempt's errors are its own.
            time.sleep(decision.delay_seconds)

    def _attempt(self, later_try: bool) -> WriteOutcome:
        """One attempt from a fresh snapshot: the committed outcome, or ``WriteLost`` (classified)."""
        history = self.history
        history.attempts += 1
        started = time.monotonic()
        if self._grant_to_start is None:  # this try's first attempt: what the lease waited for it
            self._grant_to_start = self._since_grant(started)
        attempt = AttemptContext(
            number=history.attempts,
            before_commit=self.before_commit,
            fence=self.fence,
            task=self.task,
            tag=None if self._guard is None else self._guard.tag,
            user_context=self.context,
            lease_live_until=self._live_until,
            commit_fence=self._commit_fence,
        )
        try:
            outcome = self._run_target(attempt, later_try)
        except StaleOverwriteError as stale:
            status = WriteStatus.SKIPPED if stale.action == "skip" else WriteStatus.FAILED
            self._end(status, error=str(stale))
            raise (AirflowSkipException if stale.action == "skip" else AirflowFailException)(
                str(stale)
            ) from stale
        except NeverRetry as residue:
            history.wasted_seconds += time.monotonic() - started
            self._end(WriteStatus.FAILED, error=str(residue))
            raise AirflowFailException(str(residue)) from residue
        except (AirflowFailException, AirflowSkipException, AirflowTaskTimeout, InvalidDeclarationError):
            raise
        except (LeaseNotLive, GateClosed):
            history.wasted_seconds += time.monotonic() - started
            raise
        except AlreadyCommitted as done:  # the job's own Delta txn id is in the table already: done
            return WriteOutcome.already_committed(
                self.target.engine_name,
                self.declaration.table,
                self.declaration.operation,
                str(done),
                by=None if done.found is None else done.found.by,
            )
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

    def _run_target(self, attempt: AttemptContext, later_try: bool) -> WriteOutcome:
        """The engine's attempt, under exactly-once when it is on: a retry or a later try first
        looks for its write in the table."""
        guard = self._guard
        if guard is None:
            return self.target.run_attempt(self.declaration, attempt)
        return guard.run(lambda: self.target.run_attempt(self.declaration, attempt),
                         verify_first=later_try or attempt.number > 1)

    def _exactly_once(self) -> ExactlyOnce | None:
        """The exactly-once guard of the write, or ``None`` (outside a task, an engine that
        keeps no ledger, or ``exactly_once=False``). The lease's fence is stamped on the commit."""
        if not self.settings.exactly_once:
            return None
        declaration = self.declaration
        partitions = None if declaration.partitions is None else [dict(p) for p in declaration.partitions]
        tag = from_context(self.context, declaration.operation, partitions, self.fence)
        if tag is None:
            return None
        # The keys the delta-rs target writes into its commits pick out the operator's own commits.
        own_commit = {KEYS["dag_id"]: tag.dag_id, KEYS["task_id"]: tag.task_id, KEYS["run_id"]: tag.run_id}
        ledger = self.target.commit_ledger(only_if=own_commit)
        if ledger is None:
            return None
        return ExactlyOnce(ledger, tag, self.settings.stale_overwrite)

    # ------------------------------------------------------------------ what follows a lost attempt

    def _record(self, lost: WriteLost, decision: Decision) -> None:
        cls = lost.classification
        entry = LostAttempt(
            attempt=self.history.attempts,
            kind=cls.kind,
            action=decision.action,
            delay_seconds=decision.delay_seconds,
            reason=cls.reason,
            decision_reason=decision.reason,
            winner=cls.winning_commit,
            seconds=None if lost.outcome is None else round(lost.outcome.seconds, 3),
            error=lost.engine_message,
        )
        self.history.lost.append(entry)
        self.log.warning(
            "%s", attempt_line(entry, self.declaration.operation.value, self.declaration.table, decision)
        )

    def _act_on(self, decision: Decision, lost: WriteLost) -> NoReturn:
        """Turn a decision that ends this try into what Airflow understands: reschedule, skip,
        fail fast, or (not a conflict) the engine's own error for Airflow's ordinary retries."""
        declaration, history = self.declaration, self.history
        if decision.action is Action.RESCHEDULE:
            self._end(WriteStatus.RESCHEDULED, lost.outcome, error=lost.engine_message, keep_history=True)
            raise AirflowRescheduleException(  # type: ignore[no-untyped-call]  # Airflow's class is untyped
                timezone.utcnow() + timedelta(seconds=max(decision.delay_seconds, 1.0))
            )
        if decision.action is Action.SKIP:
            self._end(WriteStatus.SKIPPED, lost.outcome, error=lost.engine_message)
            raise AirflowSkipException(decision.reason)
        report = self._end(WriteStatus.FAILED, lost.outcome, error=lost.engine_message)
        if decision.action is Action.FAIL:
            kind = lost.classification.kind
            winner = lost.classification.winning_commit
            conflict = conflict_error(kind, str(lost), winner) if kind.is_conflict else None
            raise ConflictFailure(
                f"{declaration.operation.value} on {declaration.table} lost with {kind.value} and occflow "
                f"will not retry it: {sentence(why(decision))} "
                f"(attempts {history.attempts}, {history.wasted_seconds:.1f}s wasted; "
                f"engine: {lost.engine_message})",
                report.to_dict(),
                conflict,
            ) from lost
        # DEFAULT: not a conflict. The engine's own error goes to Airflow's ordinary retries.
        if lost.error is not None:
            raise lost.error
        raise WriteNotCommitted(
            f"{declaration.operation.value} on {declaration.table} failed (not a conflict): "
            f"{lost.engine_message}",
            report.to_dict(),
        )

    def _abort_before_commit(self, refused: LeaseNotLive | GateClosed) -> NoReturn:
        """Nothing was committed, and not for a conflict. The gate stayed closed past its timeout:
        the try fails (``GateTimeoutFailure``; a new try is admitted afresh). The lease was not
        live at the commit: the task goes back through admission for a fresh lease (reschedule),
        or fails after ``MAX_LEASE_LOSSES`` such aborts, for Airflow's retries."""
        history, declaration = self.history, self.declaration
        message = (
            f"attempt {history.attempts} of {declaration.operation.value} on {declaration.table} "
            f"aborted before its commit: {refused}"
        )
        if isinstance(refused, GateClosed):
            self._end(WriteStatus.FAILED, error=message)
            raise GateTimeoutFailure(message) from refused
        history.lease_losses.append(LeaseLoss(attempt=history.attempts, fence=refused.fence, reason=str(refused)))
        if len(history.lease_losses) >= MAX_LEASE_LOSSES:
            self._end(WriteStatus.FAILED, error=message)
            raise LeaseLostFailure(
                f"{message} ({len(history.lease_losses)} times; failing for Airflow's retries)"
            ) from refused
        self._end(WriteStatus.RESCHEDULED, error=message, keep_history=True)
        when = timezone.utcnow() + timedelta(
            seconds=max(float(self.settings.reschedule_after_lease_loss), 1.0)
        )
        self.log.warning("%s; rescheduling until %s to be admitted again", message, when.isoformat())
        # Airflow's exception class is untyped.
        raise AirflowRescheduleException(when) from refused  # type: ignore[no-untyped-call]

    # ------------------------------------------------------------------ the report

    def report(
        self, status: WriteStatus, outcome: WriteOutcome | None = None, error: str | None = None
    ) -> WriteReport:
        declaration, history = self.declaration, self.history
        tag = {} if outcome is None else dict(outcome.tag)
        details = dict(self.target.report_details(declaration, outcome))
        return WriteReport(
            table=declaration.table,
            operation=declaration.operation.value,
            profile=declaration.profile.name,
            engine=self.target.engine_name,
            status=status,
            partitions=None
            if declaration.partitions is None
            else tuple(spec_json(p) for p in declaration.partitions),
            version=None if outcome is None else outcome.version,
            snapshot_id=None if outcome is None else outcome.snapshot_id,
            rows=None if outcome is None else outcome.rows,
            seconds=None if outcome is None else round(outcome.seconds, 3),
            attempts=history.attempts,
            lost=tuple(history.lost),
            wasted_seconds=history.wasted_seconds,
            tag=tag,
            error=error,
            fence=self.fence,
            lease_lost=tuple(history.lease_losses),
            committed_by=None if outcome is None or outcome.found is None else outcome.found.by,
            metadata_commit=None if outcome is None else outcome.metadata_commit,
            engine_details=details,
            table_key=None if declaration.location is None else declaration.table_key,
            grant_to_start_seconds=self._grant_to_start,
        )

    def _end(
        self,
        status: WriteStatus,
        outcome: WriteOutcome | None = None,
        error: str | None = None,
        keep_history: bool = False,
    ) -> WriteReport:
        """The try ends without a commit: its report published, metrics sent, the history kept
        for a reschedule or cleared."""
        self._ended = True
        report = self.report(status, outcome, error)
        store_history(self.context, self.history if keep_history else None)
        emit_metrics(report, self._metrics_since)
        self.publish(report)
        return report

    def _committed(self, outcome: WriteOutcome) -> WriteReport:
        self._ended = True
        report = self._observed(self.report(WriteStatus.COMMITTED, outcome), outcome)
        store_history(self.context, None)
        emit_metrics(report, self._metrics_since)
        self.publish(report)
        d = self.declaration
        race = outcome.damage
        if race:
            # Committed, and the table now holds rows twice: loud, never "committed, 0 conflicts".
            if self.keeper is None:
                cause = ("Admission keeps two compactions of one table apart; this DAG ran them without it "
                         "(admission=False / allow_unsafe_concurrency=True)")
            else:
                state = self.keeper.why or "its keeper did not see it lapse"
                cause = ("Admission was on: a lease lapsed while a compaction ran (a stalled writer whose "
                         f"lease the store gave to the other; this write's lease: {state})")
            raise AirflowFailException(
                f"{d.operation.value} on {d.table} committed ({commit_text(report)}) beside a concurrent "
                f"compaction of the same files: {race}. {cause}"
            )
        found = outcome.found
        if found is not None:  # found in the table, not written again by this try
            self.log.info(
                "%s on %s was already committed by %s (%s): this try (%d) wrote nothing; %s",
                d.operation.value,
                d.table,
                found.by or "an earlier attempt",
                commit_text(report, outcome),
                self.try_number,
                found.reason,
            )
        elif outcome.changed_nothing:
            self.log.info(
                "%s on %s committed nothing: there was nothing to change (%d attempt(s))",
                d.operation.value,
                d.table,
                report.attempts,
            )
        else:
            self.log.info(
                "committed %s on %s: %s after %d attempt(s), %d conflict(s), %.1fs wasted",
                d.operation.value,
                d.table,
                commit_text(report, outcome),
                report.attempts,
                len(report.conflicts),
                report.wasted_seconds,
            )
        return report

    def _observed(self, report: WriteReport, outcome: WriteOutcome) -> WriteReport:
        """The report with what the commit really touched (read back from the engine) and what
        of it the declaration did not cover; a write beyond its declaration is logged as a
        warning: admission kept it apart only from what it declared."""
        d = self.declaration
        try:
            observed = self.target.observe_commit(outcome)
        except Exception as exc:  # noqa: BLE001 - the write is committed; only the check is lost
            self.log.warning(
                "could not read what the commit of %s on %s touched (%s): %s",
                d.operation.value,
                d.table,
                commit_text(report),
                exc,
            )
            return report
        if observed is None:
            return report
        found = excess(d, observed)
        if found is not None:
            self.log.warning(
                "footprint exceeded: %s (commit %s). What to change: %s",
                found.describe(),
                observed.version_or_snapshot,
                found.advice,
            )
        return replace(
            report,
            observed_footprint=observed.to_dict(),
            footprint_exceeded=None if found is None else found.to_dict(),
        )


def ended_by(end: BaseException, *, in_the_job: bool = True) -> str:
    """What ended a write that the flow did not end itself, for its report (``in_the_job``: a
    fail or skip raised while an attempt ran came from the user's job)."""
    if isinstance(end, AirflowTaskTimeout):
        return f"timed out (execution_timeout): {end}"
    if in_the_job and isinstance(end, (AirflowFailException, AirflowSkipException)):
        return f"{type(end).__name__} raised by the job: {end}"
    return f"{type(end).__name__}: {end}"


__all__ = [
    "MAX_LEASE_LOSSES",
    "FlowSettings",
    "WriteFlow",
    "WriteLost",
    "task_ref",
]
