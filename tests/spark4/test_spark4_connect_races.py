"""Writes through Spark Connect (issue 37 item 3; docs/spark-support.md): two Connect clients,
each a process of its own, race a MERGE and a DELETE of one Iceberg partition on Spark 4.1's
Connect server. The MERGE runs through occflow's write flow over ``remote: sc://...``; it loses,
is classified from what Connect returned (no Py4J in its process), and is retried to the serial
result, its commit tagged and found again through SQL.

Oracles occflow does not share: Iceberg's own record (the ``snapshots`` metadata table: the
winner's DELETE, the retried MERGE carrying the write id in its summary, nothing more), and the
same two statements run one after the other on a twin table.

One server for the module, configured from occflow's own ``SparkConfig`` for Iceberg (the 4.1
runtime from ``.venv-spark4/share/occflow/jars``, the SQL extensions, the embedded JDBC/SQLite
catalog ``lake``): what a user's server needs.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import connect_races as clients
import delta_spark_races as delta_races
import pytest
from connect_server import connect_server

from occflow.engines.spark import SparkConfig
from occflow.engines.tags import WRITE_ID

Client = Callable[..., Any]


@pytest.fixture(scope="module")
def iceberg_connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A Connect server with Iceberg (``local[4]``: the held MERGE's tasks wait in their UDF while
    the DELETE's run); its URL and the home both sides name the catalog by."""
    home = str(tmp_path_factory.mktemp("connect-iceberg"))
    config = SparkConfig(table_format="iceberg", home=home, conf={"spark.sql.warehouse.dir": f"{home}/warehouse"})
    config.table_format_spec().prepare()  # the catalog's SQLite tables, as a local session makes them
    conf = {k: v for k, v in config.spark_conf().items() if not k.startswith("spark.ui")}
    with connect_server(Path(home) / "server.log", {**conf, "spark.driver.memory": "768m"}, master="local[4]") as url:
        yield url, home


@pytest.fixture(scope="module")
def two_clients(iceberg_connect: tuple[str, str]) -> Iterator[tuple[Client, Client]]:
    url, home = iceberg_connect
    pools = [ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) for _ in range(2)]
    try:
        started: list[Future[dict[str, Any]]] = [pool.submit(clients.start, url, home) for pool in pools]
        for future in started:
            info = future.result(timeout=300)
            assert info["module"].startswith("pyspark.sql.connect.") and info["spark"].startswith("4.1."), info
            assert not info["jvm"], info

        def caller(pool: ProcessPoolExecutor) -> Client:
            return lambda fn, *args: pool.submit(fn, url, home, *args)

        yield caller(pools[0]), caller(pools[1])
    finally:
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.slow  # 31 s measured (the race, its retry, the serial twin, a later try); still run by the suite
def test_a_connect_clients_lost_merge_is_classified_from_what_connect_returns_and_retried_to_the_serial_result(
    two_clients: tuple[Client, Client], tmp_path: Path
) -> None:
    loser, other = two_clients
    table, twin = "lake.db.connect_race", "lake.db.connect_twin"
    other(clients.create_tables, [table, twin]).result(timeout=120)
    delta_races._home = str(tmp_path)  # the gate's files: the server's Python worker reads them
    gate = delta_races.Gate()

    held = loser(clients.lose_and_retry, table, gate)
    gate.wait_reached(lambda: not held.done())
    other(clients.win, table).result(timeout=120)  # the other client's DELETE commits first
    gate.open()
    found = held.result(timeout=300)

    # The first attempt's error, as the Connect client raised it: a Python copy of the server's
    # error, no Java object behind it, no JVM (Py4J gateway) in the process.
    first = found["first_error"]
    assert first["python_class"].startswith("pyspark.errors.exceptions.connect."), first
    assert not first["has_java_exception"] and not found["jvm"], first
    # ValidationException is no SparkThrowable: no error class or SQLSTATE to read; the server's
    # class comes back in the message and its stack (serverStacktrace, set by occflow's session).
    assert first["condition"] is None and first["sql_state"] is None, first
    assert "JVM stacktrace:" in first["text"] and "Missing required files to delete" in first["text"], first["text"]
    info = first["info"]
    assert info["exception_class"] == "org.apache.iceberg.exceptions.ValidationException", info
    assert info["messages"][-1].startswith("through Spark Connect as pyspark.errors.exceptions.connect."), info
    assert first["classify_kind"] == "validation_conflict"

    report = found["report"]
    assert report["status"] == "committed" and report["attempts"] == 2, report
    (conflict,) = report["conflicts"]
    assert conflict["kind"] == "validation_conflict", conflict
    assert conflict["error"].startswith(
        "org.apache.iceberg.exceptions.ValidationException: Missing required files to delete"), conflict
    assert [d["action"] for d in report["decisions"]] == ["retry"], report["decisions"]

    read = other(clients.serial_and_read, table, twin, gate).result(timeout=120)
    # The serial result: the DELETE emptied partition a, the MERGE then matched nothing there.
    assert read["rows"] == read["serial_rows"] == [[3, "b", 3]], read
    # Iceberg's record: two appends, the winner's DELETE, then the retried MERGE (the lost attempt
    # committed nothing) carrying this write's id in its summary, and no other snapshot does.
    snapshots = read["snapshots"]
    operations = [s["operation"] for s in snapshots]
    assert operations[:3] == ["append", "append", "delete"] and len(snapshots) == 4, snapshots
    winner, retried = snapshots[2], snapshots[3]
    assert [s for s in snapshots if WRITE_ID in s["summary"]] == [retried], snapshots
    assert retried["summary"][WRITE_ID] == found["write_id"], (retried, found["write_id"])
    assert report["snapshot_id"] == retried["snapshot_id"], report
    # The winner occflow named, read through SQL over Connect: the DELETE's snapshot.
    assert conflict["winning_commit"]["snapshot_id"] == winner["snapshot_id"], conflict

    # Try 2 of the same task instance finds the write through the snapshots table, runs nothing.
    again = loser(clients.later_try, table).result(timeout=120)
    assert not again["job_ran"] and again["report"]["committed_by"] is not None, again
    assert again["report"]["snapshot_id"] == retried["snapshot_id"], again
    assert other(clients.snapshots, table).result(timeout=120) == snapshots

    # One write at a time per Connect session: a second tag beside the first is refused by name.
    two = loser(clients.second_tag_on_one_session, table).result(timeout=120)
    assert two["during"] == two["still"] == two["first"] and two["after"] is None, two
    assert two["refused"] is not None and f"write id {two['first']}" in two["refused"], two
