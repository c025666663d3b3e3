"""The lease check inside a spark-submit driver's Iceberg or Delta commit (issues 23 and 34,
docs/engines-spark.md).

The task keeps a lease window file fresh (``lease_window.py``). A driver reads it in Python right
before its write statement starts; on Iceberg it is read once more *inside every commit*: the
Iceberg catalog occflow configures is wrapped in ``occflow.iceberg.LeaseFencedCatalog`` (Java,
``java/occflow/iceberg/``), whose tables' ``TableOperations.commit`` checks the window after the
statement has written its files and right before the catalog swaps the table's metadata. A lease
that lapses while the statement runs stops its commit (``LeaseNotLiveException``: Iceberg does
not retry it and removes what it wrote); the driver reports the attempt as ``lease_not_live``.

Iceberg has no commit hook of its own (``SnapshotProducer.commit`` goes straight to
``TableOperations.commit``), hence the wrapping catalog. delta-spark makes a commit visible by
writing ``_delta_log/<version>.json`` through the scheme's ``LogStore`` (``overwrite=false``):
on Delta the driver's session names ``occflow.delta.LeaseFencedLogStore`` as
``spark.delta.logStore.<scheme>.impl`` for the schemes Delta knows (the LogStore it replaced, or
Delta's default for the scheme, is its delegate), and that write checks the window first
(``LeaseNotLiveException``: no commit file written, delta-spark does not retry it). The Java classes are compiled at
bootstrap with Maven (``scripts/jvm/fence/pom.xml``), against the manifest's Iceberg runtime and
delta-storage jars and PySpark's Hadoop API jar, from the local Maven repository the bootstrap
resolved them into (``python -m occflow.engines.spark.submit_fence build``). Without the jar, on a catalog that is
not Iceberg's ``SparkCatalog``, or on plain Parquet/Hive tables, the driver checks only at the
statement start and says so: in its log and in its outcome's ``lease_checked_at`` tag.

An in-process session (``SparkWriteOperator``) gets the same catalog or log store, in its
``thread`` scope (``CommitFence.attempt_conf``): the session serves every write of the process, so
each commit checks the window of the attempt its thread runs (``attempt_fence.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..outcome import LEGACY_LEASE_REFUSED_AT, WriteOutcome
from .config import SparkConfig
from .settings import SparkConfigError

FENCED_CATALOG = "occflow.iceberg.LeaseFencedCatalog"
NOT_LIVE_EXCEPTION = "occflow.iceberg.LeaseNotLiveException"
FENCED_LOG_STORE = "occflow.delta.LeaseFencedLogStore"
DELTA_NOT_LIVE_EXCEPTION = "occflow.delta.LeaseNotLiveException"
#: The refusals of the fences inside a commit: nothing was committed.
NOT_LIVE_EXCEPTIONS = (NOT_LIVE_EXCEPTION, DELTA_NOT_LIVE_EXCEPTION)
#: The Java sources; the jar records their digest, so a jar built from other sources is not used.
JAVA_SOURCES = Path(__file__).with_name("java")
#: Where the jar is (default: ``<sys.prefix>/share/occflow/occflow-lease-fence.jar``, the venv's).
JAR_ENV = "OCCFLOW_LEASE_FENCE_JAR"
#: The Maven build of the sources (its parent, ``scripts/jvm/pom.xml``, is the JVM artifacts' manifest).
FENCE_POM = Path(__file__).resolve().parents[4] / "scripts" / "jvm" / "fence" / "pom.xml"
#: The local Maven repository (default: ``<sys.prefix>/share/occflow/m2``, where the bootstrap resolves).
MAVEN_REPO_ENV = "OCCFLOW_MAVEN_REPO"
#: How much life the lease must still have at the commit (clock skew, the catalog's swap).
COMMIT_MARGIN = 1.0
#: The lease-fenced catalog's properties (``LeaseWindow.java``, ``LeaseFencedCatalog.java``).
WINDOW_KEY = "occflow.lease.window"
FENCE_KEY = "occflow.lease.fence"
MARGIN_KEY = "occflow.lease.commit-margin-seconds"
#: Which window a commit checks: the catalog's own (a driver: one write) or its thread's attempt's.
SCOPE_KEY = "occflow.lease.scope"
THREAD_SCOPE = "thread"
#: On Delta the same settings are the session's (Spark passes on ``spark.`` keys only), and the
#: LogStore each scheme's lease-fenced log store wraps (``LeaseFencedLogStore.java``).
DELTA_SETTING = "spark.{}"
DELTA_LOG_STORE_KEY = "spark.delta.logStore.{}.impl"
DELTA_LOG_STORE_CLASS_KEY = "spark.delta.logStore.class"
DELTA_DELEGATE_KEY = "spark.occflow.delta.logStore.{}.delegate"
DELTA_DELEGATE_ANY_KEY = "spark.occflow.delta.logStore.delegate"
#: The schemes delta-spark knows a LogStore for (``DelegatingLogStore``), with file, hdfs and
#: viewfs; a table on another scheme is fenced when the config names a LogStore for it.
DELTA_SCHEMES = ("file", "hdfs", "viewfs", "s3", "s3a", "s3n", "abfs", "abfss", "adl", "wasb", "wasbs", "gs")
_DELTA_CLASS = "occflow/delta/LeaseFencedLogStore.class"

#: Outcome tags: where the driver's last lease check runs, and where a refused attempt was refused
#: (payload; the typed ``WriteOutcome.lease_refused.at`` is what is decided on).
LEASE_CHECKED_AT = "lease_checked_at"
LEASE_REFUSED_AT = LEGACY_LEASE_REFUSED_AT
AT_COMMIT = "commit"
AT_STATEMENT_START = "statement_start"

#: The Spark catalogs that build their Iceberg catalog from ``catalog-impl`` / ``type``.
_ICEBERG_SPARK_CATALOGS = ("org.apache.iceberg.spark.SparkCatalog", "org.apache.iceberg.spark.SparkSessionCatalog")
_DIGEST_ATTRIBUTE = "Occflow-Source-Digest"
_BUILD_HINT = "python -m occflow.engines.spark.submit_fence build, which scripts/bootstrap.sh runs"


def jar_path() -> Path:
    default = Path(sys.prefix) / "share" / "occflow" / "occflow-lease-fence.jar"
    return Path(os.environ.get(JAR_ENV) or default)


def _sources() -> list[Path]:
    return sorted(JAVA_SOURCES.rglob("*.java"))


def source_digest() -> str | None:
    """A digest of the Java sources (``None`` where they are not installed)."""
    sources = _sources()
    if not sources:
        return None
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.relative_to(JAVA_SOURCES).as_posix().encode() + b"\0" + source.read_bytes() + b"\0")
    return digest.hexdigest()[:32]  # a manifest line holds 72 bytes


def _jar_digest(jar: Path) -> str | None:
    try:
        with zipfile.ZipFile(jar) as archive:
            manifest = archive.read("META-INF/MANIFEST.MF").decode()
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    for line in manifest.splitlines():
        key, _, value = line.partition(":")
        if key == _DIGEST_ATTRIBUTE:
            return value.strip()
    return None


def built_jar() -> tuple[Path | None, str]:
    """The jar when it is built from the sources here; else ``None`` and why not."""
    jar = jar_path()
    if not jar.is_file():
        return None, f"the commit-time lease check's jar {jar} is not built ({_BUILD_HINT})"
    digest = source_digest()
    if digest is not None and _jar_digest(jar) != digest:
        return None, f"the jar {jar} was built from other sources than {JAVA_SOURCES}: rebuild it ({_BUILD_HINT})"
    return jar, ""


def _has_delta_log_store(jar: Path) -> bool:
    try:
        with zipfile.ZipFile(jar) as archive:
            return _DELTA_CLASS in archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def _mvn() -> str:
    mvn = shutil.which("mvn")
    if not mvn:
        raise SparkConfigError(
            "building the commit-time lease check needs Maven's mvn and a JDK (Debian: maven, "
            "openjdk-17-jdk-headless); no mvn on PATH"
        )
    return mvn


def maven_repo() -> Path:
    """The local Maven repository the bootstrap resolved the manifest into (the same for this build)."""
    return Path(os.environ.get(MAVEN_REPO_ENV) or Path(sys.prefix) / "share" / "occflow" / "m2")


def _hadoop_api_jar() -> str:
    """Hadoop's API jar (``Configurable``, ``FileSystem``) from PySpark's ``jars/``: the running Spark's."""
    import pyspark  # optional heavy dependency

    hadoop = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    if not hadoop:
        raise SparkConfigError(f"no hadoop-client-api jar in {Path(pyspark.__file__).parent / 'jars'}")
    return str(hadoop[-1])


def build(force: bool = False) -> Path:
    """Compile the Java sources (every ``.java`` under ``JAVA_SOURCES``) with Maven
    (``scripts/jvm/fence/pom.xml``: the manifest's Iceberg and Delta jars, PySpark's Hadoop API)
    into the jar (``jar_path()``), unless it is built from them already."""
    jar = jar_path()
    if not force and built_jar()[0] is not None:
        return jar
    sources = _sources()
    digest = source_digest()
    if not sources or digest is None:
        raise SparkConfigError(f"no Java sources under {JAVA_SOURCES}: this installation cannot build the jar")
    if not FENCE_POM.is_file():
        raise SparkConfigError(f"no {FENCE_POM}: the jar is built from a source checkout (scripts/jvm/)")
    with tempfile.TemporaryDirectory(prefix="occflow-lease-fence-") as target:
        # Offline once the bootstrap has resolved the manifest and the build's plugins (it runs this
        # build): Maven looks nothing up that the local repository holds; what it downloads is
        # checked against Maven Central's checksums (--strict-checksums).
        command = [_mvn(), "-B", "-q", "-Dstyle.color=never", "--strict-checksums", "-f", str(FENCE_POM),
                   f"-Dmaven.repo.local={maven_repo()}", f"-Doccflow.build.dir={target}",
                   f"-Doccflow.hadoop.api.jar={_hadoop_api_jar()}", f"-Doccflow.source.digest={digest}",
                   f"-Doccflow.java.sources={JAVA_SOURCES}", "package"]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        built = Path(target) / "occflow-lease-fence.jar"
        if done.returncode != 0 or not built.is_file():
            raise SparkConfigError(f"mvn failed ({done.returncode}): {' '.join(command)}\n"
                                   f"{(done.stdout + done.stderr).strip()}")
        jar.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{jar.name}.", suffix=".tmp", dir=jar.parent)
        os.close(fd)
        try:
            shutil.copyfile(built, tmp)
            os.replace(tmp, jar)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return jar


@dataclass(frozen=True)
class CommitFence:
    """Where a driver checks its lease last: inside each commit (``AT_COMMIT``, through the
    lease-fenced catalog, or on Delta the lease-fenced log store, in ``jar``) or right before its
    write statement starts (``AT_STATEMENT_START``; ``reason`` says why not later)."""

    checked_at: str
    catalog: str = ""
    jar: str = ""
    reason: str = ""
    table_format: str = "iceberg"

    @property
    def at_commit(self) -> bool:
        return self.checked_at == AT_COMMIT

    def describe(self) -> str:
        if self.at_commit and self.table_format == "delta":
            return ("the lease is checked inside each commit to a Delta log, right before its commit file is "
                    f"written ({FENCED_LOG_STORE})")
        if self.at_commit:
            return f"the lease is checked inside each commit to Iceberg catalog {self.catalog} ({FENCED_CATALOG})"
        return f"the lease is checked only right before the write statement starts, not at its commit: {self.reason}"

    def spark_conf(self, conf: Mapping[str, str], window: str | Path, fence: int,
                   margin: float = COMMIT_MARGIN) -> dict[str, str]:
        """``conf`` with the catalog wrapped (the catalog it wrapped named as its delegate), on
        Delta the log stores (``delta_log_stores``), and the jar added; ``conf`` unchanged when
        the check is not at the commit."""
        return self._wrapped(conf, {
            WINDOW_KEY: str(Path(window).absolute()),
            FENCE_KEY: str(int(fence)),
            MARGIN_KEY: repr(float(margin)),
        })

    def attempt_conf(self, conf: Mapping[str, str]) -> dict[str, str]:
        """``conf`` with the catalog wrapped for an in-process session that every write of the
        process shares: each commit checks the window of the attempt its thread runs
        (``attempt_fence.py``), not one window of the catalog; unchanged when not at the commit."""
        return self._wrapped(conf, {SCOPE_KEY: THREAD_SCOPE})

    def _wrapped(self, conf: Mapping[str, str], lease: Mapping[str, str]) -> dict[str, str]:
        out = dict(conf)
        if not self.at_commit:
            return out
        if self.table_format == "delta":
            out = delta_log_stores(out)
            for key, value in lease.items():
                out[DELTA_SETTING.format(key)] = value
            out["spark.jars"] = ",".join(j for j in (conf.get("spark.jars"), self.jar) if j)
            return out
        prefix = f"spark.sql.catalog.{self.catalog}"
        impl, kind = out.pop(f"{prefix}.catalog-impl", None), out.pop(f"{prefix}.type", None)
        out[f"{prefix}.catalog-impl"] = FENCED_CATALOG
        if impl is not None:
            out[f"{prefix}.occflow.delegate.catalog-impl"] = impl
        if kind is not None:
            out[f"{prefix}.occflow.delegate.type"] = kind
        for key, value in lease.items():
            out[f"{prefix}.{key}"] = value
        out["spark.jars"] = ",".join(j for j in (conf.get("spark.jars"), self.jar) if j)
        return out


def delta_log_stores(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` with every scheme's Delta LogStore the lease-fenced one: for the schemes Delta knows
    and any the config names a LogStore for, the LogStore it named (or ``spark.delta.logStore.class``,
    which Delta refuses beside scheme settings) becomes the delegate; Delta's default otherwise."""
    out = dict(conf)
    every = out.pop(DELTA_LOG_STORE_CLASS_KEY, None)
    if every is not None and every != FENCED_LOG_STORE:
        out[DELTA_DELEGATE_ANY_KEY] = every
    named = {m.group(1) for key in out if (m := re.fullmatch(r"spark\.delta\.logStore\.(\w+)\.impl", key))}
    for scheme in sorted({*DELTA_SCHEMES, *named}):
        key = DELTA_LOG_STORE_KEY.format(scheme)
        impl = out.get(key)
        if impl is not None and impl != FENCED_LOG_STORE:
            out[DELTA_DELEGATE_KEY.format(scheme)] = impl
        out[key] = FENCED_LOG_STORE
    return out


def plan(config: SparkConfig) -> CommitFence:
    """Whether drivers of ``config`` can check their lease inside the commit, and if not why."""
    if config.table_format == "delta":
        jar, why = built_jar()
        if jar is None:
            return CommitFence(AT_STATEMENT_START, table_format="delta", reason=why)
        if not _has_delta_log_store(jar):
            return CommitFence(AT_STATEMENT_START, table_format="delta", reason=(
                f"the jar {jar} has no Delta log store ({FENCED_LOG_STORE}): rebuild it ({_BUILD_HINT})"))
        return CommitFence(AT_COMMIT, table_format="delta", jar=str(jar))
    if config.table_format != "iceberg":
        return CommitFence(AT_STATEMENT_START, table_format=config.table_format, reason=(
            f"{config.table_format} tables have no commit-time lease check (no table format log to wrap)"))
    catalog = config.table_catalog
    spark_catalog = config.spark_conf().get(f"spark.sql.catalog.{catalog}")
    if spark_catalog not in _ICEBERG_SPARK_CATALOGS:
        return CommitFence(AT_STATEMENT_START, catalog=catalog, reason=(
            f"spark.sql.catalog.{catalog} is {spark_catalog!r}, not Iceberg's SparkCatalog: occflow cannot "
            "wrap the Iceberg catalog inside it"))
    jar, why = built_jar()
    if jar is None:
        return CommitFence(AT_STATEMENT_START, catalog=catalog, reason=why)
    return CommitFence(AT_COMMIT, catalog=catalog, jar=str(jar))


def in_session(session_conf: Mapping[str, str], config: SparkConfig, window: str | Path, fence: int) -> CommitFence:
    """What a running driver's session does: the lease-fenced catalog for this window and fence,
    or not (and why). The session's conf is the truth; ``plan`` only explains a missing fence."""
    if config.table_format == "delta":
        if (session_conf.get(DELTA_LOG_STORE_KEY.format("file")) == FENCED_LOG_STORE
                and session_conf.get(DELTA_SETTING.format(WINDOW_KEY)) == str(Path(window).absolute())
                and session_conf.get(DELTA_SETTING.format(FENCE_KEY)) == str(int(fence))):
            return CommitFence(AT_COMMIT, table_format="delta", jar=session_conf.get("spark.jars", ""))
        planned = plan(config)
        if not planned.at_commit:
            return planned
        return CommitFence(AT_STATEMENT_START, table_format="delta", reason=(
            f"this session's Delta log stores are not the lease-fenced log store for {window} and fence {fence} "
            "(a driver started by occflow.engines.spark.submit.submit_job gets it)"))
    catalog = config.table_catalog
    prefix = f"spark.sql.catalog.{catalog}"
    if (session_conf.get(f"{prefix}.catalog-impl") == FENCED_CATALOG
            and session_conf.get(f"{prefix}.{WINDOW_KEY}") == str(Path(window).absolute())
            and session_conf.get(f"{prefix}.{FENCE_KEY}") == str(int(fence))):
        return CommitFence(AT_COMMIT, catalog=catalog, jar=session_conf.get("spark.jars", ""))
    planned = plan(config)
    if not planned.at_commit:
        return planned
    return CommitFence(AT_STATEMENT_START, catalog=catalog, reason=(
        f"this session's catalog {catalog} is not the lease-fenced catalog for {window} and fence {fence} "
        "(a driver started by occflow.engines.spark.submit.submit_job gets it)"))


def commit_refusal(outcome: WriteOutcome) -> str | None:
    """The lease-fenced catalog's (or log store's) refusal when it is what failed the job, else ``None``."""
    if outcome.committed or outcome.error is None:
        return None
    error = outcome.error
    for index, name in enumerate((error.exception_class, *error.cause_classes)):
        if name in NOT_LIVE_EXCEPTIONS:
            return error.messages[index] if index < len(error.messages) else "\n".join(error.messages)
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="occflow.engines.spark.submit_fence", description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=("build", "status"), help="build the jar (if not current), or say where it is")
    p.add_argument("--force", action="store_true", help="rebuild even if the jar is current")
    args = p.parse_args(argv)
    if args.command == "status":
        jar, why = built_jar()
        print(jar if jar is not None else why)
        return 0 if jar is not None else 1
    current = built_jar()[0] is not None and not args.force
    try:
        jar = build(force=args.force)
    except SparkConfigError as exc:
        print(f"occflow: {exc}", file=sys.stderr)
        return 1
    print(f"{'up to date' if current else 'built'}: {jar}")
    return 0


__all__ = [
    "AT_COMMIT",
    "AT_STATEMENT_START",
    "COMMIT_MARGIN",
    "DELTA_NOT_LIVE_EXCEPTION",
    "DELTA_SCHEMES",
    "FENCED_CATALOG",
    "FENCED_LOG_STORE",
    "FENCE_KEY",
    "LEASE_CHECKED_AT",
    "LEASE_REFUSED_AT",
    "MARGIN_KEY",
    "NOT_LIVE_EXCEPTION",
    "NOT_LIVE_EXCEPTIONS",
    "SCOPE_KEY",
    "THREAD_SCOPE",
    "WINDOW_KEY",
    "CommitFence",
    "build",
    "built_jar",
    "commit_refusal",
    "delta_log_stores",
    "in_session",
    "jar_path",
    "plan",
]

if __name__ == "__main__":
    sys.exit(main())
