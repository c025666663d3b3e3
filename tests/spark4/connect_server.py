"""Spark 4.1's own Spark Connect server for the tests, started as ``start-connect-server.sh``
does (PySpark's wheel ships the server jar, not the script): ``spark-submit --class
SparkConnectServer spark-internal``, in a process group of its own, stopped with it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

CONNECT_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def connect_server(log: Path, conf: Mapping[str, str], master: str = "local[1]") -> Iterator[str]:
    """A running Connect server with ``conf`` (its jars, extensions, catalogs); its ``sc://`` URL."""
    import pyspark

    port = free_port()
    home = Path(pyspark.__file__).parent
    settings = {"spark.connect.grpc.binding.port": str(port), "spark.ui.enabled": "false",
                "spark.driver.memory": "512m", **conf}
    command = [str(home / "bin" / "spark-submit"), "--class", CONNECT_SERVER, "--master", master]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    command.append("spark-internal")
    # The server's Python workers (a query's Python UDF) run this environment's interpreter.
    env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": sys.executable}
    with log.open("w") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, f"the Connect server exited: {log.read_text()[-2000:]}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, f"the Connect server did not listen: {log.read_text()[-2000:]}"
                time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # its own session: the server and nothing else
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)
