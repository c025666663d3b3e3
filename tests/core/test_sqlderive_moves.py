"""Never a narrower footprint (issue 23): every WHEN clause of a MERGE counts, rows a write moves
between partitions count where they land, an OPTIMIZE ... ZORDER BY is not conflict-free beside
row-level writes, a misspelt table property is refused, and SQL nested too deeply is refused
(issue 24). The expected footprints are read off the statements' semantics by hand; an UPDATE
oracle runs the statements on SQLite and checks every partition a row left or entered."""

from __future__ import annotations

import itertools
import sqlite3

import pytest

from occflow.core.errors import InvalidDeclarationError
from occflow.core.operations import Operation
from occflow.core.profiles import get_profile, operations_conflict
from occflow.core.profiles.delta import IsolationLevel
from occflow.core.profiles.delta_rlc import ZORDER_CHANGES, ZORDER_PROFILE, zorder_cells
from occflow.core.sqlderive import derive_write
from occflow.core.sqlread import read_sql_write
from occflow.core.tablefacts import TableFacts

WHOLE = None


def keys(sql: str, columns: list[str] | None = ["ds"]) -> frozenset[str] | None:  # noqa: B006 - read only
    return derive_write(sql, columns).partition_keys()


# ---------------------------------------------------------------- 1. every WHEN clause counts

ON_A = "MERGE INTO db.t t USING s ON t.id = s.id AND t.ds = 'A' "


@pytest.mark.parametrize(
    ("clauses", "expected"),
    [
        # The statement: NOT MATCHED BY SOURCE touches target rows outside ON's ds = 'A'.
        ("WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED BY SOURCE THEN DELETE", WHOLE),
        ("WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED BY SOURCE THEN DELETE", WHOLE),
        ("WHEN MATCHED THEN DELETE WHEN NOT MATCHED BY SOURCE THEN UPDATE SET v = 0", WHOLE),
        # Its own condition pins partitions: the union of ON's and the clause's.
        # Even a NOT MATCHED BY SOURCE clause whose own condition pins partitions: Spark joins the
        # whole target, and on a copy-on-write Iceberg table it rewrote files of partitions the
        # condition excludes (found by the differential oracle, tests/engines/test_derivation_fuzz.py).
        ("WHEN MATCHED THEN DELETE WHEN NOT MATCHED BY SOURCE AND t.ds = 'B' THEN DELETE", WHOLE),
        ("WHEN NOT MATCHED BY SOURCE AND ds IN ('B', 'C') THEN UPDATE SET v = 0", WHOLE),
        ("WHEN NOT MATCHED BY SOURCE AND t.ds = 'A' THEN DELETE", WHOLE),
        ("WHEN NOT MATCHED BY SOURCE AND t.ds = 'B' THEN DELETE WHEN NOT MATCHED BY SOURCE THEN DELETE", WHOLE),
        # A condition that pins no partition column of the target pins nothing.
        ("WHEN NOT MATCHED BY SOURCE AND t.v > 3 THEN DELETE", WHOLE),
        ("WHEN NOT MATCHED BY SOURCE AND t.ds = 'B' OR t.v > 3 THEN DELETE", WHOLE),
        # Clauses that only touch the rows ON selects add nothing.
        ("WHEN MATCHED AND t.v > 1 THEN DELETE WHEN MATCHED THEN UPDATE SET v = s.v", {"ds=A"}),
    ],
)
def test_every_when_clause_of_a_merge_counts(clauses: str, expected: set[str] | None) -> None:
    found = keys(ON_A + clauses)
    assert found == (None if expected is None else frozenset(expected)), derive_write(ON_A + clauses, ["ds"]).why


def test_the_whole_table_names_the_not_matched_by_source_clause() -> None:
    derived = derive_write(ON_A + "WHEN MATCHED THEN DELETE WHEN NOT MATCHED BY SOURCE THEN DELETE", ["ds"])
    assert derived.partitions is None
    assert any("WHEN NOT MATCHED BY SOURCE" in w and "whole table" in w for w in derived.why)


# ---------------------------------------------------------------- 2. rows moved between partitions


@pytest.mark.parametrize(
    ("sql", "columns", "expected"),
    [
        ("UPDATE db.t SET ds = 'B' WHERE ds = 'A'", ["ds"], {"ds=A", "ds=B"}),
        ("UPDATE db.t x SET x.ds = 'B', v = 1 WHERE x.ds IN ('A', 'C')", ["ds"], {"ds=A", "ds=B", "ds=C"}),
        ("UPDATE db.t SET ds = 'A' WHERE ds = 'A'", ["ds"], {"ds=A"}),
        ("UPDATE db.t SET ds = CASE WHEN v > 1 THEN 'B' ELSE 'C' END WHERE ds = 'A'", ["ds"], WHOLE),
        ("UPDATE db.t SET ds = other WHERE ds = 'A'", ["ds"], WHOLE),
        ("UPDATE db.t SET ds = NULL WHERE ds = 'A'", ["ds"], WHOLE),
        ("UPDATE db.t SET ds = ds, v = 2 WHERE ds = 'A'", ["ds"], {"ds=A"}),
        ("UPDATE db.t SET v = 2 WHERE ds = 'A'", ["ds"], {"ds=A"}),
        # The other partition column stays: the row moves within its country.
        ("UPDATE db.t SET ds = 'B' WHERE ds = 'A' AND country = 'NL'", ["ds", "country"],
         {"country=NL/ds=A", "country=NL/ds=B"}),
        ("UPDATE db.t SET ds = 'B' WHERE country = 'NL'", ["ds", "country"], {"country=NL", "country=NL/ds=B"}),
        ("UPDATE db.t SET ds = 'B', country = 'DE' WHERE ds = 'A' AND country = 'NL'", ["ds", "country"],
         {"country=NL/ds=A", "country=DE/ds=B"}),
        # A range moves to one value.
        ("UPDATE db.t SET ds = '2024-03-01' WHERE ds < '2024-01-01'", ["ds"], {"ds<2024-01-01", "ds=2024-03-01"}),
        # Not a partition column: nothing moves.
        ("UPDATE db.t SET country = CASE WHEN v > 1 THEN 'x' END WHERE ds = 'A'", ["ds"], {"ds=A"}),
    ],
)
def test_an_update_of_a_partition_column_touches_where_its_rows_land(
    sql: str, columns: list[str], expected: set[str] | None
) -> None:
    assert keys(sql, columns) == (None if expected is None else frozenset(expected)), derive_write(sql, columns).why


@pytest.mark.parametrize(
    ("clauses", "expected"),
    [
        ("WHEN MATCHED THEN UPDATE SET t.ds = 'B'", {"ds=A", "ds=B"}),
        ("WHEN MATCHED AND t.v = 1 THEN UPDATE SET ds = 'B' WHEN MATCHED THEN UPDATE SET ds = 'C'",
         {"ds=A", "ds=B", "ds=C"}),
        ("WHEN MATCHED THEN UPDATE SET t.ds = s.ds", WHOLE),
        ("WHEN MATCHED THEN UPDATE SET t.ds = concat(s.ds, 'x')", WHOLE),
        ("WHEN MATCHED THEN UPDATE SET t.ds = t.ds, t.v = s.v", {"ds=A"}),
        # SET * takes ds from the source, which nothing holds equal to the target's.
        ("WHEN MATCHED THEN UPDATE SET *", WHOLE),
        # NOT MATCHED BY SOURCE rows move too.
        ("WHEN NOT MATCHED BY SOURCE AND t.ds = 'B' THEN UPDATE SET ds = 'C'", WHOLE),
        ("WHEN NOT MATCHED BY SOURCE AND t.ds = 'B' THEN UPDATE SET ds = upper(ds)", WHOLE),
        # INSERT: a literal destination joins; anything else lands anywhere.
        ("WHEN NOT MATCHED THEN INSERT (id, ds) VALUES (s.id, 'B')", {"ds=A", "ds=B"}),
        ("WHEN NOT MATCHED THEN INSERT (id, ds) VALUES (s.id, 'A')", {"ds=A"}),
        ("WHEN NOT MATCHED BY TARGET THEN INSERT (ds, id) VALUES ('B', s.id)", {"ds=A", "ds=B"}),
        ("WHEN NOT MATCHED THEN INSERT *", WHOLE),
        ("WHEN NOT MATCHED THEN INSERT (id, ds) VALUES (s.id, s.ds)", WHOLE),
        ("WHEN NOT MATCHED THEN INSERT (id) VALUES (s.id)", WHOLE),  # ds: a default or generated value
        ("WHEN NOT MATCHED THEN INSERT VALUES (s.id, 'A')", WHOLE),  # which value is ds is not said
    ],
)
def test_a_merge_that_moves_or_adds_rows_touches_where_they_land(clauses: str, expected: set[str] | None) -> None:
    found = keys(ON_A + clauses)
    assert found == (None if expected is None else frozenset(expected)), derive_write(ON_A + clauses, ["ds"]).why


def test_update_set_star_keeps_the_partition_only_when_on_holds_it_equal_to_the_sources() -> None:
    pinned = "MERGE INTO db.t t USING s ON t.id = s.id AND t.ds = s.ds AND t.ds = 'A' WHEN MATCHED THEN UPDATE SET *"
    assert keys(pinned) == {"ds=A"}
    assert keys(pinned.replace("t.ds = s.ds AND ", "")) is None
    assert keys(pinned.replace("t.ds = s.ds AND", "(t.ds = s.ds OR t.v = 1) AND")) is None  # not a conjunct
    # A source called like the target: no column is surely the target's.
    assert keys("MERGE INTO db.t s USING s ON s.id = s.id AND s.ds = 'A' WHEN MATCHED THEN UPDATE SET *") is None
    two = "MERGE INTO db.t t USING s ON t.ds = s.ds AND t.country = 'NL' AND t.ds = 'A' WHEN MATCHED THEN UPDATE SET *"
    assert keys(two, ["ds", "country"]) is None  # country comes from the source
    assert keys(two.replace("t.country = 'NL'", "t.country = s.country AND t.country = 'NL'"), ["ds", "country"]) == {
        "country=NL/ds=A"
    }


def test_the_spec_003_merge_that_inserts_source_rows_is_the_whole_table() -> None:
    # Its NOT MATCHED rows are source rows of any date and country: INSERT * puts them there.
    merge = (
        "MERGE INTO lake.db.events t USING lake.db.updates s "
        "ON s.user_id = t.user_id AND s.date = t.date AND s.country = t.country "
        "AND t.date = '2024-01-01' AND t.country = 'NL' WHEN MATCHED THEN UPDATE SET * {insert}"
    )
    columns = ["date", "country"]
    assert keys(merge.format(insert=""), columns) == {"country=NL/date=2024-01-01"}
    assert keys(merge.format(insert="WHEN NOT MATCHED THEN INSERT *"), columns) is None
    literal = "WHEN NOT MATCHED THEN INSERT (user_id, date, country) VALUES (s.user_id, '2024-01-01', 'NL')"
    assert keys(merge.format(insert=literal), columns) == {"country=NL/date=2024-01-01"}


def test_an_unreadable_merge_clause_is_refused() -> None:
    with pytest.raises(InvalidDeclarationError, match="do not pair up"):
        derive_write(ON_A + "WHEN NOT MATCHED THEN INSERT (id, ds) VALUES (s.id)", ["ds"])


# ---- the UPDATE oracle: SQLite runs the statement; every partition a row left or entered is in the footprint

ROWS = list(itertools.product(range(4), ["A", "B", "C"], ["NL", "DE"], [0, 1, 2]))


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE t SET ds = 'B' WHERE ds = 'A'",
        "UPDATE t SET ds = 'C', country = 'DE' WHERE country = 'NL' AND v > 0",
        "UPDATE t SET ds = 'A' WHERE ds IN ('B', 'C') AND id = 1",
        "UPDATE t SET ds = CASE WHEN v > 1 THEN 'B' ELSE 'C' END WHERE ds = 'A'",
        "UPDATE t SET country = ds WHERE ds = 'A'",
        "UPDATE t SET v = v + 1, ds = 'Z' WHERE ds <> 'A'",
    ],
)
def test_updated_rows_before_and_after_lie_in_the_footprint(sql: str) -> None:
    columns = ["ds", "country"]
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (id INTEGER, ds TEXT, country TEXT, v INTEGER, rid INTEGER PRIMARY KEY)")
    db.executemany("INSERT INTO t (id, ds, country, v) VALUES (?, ?, ?, ?)", ROWS)
    before = {r[0]: r[1:] for r in db.execute("SELECT rid, ds, country, v FROM t")}
    db.execute(sql)
    after = {r[0]: r[1:] for r in db.execute("SELECT rid, ds, country, v FROM t")}
    touched = {part for rid in before if before[rid] != after[rid] for part in (before[rid][:2], after[rid][:2])}
    assert touched
    derived = derive_write(sql.replace("UPDATE t", "UPDATE db.t"), columns)
    if derived.partitions is None:
        return
    for ds, country in touched:
        assert any(
            all(_holds(spec.get(c), value) for c, value in (("ds", ds), ("country", country)))
            for spec in derived.partitions
        ), (sql, (ds, country), derived.to_json())


def _holds(constraint: object, value: str) -> bool:
    if constraint is None:
        return True
    if isinstance(constraint, str):
        return constraint == value
    return bool(constraint.contains(value))  # type: ignore[attr-defined]


# ---------------------------------------------------------------- 3. OPTIMIZE ... ZORDER BY on row-level concurrency


def test_optimize_zorder_is_flagged_and_a_plain_optimize_is_not() -> None:
    zorder = derive_write("OPTIMIZE db.t WHERE ds = 'A' ZORDER BY (id)", ["ds"])
    assert zorder.operation is Operation.OPTIMIZE and zorder.zorder and zorder.to_json()["zorder"] is True
    assert zorder.partition_keys() == {"ds=A"}
    assert derive_write("OPTIMIZE db.t ZORDER BY (id, v)", []).zorder
    plain = derive_write("OPTIMIZE db.t WHERE ds = 'A'", ["ds"])
    assert not plain.zorder and "zorder" not in plain.to_json()


@pytest.mark.parametrize("level", ["Serializable", "WriteSerializable"])
def test_on_a_row_level_table_zorder_is_kept_apart_from_update_delete_and_merge(level: str) -> None:
    facts = TableFacts("db.t", "delta", "databricks", (), {"delta.enableDeletionVectors": "true",
                                                            "delta.isolationLevel": level})
    rlc = facts.profile(Operation.OPTIMIZE, zorder=False)
    assert rlc.name.endswith("-rlc")
    zorder = facts.profile(Operation.OPTIMIZE, zorder=True)
    assert zorder.name == ZORDER_PROFILE[rlc.name] and not zorder.name.endswith("-rlc")
    # Not told whether it is a ZORDER: never the matrix that keeps fewer pairs apart.
    assert facts.profile(Operation.OPTIMIZE).name == zorder.name
    for other in (Operation.UPDATE, Operation.DELETE, Operation.MERGE):
        update_profile = facts.profile(other)
        assert not operations_conflict(rlc, Operation.OPTIMIZE, update_profile, other)  # plain OPTIMIZE: beside
        assert operations_conflict(zorder, Operation.OPTIMIZE, update_profile, other)  # ZORDER: apart
    with pytest.raises(InvalidDeclarationError, match="ZORDER BY can conflict"):
        facts.check_declared_profile(rlc.name, Operation.OPTIMIZE, zorder=True)
    facts.check_declared_profile(rlc.name, Operation.OPTIMIZE, zorder=False)


@pytest.mark.parametrize("level", [IsolationLevel.SERIALIZABLE, IsolationLevel.WRITE_SERIALIZABLE])
def test_zorder_cells_are_data_citing_databricks_and_the_fallback_holds_them(level: IsolationLevel) -> None:
    cells = zorder_cells(level)
    pairs = {(c.earlier, c.later) for c in cells}
    row_level = {Operation.UPDATE, Operation.DELETE, Operation.MERGE}
    assert pairs == {(Operation.OPTIMIZE, o) for o in row_level} | {(o, Operation.OPTIMIZE) for o in row_level}
    assert len(ZORDER_CHANGES) == len(cells)
    plain = "delta-serializable" if level is IsolationLevel.SERIALIZABLE else "delta-write-serializable"
    for cell in cells:
        assert cell.later_fails and "ZORDER BY" in cell.source and "row-level-concurrency" in cell.source
        fallback = get_profile(plain).cell(cell.earlier, cell.later)
        assert (fallback.later_fails, fallback.exception) == (cell.later_fails, cell.exception)
        # ... which the row-level matrix does not hold: that is why the fallback exists.
        assert not get_profile(f"{plain}-rlc").later_fails(cell.earlier, cell.later)


# ---------------------------------------------------------------- 4. a misspelt table property


@pytest.mark.parametrize(
    ("table_format", "key", "meant"),
    [
        ("delta", "delta.enableDeletionVector", "delta.enableDeletionVectors"),
        ("delta", "delta.isolation_level", "delta.isolationLevel"),
        ("delta", "isolationLevel", "delta.isolationLevel"),
        ("iceberg", "write.merge.isolation_level", "write.merge.isolation-level"),
        ("maxcompute", "transactionl", "transactional"),
    ],
)
def test_a_misspelt_property_is_refused_naming_it_and_the_known_ones(table_format: str, key: str, meant: str) -> None:
    with pytest.raises(InvalidDeclarationError) as error:
        TableFacts("db.t", table_format, properties={key: "true"})
    message = str(error.value)
    assert repr(key) in message and repr(meant) in message and meant in message.split("are ")[-1]


def test_other_real_properties_are_kept() -> None:
    facts = TableFacts("db.t", "delta", properties={
        "delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true",
        "delta.appendOnly": "false", "delta.checkpointInterval": "10", "delta.enableTypeWidening": "true",
    })
    assert facts.profile_name() == "delta-write-serializable-rlc"
    TableFacts("db.t", "iceberg", properties={"write.merge.distribution-mode": "hash", "format-version": "2",
                                               "write.delete.granularity": "file"})


# ---------------------------------------------------------------- 5. SQL nested too deeply (issue 24)


@pytest.mark.parametrize("depth", [50, 300, 3000])
def test_sql_nested_too_deeply_is_refused_not_a_recursion_error(depth: int) -> None:
    sql = "DELETE FROM db.t WHERE " + "(" * depth + "ds = 'A'" + ")" * depth
    with pytest.raises(InvalidDeclarationError, match="nested too deeply"):
        derive_write(sql, ["ds"])
    with pytest.raises(InvalidDeclarationError, match="nested too deeply"):
        read_sql_write(sql)


def test_an_optimize_condition_nested_too_deeply_is_refused() -> None:
    sql = "OPTIMIZE db.t WHERE " + "(" * 300 + "ds = 'A'" + ")" * 300
    with pytest.raises(InvalidDeclarationError, match="nested too deeply"):
        derive_write(sql, ["ds"])


def test_moderate_nesting_still_reads() -> None:
    assert keys("DELETE FROM db.t WHERE " + "(" * 20 + "ds = 'A'" + ")" * 20) == {"ds=A"}
