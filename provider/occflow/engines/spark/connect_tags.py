"""An Iceberg commit's occflow tag over Spark Connect (issue 37 item 3, docs/spark-support.md).

A classic session tags the SQL commits of one thread through Iceberg's ``CommitMetadata``
thread-local (``iceberg.iceberg_commit_properties``), reached through Py4J. A Connect client has
no JVM; what it can set is its server-side session's SQL conf, and Iceberg (1.12, the runtime
pinned for Spark 4.1; 1.10 has no such setting) copies every ``spark.sql.iceberg.snapshot-property.K``
of the session into the summary of each snapshot the session commits, as the
``snapshot-property.K`` write option does for one DataFrame write. So the tag is the session's
while a write runs: one write at a time per Connect session, which is checked, not assumed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ...core.errors import InvalidDeclarationError
from ..tags import WRITE_ID, CommitTag

#: Iceberg's ``SparkSQLProperties.SNAPSHOT_PROPERTY_PREFIX``: session confs that land in the summary.
SNAPSHOT_PROPERTY_CONF = "spark.sql.iceberg.snapshot-property."
_WRITE_ID_CONF = SNAPSHOT_PROPERTY_CONF + WRITE_ID


def is_connect_session(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (PySpark's ``pyspark.sql.connect`` classes);
    by module, so nothing of PySpark is imported here."""
    return type(spark).__module__.startswith("pyspark.sql.connect.")


def session_write_id(spark: Any) -> str | None:
    """The write id the Connect session's Iceberg commits carry now (``None``: untagged)."""
    value = spark.conf.get(_WRITE_ID_CONF, None)
    return None if value in (None, "") else str(value)


@contextlib.contextmanager
def iceberg_session_tag(spark: Any, tag: CommitTag) -> Iterator[None]:
    """Every Iceberg commit the Connect session ``spark`` makes inside carries ``tag`` in its
    snapshot summary. Refused when the session already carries another write's tag: two writes
    of one process sharing a session (``spark_engine`` keeps one per config) would each stamp
    the other's commits, and the ledger would find a write that never committed."""
    held = session_write_id(spark)
    if held is not None and held != tag.write_id:
        raise InvalidDeclarationError(
            f"the Spark Connect session already tags another write's Iceberg commits (write id {held}): "
            f"cannot tag {tag.describe()} beside it. Over Connect the tag is the session's "
            f"({SNAPSHOT_PROPERTY_CONF}*), so run one write at a time per session (one task per process)"
        )
    keys = {SNAPSHOT_PROPERTY_CONF + key: value for key, value in tag.properties().items()}
    for key, value in keys.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key in keys:
            spark.conf.unset(key)


__all__ = ["SNAPSHOT_PROPERTY_CONF", "iceberg_session_tag", "is_connect_session", "session_write_id"]
