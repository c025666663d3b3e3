"""How a write task ends when it did not commit, as Airflow sees it: the exceptions ``WriteFlow``
raises after it published the write's report (``ConflictFailure`` and ``WriteNotCommitted``
carry that report for notifiers and lineage)."""

from __future__ import annotations

from typing import Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException


class ConflictFailure(AirflowFailException):
    """The policy said fail fast: retrying cannot help (or may write twice). Airflow will not retry.

    ``report`` is the task's write report (``WriteReport.to_dict()``); ``conflict`` the typed
    occflow conflict exception, so a notifier can explain the conflict without parsing text.
    """

    def __init__(self, message: str, report: dict[str, Any], conflict: BaseException | None = None) -> None:
        super().__init__(message)
        self.report = report
        self.conflict = conflict

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.report, self.conflict))


class WriteNotCommitted(RuntimeError):
    """The engine failed with an error that is not a conflict: Airflow's ordinary retries decide.

    ``report`` is the task's write report (its ``error`` is the engine's message), for notifiers."""

    def __init__(self, message: str, report: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.report = report or {}

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.report))


class LeaseLostFailure(AirflowException):
    """The lease was not live at the commit ``MAX_LEASE_LOSSES`` times: Airflow's retries decide."""


class GateTimeoutFailure(AirflowException):
    """The commit waited at its gate past its timeout; nothing was committed. Airflow's retries decide."""


__all__ = ["ConflictFailure", "GateTimeoutFailure", "LeaseLostFailure", "WriteNotCommitted"]
