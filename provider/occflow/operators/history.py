"""What a task instance spent on its write so far, kept across reschedules in Airflow's
``task_state_store``, and the metrics for what each try added."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .. import metrics
from ..core.report import LeaseLoss, LostAttempt, MalformedReport, WriteReport, WriteStatus

# task_state_store keys: what earlier tries of this task instance (reschedules) already spent.
_STATE_KEY = "occflow_write_history"


@dataclass
class WriteHistory:
    """What this task instance spent on the write so far, across reschedules."""

    first_started: float = field(default_factory=time.time)
    attempts: int = 0
    wasted_seconds: float = 0.0
    lost: list[LostAttempt] = field(default_factory=list)
    lease_losses: list[LeaseLoss] = field(default_factory=list)  # attempts aborted uncommitted

    def to_dict(self) -> dict[str, Any]:
        """Kept in the state store in the report's own layout (one serialisation for both)."""
        as_report = WriteReport(
            table="-",
            operation="-",
            profile="-",
            engine="-",
            status=WriteStatus.RESCHEDULED,
            attempts=self.attempts,
            lost=tuple(self.lost),
            wasted_seconds=self.wasted_seconds,
            lease_lost=tuple(self.lease_losses),
        ).to_dict()
        return {"first_started": self.first_started, **{k: as_report[k] for k in _KEPT}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> WriteHistory:
        if not data:
            return cls()
        report = WriteReport.from_dict({"table": "-", "operation": "-", **{k: data.get(k) for k in _KEPT}})
        return cls(
            first_started=float(data["first_started"]),
            attempts=report.attempts,
            wasted_seconds=report.wasted_seconds,
            lost=list(report.lost),
            lease_losses=list(report.lease_lost),
        )


_KEPT = ("attempts", "wasted_seconds", "lost_attempts", "lease_lost")


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
    except (MalformedReport, KeyError, TypeError, ValueError):
        return WriteHistory()  # a history this version cannot read only loses counts, never data
    except Exception:  # noqa: BLE001 - no state yet / the store is not reachable
        return WriteHistory()


def store_history(context: Any, history: WriteHistory | None) -> None:
    """Keep the history across a reschedule; clear it once the write is settled."""
    store = _state_store(context)
    if store is None:
        return
    try:
        if history is None:  # Airflow's store refuses None as a value: a settled write deletes
            store.delete(_STATE_KEY)
        else:
            store.set(_STATE_KEY, history.to_dict())
    except Exception:  # noqa: BLE001 - losing the history only loses counts, never data
        return


def emit_metrics(report: WriteReport, since: tuple[int, float]) -> None:
    """Metrics for what this try added (earlier tries of a rescheduled task reported theirs)."""
    lost, wasted = since
    metrics.record_report(
        replace(report, lost=report.lost[lost:], wasted_seconds=max(report.wasted_seconds - wasted, 0.0))
    )
