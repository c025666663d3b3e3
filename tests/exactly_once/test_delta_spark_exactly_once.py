"""Exactly-once on Delta via delta-spark: runs where the delta-spark jars are available.

The jars are the manifest's delta-spark_2.12 + delta-storage (scripts/jvm/pom.xml, resolved by the
bootstrap) or the user's in ``OCCFLOW_DELTA_SPARK_JARS``. The driver runs in a subprocess because
a JVM holds one set of jars and the other Spark tests run Iceberg.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from occflow.engines.spark.delta_spark import JARS_ENV, DeltaFormat
from occflow.engines.spark.settings import SparkConfigError


def _delta_jars() -> bool:
    try:
        return bool(DeltaFormat().jars())
    except SparkConfigError:
        return False


pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(
        not _delta_jars(),
        reason=f"delta-spark jars not available: run bash scripts/bootstrap.sh or set {JARS_ENV}",
    ),
]

SCRIPT = """
import sys
sys.path.insert(0, {here!r})
from fault_injection import tag_of
from occflow.engines.spark import DeltaSparkLedger, SparkConfig, SparkEngine
from occflow.operators.exactly_once import ExactlyOnce

engine = SparkEngine(SparkConfig(table_format="delta", home={home!r}, app_name="occflow-eo-delta",
                                 conf={{"spark.sql.warehouse.dir": {warehouse!r}}}))
spark = engine.session()
spark.sql("CREATE TABLE eo_delta (id BIGINT, w BIGINT) USING delta")
ledger = DeltaSparkLedger(spark, "eo_delta")
tag = tag_of(1)
assert ledger.find_commit(tag) is None
insert = lambda: engine.run("INSERT INTO eo_delta VALUES (100, 1), (101, 1)", "eo_delta")
first = ExactlyOnce(ledger, tag).run(insert, verify_first=False)
assert first.committed, first
found = ledger.find_commit(tag)
assert found is not None and found.version == first.version, (found, first)
# A retry is verified and not run; and delta-spark itself skips a repeated txnAppId/txnVersion.
again = ExactlyOnce(ledger, tag).run(insert, verify_first=True)
assert again.tag["exactly_once"] == "already committed by an earlier attempt", again
with ledger.tagging(tag):
    spark.sql("INSERT INTO eo_delta VALUES (100, 1), (101, 1)")
assert spark.sql("SELECT count(*) FROM eo_delta").collect()[0][0] == 2
print("OK")
"""


def test_delta_spark_commits_carry_the_txn_and_user_metadata_and_a_retry_is_verified(tmp_path: Path) -> None:
    script = textwrap.dedent(SCRIPT).format(here=str(Path(__file__).parent), home=str(tmp_path / "home"),
                                            warehouse=str(tmp_path / "warehouse"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0 and "OK" in done.stdout, done.stderr[-4000:]
