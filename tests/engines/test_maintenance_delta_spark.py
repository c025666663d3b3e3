"""VACUUM against a running writer on real delta-spark (3.3.3): the failure users report, and
admission preventing it; and a retention below the table's floor refused before anything is
deleted.

The story is the nightly maintenance of a Delta table: an OPTIMIZE, then a ``VACUUM ... RETAIN 0
HOURS``, while an hourly UPDATE that planned on the table before the OPTIMIZE is still running.
Without admission the VACUUM deletes the files the UPDATE planned on, and the UPDATE fails reading
them: ``SparkFileNotFoundException``, which occflow classifies ``not_a_conflict`` (never retried
as a conflict). With the lease store (SQLite, the real one) deciding the same three jobs, the
OPTIMIZE and the VACUUM wait for the UPDATE's lease, and all three commit. The oracles are the
engine's own: the UPDATE's error, the table's ``_delta_log``, its rows read from every file the
latest version names, and the files on disk.

One Delta session for the module, in a ``spawn`` worker (``delta_spark_maintenance.py``): the
test process's JVM is the Iceberg one.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import delta_spark_maintenance as worker
import pytest

from occflow.core.kinds import ConflictKind
from occflow.leases import LeaseRequest, LeaseStore

# Slow: about 2 minutes on the 2-core machine under load (a Delta JVM of its own, OPTIMIZE, VACUUM).
pytestmark = [pytest.mark.spark, pytest.mark.slow]

UNTOUCHED = [[1, "a", 1], [2, "a", 2], [3, "b", 3], [4, "a", 4]]
UPDATED = [[1, "a", 101], [2, "a", 102], [3, "b", 3], [4, "a", 104]]
Call = Callable[..., Any]


@pytest.fixture(scope="module")
def delta() -> Iterator[Call]:
    pytest.importorskip("pyspark")
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    try:
        started = pool.submit(worker.start).result(timeout=300)
        assert "io.delta.sql.DeltaSparkSessionExtension" in started["extensions"]

        def call(name: str, *args: Any) -> Any:
            return pool.submit(getattr(worker, name), *args).result(timeout=300)

        yield call
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def test_vacuum_with_a_short_retention_fails_a_running_update_without_admission(delta: Call) -> None:
    table = delta("new_table")
    delta("start_update", table)  # the hourly UPDATE has planned on the table's current version
    assert delta("optimize", table)["committed"]
    swept = delta("vacuum", table, f"VACUUM {table} RETAIN 0 HOURS", True)
    assert swept["committed"], swept
    updated = delta("finish_update")

    assert not updated["committed"]
    # delta-spark's own words: the file the UPDATE planned on is gone, not a conflict.
    assert "SparkFileNotFoundException" in updated["error_text"] and "does not exist" in updated["error_text"]
    assert updated["kind"] == ConflictKind.NOT_A_CONFLICT.value  # never retried as a conflict
    assert delta("log_operations", table)[-3:] == ["OPTIMIZE", "VACUUM START", "VACUUM END"]
    assert delta("rows", table) == UNTOUCHED  # the update wrote nothing
    # Delta's retention check was off for the VACUUM only, and is back as it was (unset).
    assert delta("retention_check_setting") is None


def test_admission_keeps_optimize_and_vacuum_behind_the_running_update(delta: Call, tmp_path: Path) -> None:
    table = delta("new_table")
    store = LeaseStore.from_url(f"sqlite:///{tmp_path / 'leases.db'}", history=True)

    def request(operation: str, partitions: list[dict[str, str]] | None) -> LeaseRequest:
        return LeaseRequest.create(
            table, operation, "delta-write-serializable", partitions, whole_table=partitions is None
        )

    update = store.decide(request("update", [{"ds": "a"}]))
    assert update.lease is not None
    delta("start_update", table)
    # The same three jobs in the same order: the maintenance asks while the update runs.
    optimize, sweep = request("optimize", [{"ds": "a"}]), request("vacuum", None)
    assert store.decide(optimize).lease is None
    assert store.decide(sweep).lease is None
    updated = delta("finish_update")
    assert updated["committed"], updated
    store.release(update.lease)

    # The maintenance goes once the update's lease has ended, one job at a time (the VACUUM holds
    # the whole table); which the queue serves first is the store's rule, not this test's.
    jobs = {
        optimize.request_id: (optimize, ("optimize", table)),
        sweep.request_id: (sweep, ("vacuum", table, f"VACUUM {table} RETAIN 0 HOURS", True)),
    }
    ran = []
    while jobs:
        granted = [(rid, store.decide(req).lease, call) for rid, (req, call) in jobs.items()]
        live = [(rid, lease, call) for rid, lease, call in granted if lease is not None]
        assert len(live) == 1, f"the OPTIMIZE and the VACUUM were let run together: {live}"
        rid, lease, call = live[0]
        outcome = delta(*call)
        assert outcome["committed"], outcome
        ran.append(call[0])
        store.release(lease)
        del jobs[rid]
    assert sorted(ran) == ["optimize", "vacuum"]

    assert delta("rows", table) == UPDATED  # every file the latest version names is there
    operations = delta("log_operations", table)
    assert operations[3] == "UPDATE"
    assert [op for op in operations[4:] if op != "OPTIMIZE"] == ["VACUUM START", "VACUUM END"]


def test_a_retention_below_the_tables_floor_is_refused_and_deletes_nothing(delta: Call) -> None:
    table = delta("new_table")
    delta("overwrite_a", table)  # partition a's two files are removed, still on disk
    files, log = delta("data_files", table), delta("log_operations", table)

    refused = delta("vacuum", table, f"VACUUM {table} RETAIN 24 HOURS", False)
    assert not refused["committed"]
    assert f"VACUUM {table} RETAIN 24 HOURS" in refused["error_text"]
    assert "is below the safe minimum of 168 hours" in refused["error_text"]
    assert refused["kind"] == ConflictKind.NOT_A_CONFLICT.value
    assert delta("log_operations", table) == log  # no VACUUM START: delta-spark never saw it

    # The table's own longer retention raises the floor, read as delta-spark reads the property.
    delta("set_retention", table, "interval 30 days")
    log = delta("log_operations", table)
    refused = delta("vacuum", table, f"VACUUM {table} RETAIN 200 HOURS", False)
    assert "minimum of 720 hours (the table's delta.deletedFileRetentionDuration)" in refused["error_text"]

    assert delta("data_files", table) == files  # nothing deleted
    assert delta("log_operations", table) == log  # no VACUUM START either
    assert delta("retention_check_setting") is None
