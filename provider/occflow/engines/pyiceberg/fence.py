"""The lease checked at pyiceberg's catalog commit, not only before the engine call.

A pyiceberg write is long before it commits: it plans on its snapshot, writes parquet files, then
commits through ``Table._do_commit`` -> ``table.catalog.commit_table(table, requirements,
updates)`` (pyiceberg 0.12, ``pyiceberg/table/__init__.py``). A writer that stalls in between (a
frozen VM, a paused process) past its lease's TTL would still commit once it resumes, after a
conflicting write was admitted in its place. ``commit_checked`` gives the loaded ``Table`` a
catalog whose ``commit_table`` runs the write's ``before_commit`` first, so the lease is asked
right before every catalog commit the write makes:

- pyiceberg's commit retry (``Transaction.commit_transaction``) calls ``_do_commit`` again on the
  same ``Table`` after ``refresh()`` (which replaces the metadata, not the catalog), so every retry
  is checked too; it retries only ``CommitFailedException``, so the ``CommitRefused`` the check
  raises ends the commit loop at once and reaches ``PyIcebergTable._run`` unchanged.
- A schema change (``add_columns``) and ``expire_snapshots`` commit through the same
  ``Transaction`` -> ``_do_commit`` route; the expire's re-plan loads a fresh ``Table`` and gives
  it the same checked catalog (``maintenance.py``).

What holds the invariant on pyiceberg is this check alone. Delta fences a stalled writer out with
a metadata commit (``core.fencing``, ``DeltaRsTable.fence_out``) that delta-rs's conflict checker
makes every older plan fail; an Iceberg catalog has no such lever here: a property change does
not fail an append, whose only requirement is ``AssertRefSnapshotId`` (pyiceberg re-bases it on
the new head and commits), and a schema change does not either. The residual window: the check
and the catalog's compare-and-swap are not one atomic step, so a writer that stalls between the
lease's confirmation and the catalog's row update (milliseconds, inside the keeper's ``margin``,
which ends the lease's local validity before the store's) can still commit late. A refused
commit leaves the parquet files it wrote as orphans (pyiceberg deletes a failed commit's files
only for its own conflict exceptions): orphan-file maintenance removes them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table


class CommitCheckedCatalog:
    """A catalog whose ``commit_table`` runs ``check`` first; everything else is the catalog's."""

    def __init__(self, catalog: Catalog, check: Callable[[], None]) -> None:
        self._wrapped = catalog
        self._check = check

    def commit_table(self, table: Any, requirements: Any, updates: Any) -> Any:
        self._check()  # raises CommitRefused: nothing reaches the catalog
        return self._wrapped.commit_table(table, requirements, updates)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        # pyiceberg tests the table's catalog with isinstance (a REST catalog's server-side scan
        # planning, ``DataScan._plan_files_server_side``): the proxy passes for the catalog's class.
        return type(self._wrapped)


@contextlib.contextmanager
def commit_checked(table: Table, check: Callable[[], None] | None) -> Iterator[Table]:
    """``table`` with ``check`` run right before each of its catalog commits, for the block;
    its own catalog is back afterwards (``table`` may be the caller's snapshot object)."""
    if check is None:
        yield table
        return
    own = table.catalog
    table.catalog = cast("Catalog", CommitCheckedCatalog(own, check))
    try:
        yield table
    finally:
        table.catalog = own


__all__ = ["CommitCheckedCatalog", "commit_checked"]
