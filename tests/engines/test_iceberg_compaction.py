"""Iceberg compactions (``CALL ... rewrite_data_files``) on real Spark + Iceberg 1.10.

- The commit tag: Iceberg's procedure ignores ``CommitMetadata``'s commit properties, so occflow
  runs a CALL made inside ``tagging`` as the procedure's action with the tag as snapshot
  properties. The oracle is the table's own ``snapshots`` metadata table.
- What a lost whole-table compaction leaves: a concurrent DELETE of one partition fails the
  rewrite as one commit, so every partition is still uncompacted (``files`` metadata table), and
  the same CALL on a fresh snapshot compacts them all.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from occflow.core.errors import InvalidDeclarationError
from occflow.core.kinds import ConflictKind
from occflow.engines.spark import IcebergLedger
from occflow.engines.spark.iceberg import pinned_session
from occflow.engines.spark.iceberg_rewrite import RewriteCall, read_rewrite_call
from occflow.engines.tags import WRITE_ID, CommitTag
from occflow.operators.exactly_once import ExactlyOnce

_names = itertools.count()
PARTITIONS = ("a", "b", "c", "d")


def files_per_partition(spark: Any, table: str) -> dict[str, int]:
    """Live data files per partition, as the table's ``files`` metadata table lists them."""
    rows = spark.sql(f"SELECT partition.ds AS ds, count(*) AS n FROM {table}.files GROUP BY 1").collect()
    return {r["ds"]: int(r["n"]) for r in rows}


def small_files_table(spark: Any, files: int = 3) -> str:
    """Four partitions, ``files`` small files in each (one INSERT each)."""
    name = f"lake.db.compact_{next(_names)}"
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.sql(f"CREATE TABLE {name} (id INT, ds STRING) USING iceberg PARTITIONED BY (ds) "
              "TBLPROPERTIES ('format-version'='2', 'commit.retry.num-retries'='0')")
    for i in range(files):
        values = ", ".join(f"({i}, '{ds}')" for ds in PARTITIONS)
        spark.sql(f"INSERT INTO {name} VALUES {values}")
    return name


def call(table: str, extra: str = "") -> str:
    ident = table.split(".", 1)[1]
    return (f"CALL lake.system.rewrite_data_files(table => '{ident}', "
            f"options => map('min-input-files', '2'){extra})")


def snapshots(spark: Any, table: str) -> list[dict[str, Any]]:
    rows = spark.sql(f"SELECT snapshot_id, operation, summary FROM {table}.snapshots ORDER BY committed_at").collect()
    return [{"id": int(r[0]), "operation": r[1], "summary": dict(r[2] or {})} for r in rows]


# ------------------------------------------------------------------ reading the CALL (no Spark)


def test_a_rewrite_call_is_read_with_named_or_positional_arguments() -> None:
    named = read_rewrite_call(
        "CALL lake.system.rewrite_data_files(table => 'db.t', where => 'ds = \"a\"', "
        "options => map('min-input-files', '2', 'max-concurrent-file-group-rewrites', 3))"
    )
    assert named == RewriteCall("lake.db.t", None, None,
                                {"min-input-files": "2", "max-concurrent-file-group-rewrites": "3"}, 'ds = "a"')
    positional = read_rewrite_call("call system.rewrite_data_files('db.t', 'sort', 'zorder(id, ds)')")
    assert positional == RewriteCall("db.t", "sort", "zorder(id, ds)", {}, None)
    # Spark SQL joins adjacent string literals.
    joined = read_rewrite_call("CALL lake.system.rewrite_data_files(table => 'db.t', where => 'ds = ' '\"b\"')")
    assert joined.where == 'ds = "b"'


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("CALL lake.system.rewrite_data_files(table => 'db.t', branch => 'x')", "unknown argument 'branch'"),
        ("CALL lake.system.rewrite_data_files(table => 'db.t', where => concat('a', 'b'))", "where must be a string"),
        ("CALL lake.system.rewrite_data_files(table => 'db.t', options => map('a'))", "options must be map"),
        ("CALL lake.system.rewrite_data_files('db.t', 'binpack', NULL, map(), 'x', 'y')", "more arguments"),
    ],
)
def test_a_rewrite_call_occflow_cannot_read_is_refused_naming_what_is_wrong(statement: str, message: str) -> None:
    with pytest.raises(InvalidDeclarationError, match=message):
        read_rewrite_call(statement)


# ------------------------------------------------------------------ the tag, on real Spark


@pytest.mark.spark
def test_a_compaction_inside_tagging_carries_the_tag_in_its_replace_snapshot(iceberg_engine: Any) -> None:
    engine = iceberg_engine
    spark = engine.session()
    table = small_files_table(spark)
    ledger = IcebergLedger(spark, table)
    tag = CommitTag.create("maint", "compact", "manual__1", "optimize", try_number=1)
    outcome = ExactlyOnce(ledger, tag).run(lambda: engine.run(call(table), table, "optimize"), verify_first=True)
    assert outcome.committed, outcome.error
    last = snapshots(spark, table)[-1]
    # The engine's record: a replace snapshot whose summary holds the tag.
    assert last["operation"] == "replace" and last["id"] == outcome.snapshot_id
    assert last["summary"][WRITE_ID] == tag.write_id
    assert last["summary"]["occflow.task-id"] == "compact" and last["summary"]["occflow.dag-id"] == "maint"
    assert files_per_partition(spark, table) == dict.fromkeys(PARTITIONS, 1)
    found = ledger.find_commit(tag)
    assert found is not None and found.snapshot_id == outcome.snapshot_id
    # Outside tagging the CALL is Spark's own, and its snapshot carries no tag.
    spark.sql(f"INSERT INTO {table} VALUES (7, 'a')")
    spark.sql(f"INSERT INTO {table} VALUES (8, 'a')")
    engine.run(call(table), table, "optimize")
    untagged = snapshots(spark, table)[-1]
    assert untagged["operation"] == "replace" and WRITE_ID not in untagged["summary"]


@pytest.mark.spark
def test_a_tagged_compaction_keeps_the_calls_where_strategy_and_sort_order(iceberg_engine: Any) -> None:
    engine = iceberg_engine
    spark = engine.session()
    table = small_files_table(spark)
    tag = CommitTag.create("maint", "sort_b", "manual__1", "optimize")
    statement = call(table, ", strategy => 'sort', sort_order => 'id DESC NULLS LAST', where => 'ds = \"b\"'")
    outcome = ExactlyOnce(IcebergLedger(spark, table), tag).run(
        lambda: engine.run(statement, table, "optimize"), verify_first=False
    )
    assert outcome.committed, outcome.error
    last = snapshots(spark, table)[-1]
    assert last["operation"] == "replace" and last["summary"][WRITE_ID] == tag.write_id
    assert last["summary"]["changed-partition-count"] == "1"
    # Only the WHERE's partition was rewritten, into one file sorted by id descending.
    assert files_per_partition(spark, table) == {"a": 3, "b": 1, "c": 3, "d": 3}
    [path] = [r[0] for r in spark.sql(f"SELECT file_path FROM {table}.files WHERE partition.ds = 'b'").collect()]
    ids = [r[0] for r in spark.read.parquet(path).select("id").collect()]
    assert ids == sorted(ids, reverse=True) and len(ids) == 3


@pytest.mark.spark
def test_a_whole_table_compaction_that_lost_to_one_partitions_delete_left_every_partition_and_a_retry_compacts_them(
    iceberg_engine: Any,
) -> None:
    """Why the lost compaction must not be skipped, read from the engine's record."""
    engine = iceberg_engine
    spark = engine.session()
    table = small_files_table(spark)
    loser = pinned_session(spark, "lake")
    loser.sql(f"SELECT count(*) FROM {table}").collect()  # the compaction plans on this snapshot
    spark.newSession().sql(f"DELETE FROM {table} WHERE ds = 'b' AND id = 1")
    lost = engine.run(call(table), table, "optimize", session=loser)
    assert not lost.committed and lost.classification is not None
    assert lost.classification.kind is ConflictKind.VALIDATION_CONFLICT, lost.error
    # The rewrite failed as one commit: the three partitions the DELETE did not touch are as they were.
    assert files_per_partition(spark, table) == {"a": 3, "b": 2, "c": 3, "d": 3}
    again = engine.run(call(table), table, "optimize")
    assert again.committed, again.error
    assert files_per_partition(spark, table) == dict.fromkeys(PARTITIONS, 1)
