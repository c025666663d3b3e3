"""Exactly-once on Delta via delta-spark: runs only where the delta-spark jars are available.

occflow ships no Delta jars (they are Maven artifacts matched to the cluster's Spark), and Maven
Central is not reachable from this machine, so the test needs ``OCCFLOW_DELTA_SPARK_JARS``
(delta-spark_2.12 + delta-storage for Spark 3.5). The driver runs in a subprocess because a JVM
holds one set of jars and the other Spark tests run Iceberg.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from occflow.engines.spark.delta_spark import JARS_ENV

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(
        not os.environ.get(JARS_ENV),
        reason=f"delta-spark jars not available: set {JARS_ENV} to delta-spark_2.12 and delta-storage jar paths",
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
