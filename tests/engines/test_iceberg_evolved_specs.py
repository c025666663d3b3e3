"""Iceberg partition evolution in a write's footprint (issue 33, item 2), on real Spark + Iceberg.

A table partitioned by ``a`` and then by ``b`` keeps its ``a`` files live under the old spec. A
DELETE on the current spec's column rewrites every old-spec file its condition cannot keep out
of, and writes their surviving rows into the current spec's partitions. The oracle is the
engine's own record: the snapshot's summary and the ``all_entries`` metadata table (status 2 =
deleted, with each file's spec id). Run under ``flock /tmp/occflow-heavy.lock`` (starts a JVM).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from occflow.core.admission_rule import Claim, Pairing
from occflow.core.operations import Operation
from occflow.core.sqlderive import derive_write
from occflow.core.tablefacts import OlderSpec, TableFacts
from occflow.engines.spark.facts import spark_table_facts
from occflow.engines.spark.iceberg import pinned_session

_counter = itertools.count()


def _evolved(spark: Any) -> str:
    """Spec 0 (a) holds one live file per a; spec 2 (b) is current. The a=a1 file holds rows of
    b=x, y and z, so a DELETE of any of them must rewrite it."""
    name = f"lake.db.evolved_{next(_counter)}"
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.sql(
        f"CREATE TABLE {name} (id BIGINT, a STRING, b STRING) USING iceberg PARTITIONED BY (a) "
        "TBLPROPERTIES ('format-version'='2')"
    )
    spark.sql(f"INSERT INTO {name} VALUES (1, 'a1', 'x'), (2, 'a1', 'y'), (3, 'a1', 'z'), (4, 'a2', 'y')")
    spark.sql(f"ALTER TABLE {name} ADD PARTITION FIELD b")
    spark.sql(f"ALTER TABLE {name} DROP PARTITION FIELD a")
    spark.sql(f"INSERT INTO {name} VALUES (5, 'a3', 'x'), (6, 'a3', 'w')")
    return name


def _claim(facts: TableFacts, sql: str, *, reach: bool) -> Claim:
    derived = derive_write(sql, list(facts.partition_columns), facts.engine, column_types=facts.partition_column_types)
    partitions = facts.reach(derived.operation, derived.partitions).partitions if reach else derived.partitions
    keys = None if partitions is None else frozenset(
        "/".join(f"{c}={v}" for c, v in sorted(p.items())) for p in partitions
    )
    return Claim(facts.profile(derived.operation), derived.operation, keys)


@pytest.fixture(scope="module")
def evolved(iceberg_engine: Any) -> tuple[Any, str, TableFacts]:
    spark = iceberg_engine.session()
    name = _evolved(spark)
    return spark, name, spark_table_facts(spark, name)


def test_the_facts_carry_the_older_spec_with_its_live_partitions(evolved: tuple[Any, str, TableFacts]) -> None:
    spark, name, facts = evolved
    assert facts.partition_columns == ("b",)
    live = spark.sql(f"SELECT DISTINCT spec_id, partition.a AS a FROM {name}.files").collect()  # the engine's word
    old_ids = {int(r["spec_id"]) for r in live} - {int(spark.sql(f"SELECT max(spec_id) FROM {name}.files").collect()[0][0])}
    assert [s.spec_id for s in facts.older_specs] == sorted(old_ids)
    (old,) = facts.older_specs
    assert old.fields == ("a",)
    assert sorted(p["a"] for p in old.partitions or ()) == sorted(r["a"] for r in live if int(r["spec_id"]) in old_ids)
    assert TableFacts.from_json(facts.to_json()) == facts


def test_a_delete_on_the_current_column_rewrote_an_old_spec_file_and_its_reach_holds_it(
    iceberg_engine: Any,
) -> None:
    spark = iceberg_engine.session()
    name = _evolved(spark)
    facts = spark_table_facts(spark, name)
    sql = f"DELETE FROM {name} WHERE b = 'x'"
    derived = derive_write(sql, list(facts.partition_columns), facts.engine, column_types=facts.partition_column_types)
    assert derived.partition_keys() == {"b=x"}  # the SQL alone names one current-spec partition
    spark.sql(sql)
    snapshot = spark.sql(f"SELECT snapshot_id, summary FROM {name}.snapshots ORDER BY committed_at DESC LIMIT 1").collect()[0]
    removed = spark.sql(
        f"SELECT data_file.spec_id AS spec_id, data_file.partition.a AS a, data_file.partition.b AS b "
        f"FROM {name}.all_entries WHERE status = 2 AND snapshot_id = {snapshot['snapshot_id']}"
    ).collect()
    old_spec = {s.spec_id for s in facts.older_specs}
    rewritten_old = [r for r in removed if int(r["spec_id"]) in old_spec]
    assert [r["a"] for r in rewritten_old] == ["a1"], removed  # the old-spec file the condition could not keep out of
    assert int(snapshot["summary"]["changed-partition-count"]) > 1  # more than b=x changed
    reach = facts.reach(derived.operation, derived.partitions)
    assert reach.partitions is None and "partition spec" in reach.why[0]  # the whole table: a1's file is inside
    # The surviving rows of a1's file moved into current-spec partitions (b=y, b=z): the whole table.
    moved = {r["b"] for r in spark.sql(f"SELECT partition.b AS b FROM {name}.files WHERE spec_id NOT IN ({', '.join(map(str, old_spec))})").collect()}
    assert {"y", "z"} <= moved


def test_two_deletes_called_disjoint_are_now_serialised_and_the_engine_fails_one(iceberg_engine: Any) -> None:
    """DELETE b='x' and DELETE b='z' name disjoint current-spec partitions; both rewrite a1's
    old-spec file. A real race (the later DELETE planned on the snapshot before the earlier's
    commit, via a pinned session) fails; admission keyed by the reach keeps them apart."""
    spark = iceberg_engine.session()
    name = _evolved(spark)
    facts = spark_table_facts(spark, name)
    first, second = f"DELETE FROM {name} WHERE b = 'x'", f"DELETE FROM {name} WHERE b = 'z'"
    before = _claim(facts, second, reach=False).pairing(_claim(facts, first, reach=False))
    after = _claim(facts, second, reach=True).pairing(_claim(facts, first, reach=True))
    assert before is Pairing.TOGETHER
    assert after is Pairing.APART
    late = pinned_session(spark)
    late.sql(f"SELECT count(*) FROM {name}").collect()  # pins the table as it is now
    spark.sql(first)
    with pytest.raises(Exception, match=r"(?s)Missing required files to delete|Found conflicting files"):
        late.sql(second)


def test_a_condition_that_keeps_out_of_every_old_spec_partition_stays_narrow() -> None:
    """Spec (ds) evolved to (ds, region): a DELETE of a day no old-spec file holds reads none of
    them; one of a day they hold, or one that names no day, reaches the whole table."""
    facts = TableFacts(
        "lake.db.t", "iceberg", "spark-iceberg", ("ds", "region"),
        older_specs=(OlderSpec(0, ("ds",), ({"ds": "2024-01-01"}, {"ds": "2024-01-02"})),),
    )
    narrow = facts.reach(Operation.DELETE, ({"ds": "2024-02-01", "region": "eu"},))
    assert narrow.partitions == ({"ds": "2024-02-01", "region": "eu"},) and not narrow.why
    assert facts.reach(Operation.DELETE, ({"ds": "2024-01-02", "region": "eu"},)).partitions is None
    assert facts.reach(Operation.UPDATE, ({"region": "eu"},)).partitions is None
    # An append and a dynamic overwrite write only under the current spec.
    assert facts.reach(Operation.INSERT_INTO, ({"region": "eu"},)).partitions == ({"region": "eu"},)
    unknown = TableFacts("lake.db.t", "iceberg", None, ("ds",), older_specs=(OlderSpec(0, (), None),))
    assert unknown.reach(Operation.MERGE, ({"ds": "2024-02-01"},)).partitions is None
