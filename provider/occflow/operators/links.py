"""Extra links from a write task to what it committed, where the engine has a URL for it.

Airflow 3 computes an operator's extra links in the task's own process when the try ends
(``finalize``) and keeps each as an XCom (``_link_<class name>``) that the UI shows as a button;
the classes are registered in ``get_provider_info()["extra-links"]`` so the API server can
deserialize DAGs that use them.

Both links read the task's write report (its ``return_value`` XCom) and ask the operator for the
URL (``commit_url`` / ``table_history_url``): delta-rs has one (the commit's JSON file in the
table's ``_delta_log``, a ``file://`` or object-store URL); Spark and spark-submit do not, and a
task with no committed write gets an empty link, which the UI does not show.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from airflow.sdk import BaseOperatorLink
from airflow.sdk.bases.xcom import BaseXCom

from ..core.report import MalformedReport, WriteReport

#: The XCom keys of the write report: every end pushes ``occflow_report``; a committed try's
#: return value is the same report (older runs have only that).
REPORT_KEYS = ("occflow_report", "return_value")


def write_report(ti_key: Any) -> WriteReport | None:
    """The write report of the task instance ``ti_key`` names, or ``None``."""
    for key in REPORT_KEYS:
        try:
            value = BaseXCom.get_value(ti_key=ti_key, key=key)
        except Exception:  # noqa: BLE001 - no XCom (the try failed before its report): no link
            continue
        if WriteReport.looks_like(value):
            try:
                return WriteReport.from_dict(value)
            except MalformedReport:
                return None
    return None


@runtime_checkable
class CommitUrls(Protocol):
    """An operator whose engine has URLs for a commit and for the table's history (delta-rs)."""

    def commit_url(self, report: WriteReport) -> str | None: ...

    def table_history_url(self, report: WriteReport) -> str | None: ...


def _ask(
    operator: object, url: Callable[[CommitUrls, WriteReport], str | None], report: WriteReport | None
) -> str:
    if report is None or not report.committed or not isinstance(operator, CommitUrls):
        return ""
    return url(operator, report) or ""


class WriteCommitLink(BaseOperatorLink):
    """The commit the write made (delta-rs: ``_delta_log/<version>.json``)."""

    name = "Table commit"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return _ask(operator, lambda op, report: op.commit_url(report), write_report(ti_key))


class TableHistoryLink(BaseOperatorLink):
    """The table's history, where the commit sits among the others (delta-rs: ``_delta_log/``)."""

    name = "Table history"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return _ask(operator, lambda op, report: op.table_history_url(report), write_report(ti_key))


#: What ``get_provider_info()["extra-links"]`` lists.
EXTRA_LINKS = (
    f"{__name__}.WriteCommitLink",
    f"{__name__}.TableHistoryLink",
)
