"""``ConflictFreeSensor``: waits until no running write would make this task's operation fail.

"Running write" = a live lease in the lease store; "would make it fail" = the two footprints
overlap and the table's conflict matrix says the operations conflict. Deferrable: the wait is a
trigger polling the store, not a worker slot. The sensor takes no lease itself: use it in front
of a write that does not go through occflow's admission (another provider's operator).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator

from ..core.declaration import WriteDeclaration
from ..leases import Lease, LeaseRequest, TaskAdmission
from ..triggers.lease import ConflictFreeTrigger


class ConflictFreeSensor(BaseSensorOperator):
    """Wait until ``operation`` on ``partitions`` of ``table`` would not conflict with a live write.

    Takes the same declaration as the write operators (validated at DAG parse time).
    """

    template_fields: Sequence[str] = ("partitions",)
    ui_color = "#e8f4fa"

    def __init__(
        self,
        *,
        table: str,
        operation: str,
        profile: str | None = None,
        table_format: str | None = None,
        partitions: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        lease_store_url: str | None = None,
        deferrable: bool = True,
        poll_interval: float = 5.0,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", poll_interval)
        super().__init__(**kwargs)
        self.occflow_footprint = WriteDeclaration.create(
            table, operation, profile=profile, table_format=table_format, partitions=partitions, allow_templates=True
        )
        self.table = table
        self.operation = self.occflow_footprint.operation.value
        self.profile = self.occflow_footprint.profile.name
        self.partitions = partitions
        self.lease_store_url = lease_store_url
        self.deferrable = deferrable
        self.poll_interval = poll_interval

    @property
    def task_admission(self) -> TaskAdmission:
        return TaskAdmission(self.lease_store_url)

    def request(self, context: Any) -> LeaseRequest:
        declaration = WriteDeclaration.create(self.table, self.operation, profile=self.profile, partitions=self.partitions)
        return self.task_admission.request(declaration, context)

    def blockers(self, context: Any) -> list[Lease]:
        return self.task_admission.blocking_leases(self.request(context))

    def poke(self, context: Any) -> bool:
        blocking = self.blockers(context)
        for lease in blocking:
            self.log.info("waiting for %s", lease.describe())
        return not blocking

    def execute(self, context: Any) -> None:
        if not self.deferrable:
            super().execute(context)
            return
        request = self.request(context)
        blocking = self.task_admission.blocking_leases(request)
        if not blocking:
            return
        for lease in blocking:
            self.log.info("deferring while %s runs", lease.describe())
        self.defer(
            trigger=ConflictFreeTrigger.for_request(request, self.lease_store_url, self.poll_interval),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Any, event: Mapping[str, Any]) -> None:
        self.log.info("no conflicting write on %s any more", self.table)
