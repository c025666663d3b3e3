"""``occflow explain --against``: every verdict agrees with its reason (issue 26: delta-rs's
append reach made a pair conflict while the reason said "their partitions are disjoint"), and
with the rule admission applies without commit gates (``Claim.blocks``; with gates:
``tests/core/test_admission_agreement.py``)."""

from __future__ import annotations

import itertools
import re

import pytest
from explain_cli import run

from occflow.cli.explain import compare, explain_job, explain_other
from occflow.core.admission_rule import Claim
from occflow.core.tablefacts import TableFacts

# One statement per operation, on one day, another day, or the whole table.
JOBS = {
    "delta": [
        "INSERT INTO db.t PARTITION (date = '{day}') SELECT v FROM s",
        "INSERT INTO db.t SELECT * FROM s",
        "DELETE FROM db.t WHERE date = '{day}'",
        "UPDATE db.t SET v = 1 WHERE date = '{day}'",
        "UPDATE db.t SET v = 1",
        "MERGE INTO db.t t USING s ON t.id = s.id AND t.date = '{day}' WHEN MATCHED THEN UPDATE SET *",
        "INSERT OVERWRITE db.t PARTITION (date = '{day}') SELECT v FROM s",
        "OPTIMIZE db.t WHERE date = '{day}'",
        "ALTER TABLE db.t ADD COLUMNS (c STRING)",
    ],
    "iceberg": [
        "INSERT INTO db.t SELECT * FROM s",
        "DELETE FROM db.t WHERE date = '{day}'",
        "MERGE INTO db.t t USING s ON t.id = s.id AND t.date = '{day}' WHEN MATCHED THEN UPDATE SET *",
        "INSERT OVERWRITE db.t PARTITION (date = '{day}') SELECT v FROM s",
    ],
    # ds, not date: MaxCompute's ALTER TABLE ... PARTITION (date = ...) is not read (a keyword)
    "maxcompute-transactional": [
        "INSERT INTO db.t PARTITION (ds = '{day}') SELECT v FROM s",
        "UPDATE db.t SET v = 1 WHERE ds = '{day}'",
        "ALTER TABLE db.t PARTITION (ds = '{day}') COMPACT MINOR",
        "ALTER TABLE db.t COMPACT MAJOR",
    ],
}
FACTS = {
    "delta-rs": TableFacts("db.t", "delta", "delta-rs", ("date",)),
    "delta": TableFacts("db.t", "delta", None, ("date",)),
    "iceberg": TableFacts("db.t", "iceberg", None, ("date",), {"write.delete.isolation-level": "snapshot"}),
    "maxcompute-transactional": TableFacts("db.t", "maxcompute", None, ("ds",), {"transactional": "true"}),
}


def _pairs():
    """Every ordered pair of jobs on each table, each job explained once."""
    for name, facts in FACTS.items():
        templates = JOBS["delta" if name.startswith("delta") else name]
        jobs = {t.format(day=day) for t in templates for day in ("2024-01-01", "2024-01-02")}
        explained = {sql: explain_job(sql, facts) for sql in sorted(jobs)}
        assert all(explain_other(sql, facts) == job for sql, job in explained.items())
        for a, b in itertools.product(explained, repeat=2):
            yield name, explained[a], explained[b]


def _consistent(verdict: bool, reason: str) -> bool:
    """The reason says what decided: parts that cannot clash, or cells of which one fails."""
    apart = reason.startswith("their partitions are disjoint") and "append reach" not in reason
    fails = any(clash in reason for clash in ("the later fails", "the data is wrong", "kept apart"))
    if verdict:
        return not apart and fails and ("disjoint" not in reason or "the append reach makes them conflict" in reason)
    return apart or ("makes them conflict" not in reason and not fails)


def test_every_verdict_agrees_with_its_reason_and_with_admission() -> None:
    checked, reach_conflicts = 0, 0
    for name, job, other in _pairs():
        found = compare(job, other, commit_gate=False)  # order-blind: every failing cell keeps them apart
        admission = Claim(job.profile, job.derived.operation, job.derived.partition_keys()).blocks(
            Claim(other.profile, other.derived.operation, other.derived.partition_keys())
        )
        where = f"{name}: {job.sql!r} against {other.sql!r}"
        assert found["conflict"] is admission, where
        assert _consistent(found["conflict"], found["reason"]), f"{where}: {found['conflict']} {found['reason']}"
        checked += 1
        reach_conflicts += "the append reach makes them conflict" in found["reason"]
    assert checked > 200 and reach_conflicts > 0  # delta-rs's appends against other days' deletes


def test_a_delta_rs_append_against_another_days_delete_says_the_append_reach_decided(capsys) -> None:
    code, out, _ = run(capsys, "INSERT INTO db.t PARTITION (date='2024-01-01') SELECT v FROM s",
                       "--table-format", "delta-rs", "--partition-columns", "date",
                       "--against", "DELETE FROM db.t WHERE date = '2024-01-02'",
                       "--against", "OPTIMIZE db.t WHERE date = '2024-01-03'")
    assert code == 0
    blocks = re.findall(r"against \[\d\]: (\S+) on db\.t: (CONFLICT|no conflict)\n  (.*)", out)
    (_, delete_verdict, delete_reason), (_, optimize_verdict, optimize_reason) = blocks
    assert delete_verdict == "CONFLICT"
    assert delete_reason.startswith("their partitions are disjoint (date=2024-01-01 vs date=2024-01-02), but the "
                                    "append reach makes them conflict: the engine validates the commit of "
                                    "insert_into (delta-rs) against the whole table; ")
    assert "delete then insert_into: the later fails (concurrent_delete_read)" in delete_reason
    assert optimize_verdict == "no conflict"
    assert "and the matrix lets both commit: " in optimize_reason and "the later fails" not in optimize_reason


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_disjoint_partitions_of_engines_without_append_reach_never_conflict(capsys, table_format) -> None:
    code, out, _ = run(capsys, "DELETE FROM db.t WHERE date = '2024-01-01'", "--table-format", table_format,
                       "--partition-columns", "date", "--against", "DELETE FROM db.t WHERE date = '2024-01-02'")
    assert code == 0
    assert out.splitlines()[-2:] == ["against [1]: delete on db.t: no conflict",
                                     "  their partitions are disjoint (date=2024-01-01 vs date=2024-01-02)"]
