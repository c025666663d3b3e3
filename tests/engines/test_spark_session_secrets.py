"""An in-process Spark session never puts a secret setting on a command line: PySpark's gateway
passes every ``--conf`` to spark-submit's argv (readable in ``/proc`` by any local user), so
occflow hands secret settings to the JVM in a 0600 properties file instead. A real local session
in its own process; the oracle is ``/proc/<pid>/cmdline`` of every process on the machine and
the conf the JVM ended up with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the in-process session needs PySpark")

SCRIPT = Path(__file__).with_name("spark_secret_session.py")


def test_a_secret_setting_reaches_the_session_but_no_command_line(tmp_path: Path) -> None:
    secret = "occflow-s3-secret-7f3a9c"
    out = tmp_path / "seen.json"
    subprocess.run([sys.executable, str(SCRIPT), str(out)], check=True, timeout=300,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OCCFLOW_TEST_SECRET": secret})
    seen = json.loads(out.read_text())
    assert seen["seen"] == secret and seen["plain"] == "visible"  # the JVM has both settings
    assert seen["jvm_cmdlines"], "the session's JVM was not found among the processes"
    assert not seen["secret_in_any_cmdline"], seen["jvm_cmdlines"]
    assert any("spark.occflow.test.plain=visible" in c for c in seen["jvm_cmdlines"])  # the others still are
