"""``MaxComputeTarget``: a MaxCompute table as the write flow runs writes on it (``WriteTarget``).

Each attempt is one instance (``writer.MaxComputeWrite``): tagged with the write's commit tag
(built once, by the flow), reconnected to on a retry while it still runs. ``on_instance`` tells
the caller about the instance (the Airflow face publishes its id and log view).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...core.declaration import WriteDeclaration
from ...core.observed import ObservedFootprint
from ...core.tablefacts import TableFacts
from ..outcome import WriteOutcome
from ..target import AttemptContext
from .facts import maxcompute_table_facts
from .jobs import ProjectJobs, stop_fenced_jobs
from .ledger import MaxComputeLedger
from .writer import MaxComputeWrite

ENGINE = "maxcompute"


def _ignore(instance: Any, reconnected: bool) -> None:
    return None


@dataclass
class MaxComputeTarget:
    """The table ``table`` of the project ``client`` (a PyODPS ``ODPS`` or the stand-in)."""

    client: Any
    table: str
    sql: str
    hints: Mapping[str, str] = field(default_factory=dict)
    poll_interval: float = 1.0
    exactly_once: bool = True
    on_instance: Callable[[Any, bool], None] = field(default=_ignore, repr=False)
    engine_name: str = ENGINE

    def prepare(self) -> None:
        """Nothing to start: the project is reached per request."""

    def table_facts(self) -> TableFacts:
        return maxcompute_table_facts(self.client, self.table)

    def run_attempt(self, declaration: WriteDeclaration, attempt: AttemptContext) -> WriteOutcome:
        keys = declaration.partition_keys()
        write = MaxComputeWrite(
            self.client,
            declaration.table,
            self.sql,
            declaration.operation,
            partitions=None if keys is None else tuple(sorted(keys)),
            tag=attempt.tag if self.exactly_once else None,
            hints=self.hints,
            leaves_residue=declaration.operation in declaration.profile.residue_on_failure,
            poll_interval=self.poll_interval,
            fence=attempt.fence,
        )
        fence = attempt.commit_fence()
        if fence is not None and fence.superseded_fences:
            # Leases this write supersedes lapsed; their jobs may still run on the service with
            # nobody to stop them (a frozen client): stop them and wait before submitting.
            stop_fenced_jobs(self.client, declaration.table, fence.superseded_fences)

        def lapsed() -> bool:
            until = attempt.lease_live_until()
            return until is not None and until < time.time()

        return write.run(before_submit=attempt.before_commit, on_instance=self.on_instance, lease_lapsed=lapsed)

    def commit_ledger(self, only_if: Mapping[str, str] | None = None) -> MaxComputeLedger:
        """The project's instances carrying occflow's tag (``jobs.ProjectJobs``)."""
        return MaxComputeLedger(ProjectJobs(self.client), self.table)

    def observe_commit(self, outcome: WriteOutcome) -> ObservedFootprint | None:
        return None  # MaxCompute names no files per commit that occflow could read back

    def report_details(
        self, declaration: WriteDeclaration, outcome: WriteOutcome | None
    ) -> Mapping[str, Any]:
        details: Mapping[str, Any] = {} if outcome is None else outcome.engine_details
        return {
            "maxcompute": {
                "instance_id": details.get("instance_id"),
                "logview": details.get("logview"),
                "id_version": None if outcome is None else outcome.version,
                "time_version": details.get("time_version"),
                # compaction and clustering rewrite files without changing data: no time version (spec 001)
                "data_change": None
                if outcome is None or not outcome.committed
                else declaration.operation.changes_data,
                "meta_level_retry": bool(details.get("meta_level_retry", False)),
                "reconnected": bool(details.get("reconnected", False)),
            }
        }


__all__ = ["ENGINE", "MaxComputeTarget"]
