"""delta-io/delta's OptimisticTransaction suites as expectations for occflow's Delta profiles
(``delta-write-serializable``, ``delta-serializable``) and its reference engine.

delta-spark cannot run here (no Delta jars, and Maven is unreachable), so nothing in this module
runs delta-spark: the expected outcomes are COPIED from the upstream suites (delta-io/delta at
bb1057f4, ``spark/src/test/scala/org/apache/spark/sql/delta/OptimisticTransactionSuite.scala``,
its ``check(...)`` cases, and ``OptimisticTransactionLegacyTests.scala``, its ``test(...)`` cases;
each case below names its test). Upstream commits hand-made file actions; each case is the same
race as occflow declares it: two operations on partitions of a ``ReferenceTable`` (the reference
MVCC/OCC engine, which validates commits with the profile's port of delta-spark's
``ConflictChecker``), both begun on one snapshot, the earlier committed first. Where the upstream
winner adds files without reading (a blind append in Delta's sense, which WriteSerializable
exempts) but the suite runs it as a data-changing commit, the case uses a MERGE as the winner so
that the expectation holds at both isolation levels; the mapping is in each case's ``how``.

Each case asserts (1) the reference engine under both Delta profiles gives upstream's outcome,
and (2) for races on one partition, the profile cell says the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from occflow.core.errors import CommitConflict
from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation as Op
from occflow.core.profiles import get_profile
from occflow.core.reference import ReferenceTable

PROFILES = ("delta-write-serializable", "delta-serializable")
SUITE = "OptimisticTransactionSuite.scala check"
LEGACY = "OptimisticTransactionLegacyTests.scala test"


@dataclass(frozen=True)
class Job:
    op: Op
    partitions: tuple[str, ...]
    whole_table: bool = False
    app_id: str | None = None


@dataclass(frozen=True)
class Case:
    upstream: str
    earlier: Job
    later: Job
    expected: ConflictKind | None
    how: str = ""


CASES: dict[str, Case] = {
    "append_append": Case(f'{SUITE}("append / append", conflicts = false)', Job(Op.INSERT_INTO, ("x=1",)), Job(Op.INSERT_INTO, ("x=1",)), None),
    "disjoint_delete_read": Case(
        f'{SUITE}("disjoint delete / read", conflicts = false)',
        Job(Op.TRUNCATE, ("x=2",)),
        Job(Op.UPDATE, ("x=1",)),
        None,
        "RemoveFile in x=2 = TRUNCATE of x=2; the reader of x=1 = an UPDATE of x=1",
    ),
    "disjoint_add_read": Case(
        f'{SUITE}("disjoint add / read", conflicts = false)', Job(Op.INSERT_INTO, ("x=2",)), Job(Op.UPDATE, ("x=1",)), None
    ),
    "add_read_write": Case(
        f'{SUITE}("add / read + write", conflicts = true, DELTA_CONCURRENT_APPEND)',
        Job(Op.MERGE, ("x=1",)),
        Job(Op.UPDATE, ("x=1",)),
        ConflictKind.CONCURRENT_APPEND,
        "the winner's AddFile in x=1 committed as a data-changing operation = a MERGE into x=1",
    ),
    "add_part1_read_part12": Case(
        f'{SUITE}("add in part=2 / read from part=1,2 and write to part=1", conflicts = true)',
        Job(Op.MERGE, ("x=1",)),
        Job(Op.UPDATE, ("x=1", "x=2")),
        ConflictKind.CONCURRENT_APPEND,
    ),
    "delete_read": Case(
        f'{SUITE}("delete / read", conflicts = true, DELTA_CONCURRENT_DELETE_READ)',
        Job(Op.TRUNCATE, ("x=1",)),
        Job(Op.UPDATE, ("x=1",)),
        ConflictKind.CONCURRENT_DELETE_READ,
        "RemoveFile (no add) = TRUNCATE",
    ),
    "schema_change": Case(
        f'{SUITE}("schema change", conflicts = true) / {LEGACY}("block append against metadata change")',
        Job(Op.ALTER_METADATA, ("x=1",)),
        Job(Op.INSERT_INTO, ("x=1",)),
        ConflictKind.METADATA_CHANGED,
    ),
    "conflicting_txns": Case(
        f'{SUITE}("conflicting txns", conflicts = true) / {LEGACY}("block concurrent set-txns with the same app id")',
        Job(Op.INSERT_INTO, ("x=1",), app_id="t1"),
        Job(Op.INSERT_INTO, ("x=1",), app_id="t1"),
        ConflictKind.CONCURRENT_TRANSACTION,
    ),
    "disjoint_txns": Case(
        f'{SUITE}("disjoint txns", conflicts = false) / {LEGACY}("allow concurrent set-txns with different app ids")',
        Job(Op.INSERT_INTO, ("x=1",), app_id="t2"),
        Job(Op.INSERT_INTO, ("x=1",), app_id="t1"),
        None,
    ),
    "upgrade_upgrade": Case(
        f'{SUITE}("upgrade / upgrade", conflicts = true)',
        Job(Op.UPGRADE_PROTOCOL, ("x=1",)),
        Job(Op.UPGRADE_PROTOCOL, ("x=1",)),
        ConflictKind.PROTOCOL_CHANGED,
    ),
    "taint_whole_table": Case(
        f'{SUITE}("taint whole table", conflicts = true)',
        Job(Op.MERGE, ("x=3",)),
        Job(Op.UPDATE, ("x=4",), whole_table=True),
        ConflictKind.CONCURRENT_APPEND,
    ),
    "taint_whole_table_remove": Case(
        f'{SUITE}("taint whole table + concurrent remove", conflicts = true) / {LEGACY}("readWholeTable should block concurrent delete")',
        Job(Op.TRUNCATE, ("",)),
        Job(Op.MERGE, ("",), whole_table=True),
        ConflictKind.CONCURRENT_DELETE_READ,
        "unpartitioned table: the single partition ''",
    ),
    "blind_append_vs_data_change": Case(
        f'{LEGACY}("allow blind-append against any data change")', Job(Op.UPDATE, ("part=1",)), Job(Op.INSERT_INTO, ("part=1",)), None
    ),
    "disjoint_partitions": Case(
        f'{LEGACY}("allow concurrent commit on disjoint partitions")',
        Job(Op.MERGE, ("part=1",)),
        Job(Op.UPDATE, ("part=3",)),
        None,
    ),
    "read_partition_appended": Case(
        f'{LEGACY}("block concurrent commit when read partition was appended to by concurrent write")',
        Job(Op.MERGE, ("part=1",)),
        Job(Op.UPDATE, ("part=1",)),
        ConflictKind.CONCURRENT_APPEND,
    ),
    "full_table_scan": Case(
        f'{LEGACY}("block concurrent commit on full table scan")',
        Job(Op.UPDATE, ("part=2",)),
        Job(Op.UPDATE, ("part=1",), whole_table=True),
        ConflictKind.CONCURRENT_APPEND,
    ),
    "full_table_read_vs_delete": Case(
        f'{LEGACY}("block commit when full table read conflicts with delete in any partition")',
        Job(Op.TRUNCATE, ("part=1",)),
        Job(Op.DELETE, ("part=2",), whole_table=True),
        ConflictKind.CONCURRENT_DELETE_READ,
    ),
    "rearrange_vs_append": Case(
        f'{LEGACY}("no data change: allow data rearrange when new files concurrently added")',
        Job(Op.INSERT_INTO, ("part=1",)),
        Job(Op.OPTIMIZE, ("part=1",)),
        None,
    ),
    "rearrange_vs_delete": Case(
        f'{LEGACY}("no data change: block data rearrange when concurrently delete removes same file")',
        Job(Op.TRUNCATE, ("part=1",)),
        Job(Op.OPTIMIZE, ("part=1",)),
        ConflictKind.CONCURRENT_DELETE_READ,
    ),
}


def partitions_of(case: Case) -> list[str]:
    return sorted({*case.earlier.partitions, *case.later.partitions} | ({"part=2"} if case.later.whole_table else set()))


def begin(table: ReferenceTable, job: Job) -> object:
    app = {} if job.app_id is None else {"app_id": job.app_id, "app_version": 1}
    protocol = {"protocol_change": True} if job.op is Op.UPGRADE_PROTOCOL else {}
    return table.begin(job.op, job.partitions, reads_whole_table=job.whole_table, **app, **protocol)


def race(profile: str, case: Case) -> ConflictKind | None:
    table = ReferenceTable(profile, partitions=partitions_of(case))
    table.run(Op.INSERT_INTO)  # every partition holds a file before the race
    first, second = begin(table, case.earlier), begin(table, case.later)
    first.commit()  # type: ignore[attr-defined]
    try:
        second.commit()  # type: ignore[attr-defined]
    except CommitConflict as exc:
        assert exc.winner is not None and exc.winner.version == table.version
        return exc.kind
    return None


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", list(CASES))
def test_the_reference_engine_gives_upstreams_outcome(name: str, profile: str) -> None:
    case = CASES[name]
    assert race(profile, case) is case.expected, case.upstream


SAME_PARTITION = [n for n, c in CASES.items() if c.earlier.partitions == c.later.partitions and not c.later.whole_table and c.earlier.app_id is None]


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", SAME_PARTITION)
def test_the_profile_cell_gives_upstreams_outcome(name: str, profile: str) -> None:
    case = CASES[name]
    cell = get_profile(profile).cell(case.earlier.op, case.later.op)
    assert cell.exception is case.expected, f"{case.upstream}: {cell.source}"
