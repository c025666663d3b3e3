"""Spark 4.1 with Iceberg's (1.12.0) and Delta's (4.3.1) Spark 4 runtimes: the conflict races that
matter, raised by the engines themselves, classified from what Spark 4 raises, retried to the
serial result (issue 37, item 1; docs/spark-support.md).

One ``spawn`` worker per table format, one Spark 4 session in each (``spark4_races.py``); both
start together. The oracle is the serial run of the same two statements on a twin table.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

import pytest
import spark4_races as races

Call = Callable[[str], dict[str, Any]]


@pytest.fixture(scope="module")
def workers() -> Iterator[dict[str, Call]]:
    pools = {fmt: ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
             for fmt in ("iceberg", "delta")}
    try:
        # Both JVMs start at once: the suite waits for the slower, not for the sum.
        started: dict[str, Future[dict[str, Any]]] = {fmt: pool.submit(races.start, fmt) for fmt, pool in pools.items()}
        for fmt, future in started.items():
            info = future.result(timeout=300)
            assert info["spark"].startswith("4.1."), info
            jars = info["jars"]
            wanted = "iceberg-spark-runtime-4.1_2.13-1.12.0.jar" if fmt == "iceberg" else "delta-spark_2.13-4.3.1.jar"
            assert wanted in jars and "_2.12" not in jars, jars

        def caller(pool: ProcessPoolExecutor) -> Call:
            return lambda name: pool.submit(races.race, name).result(timeout=300)

        yield {fmt: caller(pool) for fmt, pool in pools.items()}
    finally:
        for pool in pools.values():
            pool.shutdown(wait=True, cancel_futures=True)


def _lost_to(found: dict[str, Any], java_class: str, error_class: str | None, kind: str) -> None:
    assert not found["committed"], found
    # Through Py4J: PySpark 4's captured exception, never a Python copy.
    assert found["python_exception"].startswith(("pyspark.errors.exceptions.captured.", "py4j.protocol.")), found
    assert java_class in (found["exception_class"], *found["cause_classes"]), found
    if error_class is not None:
        assert found["error_class"] == error_class, found
    assert found["kind"] == kind and found["classify_kind"] == kind, found


def _retried_to_the_serial_result(found: dict[str, Any]) -> None:
    assert found["policy"]["action"] == "retry", found["policy"]
    assert found["retry"] is not None and found["retry"]["committed"], found["retry"]
    assert found["rows"] == found["serial_rows"], (found["rows"], found["serial_rows"])


def test_delta_overwrite_of_a_partition_loses_to_an_append_and_is_retried_to_the_serial_result(workers) -> None:
    found = workers["delta"]("append_vs_overwrite")
    # A finding (docs/spark-support.md): delta-spark 4.3 names the error class with a sub-class
    # (delta-spark 3.3 on Spark 3.5: DELTA_CONCURRENT_APPEND); the kind is the same.
    _lost_to(found, "io.delta.exceptions.ConcurrentAppendException", "DELTA_CONCURRENT_APPEND.WITH_PARTITION_HINT",
             "concurrent_append")
    assert found["winning_commit"]["operation"] == "WRITE" and found["winning_commit"]["version"] is not None
    _retried_to_the_serial_result(found)
    assert [5, "a", 105] in found["rows"]  # the winner's row, overwritten by the retried loser


def test_delta_merge_loses_to_a_delete_and_is_retried_to_the_serial_result(workers) -> None:
    found = workers["delta"]("merge_vs_delete")
    # A finding (docs/spark-support.md): delta-spark 4.3 raises the error class with a sub-class
    # (delta-spark 3.3 on Spark 3.5: DELTA_CONCURRENT_DELETE_READ); the kind is the same.
    _lost_to(found, "io.delta.exceptions.ConcurrentDeleteReadException",
             "DELTA_CONCURRENT_DELETE_READ.WITH_PARTITION_HINT", "concurrent_delete_read")
    assert found["winning_commit"]["operation"] == "DELETE"
    _retried_to_the_serial_result(found)
    assert found["rows"] == [[3, "b", 3]]


def test_iceberg_merge_loses_to_a_delete_and_is_retried_to_the_serial_result(workers) -> None:
    found = workers["iceberg"]("merge_vs_delete")
    _lost_to(found, "org.apache.iceberg.exceptions.ValidationException", None, "validation_conflict")
    assert found["winning_commit"] is not None and found["winning_commit"]["snapshot_id"] is not None
    _retried_to_the_serial_result(found)
    assert found["rows"] == [[3, "b", 3]]


def test_iceberg_overwrite_of_a_partition_erases_a_concurrent_append_as_its_matrix_cell_says(workers) -> None:
    from occflow.core.operations import Operation
    from occflow.core.profiles.iceberg import ICEBERG_MATRIX, OVERWRITES

    # The cell (earlier INSERT INTO, later INSERT OVERWRITE) on one partition, serializable: both
    # commit and the overwrite replaces what the partition holds at its commit (no validation
    # without the isolation-level write option). Measured on Spark 3.5 / Iceberg 1.10; on 4.1 / 1.12:
    cell = {(a, b): s for a, b, s, _, _ in ICEBERG_MATRIX}[(Operation.INSERT_INTO, Operation.INSERT_OVERWRITE)]
    assert cell == OVERWRITES
    found = workers["iceberg"]("append_vs_overwrite")
    assert found["committed"] and found["python_exception"] == "", found
    # The serial run keeps the append (overwritten with v + 100); the race lost it: admission,
    # not the format, has to keep these two apart.
    assert [5, "a", 105] in found["serial_rows"]
    assert found["rows"] == [[1, "a", 101], [2, "a", 102], [3, "b", 3], [4, "a", 104]]
