"""The JVM artifacts (docs/getting-started.md#supply-chain, engines/spark/jvm_artifacts.py): one
pinned manifest (scripts/jvm/pom.xml) resolved by the bootstrap with Maven, checksums verified,
into the venv's ``share/occflow/jars/``; Iceberg's and delta-spark's jars come from there, and a
jar built for another Scala or Spark line is refused, naming it, before any session starts.

Fast and offline: reads files (the pom, the bootstrap, the resolved folder); no JVM.
"""

from __future__ import annotations

import hashlib
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from occflow.engines.spark import SparkConfig, SparkConfigError
from occflow.engines.spark.delta_spark import JARS_ENV, DeltaFormat
from occflow.engines.spark.iceberg_catalog import runtime_jars
from occflow.engines.spark.jvm_artifacts import (
    CHECKSUMS,
    DELTA_SPARK,
    DELTA_STORAGE,
    ICEBERG_SPARK_RUNTIME,
    JARS_DIR_ENV,
    MANIFEST,
    jar_problems,
    jars_dir,
)

ROOT = Path(__file__).resolve().parents[2]
POM = ROOT / "scripts" / "jvm" / "pom.xml"
FENCE_POM = ROOT / "scripts" / "jvm" / "fence" / "pom.xml"
PINS = ROOT / "scripts" / "jvm" / "jars.sha256"
BOOTSTRAP = ROOT / "scripts" / "bootstrap.sh"
NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def _pom_coordinates() -> list[tuple[str, str, str]]:
    root = ET.parse(POM).getroot()
    managed = root.findall("m:dependencyManagement/m:dependencies/m:dependency", NS)
    return [(d.findtext("m:groupId", namespaces=NS) or "", d.findtext("m:artifactId", namespaces=NS) or "",
             d.findtext("m:version", namespaces=NS) or "") for d in managed]


def _pins() -> dict[str, str]:
    lines = [line.split() for line in PINS.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return {name: digest for digest, name in lines}


def test_the_manifest_pins_exact_versions_and_mirrors_the_python_side() -> None:
    coordinates = _pom_coordinates()
    assert coordinates == [(a.group, a.artifact, a.version) for a in MANIFEST]
    for group, artifact, version in coordinates:
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{group}:{artifact}:{version} is not an exact version"
    assert (ICEBERG_SPARK_RUNTIME.coordinate, DELTA_SPARK.coordinate, DELTA_STORAGE.coordinate) == (
        "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2",
        "io.delta:delta-spark_2.12:3.3.3",
        "io.delta:delta-storage:3.3.3",
    )
    # no transitive dependency slips in: every coordinate excludes *:*
    root = ET.parse(POM).getroot()
    for dep in root.findall("m:dependencyManagement/m:dependencies/m:dependency", NS):
        excluded = [(e.findtext("m:groupId", namespaces=NS), e.findtext("m:artifactId", namespaces=NS))
                    for e in dep.findall("m:exclusions/m:exclusion", NS)]
        assert ("*", "*") in excluded, dep.findtext("m:artifactId", namespaces=NS)


def test_every_manifest_jar_has_a_pinned_sha256() -> None:
    assert set(_pins()) == {a.file_name for a in MANIFEST}
    assert all(re.fullmatch(r"[0-9a-f]{64}", d) for d in _pins().values())


def test_the_manifest_resolves_from_central_with_failing_checksums() -> None:
    text = POM.read_text()
    policies = re.findall(r"<checksumPolicy>(\w+)</checksumPolicy>", text)
    assert policies and set(policies) == {"fail"}
    assert "<snapshots><enabled>false</enabled></snapshots>" in text


def test_the_bootstrap_resolves_with_strict_checksums_checks_the_pins_and_fails_loudly() -> None:
    script = BOOTSTRAP.read_text()
    mvn = [line for line in script.splitlines() if re.match(r"\s*(if ! )?mvn ", line)]
    assert mvn and all("--strict-checksums" in line for line in mvn), mvn
    assert "scripts/jvm/pom.xml" in script and "dependency:copy-dependencies" in script
    assert "jars.sha256" in script and "sha256sum --strict -c" in script
    assert "SHA256SUMS" in script
    assert "FAILED to resolve the JVM artifacts" in script and "exit 1" in script


def test_the_fence_build_inherits_the_manifest_and_compiles_every_java_source() -> None:
    root = ET.parse(FENCE_POM).getroot()
    assert root.findtext("m:parent/m:relativePath", namespaces=NS) == "../pom.xml"
    assert root.findtext("m:build/m:sourceDirectory", namespaces=NS) == "${occflow.java.sources}"
    assert "<includes>" not in FENCE_POM.read_text()  # the compiler's default: every **/*.java


def _bootstrapped_jars() -> Path:
    folder = Path(sys.prefix) / "share" / "occflow" / "jars"
    if not (folder / CHECKSUMS).is_file():
        pytest.skip(f"{folder} is not resolved (run bash scripts/bootstrap.sh)")
    return folder


def test_the_bootstrap_recorded_the_pinned_sha256_of_each_resolved_jar() -> None:
    folder = _bootstrapped_jars()
    recorded = {name: digest for digest, name in (line.split() for line in (folder / CHECKSUMS).read_text().splitlines())}
    assert recorded == _pins()
    for name, digest in recorded.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name


def test_iceberg_and_delta_jars_resolve_to_the_manifest_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _bootstrapped_jars()
    monkeypatch.delenv(JARS_DIR_ENV, raising=False)
    monkeypatch.delenv(JARS_ENV, raising=False)
    assert jars_dir() == folder
    assert runtime_jars() == [str(folder / ICEBERG_SPARK_RUNTIME.file_name)]
    assert DeltaFormat().jars() == [str(folder / DELTA_SPARK.file_name), str(folder / DELTA_STORAGE.file_name)]


def _fake_jars(tmp_path: Path, *names: str) -> list[str]:
    for name in names:
        (tmp_path / name).write_bytes(b"")
    return [str(tmp_path / n) for n in names]


def test_a_delta_jar_for_scala_2_13_is_refused_naming_it_and_the_running_spark(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import pyspark

    jars = _fake_jars(tmp_path, "delta-spark_2.13-3.3.3.jar", "delta-storage-3.3.3.jar")
    monkeypatch.setenv(JARS_ENV, ",".join(jars))
    with pytest.raises(SparkConfigError) as raised:
        SparkConfig(table_format="delta", home=str(tmp_path)).spark_conf()
    message = str(raised.value)
    assert "delta-spark_2.13-3.3.3.jar" in message and "io.delta:delta-spark_2.13:3.3.3" in message
    assert f"Spark {pyspark.__version__}" in message and "Scala 2.13, not 2.12" in message
    assert JARS_ENV in message


def test_a_delta_or_iceberg_jar_for_another_spark_line_is_refused(tmp_path: Path) -> None:
    old_delta = _fake_jars(tmp_path, "delta-core_2.12-2.4.0.jar", "delta-storage-2.4.0.jar")
    with pytest.raises(SparkConfigError, match=r"delta-core_2.12-2.4.0.jar .*built for Spark 3.4, not Spark 3.5"):
        DeltaFormat(tuple(old_delta)).jars()
    iceberg = _fake_jars(tmp_path, "iceberg-spark-runtime-3.4_2.12-1.10.2.jar")
    with pytest.raises(SparkConfigError, match=r"iceberg-spark-runtime-3.4_2.12-1.10.2.jar .*Spark 3.4, not Spark 3.5"):
        SparkConfig(home=str(tmp_path), jars=iceberg).spark_conf()


def test_a_delta_list_missing_delta_storage_or_of_two_versions_is_refused(tmp_path: Path) -> None:
    alone = _fake_jars(tmp_path, "delta-spark_2.12-3.3.3.jar")
    with pytest.raises(SparkConfigError, match="no delta-storage-X.jar"):
        DeltaFormat(tuple(alone)).jars()
    mixed = _fake_jars(tmp_path, "delta-spark_2.12-3.3.3.jar", "delta-storage-3.2.0.jar")
    with pytest.raises(SparkConfigError, match="delta-spark 3.3.3 with delta-storage 3.2.0"):
        DeltaFormat(tuple(mixed)).jars()


def test_the_rules_read_file_names_and_uris() -> None:
    assert jar_problems(["/x/delta-spark_2.12-3.3.3.jar", "hdfs://nn/jars/delta-storage-3.3.3.jar"], "3.5.9", "2.12") == []
    assert jar_problems(["s3://b/iceberg-spark-runtime-3.5_2.13-1.10.2.jar"], "3.5.9", "2.12")
    assert jar_problems(["/x/delta-spark_2.13-4.0.0.jar"], "4.0.1", "2.13") == []
    assert jar_problems(["/x/delta-spark_2.12-3.3.3.jar"], "4.0.1", "2.12")  # Delta 3.3 is for Spark 3.5
    assert jar_problems(["/x/my-udfs.jar", "/x/postgresql.jar"], "3.5.9", "2.12") == []
