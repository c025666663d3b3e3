"""The lease check inside a spark-submit driver's Iceberg commit (issue 23, docs/engines-spark.md).

The task keeps a lease window file fresh (``lease_window.py``). A driver reads it in Python right
before its write statement starts; on Iceberg it is read once more *inside every commit*: the
Iceberg catalog occflow configures is wrapped in ``occflow.iceberg.LeaseFencedCatalog`` (Java,
``java/occflow/iceberg/``), whose tables' ``TableOperations.commit`` checks the window after the
statement has written its files and right before the catalog swaps the table's metadata. A lease
that lapses while the statement runs stops its commit (``LeaseNotLiveException``: Iceberg does
not retry it and removes what it wrote); the driver reports the attempt as ``lease_not_live``.

Iceberg has no commit hook of its own (``SnapshotProducer.commit`` goes straight to
``TableOperations.commit``), hence the wrapping catalog. The Java classes are compiled at
bootstrap, from the Iceberg runtime jar and PySpark's Hadoop API jar, no network
(``python -m occflow.engines.spark.submit_fence build``). Without the jar, on a catalog that is
not Iceberg's ``SparkCatalog``, or on delta-spark, the driver checks only at the statement start
and says so: in its log and in its outcome's ``lease_checked_at`` tag.

An in-process session (``SparkWriteOperator``) gets the same catalog, in its ``thread`` scope
(``CommitFence.attempt_conf``): the session serves every write of the process, so each commit
checks the window of the attempt its thread runs (``attempt_fence.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..outcome import WriteOutcome
from .config import SparkConfig
from .iceberg_catalog import runtime_jars
from .settings import SparkConfigError

FENCED_CATALOG = "occflow.iceberg.LeaseFencedCatalog"
NOT_LIVE_EXCEPTION = "occflow.iceberg.LeaseNotLiveException"
#: The Java sources; the jar records their digest, so a jar built from other sources is not used.
JAVA_SOURCES = Path(__file__).with_name("java")
#: Where the jar is (default: ``<sys.prefix>/share/occflow/occflow-lease-fence.jar``, the venv's).
JAR_ENV = "OCCFLOW_LEASE_FENCE_JAR"
#: How much life the lease must still have at the commit (clock skew, the catalog's swap).
COMMIT_MARGIN = 1.0
#: The lease-fenced catalog's properties (``LeaseWindow.java``, ``LeaseFencedCatalog.java``).
WINDOW_KEY = "occflow.lease.window"
FENCE_KEY = "occflow.lease.fence"
MARGIN_KEY = "occflow.lease.commit-margin-seconds"
#: Which window a commit checks: the catalog's own (a driver: one write) or its thread's attempt's.
SCOPE_KEY = "occflow.lease.scope"
THREAD_SCOPE = "thread"

#: Outcome tags: where the driver's last lease check runs, and where a refused attempt was refused.
LEASE_CHECKED_AT = "lease_checked_at"
LEASE_REFUSED_AT = "lease_refused_at"
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


def _javac() -> str:
    home = os.environ.get("JAVA_HOME")
    candidates = [str(Path(home) / "bin" / "javac")] if home else []
    candidates.append(shutil.which("javac") or "")
    for javac in candidates:
        if javac and Path(javac).is_file():
            return javac
    raise SparkConfigError(
        "building the commit-time lease check needs a JDK's javac (Debian: openjdk-17-jdk-headless); "
        "none in $JAVA_HOME/bin or on PATH"
    )


def _compile_classpath() -> list[str]:
    """Iceberg's runtime jar and Hadoop's API jar (``Configurable``) from PySpark's ``jars/``."""
    import pyspark  # optional heavy dependency

    hadoop = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    if not hadoop:
        raise SparkConfigError(f"no hadoop-client-api jar in {Path(pyspark.__file__).parent / 'jars'}")
    return [*runtime_jars(), str(hadoop[-1])]


def build(force: bool = False) -> Path:
    """Compile the Java sources into the jar (``jar_path()``), unless it is built from them already."""
    jar = jar_path()
    if not force and built_jar()[0] is not None:
        return jar
    sources = _sources()
    digest = source_digest()
    if not sources or digest is None:
        raise SparkConfigError(f"no Java sources under {JAVA_SOURCES}: this installation cannot build the jar")
    with tempfile.TemporaryDirectory(prefix="occflow-lease-fence-") as classes:
        # --release 11: the oldest JVM Iceberg 1.10 and Spark 3.5 run on, so a cluster on 11 loads it.
        command = [_javac(), "--release", "11", "-nowarn", "-d", classes,
                   "-cp", os.pathsep.join(_compile_classpath()), *map(str, sources)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SparkConfigError(f"javac failed ({done.returncode}):\n{done.stderr or done.stdout}")
        jar.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{jar.name}.", suffix=".tmp", dir=jar.parent)
        os.close(fd)
        try:
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
                archive.writestr("META-INF/MANIFEST.MF", f"Manifest-Version: 1.0\nCreated-By: occflow\n"
                                                         f"{_DIGEST_ATTRIBUTE}: {digest}\n")
                for path in sorted(Path(classes).rglob("*.class")):
                    archive.write(path, path.relative_to(classes).as_posix())
            os.replace(tmp, jar)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return jar


@dataclass(frozen=True)
class CommitFence:
    """Where a driver checks its lease last: inside each commit (``AT_COMMIT``, through the
    lease-fenced catalog in ``jar``) or right before its write statement starts
    (``AT_STATEMENT_START``; ``reason`` says why not later)."""

    checked_at: str
    catalog: str = ""
    jar: str = ""
    reason: str = ""

    @property
    def at_commit(self) -> bool:
        return self.checked_at == AT_COMMIT

    def describe(self) -> str:
        if self.at_commit:
            return f"the lease is checked inside each commit to Iceberg catalog {self.catalog} ({FENCED_CATALOG})"
        return f"the lease is checked only right before the write statement starts, not at its commit: {self.reason}"

    def spark_conf(self, conf: Mapping[str, str], window: str | Path, fence: int,
                   margin: float = COMMIT_MARGIN) -> dict[str, str]:
        """``conf`` with the catalog wrapped (the catalog it wrapped named as its delegate) and
        the jar added; ``conf`` unchanged when the check is not at the commit."""
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


def plan(config: SparkConfig) -> CommitFence:
    """Whether drivers of ``config`` can check their lease inside the commit, and if not why."""
    if config.table_format != "iceberg":
        return CommitFence(AT_STATEMENT_START, reason=(
            f"{config.table_format} tables have no commit-time lease check (delta-spark commits through "
            "its own log, which occflow does not wrap)"))
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
    """The lease-fenced catalog's refusal when it is what failed the job, else ``None``."""
    if outcome.committed or outcome.error is None:
        return None
    error = outcome.error
    for index, name in enumerate((error.exception_class, *error.cause_classes)):
        if name == NOT_LIVE_EXCEPTION:
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
    "FENCED_CATALOG",
    "FENCE_KEY",
    "LEASE_CHECKED_AT",
    "LEASE_REFUSED_AT",
    "MARGIN_KEY",
    "NOT_LIVE_EXCEPTION",
    "SCOPE_KEY",
    "THREAD_SCOPE",
    "WINDOW_KEY",
    "CommitFence",
    "build",
    "built_jar",
    "commit_refusal",
    "in_session",
    "jar_path",
    "plan",
]

if __name__ == "__main__":
    sys.exit(main())
