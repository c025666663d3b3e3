"""expire_snapshots during a compaction on real Spark + Iceberg 1.10: the failure users report
upstream, and admission preventing it.

A ``rewrite_data_files`` plans on snapshot S1 (a session that cached the table, as a long rewrite
that started before the others committed); two appends to another partition commit S2 and S3;
``expire_snapshots(older_than => <now or later>, retain_last => 1)`` expires S1 and S2. When the
rewrite commits, Iceberg walks the history from S3 back to S1 to validate it
(``MergingSnapshotProducer.validationHistory``), finds S2 gone, and fails: "Cannot determine history
between starting snapshot S1 and the last known ancestor S3". With the lease store deciding the same
jobs, the expire waits for the rewrite's lease and both commit. The oracles are Iceberg's own
``snapshots`` and ``files`` metadata tables. One Spark session for the run (``iceberg_engine``).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from occflow.core.kinds import ConflictKind
from occflow.engines.spark.iceberg import pinned_session
from occflow.leases import LeaseRequest, LeaseStore

pytestmark = pytest.mark.spark

_names = itertools.count()
EXPIRE = (
    "CALL lake.system.expire_snapshots(table => '{ident}', "
    "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)"
)
REWRITE = (
    "CALL lake.system.rewrite_data_files(table => '{ident}', where => 'ds = \"a\"', "
    "options => map('rewrite-all', 'true'))"
)


def _table(spark: Any) -> str:
    """Partition ``a`` in two files (something to rewrite), ``b`` in one."""
    name = f"lake.db.maint_{next(_names)}"
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.sql(
        f"CREATE TABLE {name} (id BIGINT, ds STRING) USING iceberg PARTITIONED BY (ds) "
        "TBLPROPERTIES ('format-version'='2', 'commit.retry.num-retries'='0')"
    )
    spark.sql(f"INSERT INTO {name} VALUES (1, 'a'), (2, 'b')")
    spark.sql(f"INSERT INTO {name} VALUES (3, 'a')")
    return name


def _sql(template: str, table: str) -> str:
    return template.format(ident=table.split(".", 1)[1])


def _operations(spark: Any, table: str) -> list[str]:
    rows = spark.sql(f"SELECT operation FROM {table}.snapshots ORDER BY committed_at").collect()
    return [r[0] for r in rows]


def _files_in_a(spark: Any, table: str) -> int:
    return int(spark.sql(f"SELECT count(*) FROM {table}.files WHERE partition.ds = 'a'").collect()[0][0])


def _ids(spark: Any, table: str) -> list[int]:
    return sorted(int(r[0]) for r in spark.sql(f"SELECT id FROM {table}").collect())


def test_expire_during_a_rewrite_fails_the_rewrite_without_admission(iceberg_engine: Any) -> None:
    spark = iceberg_engine.session()
    table = _table(spark)
    rewrite_session = pinned_session(spark)
    rewrite_session.sql(f"SELECT count(*) FROM {table}").collect()  # the rewrite plans on S1
    spark.sql(f"INSERT INTO {table} VALUES (4, 'b')")
    spark.sql(f"INSERT INTO {table} VALUES (5, 'b')")
    spark.sql(_sql(EXPIRE, table)).collect()
    outcome = iceberg_engine.run(_sql(REWRITE, table), table, "optimize", session=rewrite_session)

    assert not outcome.committed
    assert outcome.error is not None
    text = " ".join(outcome.error.messages)
    assert "Cannot determine history between starting snapshot" in text, text
    # Iceberg raises it as a ValidationException: occflow would retry it from a fresh snapshot,
    # after the rewrite's work was thrown away.
    assert outcome.classification is not None
    assert outcome.classification.kind is ConflictKind.VALIDATION_CONFLICT
    assert "replace" not in _operations(spark, table)  # the rewrite committed nothing
    assert _files_in_a(spark, table) == 2
    assert _ids(spark, table) == [1, 2, 3, 4, 5]


def test_admission_holds_the_expire_until_the_rewrite_has_committed(iceberg_engine: Any, tmp_path: Path) -> None:
    spark = iceberg_engine.session()
    table = _table(spark)
    store = LeaseStore.from_url(f"sqlite:///{tmp_path / 'leases.db'}", history=True)
    profile = "iceberg-serializable"
    rewrite = store.decide(LeaseRequest.create(table, "optimize", profile, [{"ds": "a"}]))
    assert rewrite.lease is not None
    rewrite_session = pinned_session(spark)
    rewrite_session.sql(f"SELECT count(*) FROM {table}").collect()  # the rewrite plans on S1
    # The appends to partition b run beside it (both commit in either order) ...
    for i in (4, 5):
        append = store.decide(LeaseRequest.create(table, "insert_into", profile, [{"ds": "b"}]))
        assert append.lease is not None
        spark.sql(f"INSERT INTO {table} VALUES ({i}, 'b')")
        store.release(append.lease)
    # ... the expire does not: it holds the whole table and deletes what the rewrite reads.
    expire_request = LeaseRequest.create(table, "expire_snapshots", profile, whole_table=True)
    assert store.decide(expire_request).lease is None
    outcome = iceberg_engine.run(_sql(REWRITE, table), table, "optimize", session=rewrite_session)
    assert outcome.committed, outcome.error
    store.release(rewrite.lease)

    expire = store.decide(expire_request)
    assert expire.lease is not None
    spark.sql(_sql(EXPIRE, table)).collect()
    store.release(expire.lease)

    assert _operations(spark, table) == ["replace"]  # the rewrite's snapshot, all others expired
    assert _files_in_a(spark, table) == 1
    assert _ids(spark, table) == [1, 2, 3, 4, 5]


def test_expire_pairs_commit_as_the_cells_measured(iceberg_engine: Any) -> None:
    """Two of the 34 expire_snapshots pairs raced by the conformance runner (the full run is the
    committed report): from one snapshot both commit, in either order beside a rewrite."""
    from occflow.engines.spark.iceberg_conformance import run_iceberg_conformance

    rows = run_iceberg_conformance(
        [("expire_snapshots", "optimize"), ("update", "expire_snapshots")], spark_engine=iceberg_engine
    )
    assert len(rows) == 2
    for row in rows:
        assert row.agrees and not row.observed_fails, row
