"""The lease is checked at pyiceberg's catalog commit: a writer that stalls inside the engine
call, past its lease's TTL, cannot commit once a write admitted in its place did (issue 31).

Writer A (its own process, run from this file) takes a 2 s lease on partition p=1 of a real
Iceberg table in a SQL catalog on SQLite, passes the check made before the engine call, and stops
itself (SIGSTOP) while pyiceberg writes its data file; a stopped process beats no heartbeat, so
its lease lapses. Writer B is granted a conflicting lease, overwrites p=1 and commits; A is
resumed (SIGCONT). The oracle is the table's own record, read by a catalog connection of its own:
the snapshots and their summaries (which carry each writer's fencing token) and the rows.

A's append is what shows the bug: pyiceberg's fast append asserts only the branch head, so a
late one commits beside B's overwrite. The control takes the commit-time check away
(``commit_checked`` patched out in A's process): A's late append is in the snapshot log after
B's commit. A's overwrite is refused by the same check before pyiceberg's own validation would
have failed it (an overwrite planned before B's deletes files B removed).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyiceberg", reason="needs pyiceberg (pip install 'airflow-provider-occflow[iceberg]')")

import pyarrow as pa  # noqa: E402

from occflow.engines.ledger import CommitRefused  # noqa: E402
from occflow.engines.pyiceberg.catalog import CatalogConfig  # noqa: E402
from occflow.engines.pyiceberg.commit import CommitOptions  # noqa: E402
from occflow.engines.pyiceberg.table import PyIcebergTable  # noqa: E402
from occflow.engines.tags import FENCE  # noqa: E402
from occflow.leases import LeaseKeeper, LeaseRequest, LeaseStore  # noqa: E402
from occflow.operators.exactly_once import BeforeCommit  # noqa: E402

TABLE = "db.fenced"
PROFILE = "pyiceberg-serializable"  # the table's level (pyiceberg's default)
TTL = 2.0


def _config(root: Path) -> CatalogConfig:
    return CatalogConfig("lake", {"uri": f"sqlite:///{root}/catalog.db", "warehouse": (root / "wh").as_uri()})


def _rows(ids: list[int], p: int = 1) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "p": pa.array([p] * len(ids), pa.int64())})


def _create(root: Path) -> None:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField

    catalog = _config(root).load()
    catalog.create_namespace("db")
    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "p", LongType(), required=False))
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))
    catalog.create_table(TABLE, schema, partition_spec=spec, properties={"commit.retry.min-wait-ms": "0"})
    assert PyIcebergTable(catalog, TABLE).append(_rows([1, 2, 3])).committed


# -- writer A, run as its own process ----------------------------------------------------------


def _writer(root: str, store_url: str, operation: str, checked: bool, out: str) -> None:
    import pyiceberg.io.pyarrow as pyarrow_io

    from occflow.engines.ledger import LeaseNotLive

    if not checked:  # the control: the check before the engine call only, as before issue 31
        import occflow.engines.pyiceberg.table as table_module

        @contextlib.contextmanager
        def unchecked(table: Any, check: Any) -> Iterator[Any]:
            yield table

        table_module.commit_checked = unchecked  # type: ignore[assignment]

    real_write_file = pyarrow_io.write_file

    def stalled_write_file(*args: Any, **kwargs: Any) -> Any:
        # Inside the engine call, after the early check: the process freezes as a VM would
        # (its heartbeat thread with it) and writes its data file once resumed.
        Path(out + ".stalling").write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGSTOP)
        return real_write_file(*args, **kwargs)

    pyarrow_io.write_file = stalled_write_file  # type: ignore[assignment]
    store = LeaseStore.from_url(store_url)
    lease = store.acquire(LeaseRequest.create(TABLE, operation, PROFILE, partitions=[{"p": 1}], ttl=TTL), timeout=30)
    result: dict[str, object] = {"fence": lease.fence}
    with LeaseKeeper(store, lease) as keeper:
        deadline = time.monotonic() + 10
        while keeper.lease is lease and time.monotonic() < deadline:  # its first heartbeat ends probation
            time.sleep(0.02)
        table = PyIcebergTable(_config(Path(root)), TABLE)
        commit = CommitOptions(before_commit=BeforeCommit(keeper), fence=lease.fence)
        try:
            data = _rows([100, 101])
            outcome = table.append(data, commit=commit) if operation == "insert_into" else table.overwrite(
                data, where={"p": 1}, commit=commit
            )
            result.update(committed=outcome.committed,
                          kind=None if outcome.classification is None else outcome.classification.kind.value)
        except LeaseNotLive as refused:
            result.update(committed=False, refused=type(refused).__name__, why=str(refused))
    Path(out).write_text(json.dumps(result))


# -- the race ----------------------------------------------------------------------------------


def _race(root: Path, operation: str, checked: bool) -> tuple[dict[str, Any], int]:
    """A stalls, B commits over its lapsed lease, A resumes: A's result and B's fencing token."""
    _create(root)
    store_url = f"sqlite:///{root / 'leases.db'}"
    store = LeaseStore.from_url(store_url)
    out = root / "writer.json"
    writer = subprocess.Popen(
        [sys.executable, __file__, str(root), store_url, operation, "1" if checked else "0", str(out)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        deadline = time.monotonic() + 60
        while not Path(str(out) + ".stalling").exists():
            assert writer.poll() is None, "writer A died before its stall"
            assert time.monotonic() < deadline, "writer A never reached its stall"
            time.sleep(0.05)
        # B is granted only once A's lease lapsed (the two claims conflict: the store holds B).
        lease = store.acquire(LeaseRequest.create(TABLE, "insert_overwrite", PROFILE, partitions=[{"p": 1}], ttl=30),
                              timeout=20, poll=0.1)
        try:
            with LeaseKeeper(store, lease) as keeper:
                b = PyIcebergTable(_config(root), TABLE).overwrite(
                    _rows([7, 8]), where={"p": 1}, commit=CommitOptions(before_commit=BeforeCommit(keeper), fence=lease.fence)
                )
            assert b.committed, b
        finally:
            store.release(lease)
    finally:
        os.kill(writer.pid, signal.SIGCONT)
        writer.wait(timeout=60)
    return json.loads(out.read_text()), lease.fence


def _log(root: Path) -> tuple[list[str | None], list[int]]:
    """The table as its own catalog connection reads it: each snapshot's fencing token (oldest
    first) and the ids in p=1."""
    from pyiceberg.catalog.sql import SqlCatalog

    config = _config(root)
    catalog = SqlCatalog("lake", **dict(config.properties))
    try:
        table = catalog.load_table(TABLE)
        fences = [None if s.summary is None else s.summary.get(FENCE) for s in table.snapshots()]
        ids = sorted(table.scan(row_filter="p = 1").to_arrow().column("id").to_pylist())
    finally:
        catalog.engine.dispose()
    return fences, ids


@pytest.mark.parametrize(
    ("operation", "checked"),
    [("insert_into", True), ("insert_into", False), ("insert_overwrite", True)],
    ids=["append-checked", "append-control-without-commit-check", "overwrite-checked"],
)
def test_a_stalled_writer_does_not_commit_after_its_lease_lapsed(tmp_path: Path, operation: str, checked: bool) -> None:
    a, b_fence = _race(tmp_path, operation, checked)
    fences, ids = _log(tmp_path)
    a_fence = str(a["fence"])
    assert str(b_fence) in fences, fences  # B's commit (a delete and an append snapshot) is in the log
    after_b = fences[len(fences) - fences[::-1].index(str(b_fence)):]
    if checked:
        # Refused at its commit as a lapsed lease (never an engine conflict to retry): nothing
        # of A's in the log, p=1 holds B's rows only.
        assert a["committed"] is False and a.get("refused") == "LeaseLapsed", a
        assert "is not live, the write must not commit" in str(a["why"])
        assert a_fence not in fences and after_b == [], fences
        assert ids == [7, 8]
    else:
        # Without the check at the commit pyiceberg takes A's late append after B's overwrite.
        assert a["committed"] is True, a
        assert after_b == [a_fence], fences
        assert ids == [7, 8, 100, 101]



# -- the check's reach, in-process: retries, schema changes, expires ---------------------------


class RefuseFrom:
    """A ``before_commit`` that passes ``passes`` times, then refuses as a lapsed lease does;
    ``on_call`` runs at each call (what happens meanwhile)."""

    def __init__(self, passes: int, on_call: Any = None) -> None:
        self.passes, self.on_call, self.calls = passes, on_call, 0

    def __call__(self) -> None:
        from occflow.engines.ledger import LeaseNotLive

        self.calls += 1
        if self.on_call is not None:
            self.on_call(self.calls)
        if self.calls > self.passes:
            raise LeaseNotLive(f"refused at call {self.calls}")


@pytest.fixture
def fresh(tmp_path: Path) -> PyIcebergTable:
    _create(tmp_path)
    return PyIcebergTable(_config(tmp_path), TABLE)


def _reloaded(root: Path) -> Any:
    """The table as a catalog connection of its own loads it."""
    return PyIcebergTable(_config(root), TABLE).load()


def test_a_retried_commit_is_checked_at_each_catalog_commit_and_the_snapshot_keeps_its_catalog(
    fresh: PyIcebergTable, tmp_path: Path
) -> None:
    stale = fresh.load()
    own = stale.catalog
    assert PyIcebergTable(_config(tmp_path), TABLE).append(_rows([4])).committed  # so the stale handle's first commit loses the compare-and-swap
    check = RefuseFrom(passes=99)
    done = fresh.append(_rows([5]), snapshot=stale, commit=CommitOptions(before_commit=check))
    assert done.committed, done
    assert check.calls == 3  # before the engine call, the lost commit, pyiceberg's retry
    assert stale.catalog is own
    assert len(_reloaded(tmp_path).snapshots()) == 3


def test_a_write_refused_at_its_commit_commits_nothing(fresh: PyIcebergTable, tmp_path: Path) -> None:
    before = _reloaded(tmp_path).metadata_location
    check = RefuseFrom(passes=1)
    with pytest.raises(CommitRefused, match="refused at call 2"):
        fresh.overwrite(_rows([9]), where={"p": 1}, commit=CommitOptions(before_commit=check))
    with pytest.raises(CommitRefused, match="refused at call 2"):
        fresh.add_columns({"extra": "long"}, commit=CommitOptions(before_commit=RefuseFrom(passes=1)))
    after = _reloaded(tmp_path)
    assert after.metadata_location == before and "extra" not in [f.name for f in after.schema().fields]


def test_an_expire_that_plans_again_is_checked_at_its_second_commit(fresh: PyIcebergTable, tmp_path: Path) -> None:
    from occflow.engines.pyiceberg.maintenance import expire_snapshots, snapshots_to_expire

    for ids in ([4], [5]):
        assert fresh.append(_rows(ids)).committed
    planned = snapshots_to_expire(fresh.load(), 2**62, 1)
    assert len(planned) == 2

    def meanwhile(call: int) -> None:
        if call == 2:  # at its first commit: another expire removes one of the planned snapshots
            _reloaded(tmp_path).maintenance.expire_snapshots().by_id(planned[0]).commit()

    check = RefuseFrom(passes=2, on_call=meanwhile)
    with pytest.raises(CommitRefused, match="refused at call 3"):
        expire_snapshots(fresh, older_than_hours=0, allow_unsafe_retention=True, commit=CommitOptions(before_commit=check))
    # The re-planned commit (on a fresh handle) was refused: the other planned snapshot is still there.
    assert [s.snapshot_id for s in _reloaded(tmp_path).snapshots()].count(planned[1]) == 1


if __name__ == "__main__":
    _writer(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1", sys.argv[5])
