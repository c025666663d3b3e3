"""Observed footprints of real Iceberg snapshots (Spark, copy-on-write, serializable), against
their declarations.

The oracle is independent of the manifest entries occflow reads: the table's ``files``
metadata table as of the snapshot and as of its parent, compared file by file (a file live
after and not before was added, the other way round removed). The race is real: the loser
planned on a pinned, older snapshot and Iceberg's validation decides.
"""

from __future__ import annotations

import pytest

from occflow.core.declaration import WriteDeclaration
from occflow.core.footprint import footprints_overlap
from occflow.core.observed import excess
from occflow.engines.spark import pinned_session
from occflow.engines.spark.observed import observe_iceberg_snapshot

pytestmark = pytest.mark.spark


def _files_diff(spark, table: str, snapshot_id: int) -> tuple[set[str], set[str]]:
    """Oracle: partitions of the files live at ``snapshot_id`` and not at its parent (added) and
    the other way round (removed), from ``<table>.files``."""
    (parent,) = spark.sql(f"SELECT parent_id FROM {table}.snapshots WHERE snapshot_id = {snapshot_id}").first()

    def live(sid: int) -> dict[str, str]:
        rows = spark.sql(f"SELECT file_path, partition FROM {table}.files VERSION AS OF {sid}").collect()
        return {r.file_path: f"ds={r.partition.ds}" for r in rows}

    after, before = live(snapshot_id), live(parent)
    return {p for f, p in after.items() if f not in before}, {p for f, p in before.items() if f not in after}


def _declare(table: str, operation: str, ds: str) -> WriteDeclaration:
    return WriteDeclaration.create(table, operation, profile="iceberg-serializable", partitions={"ds": ds})


def test_a_merge_on_the_key_alone_rewrites_another_partition_and_makes_a_disjoint_writer_lose(
    iceberg_engine, iceberg_table
):
    """Task A declares ds=a but its MERGE condition is ``t.id = s.id``: the source's id 4 lives in
    ds=b, so Iceberg rewrites a file of ds=b too. Task B declares ds=b, planned before A
    committed, and loses Iceberg's validation although admission saw two disjoint partitions."""
    engine, t = iceberg_engine, iceberg_table
    spark = engine.session()
    declared_a, declared_b = _declare(t, "merge", "a"), _declare(t, "update", "b")
    assert not footprints_overlap(declared_a.partition_keys(), declared_b.partition_keys())

    b_session = pinned_session(spark)
    b_session.sql(f"SELECT count(*) FROM {t}").collect()  # B's snapshot: before A's commit
    a = engine.run(
        f"MERGE INTO {t} t USING (SELECT * FROM VALUES (2L, 'a', 20), (4L, 'a', 40) AS s(id, ds, v)) s "
        "ON t.id = s.id WHEN MATCHED THEN UPDATE SET t.v = s.v WHEN NOT MATCHED THEN INSERT *",
        t, "merge",
    )
    assert a.committed and a.snapshot_id is not None
    b = engine.run(f"UPDATE {t} SET v = 99 WHERE ds = 'b' AND id = 4", t, "update", session=b_session)
    assert not b.committed and b.classification is not None and b.classification.is_conflict

    added, removed = _files_diff(spark, t, a.snapshot_id)
    assert added == removed == {"ds=a", "ds=b"}  # the oracle: A rewrote a file of each partition
    observed = observe_iceberg_snapshot(spark, t, a.snapshot_id)
    assert observed.partitions_added == frozenset(added)
    assert observed.partitions_removed == frozenset(removed)
    assert observed.operation == "overwrite" and not observed.blind_append
    parent = spark.sql(f"SELECT parent_id FROM {t}.snapshots WHERE snapshot_id = {a.snapshot_id}").first()[0]
    assert observed.read_version == parent

    found = excess(declared_a, observed)
    assert found is not None and found.partitions == frozenset({"ds=b"})
    assert "make the write's condition name its partition" in found.advice

    # B again, from a fresh snapshot: it touches what it declared, and the check says so.
    retried = engine.run(f"UPDATE {t} SET v = 99 WHERE ds = 'b' AND id = 4", t, "update")
    assert retried.committed
    b_observed = observe_iceberg_snapshot(spark, t, retried.snapshot_id)
    assert _files_diff(spark, t, retried.snapshot_id) == ({"ds=b"}, {"ds=b"})
    assert b_observed.partitions_touched == frozenset({"ds=b"})
    assert excess(declared_b, b_observed) is None

    # The benchmark's MERGE shape (bench/real_bench.py) names its partition in the condition:
    # it touches that partition only, as declared.
    named = engine.run(
        f"MERGE INTO {t} t USING (SELECT * FROM VALUES (1L, 'a', 7), (9L, 'a', 7) AS s(id, ds, v)) s "
        "ON t.ds = 'a' AND t.id = s.id WHEN MATCHED THEN UPDATE SET t.v = t.v + s.v "
        "WHEN NOT MATCHED THEN INSERT (id, ds, v) VALUES (s.id, s.ds, s.v)",
        t, "merge",
    )
    assert named.committed
    named_observed = observe_iceberg_snapshot(spark, t, named.snapshot_id)
    assert _files_diff(spark, t, named.snapshot_id) == ({"ds=a"}, {"ds=a"})
    assert named_observed.partitions_touched == frozenset({"ds=a"})
    assert excess(declared_a, named_observed) is None
    assert excess(_declare(t, "merge", "b"), named_observed).partitions == frozenset({"ds=a"})


def test_an_append_is_observed_as_a_blind_append_of_its_partitions(iceberg_engine, iceberg_table):
    engine, t = iceberg_engine, iceberg_table
    spark = engine.session()
    out = engine.run(f"INSERT INTO {t} VALUES (10, 'c', 1), (11, 'b', 1)", t, "insert_into")
    assert out.committed
    observed = observe_iceberg_snapshot(spark, t, out.snapshot_id)
    assert observed.blind_append and observed.operation == "append"
    assert observed.partitions_added == frozenset(_files_diff(spark, t, out.snapshot_id)[0]) == {"ds=b", "ds=c"}
    assert not observed.partitions_removed
    assert excess(_declare(t, "insert_into", "c"), observed).partitions == frozenset({"ds=b"})
    with pytest.raises(Exception, match="no snapshot"):
        observe_iceberg_snapshot(spark, t, 1)
