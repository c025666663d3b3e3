"""Typed partition keys against real delta-rs (issue 33, item 1).

The oracle is the engine's own record: each statement runs on a fresh delta-rs table whose
partitions are spelled as the engine writes them, and what it touched is read from the
``_delta_log`` (the partitions of the files its commit removed or added). The derivation with
the column's type and delta-rs's cast rules must name exactly those partitions, refuse exactly
the statements delta-rs refuses, and, without the type, never name fewer.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError

from occflow.core.admission_rule import Claim, Pairing
from occflow.core.declaration import WriteDeclaration
from occflow.core.errors import InvalidDeclarationError, InvalidFootprintError
from occflow.core.footprint import footprints_overlap
from occflow.core.identifiers import canonical_value
from occflow.core.operations import Operation
from occflow.core.partvalues import column_type as column_type_of
from occflow.core.partvalues import typed_partition_spec
from occflow.core.profiles import get_profile
from occflow.core.sql import check_sql_write
from occflow.core.sqlderive import derive_write

#: Column type -> the partition values the table holds (as Arrow writes them).
TABLES: dict[str, pa.Array] = {
    "int": pa.array([7, 8, 70], pa.int32()),
    "bigint": pa.array([7, 8, 70], pa.int64()),
    "string": pa.array(["7", "07", " 7", "7.0", "2024-05-01", "2024-5-1", "true", "yes", "x"]),
    "date": pa.array([dt.date(2024, 1, 1), dt.date(2024, 5, 1)], pa.date32()),
    "boolean": pa.array([True, False]),
}

#: (column type, predicate) for each shape of the issue, and the neighbours that tell a right
#: rule from a near miss (a trimmed blank, a fraction, a partial date, Arrow's boolean words).
PREDICATES = [
    ("int", "p = '07'"), ("int", "p = ' 7'"), ("int", "p = '7 '"), ("int", "p IN ('07')"), ("int", "p = '+7'"),
    ("int", "p IN ('07', '008')"), ("int", "p = 7.0"), ("int", "p = 7"), ("int", "p = '7.0'"),
    ("int", "p = 'x'"), ("int", "p < '08'"), ("int", "p >= '08'"), ("int", "p <> '07'"),
    ("bigint", "p = '07'"), ("bigint", "p = ' 7'"),
    ("string", "p = 7"), ("string", "p IN (7)"), ("string", "p = '07'"), ("string", "p = '2024-5-1'"),
    ("string", "p = true"), ("string", "p = DATE '2024-05-01'"), ("string", "p = 7.0"),
    ("date", "p = '2024-1-1'"), ("date", "p = '2024-01-01 00:00:00'"), ("date", "p = '2024-01-01 10:00:00'"),
    ("date", "p = '2024-01'"), ("date", "p = '2024'"), ("date", "p = ' 2024-01-01'"),
    ("date", "p = '2024-01-01T00:00'"), ("date", "p = '2024-02-30'"), ("date", "p = DATE '2024-05-01'"),
    ("date", "p > '2024-1-1'"),
    ("boolean", "p = 1"), ("boolean", "p = 0"), ("boolean", "p = 'yes'"), ("boolean", "p = 't'"),
    ("boolean", "p = '1'"), ("boolean", "p = 'TRUE'"), ("boolean", "p = 'on'"), ("boolean", "p = 'off'"),
    ("boolean", "p = 'tr'"), ("boolean", "p = ' no '"), ("boolean", "p = 'x'"),
]


def _table(root: Path, column_type: str) -> str:
    uri = str(root / column_type)
    values = TABLES[column_type]
    write_deltalake(uri, pa.table({"p": values, "v": list(range(len(values)))}), partition_by=["p"])
    return uri


def _key(column_type: str, raw: str) -> str:
    """A partition value as occflow's keys spell it for the column's type: canonical
    (``p=2024-05-01``, ``p=7``), except a STRING column's text, which is its own spelling and is
    quoted where the canonical form would change it (``p='2024-5-1'``, ``p='7.0'``; issue 33)."""
    if column_type != "string":
        return f"p={canonical_value('p', raw)}"
    try:
        kept = canonical_value("p", raw) == raw
    except InvalidFootprintError:
        kept = False
    return f"p={raw}" if kept and not raw.startswith("'") else f"p='{raw}'"


def _touched(uri: str, since: int, column_type: str) -> set[str]:
    """The partitions of every file a commit after version ``since`` removed or added, keyed as
    occflow keys a partition of the column's type (``_key``), from the engine's own log."""
    touched: set[str] = set()
    for log in sorted((Path(uri) / "_delta_log").glob("*.json")):
        if int(log.stem) <= since:
            continue
        for line in log.read_text().splitlines():
            action = json.loads(line)
            for kind in ("add", "remove"):
                if kind in action:
                    touched.add(_key(column_type, action[kind]["partitionValues"]["p"]))
    return touched


def _run(uri: str, statement: Any, column_type: str) -> set[str] | Exception:
    table = DeltaTable(uri)
    before = table.version()
    try:
        statement(table)
    except (DeltaError, Exception) as error:  # delta-rs raises a plain Exception for a cast error
        return error
    return _touched(uri, before, column_type)


@pytest.mark.parametrize(("column_type", "predicate"), PREDICATES)
def test_delete_touches_exactly_the_typed_partitions_delta_rs_rewrites(
    tmp_path: Path, column_type: str, predicate: str
) -> None:
    engine = _run(_table(tmp_path, column_type), lambda t: t.delete(predicate), column_type)
    sql = f"DELETE FROM db.t WHERE {predicate}"
    if isinstance(engine, Exception):
        with pytest.raises(InvalidDeclarationError, match="refuses the statement"):
            derive_write(sql, ["p"], "delta-rs", column_types={"p": column_type})
        return
    derived = derive_write(sql, ["p"], "delta-rs", column_types={"p": column_type})
    keys = derived.partition_keys()
    if keys is None:
        # The whole table only where the engine's comparison is not one value of the column
        # (a fraction compared with a STRING column) and the engine did touch something.
        assert (column_type, predicate) in WHOLE_TABLE, (predicate, derived.why)
        return
    # Exactly: every partition the commit touched is named, and no value the table holds that
    # it did not touch (a range names values by bounds: checked against the table's values).
    held = {_key(column_type, str(v).lower() if isinstance(v, bool) else str(v)) for v in TABLES[column_type].to_pylist()}
    named = {k for k in held if footprints_overlap(frozenset({k}), keys)}
    assert named == engine, (predicate, sorted(keys), sorted(engine))


#: Shapes that are the whole table with delta-rs's rules, and why.
WHOLE_TABLE = {
    ("string", "p = 7.0"),  # DataFusion writes the float as text in its own way: not measured per value
}


@pytest.mark.parametrize(("column_type", "predicate"), [p for p in PREDICATES if p[0] != "boolean"])
def test_without_the_column_type_the_footprint_is_never_narrower(
    tmp_path: Path, column_type: str, predicate: str
) -> None:
    """No table facts: a quoted string names every value it may on any type; never one guessed
    spelling (``p = '07'`` was keyed ``p=07`` and delta-rs rewrote ``p=7``)."""
    engine = _run(_table(tmp_path, column_type), lambda t: t.delete(predicate), column_type)
    if isinstance(engine, Exception):
        return  # the engine refused: no commit to be narrower than
    keys = derive_write(f"DELETE FROM db.t WHERE {predicate}", ["p"], "delta-rs").partition_keys()
    if keys is None:
        return
    missed = {k for k in engine if not footprints_overlap(frozenset({k}), keys)}
    assert not missed, (predicate, sorted(keys), sorted(engine))


def test_update_set_text_on_int_moves_rows_to_the_typed_partition(tmp_path: Path) -> None:
    """``SET p = '08'`` on an INT column writes p=8 (the issue's SET shape)."""
    uri = _table(tmp_path, "int")
    engine = _run(uri, lambda t: t.update(updates={"p": "'08'"}, predicate="p = '07'"), "int")
    derived = derive_write("UPDATE db.t SET p = '08' WHERE p = '07'", ["p"], "delta-rs", column_types={"p": "int"})
    assert engine == {"p=7", "p=8"}
    assert derived.partition_keys() == engine


def test_delete_text_and_update_number_on_one_int_partition_are_ordered(tmp_path: Path) -> None:
    """The race of the issue: a delete with ``p = '07'`` and an update with ``p = 7`` were called
    disjoint (``p=07`` and ``p=7``), ran together and the update lost. On real delta-rs the two
    conflict; their derived footprints now overlap, so admission never runs them together."""
    uri = _table(tmp_path, "int")
    deleting, updating = DeltaTable(uri), DeltaTable(uri)
    deleting.delete("p = '07'")
    with pytest.raises(DeltaError, match="(?i)conflict|concurrent"):
        updating.update(updates={"v": "0"}, predicate="p = 7")
    for column_types in ({"p": "int"}, None):  # with the table's facts, and without them
        delete = derive_write("DELETE FROM db.t WHERE p = '07'", ["p"], "delta-rs", column_types=column_types)
        update = derive_write("UPDATE db.t SET v = 0 WHERE p = 7", ["p"], "delta-rs", column_types=column_types)
        assert footprints_overlap(delete.partition_keys(), update.partition_keys())
        claims = [Claim.of("delta-rs", op, d.partition_keys()) for op, d in
                  ((Operation.DELETE, delete), (Operation.UPDATE, update))]
        assert claims[1].pairing(claims[0]) is not Pairing.TOGETHER


DECLARED = [
    ("int", "07"), ("int", " 7"), ("int", 7), ("int", "8"), ("bigint", "+08"),
    ("string", "2024-5-1"), ("string", "07"), ("string", 7),
    ("date", "2024-5-1"), ("date", dt.date(2024, 1, 1)), ("date", "2024-01-01 00:00:00"),
    ("boolean", "yes"), ("boolean", "off"), ("boolean", True), ("boolean", 0),
]


@pytest.mark.parametrize(("column_type", "declared"), DECLARED)
def test_declared_partition_is_the_partition_delta_rs_writes_for_it(
    tmp_path: Path, column_type: str, declared: object
) -> None:
    """``partitions={"p": "07"}`` on an INT column is p=7: the partition delta-rs writes when the
    rows are given that value (``SET p = '07'``), read from its log; ``"2024-5-1"`` on a STRING
    column stays the text delta-rs writes, not the day."""
    uri = _table(tmp_path, column_type)
    held = TABLES[column_type].to_pylist()
    literal = _sql_literal(declared)
    before = DeltaTable(uri).version()
    DeltaTable(uri).update(updates={"p": literal}, predicate=f"p = {_sql_literal(held[0])}")
    added = {
        json.loads(line)["add"]["partitionValues"]["p"]
        for log in sorted((Path(uri) / "_delta_log").glob("*.json")) if int(log.stem) > before
        for line in log.read_text().splitlines() if '"add"' in line
    }
    typed = typed_partition_spec({"p": declared}, {"p": column_type}, "delta-rs")
    assert added == {typed["p"]}
    # The declaration's lease key is the key of the partition the engine wrote.
    declaration = WriteDeclaration("db.t", get_profile("delta-rs"), Operation.UPDATE, ({"p": declared},))
    typed_keys = declaration.with_typed_partitions({"p": column_type}, "delta-rs").partition_keys()
    assert typed_keys == {_key(column_type, str(value)) for value in added}


def _sql_literal(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    return f"'{value}'" if isinstance(value, str) else str(value)


@pytest.mark.parametrize(
    ("column_type", "declared", "engine", "said"),
    [
        ("int", "x", "delta-rs", "DataFusion cannot cast 'x'"),
        ("int", "x", "spark-iceberg", "NULL"),
        ("int", "7.0", "delta-rs", "DataFusion cannot cast '7.0'"),
        ("date", "2024-01", "delta-rs", "DataFusion cannot cast '2024-01'"),
        ("string", 7, "spark-iceberg", "matches every text"),
        ("timestamp", "2024-01-01", "delta-rs", "time zone"),
    ],
)
def test_declared_value_that_is_no_single_value_of_the_type_is_refused_by_name(
    tmp_path: Path, column_type: str, declared: object, engine: str, said: str
) -> None:
    with pytest.raises(InvalidDeclarationError, match=rf"(?s)partition value {declared!r} for 'p'.*{re.escape(said)}"):
        typed_partition_spec({"p": declared}, {"p": column_type}, engine)


def test_unknown_type_names_and_engines_are_refused_naming_what_is_known() -> None:
    with pytest.raises(InvalidDeclarationError, match=r"unknown type 'integr' for partition column 'p'; known: .*bigint"):
        derive_write("DELETE FROM db.t WHERE p = 1", ["p"], "delta-rs", column_types={"p": "integr"})
    with pytest.raises(InvalidDeclarationError, match="column_types maps a partition column to its type name"):
        derive_write("DELETE FROM db.t WHERE p = 1", ["p"], "delta-rs", column_types=["int"])  # type: ignore[arg-type]


@pytest.mark.parametrize("column_type", sorted(TABLES))
def test_type_names_delta_rs_and_arrow_report_are_read_as_the_tables_type(tmp_path: Path, column_type: str) -> None:
    """The names the engine itself reports for the column (Delta's schema, Arrow's type) are read
    as the type the test table was written with."""
    table = DeltaTable(_table(tmp_path, column_type))
    delta_name = table.schema().fields[0].type.type
    arrow_name = str(TABLES[column_type].type)
    wanted = column_type_of("p", column_type)
    assert column_type_of("p", delta_name) is wanted and column_type_of("p", arrow_name) is wanted


def test_a_declaration_holds_the_sql_literal_it_spells_and_not_another_spelling(tmp_path: Path) -> None:
    """Without the column's type, ``{"p": "07"}`` holds ``WHERE p = '07'`` (one literal names one
    partition whatever the type) but ``{"p": "7"}`` does not: on a STRING column delta-rs
    deletes from partition '07', not '7' (read from its log)."""
    touched = _run(_table(tmp_path, "string"), lambda t: t.delete("p = '07'"), "string")
    assert touched == {"p=07"}
    sql = "DELETE FROM db.t WHERE p = '07'"
    same = WriteDeclaration("db.t", get_profile("delta-rs"), Operation.DELETE, ({"p": "07"},))
    check_sql_write(sql, same, None)
    other = WriteDeclaration("db.t", get_profile("delta-rs"), Operation.DELETE, ({"p": "7"},))
    with pytest.raises(InvalidDeclarationError, match="may touch p=07"):
        check_sql_write(sql, other, None)


@pytest.mark.parametrize("on", ["t.p = '07'", "t.p IN (' 7', '08')", "t.p = '+08'"])
def test_merge_on_text_for_an_int_partition_is_the_partitions_delta_rs_merges(tmp_path: Path, on: str) -> None:
    """``MERGE ... ON t.p = '07' AND t.v = s.v``: delta-rs rewrites p=7 (its log says so), and the
    derivation with the column's type names the same partitions."""
    uri = _table(tmp_path, "int")
    source = pa.table({"v": pa.array([0, 1, 2], pa.int64()), "w": [10, 11, 12]})

    def merge(table: DeltaTable) -> None:
        (table.merge(source, predicate=f"{on} AND t.v = s.v", source_alias="s", target_alias="t")
         .when_matched_update(updates={"v": "s.w"}).execute())

    engine = _run(uri, merge, "int")
    assert not isinstance(engine, Exception) and engine
    derived = derive_write(
        f"MERGE INTO db.t t USING src s ON {on} AND t.v = s.v WHEN MATCHED THEN UPDATE SET v = s.w",
        ["p"], "delta-rs", column_types={"p": "int"},
    )
    keys = derived.partition_keys()
    assert keys is not None
    held = {f"p={v}" for v in TABLES["int"].to_pylist()}
    assert keys <= held, keys  # values of the type, not spellings
    assert keys == engine
