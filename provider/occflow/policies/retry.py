"""``ConflictRetryPolicy``: an Airflow ``retry_policy`` that knows the table's conflict matrix.

Put it on any task that writes a lakehouse table, including operators occflow does not own
(``SparkSubmitOperator``, Databricks, a ``BashOperator`` running a job): when the task fails,
the policy classifies the exception (and, when the exception says nothing, the task's log tail)
and asks the policy derived from the profile and operation what to do:

======================  =========================================================================
occflow action          Airflow retry decision
======================  =========================================================================
retry / reschedule      ``RETRY`` with the derived delay: a new try re-runs the job, which
                        re-plans from the table's current snapshot
fail                    ``FAIL``: no retry (protocol change, shared transaction id, unknown state)
skip                    ``FAIL`` without retry: a retry policy cannot skip a task, and re-running
                        a compaction that lost to a data write is wasted work
default                 not a conflict: ``DEFAULT`` (Airflow's ordinary retry) while the task has
                        made at most ``non_conflict_retries`` retries, then ``FAIL``
======================  =========================================================================

Airflow caps ``RETRY`` at the task's ``retries``; set ``retries=policy.retries`` so the policy's
own limits are the ones that apply. Those retries are sized for conflicts, so a failure that is
not one (an ordinary bug) is retried only ``non_conflict_retries`` times (default 0), not
``policy.retries`` times. Airflow counts tries, not time: at this level the stages stop by their
attempt limits (time limits govern in-task retries in occflow's operators).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk.definitions.retry_policy import RetryAction, RetryDecision, RetryPolicy

from .. import metrics
from ..core.classify import classify
from ..core.errors import InvalidDeclarationError
from ..core.kinds import Classification
from ..core.policy import Action, Decision, WritePolicy, derive_policy, overrides_to_dict
from . import log_tail

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context

XCOM_KEY = "occflow_conflict"

# How each occflow action reaches Airflow's retry machinery (see the module docstring).
AIRFLOW_ACTION: dict[Action, RetryAction] = {
    Action.RETRY: RetryAction.RETRY,
    Action.RESCHEDULE: RetryAction.RETRY,
    Action.SKIP: RetryAction.FAIL,
    Action.FAIL: RetryAction.FAIL,
    Action.DEFAULT: RetryAction.DEFAULT,
}


class ConflictRetryPolicy(RetryPolicy):
    """Retry a task that lost a write conflict as the table's profile says; nothing else.

    :param profile: the table's profile (``delta-write-serializable``, ``iceberg-serializable``...).
    :param operation: the task's write operation (canonical name or SQL spelling).
    :param table: the table, for metrics and alerts.
    :param overrides: per conflict kind, an action name, a ``KindPolicy`` or its dict.
    :param replans_from_fresh_snapshot: whether a new try of the job re-reads the table. True
        for a job that is submitted again (spark-submit, a SQL statement); False when the job
        replays a plan made earlier, which keeps read-modify-write operations from retrying.
    :param read_task_log: when the exception is not a conflict, classify the task's log tail
        too (the conflict text of a spark-submit driver is only in the log).
    :param log_tail_lines: how many of the try's last log lines to read.
    :param non_conflict_retries: how many retries a failure that is not a conflict gets (default
        0: an ordinary bug fails at once, whatever ``retries`` the conflicts need). Airflow keeps
        no count per kind across tries, so it caps the try number: a failure that is not a
        conflict is retried (Airflow's ordinary retry, with the task's ``retry_delay``) only
        while the task has made at most this many retries, whatever failed the earlier tries.
    """

    def __init__(
        self,
        profile: str,
        operation: str,
        table: str | None = None,
        overrides: Mapping[str, Any] | None = None,
        replans_from_fresh_snapshot: bool = True,
        read_task_log: bool = True,
        log_tail_lines: int = 80,
        non_conflict_retries: int = 0,
    ) -> None:
        self.profile = profile
        self.operation = operation
        self.table = table
        self.overrides = overrides_to_dict(overrides)
        self.replans_from_fresh_snapshot = replans_from_fresh_snapshot
        self.read_task_log = read_task_log
        self.log_tail_lines = log_tail_lines
        if isinstance(non_conflict_retries, bool) or not isinstance(non_conflict_retries, int) or non_conflict_retries < 0:
            raise InvalidDeclarationError(
                f"non_conflict_retries must be a whole number of retries >= 0, got {non_conflict_retries!r}"
            )
        self.non_conflict_retries = non_conflict_retries
        # Derived now so a bad profile, operation or override fails at DAG parse time.
        self.policy: WritePolicy = derive_policy(
            profile, operation, self.overrides, replans_from_fresh_snapshot=replans_from_fresh_snapshot
        )
        if read_task_log:
            log_tail.install()

    @property
    def retries(self) -> int:
        """Task ``retries`` that lets every retrying stage of every kind run to its limit (and
        ``non_conflict_retries``, if that is more)."""
        most = self.non_conflict_retries
        for _, kind_policy in self.policy.kinds:
            total = 0
            for stage in kind_policy.stages():
                if stage.action.retries_the_write:
                    total += stage.stop.attempt_limit() or 0
            most = max(most, total)
        return most

    def classify_failure(self, exception: BaseException | str, context: Context | None = None) -> Classification:
        """The exception's classification; else the try's log tail's, if that names a conflict.

        The tail is weighed in order and by level (``occflow.core.classify``): a conflict that a
        later error or a later successful commit overtook, or that the engine retried by itself,
        is not this failure's cause.
        """
        found = classify(exception)
        if found.is_conflict or not self.read_task_log:
            return found
        text = log_tail.tail(since=_try_started(context), lines=self.log_tail_lines)
        if not text:
            return found
        from_log = classify(text)
        if not from_log.is_conflict:
            return found
        return replace(from_log, reason=f"from the task log: {from_log.reason}")

    def decide(
        self, exception: BaseException | str, try_number: int, context: Context | None = None
    ) -> tuple[Classification, Decision]:
        """Classify the failure and decide; reports metrics and the conflict to XCom."""
        classification = self.classify_failure(exception, context)
        decision = self.policy.decide(classification, attempt=max(try_number, 1), elapsed_seconds=0.0)
        self._report(classification, decision, try_number, context)
        return classification, decision

    def evaluate(
        self,
        exception: BaseException,
        try_number: int,
        max_tries: int,
        context: Context | None = None,
    ) -> RetryDecision:
        classification, decision = self.decide(exception, try_number, context)
        action = AIRFLOW_ACTION[decision.action]
        if action is RetryAction.DEFAULT:
            # A conflict kind overridden to ``default`` is left to Airflow as asked.
            return RetryDecision.default() if classification.is_conflict else self._not_a_conflict(
                classification, try_number
            )
        # Airflow keeps 500 characters of the reason: the decision first, the evidence after.
        reason = f"occflow {decision.action.value}: {decision.reason} [{classification.reason}]"
        if action is RetryAction.FAIL:
            return RetryDecision.fail(reason)
        return RetryDecision.retry(delay=timedelta(seconds=decision.delay_seconds), reason=reason)

    def _not_a_conflict(self, classification: Classification, try_number: int) -> RetryDecision:
        """Airflow's ordinary retry while the task has made at most ``non_conflict_retries``
        retries; then fail: the task's ``retries`` were sized for conflicts."""
        retries_made = max(try_number, 1) - 1
        if retries_made < self.non_conflict_retries:
            return RetryDecision.default()
        return RetryDecision.fail(
            f"occflow fail: not a conflict, and non_conflict_retries={self.non_conflict_retries} "
            f"({retries_made} retr{'y' if retries_made == 1 else 'ies'} made): the task's retries are "
            f"for conflicts only [{classification.reason}]"
        )

    def _report(
        self, classification: Classification, decision: Decision, try_number: int, context: Context | None
    ) -> None:
        """Metrics, and the classification in XCom for the notifier (best effort)."""
        if not classification.is_conflict:
            return
        table = self.table or "unknown"
        tags = {"operation": self.policy.operation.value, "profile": self.policy.profile}
        metrics.record_conflict(classification.kind, table, **tags)
        metrics.record_decision(decision, table, **tags)
        ti = context.get("ti") if context else None
        if ti is None:
            return
        try:
            ti.xcom_push(
                key=XCOM_KEY,
                value={
                    "table": self.table,
                    "profile": self.policy.profile,
                    "operation": self.policy.operation.value,
                    "try_number": try_number,
                    "classification": classification.to_dict(),
                    "decision": decision.to_dict(),
                },
            )
        except Exception:  # noqa: BLE001 - an alert without details beats a failed failure path
            return

    # -- serialization (Airflow's RetryPolicy contract) ------------------------------------

    def serialize(self) -> dict[str, Any]:
        return {
            "__type": "ConflictRetryPolicy",
            "__classpath": f"{type(self).__module__}.{type(self).__qualname__}",
            "profile": self.profile,
            "operation": self.operation,
            "table": self.table,
            "overrides": self.overrides,
            "replans_from_fresh_snapshot": self.replans_from_fresh_snapshot,
            "read_task_log": self.read_task_log,
            "log_tail_lines": self.log_tail_lines,
            "non_conflict_retries": self.non_conflict_retries,
        }

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> ConflictRetryPolicy:
        return cls(
            profile=data["profile"],
            operation=data["operation"],
            table=data.get("table"),
            overrides=data.get("overrides") or None,
            replans_from_fresh_snapshot=bool(data.get("replans_from_fresh_snapshot", True)),
            read_task_log=bool(data.get("read_task_log", True)),
            log_tail_lines=int(data.get("log_tail_lines", 80)),
            non_conflict_retries=int(data.get("non_conflict_retries", 0)),
        )

    def __repr__(self) -> str:
        table = f", table={self.table!r}" if self.table else ""
        return f"ConflictRetryPolicy({self.policy.profile!r}, {self.policy.operation.value!r}{table})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConflictRetryPolicy) and self.serialize() == other.serialize()

    def __hash__(self) -> int:
        return hash((self.profile, self.operation, self.table))


def _try_started(context: Context | None) -> float | None:
    """When this try started, so the log tail holds only this try's lines."""
    ti = context.get("ti") if context else None
    started = getattr(ti, "start_date", None)
    if started is None:
        return None
    try:
        # A second of slack: the first lines of a try are logged around its recorded start.
        return float(started.timestamp()) - 1.0
    except (AttributeError, TypeError, ValueError):
        return time.time() - 3600.0
