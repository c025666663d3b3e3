"""VACUUM against a running writer on real delta-rs: the failure users report, and admission
preventing it.

The story is the nightly maintenance of many Delta tables: an OPTIMIZE, then a VACUUM with a short
retention, while an hourly UPDATE that planned on the table before the OPTIMIZE is still running.
Without admission the VACUUM deletes the files the UPDATE's snapshot reads and the UPDATE fails,
not with a conflict delta-rs would let it retry, but with the object store's "not found" (occflow
classifies it ``not_a_conflict``: never retried). With the lease store (SQLite, the real one)
deciding the same three jobs, the OPTIMIZE and the VACUUM wait for the UPDATE's lease, and all three
commit; the oracle is the table itself (its rows, and every file its latest version names being
readable) and its ``_delta_log``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from occflow.core.errors import InvalidDeclarationError
from occflow.core.kinds import ConflictKind
from occflow.leases import LeaseRequest, LeaseStore

pa = pytest.importorskip("pyarrow", reason="delta-rs tests need pyarrow")
pytest.importorskip("deltalake", reason="delta-rs tests need deltalake")

from occflow.engines.deltars.table import DeltaRsTable  # noqa: E402
from occflow.engines.deltars.target import retention_property_hours, vacuum  # noqa: E402

TABLE = "lake.nightly"
PART = {"part": "a"}
UPDATED = 7


def _rows(ids: list[int]) -> object:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "part": pa.array(["a"] * len(ids)),
            "value": pa.array([0] * len(ids), pa.int64()),
        }
    )


@pytest.fixture
def table(tmp_path: Path) -> DeltaRsTable:
    """Partition ``a`` in two small files: something for the OPTIMIZE to compact."""
    t = DeltaRsTable(tmp_path / "t")
    assert t.create(_rows([1, 2]), partition_by=["part"]).committed
    assert t.append(_rows([3, 4])).committed
    return t


def _operations(path: Path) -> list[str]:
    """The operation of every commit in the table's ``_delta_log``, by version."""
    out = []
    for file in sorted((path / "_delta_log").glob("*.json")):
        for line in file.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            if info:
                out.append(info["operation"])
    return out


def _values(table: DeltaRsTable) -> dict[int, int]:
    rows = table.load().to_pyarrow_table().to_pylist()  # reads every file the version names
    return {r["id"]: r["value"] for r in rows}


def test_vacuum_with_a_short_retention_fails_a_running_update_without_admission(table: DeltaRsTable) -> None:
    writer_snapshot = table.load()  # the hourly UPDATE has planned on version 1
    assert table.optimize(partition=PART).committed
    swept = vacuum(table, retention_hours=0, allow_unsafe_retention=True)
    assert swept.committed
    updated = table.update(set_values={"value": UPDATED}, partition=PART, snapshot=writer_snapshot)

    assert not updated.committed
    assert updated.error is not None and "not found" in updated.error.text
    # Not a conflict: a retry from a fresh snapshot is not what occflow would do with it.
    assert updated.classification is not None and updated.classification.kind is ConflictKind.NOT_A_CONFLICT
    assert _operations(Path(table.uri))[-2:] == ["VACUUM START", "VACUUM END"]
    assert _values(table) == {i: 0 for i in (1, 2, 3, 4)}  # the update wrote nothing


def test_admission_keeps_optimize_and_vacuum_behind_the_running_update(table: DeltaRsTable, tmp_path: Path) -> None:
    store = LeaseStore.from_url(f"sqlite:///{tmp_path / 'leases.db'}", history=True)
    def request(operation: str, partitions: list[dict[str, str]] | None) -> LeaseRequest:
        return LeaseRequest.create(TABLE, operation, "delta-rs", partitions, whole_table=partitions is None)

    update = store.decide(request("update", [PART]))
    assert update.lease is not None
    writer_snapshot = table.load()
    # The same three jobs in the same order: the maintenance asks while the update runs.
    optimize, sweep = request("optimize", [PART]), request("vacuum", None)
    assert store.decide(optimize).lease is None
    assert store.decide(sweep).lease is None
    updated = table.update(set_values={"value": UPDATED}, partition=PART, snapshot=writer_snapshot)
    assert updated.committed, updated.error
    store.release(update.lease)

    # The maintenance goes once the update's lease has ended, one job at a time (both hold the
    # partition, the VACUUM the whole table); which of the two the queue serves first is the
    # store's priority rule, not this test's.
    jobs = {
        optimize.request_id: (optimize, lambda: table.optimize(partition=PART)),
        sweep.request_id: (sweep, lambda: vacuum(table, retention_hours=0, allow_unsafe_retention=True)),
    }
    ran = []
    while jobs:
        granted = [(rid, store.decide(req).lease, run) for rid, (req, run) in jobs.items()]
        live = [(rid, lease, run) for rid, lease, run in granted if lease is not None]
        assert len(live) == 1, f"the OPTIMIZE and the VACUUM were let run together: {live}"
        rid, lease, run = live[0]
        outcome = run()
        assert outcome.committed, outcome.error
        ran.append(outcome.operation.value)
        store.release(lease)
        del jobs[rid]
    assert sorted(ran) == ["optimize", "vacuum"]

    assert _values(table) == {i: UPDATED for i in (1, 2, 3, 4)}  # every file it names is there
    assert _operations(Path(table.uri))[2] == "UPDATE"
    # (the OPTIMIZE may find nothing left to compact: the UPDATE rewrote the partition in one file)
    assert [op for op in _operations(Path(table.uri))[3:] if op != "OPTIMIZE"] == ["VACUUM START", "VACUUM END"]


def test_a_retention_below_the_tables_minimum_is_refused_and_deletes_nothing(table: DeltaRsTable) -> None:
    version = table.version()
    assert table.overwrite(_rows([5]), partition=PART).committed  # leaves two removed files
    files = sorted(p.name for p in Path(table.uri, "part=a").glob("*.parquet"))
    with pytest.raises(InvalidDeclarationError, match=r"retention_hours=24 is below the safe minimum of 168 hours"):
        vacuum(table, retention_hours=24)
    assert sorted(p.name for p in Path(table.uri, "part=a").glob("*.parquet")) == files
    assert table.version() == version + 1  # no VACUUM commit either


def test_the_tables_own_longer_retention_raises_the_floor(table: DeltaRsTable) -> None:
    assert table.set_properties({"delta.deletedFileRetentionDuration": "interval 30 days"}).committed
    with pytest.raises(InvalidDeclarationError, match=r"minimum of 720 hours \(the table's delta.deletedFileRetentionDuration\)"):
        vacuum(table, retention_hours=200)
    assert retention_property_hours("interval 1 week") == 168.0
    with pytest.raises(InvalidDeclarationError, match="not an interval Delta reads"):
        retention_property_hours("7 days")


def test_every_vacuum_pair_agrees_with_the_delta_rs_profile(tmp_path: Path) -> None:
    """The 17 VACUUM cells raced on real tables at both isolation levels (a VACUUM planned
    before a data-changing removal fails its START commit; beside the rest both commit)."""
    from occflow.core.operations import Operation
    from occflow.core.profiles import get_profile
    from occflow.engines.conformance import run_runner
    from occflow.engines.deltars.conformance import conformance_runners

    ops = get_profile("delta-rs").operations
    pairs = [(a, b) for a in ops for b in ops if Operation.VACUUM in (a, b)]
    assert len(pairs) == 17
    with conformance_runners(tmp_path) as runners:
        for runner in runners:
            comparison = run_runner(runner, only=pairs).comparison("delta-rs")
            assert comparison.covered == 17
            wrong = [(r.earlier.value, r.later.value, r.observed_kind, r.note) for r in comparison.diverging]
            assert not wrong, f"{runner.label}: {wrong}"
            failed = {(r.earlier, r.later) for r in comparison.rows if r.observed_fails}
            assert failed == {
                (c.earlier, c.later) for c in get_profile("delta-rs").cells if c.later_fails and Operation.VACUUM in (c.earlier, c.later)
            }
