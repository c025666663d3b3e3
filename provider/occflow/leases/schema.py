"""The lease store's tables (SQLAlchemy Core), the same on SQLite and PostgreSQL.

Times are seconds since the epoch (double precision) from the store's clock, so comparisons
are plain numbers on both backends; ``Lease`` turns them into pendulum times.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from ..core.errors import InvalidDeclarationError
from ..core.identifiers import shown

metadata = sa.MetaData()

_ID = sa.String(64)
_SEQ = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # SQLite autoincrements INTEGER only


def _holder_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("dag_id", sa.String(250), nullable=False, default=""),
        sa.Column("task_id", sa.String(250), nullable=False, default=""),
        sa.Column("run_id", sa.String(250), nullable=False, default=""),
        sa.Column("try_number", sa.Integer, nullable=False, default=0),
        sa.Column("host", sa.String(250), nullable=False, default=""),
        sa.Column("pid", sa.Integer, nullable=False, default=0),
    ]


leases = sa.Table(
    "occflow_leases",
    metadata,
    sa.Column("lease_id", _ID, primary_key=True),
    sa.Column("request_id", _ID, nullable=False),
    sa.Column("table_name", sa.String(512), nullable=False),
    # JSON list of partition keys; NULL = the whole table.
    sa.Column("partitions", sa.Text, nullable=True),
    sa.Column("operation", sa.String(32), nullable=False),
    sa.Column("profile", sa.String(64), nullable=False),
    *_holder_columns(),
    sa.Column("acquired_at", sa.Double, nullable=False),
    sa.Column("heartbeat_at", sa.Double, nullable=False),
    sa.Column("expires_at", sa.Double, nullable=False),
    sa.Column("ttl", sa.Double, nullable=False),
    # The grant's fencing token (occflow_lease_fences); 0 on rows written before fences existed.
    sa.Column("fence", sa.BigInteger, nullable=False, server_default="0"),
    # 1: the writer holds its commit at the lease's gate (order-aware admission may gate it).
    sa.Column("commit_gate", sa.Integer, nullable=False, server_default="0"),
    # When the writer first reached its gate (about to commit): from then on no newcomer may
    # hold its commit back. NULL: still working.
    sa.Column("gate_reached_at", sa.Double, nullable=True),
    sa.Index("ix_occflow_leases_table_expires", "table_name", "expires_at"),
    sa.Index("ix_occflow_leases_request", "request_id"),
)

# One row per partition key of a lease ("*" for a whole-table lease), so a decision reads only
# the leases that can overlap the request instead of every lease on the table.
lease_keys = sa.Table(
    "occflow_lease_keys",
    metadata,
    sa.Column("lease_id", _ID, primary_key=True),
    sa.Column("partition_key", sa.String(1024), primary_key=True),
    sa.Column("table_name", sa.String(512), nullable=False),
    # Sorted partition columns ("country,ds"); keys of another column set may overlap partially.
    sa.Column("columns", sa.String(512), nullable=False),
    sa.Index("ix_occflow_lease_keys_key", "table_name", "partition_key"),
    sa.Index("ix_occflow_lease_keys_columns", "table_name", "columns"),
)

# Requests that were not admitted, in arrival order (queue_key = arrival - head start).
queue = sa.Table(
    "occflow_lease_queue",
    metadata,
    sa.Column("request_id", _ID, primary_key=True),
    sa.Column("table_name", sa.String(512), nullable=False),
    sa.Column("partitions", sa.Text, nullable=True),
    sa.Column("operation", sa.String(32), nullable=False),
    sa.Column("profile", sa.String(64), nullable=False),
    *_holder_columns(),
    sa.Column("commit_gate", sa.Integer, nullable=False, server_default="0"),
    sa.Column("queue_key", sa.Double, nullable=False),
    sa.Column("enqueued_at", sa.Double, nullable=False),
    sa.Column("seen_at", sa.Double, nullable=False),
    sa.Column("expires_at", sa.Double, nullable=False),
    sa.Index("ix_occflow_lease_queue_table", "table_name", "expires_at"),
)

# Every grant, release, heartbeat, expiry and queue change, in decision order (seq) per table.
events = sa.Table(
    "occflow_lease_events",
    metadata,
    sa.Column("seq", _SEQ, primary_key=True, autoincrement=True),
    sa.Column("at", sa.Double, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("table_name", sa.String(512), nullable=False),
    sa.Column("lease_id", _ID, nullable=True),
    sa.Column("request_id", _ID, nullable=True),
    sa.Column("partitions", sa.Text, nullable=True),
    sa.Column("operation", sa.String(32), nullable=False),
    sa.Column("profile", sa.String(64), nullable=False),
    sa.Column("expires_at", sa.Double, nullable=True),
    sa.Column("pid", sa.Integer, nullable=False, default=0),
    sa.Column("fence", sa.BigInteger, nullable=True),  # on grant events
    # Who the event is about (the lease's or the request's holder), so a reader may be shown
    # the history of the DAGs they may read. NULL on events recorded before these columns
    # existed: such an event cannot be attributed (only admins may see it).
    sa.Column("dag_id", sa.String(250), nullable=True),
    sa.Column("task_id", sa.String(250), nullable=True),
    sa.Column("run_id", sa.String(250), nullable=True),
    sa.Column("try_number", sa.Integer, nullable=True),
    # On grant events: the JSON list of leases the grant's commit waits for (order-aware
    # admission), and of running leases whose commits now wait for the grant's (``holds``).
    sa.Column("awaits", sa.Text, nullable=True),
    sa.Column("holds", sa.Text, nullable=True),
)

# Order-aware admission: a lease granted beside live leases it must commit after holds its
# commit until each of them has ended (released, or lapsed). One row per (waiter, awaited);
# a waiter's rows go when it passes its gate or ends. Edges only point from a grant to leases
# granted before it, so waits never form a cycle.
gates = sa.Table(
    "occflow_lease_gates",
    metadata,
    sa.Column("lease_id", _ID, primary_key=True),
    sa.Column("awaits_lease_id", _ID, primary_key=True),
    sa.Column("table_name", sa.String(512), nullable=False),
)

# The last fencing token granted per table. Only a decision on the table (under its lock)
# bumps it, so fences on one table strictly increase, across releases, expiries and takeovers.
fences = sa.Table(
    "occflow_lease_fences",
    metadata,
    sa.Column("table_name", sa.String(512), primary_key=True),
    sa.Column("last_fence", sa.BigInteger, nullable=False),
)

# Leases that lapsed (reclaimed unreleased), remembered for ``LAPSED_MEMORY`` seconds: their
# holder may be stalled inside its engine call rather than dead, and may still try to commit.
# A later write whose claim conflicts with one fences it out at the engine's commit
# (``LeaseStore.commit_fence``: on Delta both commits carry the lapsed lease's ``txn`` app id,
# and the engine's conflict checker refuses whichever of the two commits second).
lapsed = sa.Table(
    "occflow_lease_lapsed",
    metadata,
    sa.Column("lease_id", _ID, primary_key=True),
    sa.Column("table_name", sa.String(512), nullable=False),
    sa.Column("partitions", sa.Text, nullable=True),
    sa.Column("operation", sa.String(32), nullable=False),
    sa.Column("profile", sa.String(64), nullable=False),
    sa.Column("fence", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("lapsed_at", sa.Double, nullable=False),
    sa.Index("ix_occflow_lease_lapsed_table", "table_name", "lapsed_at"),
)

# Per table, a counter bumped in every decision that frees part of the table's footprint: the
# SQLite store's wake-up signal (``wakeup``; PostgreSQL sends a NOTIFY instead).
wakeups = sa.Table(
    "occflow_lease_wakeups",
    metadata,
    sa.Column("table_name", sa.String(512), primary_key=True),
    sa.Column("generation", sa.BigInteger, nullable=False),
)

#: Columns added after the first release, as ``ALTER TABLE ... ADD COLUMN`` clauses: a store
#: created by an older occflow gains them on ``create_schema`` and keeps working.
ADDED_COLUMNS: dict[str, dict[str, str]] = {
    "occflow_leases": {
        "fence": "BIGINT NOT NULL DEFAULT 0",
        "commit_gate": "INTEGER NOT NULL DEFAULT 0",
        "gate_reached_at": "DOUBLE PRECISION",
    },
    "occflow_lease_queue": {"commit_gate": "INTEGER NOT NULL DEFAULT 0"},
    "occflow_lease_events": {
        "fence": "BIGINT",
        "dag_id": "VARCHAR(250)",
        "task_id": "VARCHAR(250)",
        "run_id": "VARCHAR(250)",
        "try_number": "INTEGER",
        "awaits": "TEXT",
        "holds": "TEXT",
    },
}


def upgrade(conn: sa.Connection) -> None:
    """Add the columns an older store lacks (run inside the schema transaction)."""
    inspector = sa.inspect(conn)
    for table, columns in ADDED_COLUMNS.items():
        present = {c["name"] for c in inspector.get_columns(table)}
        for name, ddl in columns.items():
            if name not in present:
                conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN {name} {ddl}"))


#: How an error names a column's value to the user who wrote it.
_FIELD_NAMES = {
    "table_name": "table", "request_id": "request_id", "partition_key": "partition key",
    "columns": "partition columns", "dag_id": "holder dag_id", "task_id": "holder task_id",
    "run_id": "holder run_id", "host": "holder host", "try_number": "holder try_number",
    "pid": "holder pid", "operation": "operation", "profile": "profile",
}
_INT_BITS = {sa.Integer: 31, sa.BigInteger: 63}


def check_fits(table: sa.Table, row: Mapping[str, Any]) -> None:
    """Refuse, before any SQL runs, a value the store's column cannot hold as it is: text longer
    than the column (PostgreSQL refuses it, SQLite would keep it: the two stores must agree),
    an integer past the column's width, a number that is not finite. The error names the field
    and the limit, so it is never mistaken for an outage."""
    for name, value in row.items():
        column = table.c[name]
        what = _FIELD_NAMES.get(name, name)
        length = getattr(column.type, "length", None)
        if isinstance(value, str) and length is not None and len(value) > length:
            raise InvalidDeclarationError(
                f"{what} is {len(value)} characters long; the lease store keeps at most {length} "
                f"({table.name}.{name}): {shown(value)}"
            )
        if isinstance(value, int) and not isinstance(value, bool):
            bits = next((b for t, b in _INT_BITS.items() if type(column.type) is t), None)
            if bits is not None and not -(2**bits) <= value < 2**bits:
                raise InvalidDeclarationError(
                    f"{what} does not fit the lease store's {bits + 1}-bit column {table.name}.{name}: {shown(value)}"
                )
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidDeclarationError(f"{what} must be a finite number, got {value!r} ({table.name}.{name})")
