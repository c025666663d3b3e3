"""``OutsideCommitTrigger`` (docs/assets.md, "Commits made outside Airflow") on real tables.

Outside commits are made with the engines' own writers (``deltalake.write_deltalake``,
pyiceberg's ``Table.append``), occflow's with occflow's own delta-rs path and its commit tag; the
oracle is the test's record of which writer made which version, and each engine's own record
(delta-rs's ``DeltaTable.version()``, pyiceberg's ``current_snapshot()``). The real scheduler,
with Airflow's asset state store, is tests/airflow/test_asset_watcher_scheduler.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

pytestmark = pytest.mark.airflow


def _rows(n: int) -> pa.Table:
    return pa.table({"id": pa.array([n], pa.int64()), "ds": [f"d{n}"]})


def _outside_write(path: str, n: int) -> int:
    """A commit occflow did not make: delta-rs's own writer, no commit properties."""
    from deltalake import DeltaTable, write_deltalake

    write_deltalake(path, _rows(n), mode="append", partition_by=["ds"])
    return int(DeltaTable(path).version())


def _occflow_write(path: str, n: int) -> int:
    """A commit occflow made, as a write task makes it: its delta-rs path with a write's tag."""
    from occflow.engines.deltars import DeltaRsTable
    from occflow.engines.deltars.commit import deltars_commit
    from occflow.engines.tags import CommitTag

    tag = CommitTag("producer", "write", f"run{n}", "insert_into", try_number=1)
    outcome = DeltaRsTable(path).append(_rows(n), commit=deltars_commit(tag))
    assert outcome.committed
    from deltalake import DeltaTable

    return int(DeltaTable(path).version())


async def _events_while(trigger: Any, writes: Callable[[], None], wanted: int, timeout: float = 20.0) -> list[dict[str, Any]]:
    """Runs ``trigger`` while ``writes()`` commits (in a thread) until ``wanted`` events came, and
    then a little longer: an event too many is returned too."""
    events: list[dict[str, Any]] = []
    stream = trigger.run()

    async def collect() -> None:
        async for event in stream:
            events.append(event.payload)
            if len(events) >= wanted:
                return

    task = asyncio.create_task(collect())
    await asyncio.sleep(0.2)  # the trigger's first look sets its watermark before the writes
    await asyncio.to_thread(writes)
    try:
        await asyncio.wait_for(task, timeout)
        # Settle: the trigger goes on past the last event (storing its watermark) and may emit more.
        while True:
            events.append((await asyncio.wait_for(stream.__anext__(), 0.3)).payload)
    except TimeoutError:
        pass
    finally:
        task.cancel()
        await stream.aclose()
    return events


def test_outside_delta_commits_fire_and_occflow_commits_do_not(tmp_path):
    from occflow.triggers.table import OutsideCommitTrigger

    path = str(tmp_path / "events")
    created = _outside_write(path, 0)  # history before the watcher: not replayed
    made: dict[int, str] = {created: "outside"}

    def writes() -> None:
        made[_outside_write(path, 1)] = "outside"
        made[_occflow_write(path, 2)] = "occflow"
        made[_occflow_write(path, 3)] = "occflow"
        made[_outside_write(path, 4)] = "outside"

    trigger = OutsideCommitTrigger("delta", path, poll_interval=0.05)
    events = asyncio.run(_events_while(trigger, writes, wanted=2))
    expected = sorted(v for v, who in made.items() if who == "outside" and v > created)
    assert [e["version"] for e in events] == expected == [1, 4]
    assert events[1]["partitions"] == ["ds=d4"] and events[1]["operation"] == "WRITE"
    assert trigger._watermark == 4  # the occflow commits in between were looked at, not emitted


def test_start_version_replays_the_outside_history_from_there(tmp_path):
    from occflow.triggers.table import OutsideCommitTrigger

    path = str(tmp_path / "events")
    _outside_write(path, 0)
    _occflow_write(path, 1)
    _outside_write(path, 2)
    trigger = OutsideCommitTrigger("delta", path, start_version=0, poll_interval=0.05)
    events = asyncio.run(_events_while(trigger, lambda: None, wanted=2))
    assert [e["version"] for e in events] == [0, 2]


class _StateStore:
    """The two calls a triggerer's ``AssetStateStoreAccessors`` answers for one watched asset
    (``aget``/``aset``); the real store is exercised by the scheduler test."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value


def test_a_restarted_watcher_goes_on_from_the_stored_watermark_of_its_own_table(tmp_path):
    from occflow.triggers.table import WATERMARK_KEY, OutsideCommitTrigger

    path = str(tmp_path / "events")
    _outside_write(path, 0)
    store = _StateStore()
    first = OutsideCommitTrigger("delta", path, poll_interval=0.05)
    first.asset_state_store = store
    assert [e["version"] for e in asyncio.run(_events_while(first, lambda: _outside_write(path, 1), 1))] == [1]
    assert store.values[WATERMARK_KEY] == {"location": path, "version": 1}
    # While no watcher runs, two outside commits land; the restarted watcher emits both, once.
    _outside_write(path, 2)
    _outside_write(path, 3)
    again = OutsideCommitTrigger("delta", path, poll_interval=0.05)
    again.asset_state_store = store
    assert [e["version"] for e in asyncio.run(_events_while(again, lambda: None, 2))] == [2, 3]
    # A watermark stored for another table's location is not this table's: start at its newest.
    other = str(tmp_path / "other")
    _outside_write(other, 0)
    _outside_write(other, 1)
    moved = OutsideCommitTrigger("delta", other, poll_interval=0.05)
    moved.asset_state_store = store
    assert [e["version"] for e in asyncio.run(_events_while(moved, lambda: _outside_write(other, 2), 1))] == [2]


def test_outside_iceberg_snapshots_fire_with_the_snapshot_pyiceberg_committed(tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog

    from occflow.triggers.table import OutsideCommitTrigger

    catalog = SqlCatalog("lake", uri=f"sqlite:///{tmp_path / 'catalog.db'}", warehouse=tmp_path.as_uri())
    catalog.create_namespace("db")
    table = catalog.create_table("db.events", schema=_rows(0).schema)
    table.append(_rows(0))
    location = table.location().removeprefix("file://")
    committed: list[int] = []

    def writes() -> None:
        for n in (1, 2):
            table.append(_rows(n))
            committed.append(table.current_snapshot().snapshot_id)

    events = asyncio.run(_events_while(OutsideCommitTrigger("iceberg", location, poll_interval=0.05), writes, 2))
    assert [e["snapshot_id"] for e in events] == committed
    assert [e["operation"] for e in events] == ["append", "append"]


def test_serializes_to_what_it_was_built_from_and_refuses_what_it_cannot_watch(tmp_path):
    from occflow.core.errors import InvalidDeclarationError
    from occflow.triggers.table import OutsideCommitTrigger

    trigger = OutsideCommitTrigger("iceberg", str(tmp_path), start_version=3, poll_interval=2)
    classpath, kwargs = trigger.serialize()
    assert classpath == "occflow.triggers.table.OutsideCommitTrigger"
    assert OutsideCommitTrigger(**kwargs).serialize() == (classpath, kwargs)
    for bad, named in (
        (dict(table_format="maxcompute", location="p.t"), "maxcompute"),
        (dict(table_format="delta", location=""), "location"),
        (dict(table_format="delta", location="/t", start_version=-1), "start_version"),
        (dict(table_format="delta", location="/t", start_version=True), "start_version"),
        (dict(table_format="delta", location="/t", poll_interval=0), "poll_interval"),
    ):
        with pytest.raises(InvalidDeclarationError, match=named):
            OutsideCommitTrigger(**bad)


def test_an_asset_watcher_takes_it_and_the_dag_serializes(tmp_path):
    from airflow.sdk import DAG, Asset, AssetWatcher
    from airflow.serialization.serialized_objects import DagSerialization

    from occflow.triggers.table import OutsideCommitTrigger

    uri = (tmp_path / "events").as_uri()
    watched = Asset(uri=uri, name=uri, watchers=[
        AssetWatcher(name="outside", trigger=OutsideCommitTrigger("delta", str(tmp_path / "events")))])
    with DAG("watched", schedule=[watched]) as dag:
        pass
    data = DagSerialization.to_dict(dag)
    assert "OutsideCommitTrigger" in str(data)
