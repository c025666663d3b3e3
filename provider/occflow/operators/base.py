"""The operator every occflow write operator shares: its parameters, ``declare()``, and
``execute()`` = declare -> admit or defer -> run the write's ``WriteFlow`` -> its asset event.

A subclass says how its write is declared (``declare``) and which engine runs it
(``write_target``: a ``WriteTarget`` from its engine folder). The run itself, attempt ->
classify -> decide -> act and the report of every end, is ``flow.WriteFlow``'s.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import (
    AirflowFailException,
    AirflowRescheduleException,
    AirflowSkipException,
    TaskDeferred,
)

from ..core.declaration import WriteDeclaration
from ..core.errors import InvalidDeclarationError
from ..core.policy import WritePolicy, derive_policy, overrides_to_dict, partitions_of
from ..core.report import WriteReport, WriteStatus
from ..engines.target import WriteTarget
from . import admission
from .admission import AdmissionSettings
from .assets import (
    TableAssetsMixin,
    as_list,
    checked_key_columns,
    key_placeholder,
    table_asset,
    with_table_outlet,
)
from .exactly_once import stale_overwrite_action, try_number
from .flow import MAX_LEASE_LOSSES, FlowSettings, WriteFlow, WriteLost, ended_by, task_ref
from .history import WriteHistory, load_history
from .lineage import OpenLineageMixin
from .links import TableHistoryLink, WriteCommitLink
from .write_ends import ConflictFailure, GateTimeoutFailure, LeaseLostFailure, WriteNotCommitted

#: The XCom key every write pushes its report under, whatever its end (``WriteReport``).
REPORT_XCOM_KEY = "occflow_report"
#: Each try's report in the task state store: ``occflow_report.try.<n>`` (the view reads them).
TRY_REPORT_KEY_PREFIX = f"{REPORT_XCOM_KEY}.try."


def try_report_key(try_number: int) -> str:
    """The task state store key of try ``try_number``'s report."""
    return f"{TRY_REPORT_KEY_PREFIX}{try_number}"
#: Seconds a commit waits at its gate by default when the task has no ``execution_timeout``
#: (``gate_timeout`` on the operator). A gate opens when the leases it awaits end, by release
#: or by lapse: only a live writer running longer than this holds it closed so long.
DEFAULT_GATE_TIMEOUT_SECONDS = 3600.0
#: Seconds (at most a tenth of ``execution_timeout``) a gate wait ends before Airflow's
#: ``execution_timeout`` would, so the try ends with occflow's error and report, not a bare timeout.
GATE_REPORT_MARGIN_SECONDS = 30.0


class OccflowWriteOperator(TableAssetsMixin, OpenLineageMixin, BaseOperator):
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
    :param exactly_once: tag each commit with the write's id and look for it before every retry
        and later try, so the write lands once (docs/exactly-once.md); ``False`` turns it off.
    :param stale_overwrite: ``report`` / ``skip`` / ``apply``: an overwrite that a newer logical
        date already overwrote (default ``$OCCFLOW_STALE_OVERWRITE``, else ``report``).
    :param admission_resume_settle_seconds: seconds after a deferral before the task is resumed
        (guards against an Airflow 3.3 race that kills a task resumed very soon; 0: off).
    :param gate_timeout: seconds the commit may wait at its gate for the leases it must commit
        after (order-aware admission) before the try fails with ``GateTimeoutFailure``, naming
        them. Default: what is left of the task's ``execution_timeout`` (less a margin, so the
        failure is occflow's, with its report), else ``DEFAULT_GATE_TIMEOUT_SECONDS`` (1 hour).
        A number is capped by what is left of ``execution_timeout`` too.
    :param partition_key_columns: take the partition written from the DAG run's
        ``partition_key`` (``CronPartitionTimetable``, ``PartitionedAssetTimetable``): the key's
        ``|``-separated values, one per column named here, in this order (docs/assets.md). Instead
        of ``partitions``; a key that does not parse for these columns fails the try before
        admission. The asset event's partition keys are written in this order too.

    The table is an outlet ``Asset`` of the task (docs/assets.md); a committed write emits its
    asset event with what it committed, a try that committed nothing emits none.
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
        admission_wait_seconds: float | None = None,
        admission_resume_settle_seconds: float | None = None,
        exactly_once: bool = True,
        stale_overwrite: str | None = None,
        gate_timeout: float | None = None,
        partition_key_columns: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.partition_key_columns = checked_key_columns(partition_key_columns, self.task_id)
        if self.partition_key_columns is not None:
            partitions = key_placeholder(self.partition_key_columns, partitions, self.task_id)
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
        self.exactly_once = exactly_once
        self.stale_overwrite = stale_overwrite
        self.gate_timeout = gate_timeout
        self._execute_started: float | None = None
        self.admission_settings()  # a bad number of seconds fails the DAG import, naming the parameter
        self.flow_settings()  # as does a stale_overwrite that is not one of its actions, or a bad gate_timeout

    @classmethod
    def partial(cls, **kwargs: Any) -> Any:
        """Like ``BaseOperator.partial``, but the declaration's fixed parts are checked now, and
        the table's asset is an outlet of the mapped task where its URI is known from the
        arguments (``parse_time_asset_uri``).

        Airflow builds mapped tasks without calling ``__init__`` at parse time; a bad table or
        operation in ``.partial(...)`` must still fail the DAG import, not the first mapped task.
        """
        from airflow.sdk.bases.operator import partial as airflow_partial

        cls.parse_time_declaration(kwargs)
        uri = cls.parse_time_asset_uri(kwargs)
        if uri is not None:
            kwargs = {**kwargs, "outlets": with_table_outlet(as_list(kwargs.get("outlets")), table_asset(uri))}
        return airflow_partial(cls, **kwargs)

    @classmethod
    def parse_time_declaration(cls, kwargs: Mapping[str, Any]) -> WriteDeclaration | None:
        """The declaration the keyword arguments fix at DAG parse time (templates allowed), its
        policy overrides checked; ``None`` when they leave the table or operation to ``expand``."""
        if "table" not in kwargs or "operation" not in kwargs:
            return None
        key_columns = checked_key_columns(kwargs.get("partition_key_columns"), str(kwargs.get("task_id")))
        if key_columns is not None:
            kwargs = {**kwargs, "partitions": key_placeholder(key_columns, kwargs.get("partitions"), str(kwargs.get("task_id")))}
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
        return declared

    # ------------------------------------------------------------------ the flow

    def execute(self, context: Any) -> dict[str, Any]:
        self._execute_started = time.monotonic()  # where Airflow's execution_timeout starts
        with self._reported(context):
            self.take_partitions_from_run(context)
            declaration = self.declare()
            lease = admission.admit(self.admission_settings(), declaration, context, self.log, self.defer)
            report = self.write(declaration, lease, context)
        self.emit_table_event(context)
        return report

    def execute_admitted(self, context: Any, event: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Resumed by the admission trigger: the lease was granted while the task was deferred."""
        self._execute_started = time.monotonic()  # a resumed try's execution_timeout starts anew
        with self._reported(context):
            self.take_partitions_from_run(context)
            declaration = self.declare()
            lease = admission.lease_from_event(self.admission_settings(), event)
            report = self.write(declaration, lease, context)
        self.emit_table_event(context)
        return report

    @contextlib.contextmanager
    def _reported(self, context: Any) -> Iterator[None]:
        """Every end of the try publishes a report, also those before the flow exists (an invalid
        declaration, admission refused or timed out, an engine that fails to start): a row with
        its table, operation and why. A deferral is no end (the resumed try reports)."""
        self._report_published = False
        try:
            yield
        except (TaskDeferred, AirflowRescheduleException):
            raise
        except BaseException as end:
            if not self._report_published:
                status = WriteStatus.SKIPPED if isinstance(end, AirflowSkipException) else WriteStatus.FAILED
                self.publish_report(self._refused_report(status, ended_by(end, in_the_job=False)), context)
            raise

    def _refused_report(self, status: WriteStatus, why: str) -> WriteReport:
        """The report of a try that ended before its first attempt: what it was declared to write."""
        try:
            declared = self.declare()  # rendered partitions, where they render
        except Exception:  # noqa: BLE001 - the declaration itself is what failed: as parsed
            declared = self.occflow_write
        return WriteReport(
            table=declared.table, operation=declared.operation.value, profile=declared.profile.name,
            engine=self.engine_name, status=status,
            partitions=None if declared.partitions is None else tuple(dict(p) for p in declared.partitions),
            error=f"ended before its first attempt: {why}",
        )

    def admission_settings(self) -> AdmissionSettings:
        return AdmissionSettings(
            enabled=bool(self.admission),
            store_url=self.lease_store_url,
            lease_ttl=self.lease_ttl,
            poll_interval=self.admission_poll_interval,
            wait_seconds=admission.DEFAULT_ADMISSION_WAIT_SECONDS
            if self.admission_wait_seconds is None
            else self.admission_wait_seconds,
            resume_settle_seconds=admission.DEFAULT_RESUME_SETTLE_SECONDS
            if self.admission_resume_settle_seconds is None
            else self.admission_resume_settle_seconds,
        )

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

    def write_policy(self, declaration: WriteDeclaration | None = None) -> WritePolicy:
        """The policy of the write ``declaration`` says (default: the operator's own); how many
        partitions it covers decides whether a compaction that lost skips or retries what is left."""
        covers = (declaration or self.occflow_write).partitions
        # occflow's operators re-plan every attempt from a fresh snapshot (the targets load it).
        return derive_policy(
            self.profile,
            self.operation,
            self.policy_overrides,
            replans_from_fresh_snapshot=True,
            partitions=partitions_of(covers),
        )

    def flow_settings(self) -> FlowSettings:
        gate_timeout = None if self.gate_timeout is None else admission.checked_gate_timeout(self.gate_timeout)
        deadline = None
        limit = self.execution_timeout
        if limit is not None and self._execute_started is not None:
            seconds = limit.total_seconds()
            deadline = self._execute_started + seconds - min(GATE_REPORT_MARGIN_SECONDS, seconds / 10)
        if gate_timeout is None and deadline is None:
            gate_timeout = DEFAULT_GATE_TIMEOUT_SECONDS
        return FlowSettings(
            exactly_once=self.exactly_once is not False,
            stale_overwrite=stale_overwrite_action(self.stale_overwrite),
            reschedule_after_lease_loss=float(self.admission_poll_interval),
            gate_timeout=gate_timeout,
            gate_deadline=deadline,
        )

    def write(self, declaration: WriteDeclaration, lease: Any, context: Any) -> dict[str, Any]:
        """Run the admitted write's flow; its report (``WriteReport.to_dict()``) is the XCom."""
        settings = self.admission_settings()
        target = self.write_target(declaration, context)
        # Starting the engine (a JVM, a session) is not an attempt: no conflict can waste it.
        target.prepare()
        history = load_history(context)
        try:
            with admission.keep(settings, lease, self.log) as keeper:
                flow = WriteFlow(
                    declaration=declaration,
                    policy=self.write_policy(declaration),
                    target=target,
                    context=context,
                    log=self.log,
                    history=history,
                    settings=self.flow_settings(),
                    keeper=keeper,
                    publish=lambda report: self.publish_report(report, context),
                    task=task_ref(context),
                    try_number=try_number(context),
                )
                report = flow.run()
        finally:
            admission.release(settings, lease, self.log)
        return report.to_dict()

    def publish_report(self, report: WriteReport, context: Any) -> None:
        """Every end's report: kept for the OpenLineage facets and pushed to XCom under
        ``occflow_report`` (a failed or skipped try returns no value, yet the view and the
        notifier must see it)."""
        self.occflow_report = report
        self._report_published = True
        ti = context.get("ti") if hasattr(context, "get") else None
        if ti is None:
            return
        try:
            ti.xcom_push(key=REPORT_XCOM_KEY, value=report.to_dict())
        except Exception as exc:  # noqa: BLE001 - the write's end must not be hidden by its report
            self.log.warning("could not push the write report to XCom: %s", exc)
        # Airflow clears a task's XComs when its next try starts: each try's report is also kept
        # in the task state store under its own key, written while the try still runs (Airflow
        # refuses the write once the try has ended), so the view shows every try.
        store = context.get("task_state_store") if hasattr(context, "get") else None
        if store is not None:
            try:
                store.set(try_report_key(try_number(context)), report.to_dict())
            except Exception as exc:  # noqa: BLE001 - as above
                self.log.warning("could not keep this try's report: %s", exc)

    # ------------------------------------------------------------------ engine-specific

    def write_target(self, declaration: WriteDeclaration, context: Any) -> WriteTarget:
        """The engine's ``WriteTarget`` for this write (one per engine folder)."""
        raise NotImplementedError(f"{type(self).__name__} must implement write_target")


__all__ = [
    "MAX_LEASE_LOSSES",
    "ConflictFailure",
    "DEFAULT_GATE_TIMEOUT_SECONDS",
    "GateTimeoutFailure",
    "REPORT_XCOM_KEY",
    "TRY_REPORT_KEY_PREFIX",
    "try_report_key",
    "LeaseLostFailure",
    "OccflowWriteOperator",
    "WriteHistory",
    "WriteLost",
    "WriteNotCommitted",
]
