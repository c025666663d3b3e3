"""What Spark logs from a session occflow starts in its own process: occflow's ``log4j2.properties``
(beside this module) at ``SparkConfig.log_level``, given to the driver's JVM when it starts.

Spark's JVM writes its log to stderr, and an Airflow task log shows every stderr line as an
error: with Spark's defaults each task that starts a session opens with the log4j banner, a
missing native-Hadoop warning and a loopback-address warning that no user of an embedded session
can act on. The file keeps Spark's WARN level and drops those lines (each one named in the file,
with why). A ``conf`` that brings its own log4j configuration keeps it; ``log_level=None`` leaves
Spark's logging as Spark configures it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

#: Log4j's levels, the quietest first: what ``SparkConfig.log_level`` may be.
LOG_LEVELS = ("OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "ALL")
PROPERTIES = Path(__file__).with_name("log4j2.properties")
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
#: A Java option that already names a log4j configuration (log4j 2 or Spark's older log4j 1 key).
_OWN_CONFIGURATION = re.compile(r"-Dlog4j2?\.configuration(File)?=")
#: A master whose executors run in the driver's JVM: nothing needs to reach the driver's address.
_LOCAL_MASTER = re.compile(r"local(\[[^\]]*\])?")


def driver_log_conf(level: str | None, master: str, conf: Mapping[str, str]) -> dict[str, str]:
    """The Spark conf that starts a driver JVM with occflow's log configuration at ``level``:
    ``spark.driver.extraJavaOptions`` with ours after the user's own options. Empty when
    ``level`` is ``None`` or ``conf``'s Java options name their own log4j configuration."""
    theirs = conf.get(JAVA_OPTIONS, "")
    if level is None or _OWN_CONFIGURATION.search(theirs):
        return {}
    ours = [f"-Dlog4j2.configurationFile={PROPERTIES.as_uri()}", f"-Doccflow.spark.logLevel={level}"]
    if _LOCAL_MASTER.fullmatch(master):
        ours.append("-Doccflow.spark.loopbackNotice=DENY")
    return {JAVA_OPTIONS: " ".join(filter(None, [theirs, *ours]))}
