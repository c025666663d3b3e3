"""``SparkSubmitTarget``: a table written by spark-submit drivers, as the write flow sees it
(``WriteTarget``). Running a driver, or reconnecting to the one a crashed try left, is the
caller's (Airflow's ``ResumableJobMixin`` on the operator): ``run_driver`` does it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...core.declaration import WriteDeclaration
from ...core.observed import ObservedFootprint
from ..ledger import CommitLedger, LeaseNotLive
from ..outcome import WriteOutcome
from ..target import AttemptContext
from .delta_spark import unsupported_table_features
from .submit_fence import AT_COMMIT, AT_STATEMENT_START
from .submit_ledger import SubmitLedger

ENGINE = "spark-submit"


@dataclass
class SparkSubmitTarget:
    """The table ``table`` that drivers started with ``config`` write."""

    config: Mapping[str, Any]
    table: str
    run_driver: Callable[[WriteDeclaration, AttemptContext], WriteOutcome] = field(repr=False)
    engine_name: str = ENGINE

    def prepare(self) -> None:
        """Nothing to start here: each attempt is its own driver."""

    def run_attempt(self, declaration: WriteDeclaration, attempt: AttemptContext) -> WriteOutcome:
        outcome = self.run_driver(declaration, attempt)
        refused = outcome.lease_refused
        if refused is not None:
            where = {AT_COMMIT: " (refused inside its commit)", AT_STATEMENT_START: " (refused before its write "
                     "statement started)"}.get(refused.at or "", "")
            raise LeaseNotLive(f"the driver did not commit{where}: {refused.reason}", attempt.fence)
        unsupported = None if outcome.committed else unsupported_table_features(self.table, outcome.error)
        if unsupported is not None:  # the table needs a newer delta-spark than the driver's: never retried
            raise unsupported
        return outcome

    def commit_ledger(self, only_if: Mapping[str, str] | None = None) -> CommitLedger | None:
        """The table's ledger read from this process; the driver carries the tag
        (``SubmitLedger``). Commits name no task, so ``only_if`` does not apply."""
        if self.config.get("table_format", "iceberg") not in ("iceberg", "delta"):
            return None  # plain Parquet/Hive tables keep no history to find a tag in
        return SubmitLedger(dict(self.config), self.table)

    def observe_commit(self, outcome: WriteOutcome) -> ObservedFootprint | None:
        return None  # the commit happened in the driver's session

    def report_details(
        self, declaration: WriteDeclaration, outcome: WriteOutcome | None
    ) -> Mapping[str, Any]:
        return {}


__all__ = ["ENGINE", "SparkSubmitTarget"]
