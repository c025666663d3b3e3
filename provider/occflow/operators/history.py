"""What a task instance spent on its write so far, kept across reschedules in Airflow's
``task_state_store``, the metrics for what each try added, and what its commit really touched."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import metrics
from ..core.declaration import WriteDeclaration
from ..core.observed import excess
from ..engines.outcome import WriteOutcome

# task_state_store keys: what earlier tries of this task instance (reschedules) already spent.
_STATE_KEY = "occflow_write_history"


@dataclass
class WriteHistory:
    """What this task instance spent on the write so far, across reschedules."""

    first_started: float = field(default_factory=time.time)
    attempts: int = 0
    wasted_seconds: float = 0.0
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    lease_losses: list[dict[str, Any]] = field(default_factory=list)  # attempts aborted uncommitted

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> WriteHistory:
        if not data:
            return cls()
        return cls(
            first_started=float(data["first_started"]),
            attempts=int(data["attempts"]),
            wasted_seconds=float(data["wasted_seconds"]),
            conflicts=list(data.get("conflicts", [])),
            decisions=list(data.get("decisions", [])),
            lease_losses=list(data.get("lease_losses", [])),
        )


def _state_store(context: Any) -> Any:
    try:
        return context.get("task_state_store")
    except Exception:  # noqa: BLE001 - a context without the store (older runners)
        return None


def load_history(context: Any) -> WriteHistory:
    store = _state_store(context)
    if store is None:
        return WriteHistory()
    try:
        return WriteHistory.from_dict(store.get(_STATE_KEY))
    except Exception:  # noqa: BLE001 - no state yet / the store is not reachable
        return WriteHistory()


def store_history(context: Any, history: WriteHistory | None) -> None:
    """Keep the history across a reschedule; clear it once the write is settled."""
    store = _state_store(context)
    if store is None:
        return
    try:
        store.set(_STATE_KEY, None if history is None else asdict(history))
    except Exception:  # noqa: BLE001 - losing the history only loses counts, never data
        return


def emit_metrics(report: Mapping[str, Any], since: tuple[int, int, float]) -> None:
    """Metrics for what this try added (earlier tries of a rescheduled task reported theirs)."""
    conflicts, decisions, wasted = since
    metrics.record_report(
        {
            **report,
            "conflicts": report["conflicts"][conflicts:],
            "decisions": report["decisions"][decisions:],
            "wasted_seconds": max(float(report["wasted_seconds"]) - wasted, 0.0),
        }
    )


def observed_report(operator: Any, declaration: WriteDeclaration, outcome: WriteOutcome) -> dict[str, Any]:
    """The report's ``observed_footprint`` (what the commit really touched, read back from the
    engine by ``operator.observe_commit``) and ``footprint_exceeded`` (what of it the declaration
    did not cover, with the advice; ``None`` when covered or not observed). A write beyond its
    declaration is logged as a warning: admission kept it apart only from what it declared."""
    empty: dict[str, Any] = {"observed_footprint": None, "footprint_exceeded": None}
    if not outcome.committed:
        return empty
    try:
        observed = operator.observe_commit(outcome)
    except Exception as exc:  # noqa: BLE001 - the write is committed; only the check is lost
        operator.log.warning(
            "could not read what the commit of %s on %s touched (version=%s snapshot=%s): %s",
            declaration.operation.value, declaration.table, outcome.version, outcome.snapshot_id, exc,
        )
        return empty
    if observed is None:
        return empty
    found = excess(declaration, observed)
    if found is not None:
        operator.log.warning(
            "footprint exceeded: %s (commit %s). What to change: %s",
            found.describe(), observed.version_or_snapshot, found.advice,
        )
    return {"observed_footprint": observed.to_dict(), "footprint_exceeded": None if found is None else found.to_dict()}
