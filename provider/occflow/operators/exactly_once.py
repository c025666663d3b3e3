"""The task side of exactly-once writes: a task instance's tag, its table's ledger, and the guard
that runs each attempt so that the logical write lands once (docs/exactly-once.md).

``ExactlyOnce.run`` wraps one attempt: verify first when asked, refuse an overwrite that a newer
logical date already overwrote, tag the commit, and verify a ``commit_state_unknown`` failure
instead of letting it be retried blindly. The ledger comes from the operator itself
(``commit_ledger(table, only_if=None)``): each write operator asks its engine for it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..core.classify import classify
from ..core.errors import InvalidDeclarationError
from ..core.kinds import Classification, ConflictKind
from ..core.operations import Operation
from ..engines.ledger import CommitLedger, StaleOverwriteError, newer_overwrite
from ..engines.outcome import ErrorInfo, WriteOutcome
from ..engines.tags import CommitTag

#: What happens to an overwrite whose partition a newer logical date already overwrote.
STALE_OVERWRITE_ACTIONS = ("report", "skip", "apply")
STALE_OVERWRITE_ENV = "OCCFLOW_STALE_OVERWRITE"


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
        return WriteOutcome(
            engine=self.ledger.engine,
            table=self.ledger.table,
            operation=self.tag.operation,
            committed=False,
            seconds=0.0,
            error=None if error is None else ErrorInfo.from_exception(error),
            classification=verified,
            tag={"exactly_once": "verified absent"},
        )


def from_context(context: Any, operation: Operation | str, partitions: Any = None) -> CommitTag | None:
    """The tag of the task instance in an Airflow ``context``; ``None`` outside a task."""
    ti = context.get("ti") if hasattr(context, "get") else None
    if ti is None:
        return None
    logical = context.get("logical_date")
    dag_run = context.get("dag_run")
    if logical is None and dag_run is not None:
        # Airflow 3 runs without a logical date (manual, asset-triggered): order by run_after.
        logical = getattr(dag_run, "logical_date", None) or getattr(dag_run, "run_after", None)
    return CommitTag.create(
        str(ti.dag_id),
        str(ti.task_id),
        str(ti.run_id),
        operation,
        map_index=int(getattr(ti, "map_index", -1) if getattr(ti, "map_index", None) is not None else -1),
        logical_date=logical,
        partitions=partitions,
    )


def stale_overwrite_action(operator: Any) -> str:
    """The operator's ``stale_overwrite`` attribute, else ``$OCCFLOW_STALE_OVERWRITE``, else report."""
    action = getattr(operator, "stale_overwrite", None) or os.environ.get(STALE_OVERWRITE_ENV) or "report"
    if action not in STALE_OVERWRITE_ACTIONS:
        raise InvalidDeclarationError(
            f"stale_overwrite must be one of {', '.join(STALE_OVERWRITE_ACTIONS)}, got {action!r}"
        )
    return str(action)


def ledger_for(operator: Any, table: str, only_if: Mapping[str, str] | None = None) -> CommitLedger | None:
    """The ledger of the table an occflow operator writes: its ``commit_ledger(table, only_if=...)``;
    ``None`` for an operator without one or whose engine keeps no ledger (spark-submit drivers
    commit in another process, plain Parquet/Hive tables keep no history: docs/exactly-once.md)."""
    own = getattr(operator, "commit_ledger", None)
    if not callable(own):
        return None
    ledger: CommitLedger | None = own(table, only_if=only_if)
    return ledger


def exactly_once_for(operator: Any, declaration: Any, context: Any) -> ExactlyOnce | None:
    """The exactly-once guard of a task's write, or ``None`` (outside a task, untaggable engine,
    or ``exactly_once = False`` on the operator)."""
    if getattr(operator, "exactly_once", True) is False:
        return None
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
