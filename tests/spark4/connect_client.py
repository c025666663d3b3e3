"""A Spark Connect client's write, in a process of its own: PySpark marks a process that built a
Connect session as Connect-only (``SPARK_CONNECT_MODE_ENABLED``), and the suite's other tests start
local sessions. Returns plain data (it crosses a process boundary)."""

from __future__ import annotations

from typing import Any


def write_error(remote: str, table_format: str, home: str) -> dict[str, Any]:
    """What ``SparkEngine.run`` of one INSERT over ``remote`` raises (``None`` if it raises nothing)."""
    from occflow.engines.spark import SparkConfig, SparkConfigError, SparkEngine

    engine = SparkEngine(SparkConfig(remote=remote, table_format=table_format, home=home))
    try:
        outcome = engine.run("INSERT INTO db.t VALUES (1)", "db.t", "insert_into")
    except SparkConfigError as exc:
        return {"error": str(exc)}
    return {"error": None, "committed": outcome.committed}
