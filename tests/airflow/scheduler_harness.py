"""What the real-scheduler tests share: the main command's Airflow starter
(``scripts/run_examples.py``, loaded as a module), a wait that fails as soon as a service died,
and a read of a SQLite database (Airflow's metadata, the lease store) from outside the services."""

from __future__ import annotations

import importlib.util
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def run_examples() -> Any:
    """``scripts/run_examples.py`` as a module (it starts and stops Airflow's services)."""
    spec = importlib.util.spec_from_file_location("occflow_run_examples", REPO / "scripts" / "run_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wait_for(what: str, check: Callable[[], Any], timeout: float, airflow: Any, every: float = 1.0) -> Any:
    """``check()``'s first truthy answer; an error naming ``what`` after ``timeout`` seconds, or
    at once when one of ``airflow``'s services has died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        airflow.check_alive()
        found = check()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def query(db: Path, sql: str, *args: Any) -> list[Any]:
    with sqlite3.connect(db, timeout=30) as conn:
        return conn.execute(sql, args).fetchall()
