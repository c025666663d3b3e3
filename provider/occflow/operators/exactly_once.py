"""The task side of exactly-once writes: a task instance's tag, its table's ledger, and the guard
that runs each attempt so that the logical write lands once (docs/exactly-once.md).

``ExactlyOnce.run`` wraps one attempt: verify first when asked, refuse an overwrite that a newer
logical date already overwrote, tag the commit, and verify a ``commit_state_unknown`` failure
instead of letting it be retried blindly. The ledger comes from the write's engine target
(``WriteTarget.commit_ledger(only_if=None)``).

One write, one live attempt: ``BeforeCommit`` is the check the engines run right before the
commit (another live try may have committed meanwhile; the lease must still be live). What it
finds, and a ``concurrent_transaction`` that another try's commit of this write caused, settle
the attempt as "already committed by try N" instead of committing twice or failing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..core.classify import classify
from ..core.errors import InvalidDeclarationError
from ..core.kinds import Classification, ConflictKind
from ..core.operations import Operation
from ..engines.ledger import (
    AlreadyCommitted,
    CommitLedger,
    CommitRefused,
    FoundCommit,
    LeaseNotLive,
    StaleOverwriteError,
    newer_overwrite,
)
from ..engines.outcome import ErrorInfo, WriteOutcome
from ..engines.tags import CommitTag
from ..leases import GateTimeout, LeaseKeeper, LeaseLostError

#: The longest a commit waits at its gate (``LeaseStore.wait_gate`` takes at most a week).
MAX_GATE_TIMEOUT_SECONDS = 7 * 86400.0

#: What happens to an overwrite whose partition a newer logical date already overwrote.
STALE_OVERWRITE_ACTIONS = ("report", "skip", "apply")
STALE_OVERWRITE_ENV = "OCCFLOW_STALE_OVERWRITE"


class LeaseLapsed(LeaseNotLive):
    """The write's lease lapsed, was lost or was superseded before the commit: the attempt is
    aborted without committing (someone else may hold the footprint now)."""


class GateClosed(CommitRefused):
    """The commit waited at its gate longer than its gate timeout for the leases it must commit
    after (order-aware admission): aborted without committing. ``timeout`` is the ``GateTimeout``
    that names them, the table and how long it waited."""

    def __init__(self, timeout: GateTimeout, fence: int | None = None) -> None:
        super().__init__(str(timeout))
        self.timeout = timeout
        self.fence = fence


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
        """The write's commit if the table holds it, naming the try that made it (``committed_by``:
        the log says "already committed by try N"); ``None`` otherwise."""
        found = self.ledger.find_commit(self.tag)
        if found is None:
            return None
        return found.outcome(self.tag.operation, reason)

    def ensure_not_committed(self) -> None:
        """Raise ``AlreadyCommitted`` if the write is in the table: the check right before a commit."""
        found = self.ledger.find_commit(self.tag)
        if found is not None:
            raise AlreadyCommitted(f"{self.tag.describe()} is already in {found.describe()}", found)

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
        except AlreadyCommitted as done:
            return self._settle_refused(done)
        except CommitRefused:
            raise
        except Exception as exc:
            raised = classify(exc)
            settled = self._settled_by_another_try(raised)
            if settled is not None:
                return settled
            if raised.kind is not ConflictKind.COMMIT_STATE_UNKNOWN:
                raise
            return self._settle_unknown(None, raised, exc)
        if outcome.committed:
            return outcome
        found = outcome.classification
        if found is None:
            return outcome
        settled = self._settled_by_another_try(found)
        if settled is not None:
            return settled
        if found.kind is not ConflictKind.COMMIT_STATE_UNKNOWN:
            return outcome
        return self._settle_unknown(outcome, found, None)

    def _settled_by_another_try(self, lost: Classification) -> WriteOutcome | None:
        """A ``concurrent_transaction`` on this write's own transaction id: the table refused a
        second commit of it, so another try committed it. The ledger decides; ``None`` when the
        tag is not there (another writer's transaction id: the failure stands)."""
        if lost.kind is not ConflictKind.CONCURRENT_TRANSACTION:
            return None
        found = self.ledger.find_commit(self.tag)
        return None if found is None else _settled(found, self.tag, _BY_TRANSACTION)

    def _settle_refused(self, refused: AlreadyCommitted) -> WriteOutcome:
        """The check right before the commit found the write in the table: done, not again."""
        found = refused.found or self.ledger.find_commit(self.tag)
        if found is None:  # the format's txn says landed, yet the ledger cannot name the commit
            raise refused
        return _settled(found, self.tag, "found right before this attempt's commit")

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


_BY_TRANSACTION = "the table refused a second commit of this write (concurrent_transaction)"


def _settled(found: FoundCommit, tag: CommitTag, why: str) -> WriteOutcome:
    """The write settled as committed by the try whose commit ``found`` is; this one adds none."""
    mine = "" if tag.try_number is None else f"; try {tag.try_number} did not commit again"
    reason = f"already committed by {found.by}: {why}{mine}"
    return found.outcome(tag.operation, reason)


@dataclass(frozen=True)
class BeforeCommit:
    """The check a write makes right before its commit; engines call it as late as they can.

    First the lease's gate (``LeaseKeeper.wait_gate``: the leases this commit must follow have
    ended; ``GateClosed`` when that takes longer than the gate timeout), then the ledger (another live try of the task may have committed the write
    meanwhile: ``AlreadyCommitted``), then the lease, last because it is the one that must hold at the
    commit (``LeaseLapsed`` when it lapsed, was lost or superseded). No keeper: admission is
    off; no guard: exactly-once is off.
    """

    keeper: LeaseKeeper | None = None
    guard: ExactlyOnce | None = None
    #: Seconds the commit may wait at its gate (``None``: no limit of its own) ...
    gate_timeout: float | None = None
    #: ... and the ``time.monotonic()`` by which the wait ends whatever is left of it (the
    #: task's ``execution_timeout``, less a margin for the report); ``GateClosed`` past either.
    gate_deadline: float | None = None

    def __call__(self) -> None:
        if self.keeper is not None:
            # Order-aware admission: the leases this commit must follow end first (a holder
            # that dies lets its lease lapse, and the gate opens then).
            try:
                self.keeper.wait_gate(self.gate_wait_limit())
            except GateTimeout as exc:
                raise GateClosed(exc, self.keeper.fence) from exc
        if self.guard is not None:
            self.guard.ensure_not_committed()
        if self.keeper is None:
            return
        try:
            self.keeper.ensure_live()
        except LeaseLostError as exc:
            raise LeaseLapsed(str(exc), self.keeper.fence) from exc

    def gate_wait_limit(self) -> float | None:
        """Seconds the commit may still wait at its gate now (``None``: no limit)."""
        limit = self.gate_timeout
        if self.gate_deadline is not None:
            left = max(self.gate_deadline - time.monotonic(), 0.0)
            limit = left if limit is None else min(limit, left)
        return None if limit is None else min(limit, MAX_GATE_TIMEOUT_SECONDS)


def from_context(
    context: Any, operation: Operation | str, partitions: Any = None, fence: int | None = None
) -> CommitTag | None:
    """The tag of the task instance in an Airflow ``context``; ``None`` outside a task.
    It names the try (and ``fence``, the lease's token) as who made the commit."""
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
        try_number=try_number(context),
        fence=fence,
    )


def stale_overwrite_action(configured: str | None) -> str:
    """``configured`` (the operator's ``stale_overwrite``), else ``$OCCFLOW_STALE_OVERWRITE``,
    else report."""
    action = configured or os.environ.get(STALE_OVERWRITE_ENV) or "report"
    if action not in STALE_OVERWRITE_ACTIONS:
        raise InvalidDeclarationError(
            f"stale_overwrite must be one of {', '.join(STALE_OVERWRITE_ACTIONS)}, got {action!r}"
        )
    return str(action)


def try_number(context: Any) -> int:
    ti = context.get("ti") if hasattr(context, "get") else None
    value = getattr(ti, "try_number", None)
    return int(value) if isinstance(value, int) else 1
