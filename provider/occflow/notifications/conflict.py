"""``ConflictNotifier``: explains a write conflict to a human, through any Airflow notifier.

Use it as ``on_failure_callback`` / ``on_retry_callback``. It gathers what is known about the
failure (occflow's write report on the exception, the retry policy's classification in XCom, or
the classifier run on the exception or its text), writes the explanation to the task log, and
hands it to the wrapped notifier (SMTP, Slack, ...: anything with ``notify(context)``), which
can use it in its templates as ``{{ occflow_message }}`` / ``{{ occflow_subject }}`` or read the
structured ``occflow_conflict`` dict from the context.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseNotifier
from airflow.sdk.exceptions import AirflowFailException

from ..core.advice import kind_help
from ..core.classify import classify
from ..core.kinds import Classification, ConflictKind, WinningCommit
from ..core.operations import parse_operation
from ..core.report import MalformedReport, WriteReport
from ..policies import XCOM_KEY, ConflictRetryPolicy, log_tail
from .alert import ConflictReport

#: Where every occflow write pushes its report (``OccflowWriteOperator.publish_report``).
REPORT_XCOM_KEY = "occflow_report"

# How far the notifier looks for the task that made the winning commit (XCom reads per alert).
MAX_TASKS_SEARCHED = 64
# An engine message longer than this (a JVM stack in the message) is cut, saying so; real
# messages, a Py4J first line or delta-rs's conflict text, stay whole.
MAX_ERROR_CHARS = 4000
class ConflictNotifier(BaseNotifier):
    """Explain a conflict in the task log, and through ``notifier`` when one is given.

    :param notifier: any Airflow notifier (``SmtpNotifier``, ``SlackNotifier``...) or an object
        with ``notify(context)`` or a callable taking the context; ``None`` = the task log only.
    :param table / operation / profile / partition: what the task writes, for tasks whose own
        report does not say (operators occflow does not own); templated.
    """

    template_fields = ("table", "operation", "profile", "partition")

    def __init__(
        self,
        notifier: Any = None,
        *,
        table: str | None = None,
        operation: str | None = None,
        profile: str | None = None,
        partition: str | Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if operation is not None:
            operation = parse_operation(operation).value  # a typo fails at DAG parse time
        self.notifier = notifier
        self.table = table
        self.operation = operation
        self.profile = profile
        self.partition = partition
        log_tail.install()

    def notify(self, context: Any) -> None:
        report = self.explain(context)
        self.log.warning("%s", report.text())
        try:
            context["occflow_conflict"] = report.to_dict()
            context["occflow_message"] = report.text()
            context["occflow_subject"] = report.subject
        except TypeError:  # a read-only context: the wrapped notifier still gets it unchanged
            pass
        if self.notifier is None:
            return
        try:
            _deliver(self.notifier, context)
        except Exception as exc:  # noqa: BLE001 - the explanation is in the task log already
            self.log.error("could not send the conflict alert through %r: %s", self.notifier, exc)

    # ----------------------------------------------------------------- gathering the facts

    def explain(self, context: Mapping[str, Any]) -> ConflictReport:
        exception = context.get("exception")
        ti = context.get("ti")
        report = _own_report(exception, ti)
        from_policy = _xcom(ti, XCOM_KEY) or _policy_facts(ti, context)
        classification = self._classification(exception, report, from_policy, ti)

        last = None if report is None else report.last_lost
        winner = classification.winning_commit or (None if last is None else last.winner)
        table = (report.table if report else None) or (from_policy or {}).get("table") or self.table
        operation = (
            (report.operation if report else None) or (from_policy or {}).get("operation") or self.operation
        )
        profile = (report.profile if report else None) or (from_policy or {}).get("profile") or self.profile
        partition = _partition_text(
            None if report is None else list(report.partitions or ())
        ) or _partition_text(self.partition)
        winner_task, winner_report = _winner_task(ti, context, table, winner)
        own_excess = None if report is None else report.footprint_exceeded
        winner_excess = None if winner_report is None else winner_report.footprint_exceeded
        engine = (report.engine if report else None) or classification.engine or ""
        advice = _advice(classification.kind, operation, partition, report, engine)
        decision = _decision_text(report, from_policy, advice)
        for found in (own_excess, winner_excess):
            if found and found.get("advice") and found["advice"] not in advice:
                advice += (str(found["advice"]),)
        return ConflictReport(
            task=_task_name(ti, context),
            kind=classification.kind,
            error=_engine_error(report) or _error_text(exception),
            try_number=getattr(ti, "try_number", None),
            table=table,
            partition=partition,
            operation=operation,
            profile=profile,
            classification_reason=classification.reason,
            winner=winner,
            winner_task=winner_task,
            attempts=None if report is None else report.attempts,
            wasted_seconds=None if report is None else report.wasted_seconds,
            decision=decision,
            advice=advice,
            footprint_exceeded=str(own_excess["message"])
            if own_excess and own_excess.get("message")
            else None,
            winner_footprint_exceeded=str(winner_excess["message"])
            if winner_excess and winner_excess.get("message")
            else None,
            retried_by_airflow=_retried_by_airflow(exception, ti, context),
            status=None if report is None else report.status.value,
        )

    def _classification(
        self,
        exception: Any,
        report: WriteReport | None,
        from_policy: Mapping[str, Any] | None,
        ti: Any,
    ) -> Classification:
        last = None if report is None else report.last_lost
        if report is not None and last is not None and not last.is_conflict:
            # The operator's last attempt failed without a conflict: earlier lost attempts (that
            # were retried) are not why the task failed.
            return Classification(
                kind=ConflictKind.NOT_A_CONFLICT, engine=report.engine, reason=last.decision_reason
            )
        if report is not None and last is not None:
            return Classification(
                kind=last.kind, engine=report.engine, reason=last.reason, winning_commit=last.winner
            )
        if from_policy and from_policy.get("classification"):
            data = from_policy["classification"]
            return Classification(
                kind=ConflictKind(data["kind"]),
                engine=str(data.get("engine", "unknown")),
                reason=str(data.get("reason", "")),
                winning_commit=_winner(data.get("winning_commit")),
            )
        if exception is None:
            return Classification(ConflictKind.NOT_A_CONFLICT, "unknown", "no exception in the context")
        found = classify(exception)  # an exception or, for a task failed externally, a string
        if found.is_conflict:
            return found
        text = log_tail.tail(since=_try_started(ti), lines=80)
        from_log = classify(text) if text else found
        return from_log if from_log.is_conflict else found


# --------------------------------------------------------------------- helpers


def _deliver(notifier: Any, context: Any) -> None:
    if isinstance(notifier, BaseNotifier):
        notifier(context)  # renders its templates, which may use {{ occflow_message }}
    elif hasattr(notifier, "notify"):
        notifier.notify(context)
    elif callable(notifier):
        notifier(context)
    else:
        raise TypeError(f"{notifier!r} is neither a notifier nor callable")


def _xcom(ti: Any, key: str) -> Mapping[str, Any] | None:
    if ti is None:
        return None
    try:
        value = ti.xcom_pull(task_ids=ti.task_id, key=key, map_indexes=getattr(ti, "map_index", None))
    except Exception:  # noqa: BLE001 - no XCom backend reachable: explain with what we have
        return None
    return value if isinstance(value, Mapping) else None


def _policy_facts(ti: Any, context: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """What the task's ``ConflictRetryPolicy`` names (table, operation, profile), when it pushed
    no classification: the policy pushes one for a conflict only, and Airflow does not ask it
    at all about an ``AirflowFailException``; the alert still says what the task writes."""
    task = getattr(ti, "task", None) or context.get("task")
    policy = getattr(task, "retry_policy", None)
    if not isinstance(policy, ConflictRetryPolicy):
        return None
    return {"table": policy.table, "operation": policy.policy.operation.value, "profile": policy.policy.profile}


def _winner(data: Any) -> WinningCommit | None:
    if not isinstance(data, Mapping) or not any(v is not None for v in data.values()):
        return None
    return WinningCommit.from_dict(data)


def _own_report(exception: Any, ti: Any) -> WriteReport | None:
    """This task's write report: the one on the exception (``ConflictFailure.report``), else the
    one every write pushes (XCom ``occflow_report``, a failed try's too); ``None`` without one,
    or when it is malformed (explained from the exception alone)."""
    for value in (getattr(exception, "report", None), _xcom(ti, REPORT_XCOM_KEY)):
        if WriteReport.looks_like(value):
            try:
                return WriteReport.from_dict(value)
            except MalformedReport:
                continue
    return None


def _parsed(value: Any) -> WriteReport | None:
    """A task's value as a write report; ``None`` for a partial or malformed one."""
    if not WriteReport.looks_like(value):
        return None
    try:
        return WriteReport.from_dict(value)
    except MalformedReport:
        return None


def _retried_by_airflow(exception: Any, ti: Any, context: Mapping[str, Any]) -> bool | None:
    """Whether Airflow runs the task again: never after an ``AirflowFailException``; else while
    the task has retries left."""
    if isinstance(exception, AirflowFailException):
        return False
    retries = getattr(getattr(ti, "task", None) or context.get("task"), "retries", None)
    number = getattr(ti, "try_number", None)
    if not isinstance(retries, int) or not isinstance(number, int):
        return None
    return number <= retries


def _winner_task(
    ti: Any, context: Mapping[str, Any], table: str | None, winner: WinningCommit | None
) -> tuple[str | None, WriteReport | None]:
    """The task of this DAG run whose write report committed the winning version, and that
    report (``(None, None)`` when no task's report names it)."""
    if (
        ti is None
        or table is None
        or winner is None
        or (winner.version is None and winner.snapshot_id is None)
    ):
        return None, None
    if winner.task_id and winner.tagged:
        return winner.task_id, None  # the commit names its task (occflow's tag)
    dag = context.get("dag")
    task_ids = [t for t in getattr(dag, "task_ids", []) if t != ti.task_id][:MAX_TASKS_SEARCHED]
    for task_id in task_ids:
        for key in (REPORT_XCOM_KEY, "return_value"):
            try:
                values = ti.xcom_pull(task_ids=task_id, key=key, map_indexes=None)
            except Exception:  # noqa: BLE001 - a task without XCom, or no backend: keep looking
                continue
            candidates = values if isinstance(values, list) else [values]
            for index, value in enumerate(candidates):
                if not isinstance(value, Mapping) or value.get("table") != table:
                    continue
                same_version = winner.version is not None and value.get("version") == winner.version
                same_snapshot = (
                    winner.snapshot_id is not None and value.get("snapshot_id") == winner.snapshot_id
                )
                if same_version or same_snapshot:
                    return (task_id if len(candidates) == 1 else f"{task_id}[{index}]"), _parsed(value)
    return None, None


def _partition_text(value: Any) -> str | None:
    if not value:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return "/".join(f"{k}={v}" for k, v in sorted(value.items()))
    if isinstance(value, list | tuple):
        return ", ".join(filter(None, (_partition_text(v) for v in value)))
    return str(value)


def _decision_text(
    report: WriteReport | None, from_policy: Mapping[str, Any] | None, advice: tuple[str, ...] = ()
) -> str | None:
    last = None if report is None else report.last_lost
    if last is not None:
        reason = last.decision_reason
        prefix = f"{last.kind.value}: "
        if reason.startswith(prefix):
            reason = reason[len(prefix) :]
        if reason in advice:  # the fail-fast reason is the advice below: said once
            reason = "occflow does not retry it (what to change, below)"
        return f"{last.action.value}: {reason}"
    if from_policy and from_policy.get("decision"):
        decided = from_policy["decision"]
        delay = decided.get("delay_seconds")
        after = f" in {delay:.0f}s" if decided.get("action") in ("retry", "reschedule") and delay else ""
        return f"{decided['action']}{after}: {decided.get('reason', '')}"
    return None


def _advice(
    kind: ConflictKind,
    operation: str | None,
    partition: str | None,
    report: WriteReport | None,
    engine: str | None = None,
) -> tuple[str, ...]:
    """The kind's help text as it fits the engine that raised it (``core.advice``), plus what the
    declaration itself suggests."""
    if not kind.is_conflict:
        return ()
    advice = [kind_help(kind, engine)]
    op = None
    if operation:
        try:
            op = parse_operation(operation)
        except Exception:  # noqa: BLE001 - an operation we cannot parse gets the generic advice
            op = None
    if op is not None and op.reads_table and not partition and not op.is_compaction:
        advice.append(
            f"{op.value} declares no partition: it reads the whole table, so any concurrent write "
            "conflicts with it; name the partition in the statement's condition and in `partitions=`."
        )
    if kind.retry_safe:
        advice.append(
            "If conflicts repeat, keep conflicting writers of this table apart: one Airflow pool per "
            "table or partition (1 slot), or occflow admission (`admission=True`)."
        )
    attempts = None if report is None else report.attempts
    if attempts is not None and attempts > 1 and kind.retry_safe:
        advice.append(f"{attempts} attempts were needed: the table is contended at this time of day.")
    return tuple(advice)


def _task_name(ti: Any, context: Mapping[str, Any]) -> str:
    if ti is None:
        dag = context.get("dag")
        return str(getattr(dag, "dag_id", "unknown task"))
    name = f"{ti.dag_id}.{ti.task_id}"
    map_index = getattr(ti, "map_index", -1)
    return f"{name}[{map_index}]" if isinstance(map_index, int) and map_index >= 0 else name


def _engine_error(report: WriteReport | None) -> str | None:
    """The engine's own message from an occflow write report: the failed attempt's ``error``,
    else the last lost attempt's (the report's ``error`` is set when the try ended without a commit)."""
    if report is None:
        return None
    if report.error:
        return report.error
    last = report.last_lost
    return last.error if last is not None and last.error else None


def _error_text(exception: Any) -> str:
    """The exception as ``Class: message``, the whole message (every line), cut only past
    ``MAX_ERROR_CHARS`` and then saying how much more the task log holds."""
    if exception is None:
        return "no exception (the task was failed from outside the task)"
    text = exception if isinstance(exception, str) else f"{type(exception).__name__}: {exception}"
    text = text.strip()
    if len(text) <= MAX_ERROR_CHARS:
        return text
    return f"{text[:MAX_ERROR_CHARS]} [... {len(text) - MAX_ERROR_CHARS} more characters in the task log]"


def _try_started(ti: Any) -> float | None:
    started = getattr(ti, "start_date", None)
    try:
        return None if started is None else float(started.timestamp()) - 1.0
    except (AttributeError, TypeError, ValueError):
        return None
