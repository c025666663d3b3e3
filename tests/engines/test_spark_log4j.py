"""Spark's log lines in a session occflow starts: its start-up lines nobody can act on are gone,
what Spark warns about still shows, and ``log_level`` / a user's own log4j file decide the rest.

The first tests read the conf only; the last ones start a driver JVM in a fresh Python process
(the log configuration acts when the JVM starts) and read what it printed on stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from occflow.engines.spark import SparkConfig, SparkConfigError
from occflow.engines.spark.log4j import JAVA_OPTIONS, PROPERTIES

OURS = f"-Dlog4j2.configurationFile={PROPERTIES.as_uri()}"


def test_an_embedded_session_gets_occflows_log4j_file_at_warn_with_the_loopback_notice_denied() -> None:
    options = SparkConfig().driver_log_conf()[JAVA_OPTIONS].split()
    assert options == [OURS, "-Doccflow.spark.logLevel=WARN", "-Doccflow.spark.loopbackNotice=DENY"]
    assert PROPERTIES.is_file()


def test_a_cluster_master_keeps_the_loopback_notice_its_executors_may_need() -> None:
    options = SparkConfig(master="spark://master:7077", log_level="info").driver_log_conf()[JAVA_OPTIONS]
    assert options.split() == [OURS, "-Doccflow.spark.logLevel=INFO"]


def test_the_users_java_options_come_first_and_their_own_log4j_file_wins() -> None:
    mine = SparkConfig(conf={JAVA_OPTIONS: "-Dfoo=1"}).driver_log_conf()[JAVA_OPTIONS]
    assert mine.split()[:2] == ["-Dfoo=1", OURS]
    theirs = {JAVA_OPTIONS: "-Dlog4j2.configurationFile=/etc/spark/log4j2.properties"}
    assert SparkConfig(conf=theirs).driver_log_conf() == {}
    assert SparkConfig(log_level=None).driver_log_conf() == {}


def test_a_log_level_that_log4j_does_not_know_names_the_levels_it_does() -> None:
    with pytest.raises(SparkConfigError) as raised:
        SparkConfig(log_level="WARNING")
    assert str(raised.value) == (
        "log_level must be one of Spark's log4j levels OFF, FATAL, ERROR, WARN, INFO, DEBUG, TRACE, ALL, "
        "or null for Spark's own logging configuration, got 'WARNING'"
    )


# A session started the way a task starts one, then a warning of the user's own through log4j.
_START = """
from occflow.engines.spark import SparkConfig, SparkEngine
spark = SparkEngine(SparkConfig(log_level={level!r})).session()
spark.sql("SHOW NAMESPACES IN lake").collect()   # the Iceberg catalog starts (its notices too)
spark._jvm.org.apache.logging.log4j.LogManager.getLogger("my.job").warn("a warning of my job")
spark.stop()
"""

#: What Spark prints at start-up with its own defaults and occflow's file must drop.
NOISE = (
    "Using Spark's default log4j profile",
    'Setting default log level to "WARN"',
    "To adjust logging level use sc.setLogLevel",
    "NativeCodeLoader",
    "resolves to a loopback address",
    "Set SPARK_LOCAL_IP",
    "initialized without view support",
)


def _stderr(level: str | None, home: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _START.format(level=level)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OCCFLOW_HOME": str(home)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


@pytest.mark.spark
def test_a_started_session_prints_no_start_up_noise_and_still_shows_a_warning(tmp_path: Path) -> None:
    stderr = _stderr("WARN", tmp_path)
    assert [line for line in stderr.splitlines() if any(n in line for n in NOISE)] == []
    assert "WARN job: a warning of my job" in stderr  # Spark's pattern: the logger's last name part


@pytest.mark.spark
@pytest.mark.parametrize("level", ["ERROR", "INFO"])
def test_another_log_level_is_the_level_spark_logs_at_without_a_shell_notice(level: str, tmp_path: Path) -> None:
    stderr = _stderr(level, tmp_path)
    assert ("WARN job: a warning of my job" in stderr) is (level == "INFO")
    assert (" INFO " in stderr) is (level == "INFO")
    assert not [line for line in stderr.splitlines() if any(n in line for n in NOISE)]
