"""Real delta-spark races, every kind of Delta conflict, raised by the engine itself (issue 34).

Two writers race on a real Delta table in one local Spark application (Delta's extensions and
catalog; delta-spark 3.3 jars): the loser starts its transaction and is held until the winner
has committed (``delta_spark_races.py`` says how), so each race ends the same way every run.
Each loss is seen as occflow's operator sees it, through Py4J (``SparkEngine.run``): the Java
exception class, Spark's error class, ``occflow.classify``'s kind, the winner by version number
(delta-spark 3.x prints no version: it is read from the table's history), and the policy the
``delta-write-serializable`` matrix derives for the loser's operation; a retryable loss is then
run again from a fresh snapshot and ends as the serial run would.

The Delta session runs in a process of its own (one JVM holds one set of jars and extensions;
this process's JVM is the Iceberg one): one ``spawn`` worker per module, one session in it.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import delta_spark_races as races
import pytest

pytestmark = [
    pytest.mark.spark,
]

DOCS_ERROR = "[{}] "


@pytest.fixture(scope="module")
def delta() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    try:
        started = pool.submit(races.start).result(timeout=300)
        assert "io.delta.sql.DeltaSparkSessionExtension" in started["extensions"]
        assert "delta-spark_2.12-" in started["jars"]

        def call(name: str) -> dict[str, Any]:
            return pool.submit(getattr(races, name)).result(timeout=300)

        yield call
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _assert_lost(found: dict[str, Any], java_class: str, error_class: str, kind: str) -> None:
    assert not found["committed"], found
    assert found["exception_class"] == f"io.delta.exceptions.{java_class}", found
    assert found["error_class"] == error_class
    assert found["message"].startswith(f"[{error_class}] {java_class}: "), found["message"][:200]
    # Raised through Py4J: PySpark's captured exception (or Py4JJavaError), never a Python copy.
    assert found["python_exception"].startswith(("pyspark.errors.exceptions.captured.", "py4j.protocol.")), found
    assert found["kind"] == kind and found["classify_kind"] == kind
    winner = found["winning_commit"]
    assert winner is not None and winner["version"] == found["winner_version"], (winner, found["winner_version"])


def test_concurrent_append_is_retried_from_a_fresh_snapshot_to_the_serial_result(delta) -> None:
    found = delta("concurrent_append")
    _assert_lost(found, "ConcurrentAppendException", "DELTA_CONCURRENT_APPEND", "concurrent_append")
    assert found["winning_commit"]["operation"] == "UPDATE"
    assert found["policy"]["action"] == "retry"
    assert found["retry"]["committed"], found["retry"]
    assert found["retry"]["version"] == found["winner_version"] + 1
    # Serial: the winner's v * 10, then the loser's v + 100, on partition a only.
    assert found["rows"] == [[1, "a", 110], [2, "a", 120], [3, "b", 3], [4, "a", 140]]


def test_concurrent_delete_read_is_retried_and_the_retry_finds_nothing_left(delta) -> None:
    found = delta("concurrent_delete_read")
    _assert_lost(found, "ConcurrentDeleteReadException", "DELTA_CONCURRENT_DELETE_READ", "concurrent_delete_read")
    assert found["winning_commit"]["operation"] == "DELETE"
    assert found["policy"]["action"] == "retry"
    assert found["retry"]["committed"]
    assert found["rows"] == [[3, "b", 3]]


def test_concurrent_delete_delete_on_the_same_files(delta) -> None:
    found = delta("concurrent_delete_delete")
    _assert_lost(
        found, "ConcurrentDeleteDeleteException", "DELTA_CONCURRENT_DELETE_DELETE", "concurrent_delete_delete"
    )
    assert found["policy"]["action"] == "retry"
    assert found["rows"] == [[3, "b", 3]]


def test_metadata_changed_is_retried_on_the_new_metadata(delta) -> None:
    found = delta("metadata_changed")
    _assert_lost(found, "MetadataChangedException", "DELTA_METADATA_CHANGED", "metadata_changed")
    assert found["winning_commit"]["operation"] == "SET TBLPROPERTIES"
    assert found["policy"]["action"] == "retry"
    assert found["retry"]["committed"]
    assert [13, "c", 3] in found["rows"]


def test_protocol_changed_fails_fast(delta) -> None:
    found = delta("protocol_changed")
    _assert_lost(found, "ProtocolChangedException", "DELTA_PROTOCOL_CHANGED", "protocol_changed")
    assert found["policy"] == {"action": "fail", "then": None}


def test_concurrent_transaction_on_a_shared_txn_app_id_fails_fast(delta) -> None:
    found = delta("concurrent_transaction")
    _assert_lost(
        found, "ConcurrentTransactionException", "DELTA_CONCURRENT_TRANSACTION", "concurrent_transaction"
    )
    assert found["winning_commit"]["operation"] == "WRITE"
    assert found["policy"] == {"action": "fail", "then": None}
    assert [9, "d", 9] in found["rows"] and not any(r[2] == "c" for r in found["rows"])
