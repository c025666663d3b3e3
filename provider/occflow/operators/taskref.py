"""The task instance in an Airflow context, as the plain values the engines take (``TaskRef``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..engines.target import TaskRef


def task_ref(context: Any) -> TaskRef | None:
    """The task instance in an Airflow ``context`` as plain values; ``None`` outside a task."""
    ti = context.get("ti") if isinstance(context, Mapping) or hasattr(context, "get") else None
    if ti is None:
        return None
    map_index = getattr(ti, "map_index", None)
    number = getattr(ti, "try_number", None)
    return TaskRef(
        dag_id=str(ti.dag_id),
        task_id=str(ti.task_id),
        run_id=str(ti.run_id),
        map_index=int(map_index) if isinstance(map_index, int) else -1,
        try_number=int(number) if isinstance(number, int) else 1,
    )
