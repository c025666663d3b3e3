"""Spark Connect's bad input (issue 37, item 3; engines/spark/connect.py): a Connect URL that does
not answer, and a Connect server without the table format's extensions, each end in one
``SparkConfigError`` naming what is wrong, before any write.

The server is Spark 4.1's own (``SparkConnectServer`` from PySpark 4.1's jars, started with
spark-submit as ``start-connect-server.sh`` does), deliberately without Iceberg or Delta.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import connect_client
import pytest
from connect_server import connect_server, free_port

from occflow.engines.spark import SparkConfig, SparkConfigError, SparkEngine


def test_a_connect_url_that_does_not_answer_is_refused_before_any_write(tmp_path: Path) -> None:
    url = f"sc://127.0.0.1:{free_port()}"  # nothing listens there
    engine = SparkEngine(SparkConfig(remote=url, table_format="iceberg", home=str(tmp_path)))
    began = time.monotonic()
    with pytest.raises(SparkConfigError) as raised:
        engine.run("INSERT INTO lake.db.t VALUES (1)", "lake.db.t", "insert_into")
    assert time.monotonic() - began < 10  # the client's own retries would wait minutes
    message = str(raised.value)
    assert url in message and "does not answer" in message and "nothing was written" in message
    assert not (tmp_path / "warehouse").exists()


@pytest.fixture(scope="module")
def bare_connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Spark 4.1's Connect server with no Iceberg or Delta jars or extensions."""
    with connect_server(tmp_path_factory.mktemp("connect") / "server.log", {}) as url:
        yield url


@pytest.fixture(scope="module")
def connect_process() -> Iterator[ProcessPoolExecutor]:
    """The Connect clients' process (``connect_client.py`` says why not this one)."""
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize(("table_format", "extension"), [
    ("delta", "io.delta.sql.DeltaSparkSessionExtension"),
    ("iceberg", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"),
])
def test_a_connect_server_without_the_formats_extensions_is_refused_before_any_write(
    bare_connect_server: str, connect_process: ProcessPoolExecutor, table_format: str, extension: str, tmp_path: Path
) -> None:
    found = connect_process.submit(connect_client.write_error, bare_connect_server, table_format,
                                   str(tmp_path)).result(timeout=300)
    message = found["error"]
    assert message is not None, found
    assert bare_connect_server in message and f"not set up for {table_format} tables" in message
    assert f"spark.sql.extensions has no {extension}" in message and "nothing was written" in message
