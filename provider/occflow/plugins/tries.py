"""Every try's write report, kept: where the view finds the reports of earlier tries.

Airflow clears a task instance's XComs when its next try starts, so the ``occflow_report`` a
failed try pushed is gone once the retry runs, and the view would show the second try's report in
place of the first's. Each try's report is therefore also kept in Airflow's task state store
(kept across the tries of a task instance, for ``[state_store] default_retention_days``) under
``occflow_report.try.<n>``; the view reads them back beside Airflow's ``TaskInstanceHistory``,
one row per try (``data.airflow_writes``).

The copy must be written by the try itself, while it runs: after a try ended, its task's token
may no longer write the task state store (the execution API refuses it), so neither a listener
nor a callback can keep it: ``OccflowWriteOperator.publish_report`` writes it (docs/ui.md,
"Every try's report").
"""

from __future__ import annotations

import json
from typing import Any

from ..operators.base import TRY_REPORT_KEY_PREFIX as KEY_PREFIX
from ..operators.base import try_report_key as report_key


def try_of(key: str) -> int | None:
    """The try a task state store key holds the report of; ``None`` for any other key."""
    number = key[len(KEY_PREFIX):] if key.startswith(KEY_PREFIX) else ""
    return int(number) if number.isascii() and number.isdigit() else None


def stored_value(text: str) -> Any:
    """A task state store value as the metadata DB holds it (JSON text); ``None`` when it is not
    JSON (a value a custom state backend keeps elsewhere is a reference, not a report)."""
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


__all__ = ["KEY_PREFIX", "report_key", "stored_value", "try_of"]
