"""Order-aware admission on real delta-rs: a schema change admitted beside a running append holds
its commit at its gate until the append's lease ends, and then commits on its stale snapshot.

What is checked is the engine's record: the table's ``_delta_log`` (which commit landed at which
version, what it did) and delta-rs's own exception in the control run, where the same two writes
commit in the other order and the append fails. The lease store is the real one (SQLite).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from occflow.leases import LeaseKeeper, LeaseRequest, LeaseStore

pa = pytest.importorskip("pyarrow", reason="delta-rs tests need pyarrow")
pytest.importorskip("deltalake", reason="delta-rs tests need deltalake")

from occflow.engines.deltars.commit import CommitOptions  # noqa: E402
from occflow.engines.deltars.table import DeltaRsTable  # noqa: E402

TABLE = "lake.gated"


def _rows(start: int) -> object:
    return pa.table({"id": pa.array([start, start + 1], pa.int64()), "v": pa.array(["a", "b"])})


def _log(path: Path) -> list[set[str]]:
    """Per version, the kinds of action its commit file holds (Delta's own record)."""
    out = []
    for file in sorted((path / "_delta_log").glob("*.json")):
        kinds: set[str] = set()
        for line in file.read_text().splitlines():
            kinds |= set(json.loads(line))
        out.append(kinds)
    return out


@pytest.fixture
def table(tmp_path: Path) -> DeltaRsTable:
    t = DeltaRsTable(tmp_path / "t")
    assert t.create(_rows(0)).committed
    return t


def test_a_gated_schema_change_commits_after_the_append_it_runs_beside(table: DeltaRsTable, tmp_path: Path) -> None:
    store = LeaseStore.from_url(f"sqlite:///{tmp_path / 'leases.db'}", history=True)
    append = store.decide(LeaseRequest.create(TABLE, "insert_into", "delta-rs", whole_table=True, commit_gate=True))
    assert append.lease is not None and append.lease.awaits == frozenset()
    alter = store.decide(LeaseRequest.create(TABLE, "alter_metadata", "delta-rs", whole_table=True, commit_gate=True))
    # Admitted beside the running append (without order-aware admission it would wait).
    assert alter.lease is not None and alter.lease.awaits == {append.lease.lease_id}

    append_snapshot = table.load()  # both plan on version 0
    outcome: dict[str, object] = {}
    with LeaseKeeper(store, alter.lease) as keeper:

        def schema_change() -> None:
            started = time.monotonic()
            result = table.add_columns({"note": "string"}, commit=CommitOptions(before_commit=keeper.wait_gate))
            outcome.update(result=result, held=keeper.gate_seconds, took=time.monotonic() - started)

        worker = threading.Thread(target=schema_change)
        worker.start()
        time.sleep(1.5)
        assert worker.is_alive(), "the schema change did not wait at its gate"
        assert table.version() == 0  # nothing committed while it waits
        appended = table.append(_rows(10), snapshot=append_snapshot)
        assert appended.committed and appended.version == 1, appended
        store.release(append.lease)  # the append's lease ends: the gate opens
        worker.join(timeout=60)
    result = outcome["result"]
    assert result.committed and result.version == 2, result  # type: ignore[attr-defined]
    assert outcome["held"] >= 1.0  # type: ignore[operator]
    log = _log(Path(table.uri))
    assert "add" in log[1] and "metaData" not in log[1]  # v1: the append's files
    assert "metaData" in log[2]  # v2: the schema change, on its stale snapshot, accepted by delta-rs
    assert "note" in table.load().schema().to_arrow().names
    assert table.load().to_pyarrow_table().num_rows == 4


def test_the_other_commit_order_loses_the_append(table: DeltaRsTable) -> None:
    """Control: with no gate, the schema change commits first and delta-rs fails the append that
    planned on the older version, which is why the gate holds it."""
    append_snapshot = table.load()
    assert table.add_columns({"note": "string"}).committed
    lost = table.append(_rows(10), snapshot=append_snapshot)
    assert not lost.committed
    assert lost.classification is not None and lost.classification.kind.value == "metadata_changed", lost
    assert table.load().to_pyarrow_table().num_rows == 2
