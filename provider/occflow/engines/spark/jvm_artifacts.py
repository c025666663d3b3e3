"""The JVM artifacts Spark loads (Iceberg's and Delta's own jars), from one pinned manifest.

``scripts/jvm/pom.xml`` pins their Maven coordinates; ``scripts/bootstrap.sh`` resolves it with
Maven from Maven Central, checksums verified, into ``<sys.prefix>/share/occflow/jars/``
(``$OCCFLOW_JVM_JARS_DIR`` names another folder) and records each file's sha256 there
(``SHA256SUMS``). Spark gets the local paths: no network when a session starts.
``MANIFEST`` mirrors the pom (a test keeps them equal).

Two Spark lines (docs/spark-support.md): 3.5 on Scala 2.12 (``MANIFEST``, the pom's default) and
4.1 on Scala 2.13 (``SPARK_4_1``, the pom's profile ``spark-4.1``, which the bootstrap resolves
into ``.venv-spark4/``). A venv holds one line's jars; ``jar()`` gives the running PySpark's
line's counterpart of a manifest artifact (``line_manifest``), so a caller naming
``ICEBERG_SPARK_RUNTIME`` gets Iceberg's Spark 4.1 runtime under PySpark 4.1. A PySpark of a
line with no manifest is refused naming the lines there are.

``check_spark_jars`` reads the jar file names a session is given against the running PySpark (its
Spark line and Scala build): a ``_2.13`` jar on a Scala 2.12 Spark, or an Iceberg or delta-spark
jar built for another Spark line, is refused with one error naming the file, its coordinate and
the running Spark, before any session starts, so before any write.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .settings import SparkConfigError

JARS_DIR_ENV = "OCCFLOW_JVM_JARS_DIR"
#: What the bootstrap records beside the jars (``sha256sum`` format).
CHECKSUMS = "SHA256SUMS"
_BOOTSTRAP_HINT = "run bash scripts/bootstrap.sh (it resolves scripts/jvm/pom.xml with Maven)"


@dataclass(frozen=True)
class Artifact:
    group: str
    artifact: str
    version: str

    @property
    def coordinate(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"


ICEBERG_SPARK_RUNTIME = Artifact("org.apache.iceberg", "iceberg-spark-runtime-3.5_2.12", "1.10.2")
DELTA_SPARK = Artifact("io.delta", "delta-spark_2.12", "3.3.3")
DELTA_STORAGE = Artifact("io.delta", "delta-storage", "3.3.3")
#: scripts/jvm/pom.xml's coordinates, versions exact (for PySpark 3.5, Scala 2.12).
MANIFEST = (ICEBERG_SPARK_RUNTIME, DELTA_SPARK, DELTA_STORAGE)
SPARK_LINE = "3.5"
SCALA_BINARY = "2.12"


@dataclass(frozen=True)
class LineManifest:
    """One Spark line's jars: Iceberg's Spark runtime, delta-spark, delta-storage (in ``MANIFEST``'s order)."""

    spark_line: str
    scala: str
    artifacts: tuple[Artifact, Artifact, Artifact]
    #: The profile of scripts/jvm/pom.xml that resolves them ("" for the default) and their pins.
    pom_profile: str
    pins: str


#: scripts/jvm/pom.xml's profile spark-4.1 (versions exact): the newest Spark 4 line both formats
#: release for (Maven Central, 2026-11-28: Iceberg's runtime exists for Spark 4.0 and 4.1, not 4.2;
#: delta-spark 4.1.0 to 4.3.1 are built on Spark 4.1.0, 4.4.0 on 4.2.0).
SPARK_4_1 = LineManifest("4.1", "2.13", (
    Artifact("org.apache.iceberg", "iceberg-spark-runtime-4.1_2.13", "1.12.0"),
    Artifact("io.delta", "delta-spark_2.13", "4.3.1"),
    Artifact("io.delta", "delta-storage", "4.3.1"),
), "spark-4.1", "scripts/jvm/jars-spark-4.1.sha256")
SPARK_3_5 = LineManifest(SPARK_LINE, SCALA_BINARY, MANIFEST, "", "scripts/jvm/jars.sha256")
#: Spark line -> its manifest.
LINES = {m.spark_line: m for m in (SPARK_3_5, SPARK_4_1)}

#: delta-spark (delta-core before 3.0) release line -> the Spark line it is built for (delta-spark
#: 4.x's poms: spark-sql_2.13 4.0.x for 4.0, 4.1.0 for 4.1 to 4.3, 4.2.0 for 4.4).
DELTA_SPARK_LINES = {
    "4.4": "4.2", "4.3": "4.1", "4.2": "4.1", "4.1": "4.1",
    "4.0": "4.0", "3.3": "3.5", "3.2": "3.5", "3.1": "3.5", "3.0": "3.5",
    "2.4": "3.4", "2.3": "3.3", "2.2": "3.3", "2.1": "3.3", "2.0": "3.2",
    "1.2": "3.2", "1.1": "3.2", "1.0": "3.1",
}
# <artifact>_<scala>-<version>.jar: a Scala library's file name.
_SCALA_JAR = re.compile(r"^(?P<artifact>.+?)_(?P<scala>2\.1[0-3]|3)-(?P<version>\d[^/]*)\.jar$")
_ICEBERG_JAR = re.compile(r"^iceberg-spark(?:-runtime|-extensions)?-(?P<line>\d+\.\d+)_")
_DELTA_JAR = re.compile(r"^(?P<artifact>delta-spark|delta-core)_[0-9.]+-(?P<version>\d+\.\d+[^/]*?)\.jar$")
_DELTA_STORAGE_JAR = re.compile(r"^delta-storage-(?P<version>\d[^/]*?)\.jar$")


def jars_dir() -> Path:
    """Where the bootstrap put the manifest's jars."""
    return Path(os.environ.get(JARS_DIR_ENV) or Path(sys.prefix) / "share" / "occflow" / "jars")


def line_manifest(spark_version: str | None = None) -> LineManifest:
    """The manifest of ``spark_version``'s line (default: the running PySpark's; 3.5 without
    PySpark); ``SparkConfigError`` naming the lines there are for a line with none."""
    if spark_version is None:
        try:
            spark_version = running_spark()[0]
        except ImportError:
            return SPARK_3_5
    line = ".".join(spark_version.split(".")[:2])
    found = LINES.get(line)
    if found is None:
        raise SparkConfigError(
            f"PySpark {spark_version} is Spark {line}, for which occflow pins no Iceberg or Delta jars; the "
            f"manifest (scripts/jvm/pom.xml) has Spark {' and '.join(sorted(LINES))}: install one of those PySparks"
        )
    return found


def jar(artifact: Artifact) -> str:
    """The local path of the manifest's ``artifact``, or of its counterpart in the running
    PySpark's line (``line_manifest``): a venv holds the jars of its own Spark line only."""
    if artifact in MANIFEST:
        artifact = line_manifest().artifacts[MANIFEST.index(artifact)]
    path = jars_dir() / artifact.file_name
    if not path.is_file():
        raise SparkConfigError(
            f"the JVM artifact {artifact.coordinate} ({artifact.file_name}) is not in {jars_dir()}: {_BOOTSTRAP_HINT}, "
            f"or set {JARS_DIR_ENV} to a folder holding it"
        )
    return str(path)


def running_spark() -> tuple[str, str]:
    """The running PySpark's version and Scala binary version (from its ``scala-library`` jar)."""
    import pyspark  # optional heavy dependency

    version = str(pyspark.__version__)
    # A Connect-only client (pyspark-client) has no jars: its line's Scala is the manifest's.
    libraries = sorted((Path(pyspark.__file__).parent / "jars").glob("scala-library-*.jar"))
    if libraries:
        return version, ".".join(libraries[-1].name[len("scala-library-"):].split(".")[:2])
    line = LINES.get(".".join(version.split(".")[:2]))
    return version, line.scala if line is not None else SCALA_BINARY


def _name(path: str) -> str:
    return PurePosixPath(path.split("://", 1)[-1]).name if "://" in path else Path(path).name


def _coordinate(name: str) -> str:
    """A jar file name as the Maven coordinate it looks like (for the error)."""
    if name.startswith(("iceberg-", "delta-")):
        group = "org.apache.iceberg" if name.startswith("iceberg-") else "io.delta"
        match = re.match(r"^(?P<artifact>.+?)-(?P<version>\d[^_]*)\.jar$", name)
        if match:
            return f"{group}:{match['artifact']}:{match['version']}"
    return name


def _looks_versioned(name: str) -> bool:
    return bool(_SCALA_JAR.match(name) or _ICEBERG_JAR.match(name) or _DELTA_JAR.match(name))


def jar_problems(jars: Iterable[str], spark_version: str, scala: str) -> list[str]:
    """What in ``jars`` (paths or URIs) does not fit a Spark ``spark_version`` on Scala ``scala``."""
    line = ".".join(spark_version.split(".")[:2])
    problems: list[str] = []
    for path in jars:
        name = _name(path)
        what = f"{path} ({_coordinate(name)})"
        scala_jar = _SCALA_JAR.match(name)
        if scala_jar and scala_jar["scala"] != scala:
            problems.append(f"{what} is built for Scala {scala_jar['scala']}, not {scala}")
            continue
        iceberg = _ICEBERG_JAR.match(name)
        if iceberg and iceberg["line"] != line:
            problems.append(f"{what} is Iceberg's jar for Spark {iceberg['line']}, not Spark {line}")
            continue
        delta = _DELTA_JAR.match(name)
        if delta:
            wanted = DELTA_SPARK_LINES.get(".".join(delta["version"].split(".")[:2]))
            if wanted is not None and wanted != line:
                problems.append(f"{what} is Delta {delta['version']}, built for Spark {wanted}, not Spark {line}")
    return problems


def check_spark_jars(jars: Iterable[str], *, origin: str = "") -> None:
    """Raise one ``SparkConfigError`` naming every jar of ``jars`` built for another Spark line or
    Scala version than the running PySpark's."""
    jars = [j for j in jars if _looks_versioned(_name(j))]
    if not jars:
        return  # nothing a Spark line or Scala version can be read from (PySpark not imported)
    version, scala = running_spark()
    problems = jar_problems(jars, version, scala)
    if problems:
        source = f" (from {origin})" if origin else ""
        line = LINES.get(".".join(version.split(".")[:2]), SPARK_3_5)
        raise SparkConfigError(
            f"jars that do not fit the running Spark {version} (Scala {scala}){source}: " + "; ".join(problems)
            + f". The manifest's jars for Spark {line.spark_line} / Scala {line.scala} are in {jars_dir()}"
        )


def delta_jar_problems(jars: Iterable[str]) -> list[str]:
    """What a delta-spark jar list misses: a delta-spark (or delta-core) jar and a delta-storage
    jar of the same version."""
    names = [_name(j) for j in jars]
    spark = [m for m in map(_DELTA_JAR.match, names) if m]
    storage = [m for m in map(_DELTA_STORAGE_JAR.match, names) if m]
    problems = []
    if not spark:
        problems.append(f"no delta-spark_<scala>-X.jar among {', '.join(names)}")
    if not storage and not any(m["artifact"] == "delta-core" for m in spark):
        problems.append(f"no delta-storage-X.jar among {', '.join(names)}")
    if spark and storage:
        spark_versions = {m["version"] for m in spark}
        storage_versions = {m["version"] for m in storage}
        if spark_versions != storage_versions:
            problems.append(f"delta-spark {', '.join(sorted(spark_versions))} with delta-storage "
                            f"{', '.join(sorted(storage_versions))}: give the same version of both")
    return problems


__all__ = [
    "CHECKSUMS",
    "DELTA_SPARK",
    "DELTA_STORAGE",
    "ICEBERG_SPARK_RUNTIME",
    "JARS_DIR_ENV",
    "LINES",
    "MANIFEST",
    "SPARK_3_5",
    "SPARK_4_1",
    "Artifact",
    "LineManifest",
    "check_spark_jars",
    "delta_jar_problems",
    "jar",
    "jar_problems",
    "jars_dir",
    "line_manifest",
    "running_spark",
]
