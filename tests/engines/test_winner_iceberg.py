"""Spark + Iceberg names the snapshot a lost write lost to.

A real race on the shared Iceberg session (tests/engines/conftest.py): the losing DELETE's
session caches the table on S0 (``pinned_session``), an append into another partition and then
an UPDATE of the DELETE's partition commit from a second session, and the DELETE commits last.
Iceberg's validation fails it; the winner occflow names must be the UPDATE's snapshot, which the
oracle reads from the table on its own: the snapshot whose summary carries the UPDATE's tag.
"""

from __future__ import annotations

from typing import Any

import pytest

from occflow.core.operations import Operation
from occflow.engines.spark.iceberg import current_snapshot, iceberg_commit_properties, pinned_session
from occflow.engines.tags import WRITE_ID, CommitTag

pytestmark = pytest.mark.spark


def _tagged_snapshot(spark: Any, table: str, tag: CommitTag) -> int:
    rows = spark.sql(f"SELECT snapshot_id, summary FROM {table}.snapshots").collect()
    found = [int(r["snapshot_id"]) for r in rows if (r["summary"] or {}).get(WRITE_ID) == tag.write_id]
    assert len(found) == 1, found
    return found[0]


def test_a_lost_iceberg_commit_names_the_snapshot_it_lost_to(iceberg_engine: Any, iceberg_table: str) -> None:
    engine, table = iceberg_engine, iceberg_table
    spark = engine.session()
    loser = pinned_session(spark, "lake")
    fresh = spark.newSession()
    loser.sql(f"SELECT count(*) FROM {table}").collect()  # the DELETE's session stays on S0
    start = current_snapshot(loser, table)
    assert start is not None
    other_tag = CommitTag.create("etl", "load_b", "manual__1", Operation.INSERT_INTO, try_number=1)
    update_tag = CommitTag.create("etl", "fix_a", "manual__1", Operation.UPDATE, try_number=2)
    with iceberg_commit_properties(fresh, other_tag):
        other = engine.run(f"INSERT INTO {table} VALUES (9, 'b', 9)", table, session=fresh)
    with iceberg_commit_properties(fresh, update_tag):
        update = engine.run(f"UPDATE {table} SET v = v + 10 WHERE ds = 'a'", table, session=fresh)
    assert other.committed and update.committed, (other.error, update.error)

    lost = engine.run(f"DELETE FROM {table} WHERE ds = 'a' AND v % 2 = 0", table, session=loser)
    assert not lost.committed and lost.classification is not None and lost.classification.is_conflict, lost.error
    named = engine.format.lost(loser, table, start, lost)
    winner = named.classification.winning_commit
    assert winner is not None, lost.error
    # the oracle: the snapshot the UPDATE committed, read from the table by its tag
    assert winner.snapshot_id == _tagged_snapshot(spark, table, update_tag) == update.snapshot_id, (winner, lost.error)
    assert winner.version == update.version
    assert winner.others == (_tagged_snapshot(spark, table, other_tag),)
    assert (winner.dag_id, winner.task_id, winner.run_id, winner.try_number) == ("etl", "fix_a", "manual__1", 2)
    assert winner.operation == "overwrite"  # copy-on-write UPDATE
    assert "by etl.fix_a run manual__1 try 2" in winner.describe()
    assert named.classification.to_dict()["winning_commit"]["snapshot_id"] == update.snapshot_id
