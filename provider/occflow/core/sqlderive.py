"""A SQL job's declaration, derived: its operation, the partitions it may touch, whether it
reads the table it writes (issue 12).

The write statement is the one ``core.sqlread.read_sql_write`` finds. Its partitions come from
what confines it: the ``WHERE`` of an UPDATE or DELETE, the target's side of a MERGE's ``ON``
(spec 003: a MERGE whose condition pins no partition reads the whole table), an INSERT's static
``PARTITION (...)`` or ``REPLACE WHERE``, OPTIMIZE / REORG ``WHERE``, ``rewrite_data_files``'s
``where``, TRUNCATE's ``PARTITION``. A condition is read by ``core.sqlpredicates``: never
narrower than what it selects. An INSERT whose query reads its own target behaves as a MERGE
(spec 004, note (1)); ``REORG ... APPLY (UPGRADE ...)`` changes the protocol (spec 004).
``check_derived_against`` refuses a hand declaration that says less than the SQL does.

Rows a statement moves or adds count too (issue 23): every WHEN clause of a MERGE (a ``WHEN NOT
MATCHED BY SOURCE`` clause, with or without a condition, makes the whole table: Spark joins the
whole target and rewrites every file of a copy-on-write Iceberg table), and every assignment to
a partition column (``UPDATE ... SET ds = 'B'``, a MERGE's ``UPDATE SET`` / ``INSERT``): a
literal destination joins the footprint, any other value is the whole table. What cannot be
read is refused, never guessed narrow. How much of an UPDATE, DELETE or REPLACE WHERE condition
confines the files the engine rewrites depends on the engine (``core.sqlfilefinding``: on
delta-rs only the conjuncts delta-kernel translates).

A literal names the partition value the engine casts it to for the column's type
(``column_types``; ``core.partvalues``, issue 33): ``p = '07'`` on an INT column is ``p=7``. Without
the types a quoted string names every value it may on any type (``'07'``: ``07`` and ``7``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp

from .declaration import WriteDeclaration, partition_key
from .errors import InvalidDeclarationError, InvalidFootprintError
from .identifiers import canonical_value, unquoted_parts
from .operations import Operation
from .partvalues import CastRules, ColumnType, ColumnTyping, Named, untyped_text_value
from .ranges import canonical_spec_value, spec_json, string_key, value_within
from .sqlfilefinding import confine_to_found_files, file_finding
from .sqlmerge import read_merge
from .sqlnesting import nested_too_deeply
from .sqlpredicates import (
    MAX_SPECS,
    ColumnScope,
    Spec,
    TooManySpecs,
    both,
    either,
    read_condition,
    read_literal,
)
from .sqlread import (
    DIALECT,
    SqlWrite,
    dotted_name,
    first_keyword,
    job_text,
    parse_statement,
    read_sql_write,
    shorten,
    sql_tokens,
)
from .sqlreading import Reading, assignments, is_column, reads_table, target_names, with_target_reads

_COLUMN_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: Engines on which ``p IS NULL``, a prefix ``LIKE`` and a cast that leaves a partition column as
#: it is (``core.sqlpredicates``) confine the column: their writes of other values stay apart, in
#: the files the engine finds and in its conflict check. Spark + Iceberg: the files found
#: (``tests/engines/test_derivation_fuzz.py``), and Spark pushes these shapes (``IsNull``,
#: ``StartsWith``, the comparison once the no-op cast is gone) into the scan whose filter is
#: Iceberg's conflict-detection filter. Not delta-rs: its conflict checker reads ``p IS NULL``,
#: ``LIKE`` and ``to_date`` as matching a removed file of any value, and ``p = 7`` as matching a
#: removed file of the NULL partition ("a concurrent transaction deleted data this operation
#: read", ``tests/engines/test_null_like_cast_real.py``). Not measured: delta-spark, MaxCompute.
NARROW_SHAPES = frozenset({"spark-iceberg"})
_SPEC_003 = "spec 003"
_NOTE_1 = "spec 004, note (1): an INSERT whose subquery reads the target has the concurrency of a MERGE"


@dataclass(frozen=True)
class DerivedWrite:
    """What a SQL job writes, read from its text. ``partitions`` ``None``: the whole table;
    values are canonical scalars or ``core.ranges.ValueRange``."""

    table: str
    operation: Operation
    partitions: tuple[Mapping[str, Any], ...] | None
    reads_target: bool
    why: tuple[str, ...]
    #: Ranges of the condition's other columns (information: delta-rs prunes files by min/max).
    value_ranges: Mapping[str, Any] = field(default_factory=dict, hash=False)
    protocol_change: bool = False
    #: ``OPTIMIZE ... ZORDER BY``: under row-level concurrency it can conflict with UPDATE,
    #: DELETE and MERGE (``core.profiles.delta_rlc.ZORDER_CELLS``), unlike a plain OPTIMIZE.
    zorder: bool = False

    def partition_keys(self) -> frozenset[str] | None:
        """Partition keys (``core.declaration.partition_key``; ranges as ``ds>=a/ds<b``) for
        ``core.footprint.footprints_overlap`` and leases; ``None``: the whole table."""
        if self.partitions is None:
            return None
        return frozenset(partition_key(spec) for spec in self.partitions)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "table": self.table,
            "operation": self.operation.value,
            "partitions": None if self.partitions is None else [spec_json(s) for s in self.partitions],
            "reads_target": self.reads_target,
            "why": list(self.why),
        }
        if self.value_ranges:
            out["value_ranges"] = spec_json(self.value_ranges)
        if self.protocol_change:
            out["protocol_change"] = True
        if self.zorder:
            out["zorder"] = True
        return out


def derive_write(
    sql: str | Sequence[str],
    partition_columns: Sequence[str] | None,
    engine: str | None = None,
    *,
    column_types: Mapping[str, str | ColumnType] | None = None,
) -> DerivedWrite:
    """The declaration a SQL job implies on a table partitioned by ``partition_columns``
    (``None``: unknown; the operation and reads are still derived, partitions are not), run by
    ``engine`` (``core.tablefacts.ENGINES``; ``None``: not named, read as the engine whose
    footprint is widest, ``core.sqlfilefinding``). ``column_types`` maps partition columns to
    their types as the engine names them (``{"p": "int", "ds": "date"}``): a literal is then the
    value the engine casts it to (``core.partvalues``); a column without a type is read without
    guessing one."""
    text, allow_settings = job_text(sql)
    return derive_sql_write(read_sql_write(text, allow_settings), partition_columns, engine, column_types=column_types)


def derive_sql_write(
    found: SqlWrite,
    partition_columns: Sequence[str] | None,
    engine: str | None = None,
    *,
    column_types: Mapping[str, str | ColumnType] | None = None,
) -> DerivedWrite:
    """``derive_write`` for a statement ``read_sql_write`` has already read."""
    columns = _columns(partition_columns)
    file_finding(engine)  # an unknown engine is refused whatever the statement
    typing = ColumnTyping.of(column_types, engine)
    try:
        reading = _read_statement(found, columns, typing)
        confine_to_found_files(reading, engine, columns or {})
        partitions, why, ranges = _partitions(reading, columns, typing, engine)
    except RecursionError:
        raise nested_too_deeply(f"statement {shorten(found.statement)!r}") from None
    return DerivedWrite(
        table=found.table,
        operation=reading.operation,
        partitions=partitions,
        reads_target=reading.reads_target,
        why=tuple(reading.why + why),
        value_ranges=ranges,
        protocol_change=reading.operation is Operation.UPGRADE_PROTOCOL,
        zorder=reading.zorder,
    )


def _columns(partition_columns: Sequence[str] | None) -> dict[str, str] | None:
    if partition_columns is None:
        return None
    if isinstance(partition_columns, str):
        raise InvalidDeclarationError(f"partition_columns is a list of column names, not the string {partition_columns!r}")
    out: dict[str, str] = {}
    for column in partition_columns:
        if not isinstance(column, str) or not _COLUMN_RE.fullmatch(column):
            raise InvalidDeclarationError(f"invalid partition column {column!r}: use letters, digits, _")
        out[column.lower()] = column
    return out


def _read_statement(found: SqlWrite, columns: dict[str, str] | None, typing: ColumnTyping) -> Reading:
    if found.operation is Operation.UPGRADE_PROTOCOL:
        why = "REORG ... APPLY (UPGRADE ...) changes the table's protocol: it conflicts with every ongoing operation (spec 004)"
        return Reading(found.operation, False, [why], whole=why)
    if found.operation.deletes_unreferenced_files:
        why = f"{found.operation.value} deletes the files no version references, in every partition: the whole table"
        return Reading(found.operation, False, [why], whole=why)
    if first_keyword(found.statement) in ("OPTIMIZE", "REORG", "CALL"):
        return _command(found)
    tree = parse_statement(found.statement, f"statement {shorten(found.statement)!r}")
    if isinstance(tree, exp.Insert):
        return _insert(found, tree, typing)
    if isinstance(tree, exp.Merge):
        return read_merge(found, tree, columns or {}, typing)
    if isinstance(tree, (exp.Update, exp.Delete)):
        return _update_or_delete(found, tree, columns or {}, typing)
    if isinstance(tree, exp.TruncateTable):
        target = tree.expressions[0]
        static, unkeyed = _static_spec(tree.args.get("partition"), typing)
        reading = Reading(found.operation, True, [], static=static, label="the PARTITION clause")
        if static is None:
            reading.whole = unkeyed or "TRUNCATE TABLE without a PARTITION clause empties the whole table"
        return with_target_reads(reading, tree, target, found.table)
    why = f"{found.operation.value} ({first_keyword(found.statement)} TABLE) changes the table's metadata: the whole table"
    return Reading(found.operation, found.operation.reads_table, [why], whole=why)


def _insert(found: SqlWrite, tree: exp.Insert, typing: ColumnTyping) -> Reading:
    target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    static, unkeyed = _static_spec(target.args.get("partition"), typing)
    reading = Reading(found.operation, found.operation.reads_table, [], static=static, label="the PARTITION clause")
    if unkeyed is not None:
        reading.whole = unkeyed
    elif tree.args.get("where") is not None:
        reading.condition, reading.label = tree.args["where"], "REPLACE WHERE"
        reading.finds_files = True
        reading.qualifiers = target_names(target)
    elif static is None:
        reading.whole = (
            "INSERT OVERWRITE without a static PARTITION spec replaces the whole table"
            if found.operation is Operation.INSERT_OVERWRITE
            else "the rows' partition values come from the data (no static PARTITION clause): any partition"
        )
    reader = reads_table(tree, target, found.table)
    if reader is not None and found.operation is Operation.INSERT_INTO:
        reading.operation = Operation.MERGE
        reading.why.append(f"the query reads the target ({reader}): a merge, not a blind append ({_NOTE_1})")
    return with_target_reads(reading, tree, target, found.table)


def _update_or_delete(
    found: SqlWrite, tree: exp.Update | exp.Delete, columns: dict[str, str], typing: ColumnTyping
) -> Reading:
    where = tree.args.get("where")
    verb = "UPDATE" if isinstance(tree, exp.Update) else "DELETE"
    reading = Reading(found.operation, True, [], qualifiers=target_names(tree.this), label=f"{verb} WHERE", finds_files=True)
    if where is None:
        reading.whole = f"{verb} without WHERE touches every row: the whole table"
    else:
        reading.condition = where.this
    if isinstance(tree, exp.Update) and columns:
        qualifiers = reading.qualifiers

        def same(column: str, value: exp.Expr) -> bool:
            return is_column(value, column, qualifiers, bare=True)

        moves, whole = assignments(tree.expressions, columns, "UPDATE SET", same, typing=typing)
        if whole is not None:
            reading.anywhere.append(f"{whole}: the whole table")
        elif moves:
            reading.moves.append(moves)
    return with_target_reads(reading, tree, tree.this, found.table)


def _static_spec(partition: exp.Expr | None, typing: ColumnTyping) -> tuple[Spec | None, str | None]:
    """``PARTITION (ds = '2024-01-01', hr)``: the static values (``hr`` is dynamic), and why
    the clause names no one partition (a value the engine casts to NULL or decides)."""
    if not isinstance(partition, exp.Partition):
        return None, None
    spec: Spec = {}
    for item in partition.expressions:
        if isinstance(item, exp.EQ) and isinstance(item.this, exp.Column):
            literal = read_literal(item.this.name, item.expression, typing)
            if literal is None:
                continue
            if literal.value is not None:
                spec[item.this.name.lower()] = literal.value
                continue
            what = literal.anywhere or (
                "the engine casts the value to NULL, a partition no key names" if literal.nothing
                else f"the value is {' or '.join(literal.values)} as the engine in force casts it"
            )
            return None, f"PARTITION ({item.sql(dialect=DIALECT)}): {what}: the whole table"
    return spec or None, None


def _command(found: SqlWrite) -> Reading:
    """OPTIMIZE t WHERE p ZORDER BY ..., REORG TABLE t WHERE p APPLY (PURGE),
    CALL ...rewrite_data_files(table => 't', where => 'p')."""
    keyword = first_keyword(found.statement)
    tokens = sql_tokens(found.statement, "statement")
    rest, offset = tokens[1:], 0
    if tokens and tokens[0].token_type is sqlglot.TokenType.COMMAND:
        offset = tokens[0].end + 1
        rest = sql_tokens(found.statement[offset:], "statement")
    text = found.statement[offset:]
    qualifiers = frozenset({unquoted_parts(found.table)[-1].lower()})
    reading = Reading(found.operation, True, [], label=f"{keyword}'s WHERE", qualifiers=qualifiers)
    if keyword == "OPTIMIZE" and any(t.text.upper() == "ZORDER" for t in rest):
        reading.zorder = True
        reading.why.append(
            "OPTIMIZE ... ZORDER BY rewrites rows in a new order: with row-level concurrency it can still "
            "conflict with UPDATE, DELETE and MERGE (Databricks' row-level concurrency table)"
        )
    predicate = _call_where(rest) if keyword == "CALL" else _command_where(text, rest)
    if predicate is None:
        reading.whole = f"{keyword} without a WHERE condition rewrites the whole table"
        return reading
    try:
        reading.condition = sqlglot.parse_one(predicate, read=DIALECT, into=exp.Condition)
    except RecursionError:
        raise nested_too_deeply(f"{keyword}'s WHERE condition {shorten(predicate)!r}") from None
    except sqlglot.errors.SqlglotError:
        reading.whole = f"{keyword}'s WHERE condition {predicate!r} cannot be read: the whole table"
    return reading


def _command_where(text: str, tokens: list[sqlglot.Token]) -> str | None:
    _, after = dotted_name(tokens[1:] if tokens and tokens[0].token_type is sqlglot.TokenType.TABLE else tokens)
    if not after or after[0].token_type is not sqlglot.TokenType.WHERE:
        return None
    ends = [t.start for t in after[1:] if t.text.upper() in ("ZORDER", "APPLY")]
    return text[after[0].end + 1 : ends[0] if ends else len(text)].strip() or None


def _call_where(tokens: list[sqlglot.Token]) -> str | None:
    for i, token in enumerate(tokens[:-2]):
        named = token.text.lower() == "where" and tokens[i + 1].text == "=>"
        if named and tokens[i + 2].token_type is sqlglot.TokenType.STRING:
            return tokens[i + 2].text
    return None


def _partitions(
    reading: Reading, columns: dict[str, str] | None, typing: ColumnTyping, engine: str | None
) -> tuple[tuple[Mapping[str, Any], ...] | None, list[str], dict[str, Any]]:
    """The partition specs (``None``: the whole table), the reasons, the other columns' ranges."""
    if reading.whole is not None:
        return None, [reading.whole] if reading.whole not in reading.why else [], {}
    static: list[Spec] = [reading.static] if reading.static else [{}]
    if columns is None:
        if reading.static:
            return (dict(reading.static),), ["the static PARTITION clause names the partition"], {}
        return None, ["the table's partition columns are unknown: partitions not derived (the whole table)"], {}
    scope = ColumnScope(columns, reading.qualifiers, reading.bare, typing=typing,
                        narrow_shapes=engine in NARROW_SHAPES)
    why: list[str] = []
    try:
        specs = both(static, read_condition(reading.condition, scope) if reading.condition is not None else [{}])
        why += scope.notes
        if {} in specs:
            return None, why + [_whole_why(reading, columns), *reading.anywhere], _value_ranges(reading, columns)
        if reading.anywhere:
            return None, why + reading.anywhere, _value_ranges(reading, columns)
        found = list(specs)
        for moves in reading.moves:
            found = either(found, _moved(specs, moves))
            why.append(f"the rows it updates move to {_spelled(moves)}: those partitions are touched too")
        for piece in reading.pieces:
            found = either(found, [dict(piece.spec)])
            why.append(f"{piece.label} adds {partition_key(piece.spec)}")
    except TooManySpecs:
        return None, [f"{reading.label} reads as more than {MAX_SPECS} partition specs: the whole table"], {}
    ranges = _value_ranges(reading, columns)
    if not found:
        return None, why + [f"{reading.label} holds for no partition; treated as the whole table"], ranges
    named = ", ".join(sorted({c for s in found for c in s}))
    if reading.moves or reading.pieces:
        last = f"{reading.label} with the rows the statement moves or adds: {len(found)} partition spec(s) of {named}"
    else:
        last = f"{reading.label} confines the write to {len(found)} partition spec(s) of {named}"
    return tuple(found), why + [last], ranges


def _moved(specs: Sequence[Spec], moves: Mapping[str, str]) -> list[Spec]:
    """Where rows of ``specs`` land when ``SET`` gives their partition columns ``moves``."""
    out: list[Spec] = []
    for spec in specs:
        moved: Spec = {c: v for c, v in spec.items() if c not in moves}
        moved.update(moves)
        if moved not in out:
            out.append(moved)
    return out


def _spelled(moves: Mapping[str, str]) -> str:
    return ", ".join(f"{c} = {v!r}" for c, v in sorted(moves.items()))


def _whole_why(reading: Reading, columns: dict[str, str]) -> str:
    if not columns:
        return "the table has no partition columns: the whole table"
    if reading.label == "MERGE ON":
        return f"MERGE ON names no partition column of the target: reads the whole table ({_SPEC_003})"
    return f"{reading.label} does not pin any of the partition columns ({', '.join(columns.values())}): the whole table"


def _value_ranges(reading: Reading, columns: dict[str, str]) -> dict[str, Any]:
    """The condition's bounds on the target's other columns, when it is one conjunction."""
    if reading.condition is None:
        return {}
    names = {c.name.lower(): c.name for c in reading.condition.find_all(exp.Column) if c.name.lower() not in columns}
    if not names:
        return {}
    try:
        specs = read_condition(reading.condition, ColumnScope(names, reading.qualifiers, reading.bare))
    except TooManySpecs:
        return {}
    return dict(specs[0]) if len(specs) == 1 else {}


def check_derived_against(derived: DerivedWrite, declaration: WriteDeclaration, *, templated: bool = False) -> None:
    """The task's hand declaration says at least what its SQL does: the same operation, and
    partitions that hold every partition the SQL may touch (a wider declaration is accepted:
    admission only keeps more apart). ``templated`` (values still Jinja): columns only."""
    if derived.operation is not declaration.operation:
        reason = next((w for w in derived.why if "note (1)" in w), None)
        raise InvalidDeclarationError(
            f"the SQL job is a {derived.operation.value} but the task declares {declaration.operation.value}"
            f"{f' ({reason})' if reason else ''}; declare the operation the job performs"
        )
    declared = declaration.partitions
    if not declared:
        return  # the whole table: wider than anything the SQL does
    if derived.partitions is None and derived.operation is Operation.INSERT_INTO and not derived.reads_target:
        # A blind append whose rows carry their partition values (INSERT ... VALUES / SELECT
        # without a static PARTITION clause): the SQL cannot say where they land, the DAG can.
        # The declaration stands; the commit's observed footprint checks it afterwards.
        return
    shown = ", ".join(f"({', '.join(sorted(d))})" if templated else partition_key(d) for d in declared)
    for spec in derived.partitions or ({},):
        if any(_covers(d, spec, templated, declaration.string_columns) for d in declared):
            continue
        raise InvalidDeclarationError(_uncovered(derived, spec, shown, declaration.reads_whole_table))


def _covers(
    declared: Mapping[str, Any], spec: Mapping[str, Any], templated: bool, string_columns: frozenset[str] = frozenset()
) -> bool:
    """Whether declared spec ``declared`` surely holds every partition of derived ``spec``. On a
    column the table types STRING (``string_columns``) a declared text is its own spelling only:
    ``"2024-5-1"`` does not hold the SQL's ``'2024-05-01'``."""
    mine = {c.lower(): v for c, v in spec.items()}
    for column, value in declared.items():
        if column.lower() not in mine:
            return False
        if not templated and not any(
            value_within(mine[column.lower()], v)
            for v in _declared_values(column, value, as_text=column.lower() in string_columns)
        ):
            return False
    return True


def _declared_values(column: str, value: Any, *, as_text: bool = False) -> list[Any]:
    """What a declared value names when the column's type is not known: a text names what the
    same quoted literal in the SQL names (``"1"`` is ``1`` or, on a BOOLEAN column, ``true``), so
    a declaration and a condition that spell one literal agree whatever the type (on a STRING
    column ``"2024-5-1"`` is its own spelling, ``core.ranges.string_key``)."""
    spelled = canonical_spec_value(column, value, as_text=as_text)
    if as_text or not isinstance(value, str):
        return [spelled]
    typed = untyped_text_value(value, tuple(CastRules))
    if not isinstance(typed, Named):
        return [spelled]
    try:
        return [spelled, string_key(value), *(canonical_value(column, key) for key in typed.keys if key != value)]
    except InvalidFootprintError:
        return [spelled]


def _uncovered(derived: DerivedWrite, spec: Mapping[str, Any], shown: str, reads_whole_table: bool) -> str:
    why = "; ".join(derived.why)
    if not spec and derived.reads_target:
        flag = " (reads_whole_table=True does not widen what admission keeps apart)" if reads_whole_table else ""
        return (
            f"the SQL job reads the whole table ({why}) but the task declares only {shown}{flag}: admission "
            "would let writes to other partitions run beside it; declare no partitions (the whole table) "
            "or pin the partition in the SQL's condition"
        )
    if not spec:
        return (
            f"the SQL job may write any partition ({why}) but the task declares only {shown}; declare no "
            "partitions (the whole table) or write a static PARTITION (...) clause"
        )
    return (
        f"the SQL job may touch {partition_key(spec)} ({why}), which the declared partitions {shown} do "
        "not hold; declare partitions that hold what the SQL touches"
    )
