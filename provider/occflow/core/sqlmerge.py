"""A MERGE's footprint, clause by clause (issue 23): ``ON``'s partitions, where every ``WHEN``
clause's rows land (moved by ``UPDATE SET``, added by ``INSERT``), and ``WHEN NOT MATCHED BY
SOURCE``, which makes the whole table."""

from __future__ import annotations

from sqlglot import exp

from .errors import InvalidDeclarationError
from .partvalues import UNTYPED, ColumnTyping
from .sqlpredicates import Spec, read_literal
from .sqlread import SqlWrite
from .sqlreading import (
    Piece,
    Reading,
    assignments,
    column_key,
    conjuncts,
    is_column,
    short,
    target_names,
    with_target_reads,
)


def read_merge(
    found: SqlWrite, tree: exp.Merge, columns: dict[str, str], typing: ColumnTyping = UNTYPED
) -> Reading:
    target, source = tree.this, tree.args.get("using")
    qualifiers = target_names(target)
    reading = Reading(found.operation, True, [], condition=tree.args.get("on"), label="MERGE ON", bare=False)
    source_name = source.alias_or_name.lower() if isinstance(source, exp.Expr) else ""
    if source_name in qualifiers:
        reading.why.append(
            f"the source is also called {source_name!r}: no column of ON is surely the target's"
        )
        qualifiers = frozenset()
    reading.qualifiers = qualifiers
    if columns:
        _merge_clauses(reading, tree, columns, source_name, typing)
    return with_target_reads(reading, tree, target, found.table)


def _merge_clauses(
    reading: Reading, tree: exp.Merge, columns: dict[str, str], source_name: str, typing: ColumnTyping
) -> None:
    """What each WHEN clause adds to ON's partitions (issue 23): a MATCHED UPDATE's literal
    destinations, a NOT MATCHED INSERT's literal partition; a NOT MATCHED BY SOURCE clause or a
    value the data decides makes the whole table."""
    whens = tree.args.get("whens")
    equal = _on_equalities(reading.condition, reading.qualifiers, source_name, columns)
    target = reading.qualifiers
    for when in whens.expressions if isinstance(whens, exp.Whens) else ():
        if not isinstance(when, exp.When):
            raise InvalidDeclarationError(
                f"MERGE clause {short(when)!r} cannot be read: a WHEN ... THEN clause"
            )
        then, label = when.args.get("then"), _when_label(when)
        by_source, matched = bool(when.args.get("source")), bool(when.args.get("matched"))
        if isinstance(then, exp.Var) and then.name.upper() == "DELETE" and not by_source:
            continue  # deletes rows ON already selects
        if matched or by_source:
            if not (
                isinstance(then, exp.Update) or (isinstance(then, exp.Var) and then.name.upper() == "DELETE")
            ):
                raise InvalidDeclarationError(
                    f"{label} THEN {short(then)}: cannot be read (UPDATE SET ... or DELETE)"
                )
            if by_source:
                reading.anywhere.append(_by_source_why(label, when.args.get("condition")))
                continue

            def same(column: str, value: exp.Expr) -> bool:
                if is_column(value, column, target, bare=False):
                    return True  # SET ds = t.ds
                return isinstance(value, exp.Column) and (column, column_key(value)) in equal

            assigned = then.expressions if isinstance(then, exp.Update) else []
            moves, whole = assignments(assigned, columns, label, same, source_name, typing)
            if whole is not None:
                reading.anywhere.append(f"{whole}: the whole table")
            elif moves:
                reading.moves.append(moves)
            continue
        if not isinstance(then, exp.Insert):
            raise InvalidDeclarationError(f"{label} THEN {short(then)}: cannot be read (INSERT ...)")
        spec, whole = _inserted(then, columns, label, typing)
        if whole is not None:
            reading.anywhere.append(f"{whole}: the whole table")
        else:
            reading.pieces.append(Piece(f"{label} THEN INSERT", spec))


def _by_source_why(label: str, condition: exp.Expr | None) -> str:
    """Why a MERGE with a ``WHEN NOT MATCHED BY SOURCE`` clause is the whole table, whatever the
    clause's condition: found by the differential oracle on Iceberg (issue 23)."""
    clause = label if condition is None else f"{label} AND {short(condition)}"
    return (
        f"{clause}: the target rows no source row matches are found by joining the whole target (Spark "
        "plans a full outer join, no partition filter from ON), and on a copy-on-write Iceberg table the "
        "MERGE rewrites every data file it read, in every partition, whatever the clause's own condition: "
        "the whole table"
    )


def _when_label(when: exp.When) -> str:
    if when.args.get("matched"):
        return "WHEN MATCHED"
    return "WHEN NOT MATCHED BY SOURCE" if when.args.get("source") else "WHEN NOT MATCHED"


def _inserted(
    insert: exp.Insert, columns: dict[str, str], label: str, typing: ColumnTyping
) -> tuple[Spec, str | None]:
    """The partition a MERGE's ``INSERT (cols) VALUES (vals)`` writes (literal values), or why
    its rows may land anywhere (``INSERT *``, a value from the data, a partition column left out:
    it may be generated from the data)."""
    names, values = insert.this, insert.expression
    if isinstance(names, exp.Star):
        return (
            {},
            f"{label} THEN INSERT * takes the partition columns from the source: "
            "its rows land in any partition",
        )
    if names is None:
        return (
            {},
            f"{label} THEN INSERT VALUES (...) without a column list: "
            "which value is a partition column is not known",
        )
    if not isinstance(names, exp.Tuple) or not isinstance(values, exp.Tuple):
        raise InvalidDeclarationError(
            f"{label} THEN {short(insert)}: cannot be read (INSERT (cols) VALUES (vals) or INSERT *)"
        )
    if len(names.expressions) != len(values.expressions) or not all(
        isinstance(n, exp.Column) for n in names.expressions
    ):
        raise InvalidDeclarationError(
            f"{label} THEN {short(insert)}: the column list and the values do not pair up"
        )
    given = {n.name.lower(): v for n, v in zip(names.expressions, values.expressions, strict=True)}
    spec: Spec = {}
    for lowered, column in columns.items():
        if lowered not in given:
            return {}, (
                f"{label} THEN INSERT gives no value for partition column {column} (its default or generated "
                "value comes from the data): its rows land in any partition"
            )
        literal = read_literal(column, given[lowered], typing, assigned=True)
        if literal is None or literal.value is None:
            typed = "" if literal is None else f" ({literal.anywhere or 'NULL, or a value the engine in force decides'})"
            return (
                {},
                f"{label} THEN INSERT takes {column} from {short(given[lowered])}{typed}: "
                "its rows land in any partition",
            )
        spec[column] = literal.value
    return spec, None


def _on_equalities(
    on: exp.Expr | None, target: frozenset[str], source: str, columns: dict[str, str]
) -> set[tuple[str, str]]:
    """``(partition column, source column)`` pairs a top-level conjunct of ON holds equal
    (``t.ds = s.ds``): a matched row's ``ds`` already is that source column's value."""
    found: set[tuple[str, str]] = set()
    if on is None or not target or not source:
        return found
    for conjunct in conjuncts(on):
        if not isinstance(conjunct, exp.EQ):
            continue
        for mine, theirs in ((conjunct.this, conjunct.expression), (conjunct.expression, conjunct.this)):
            if not isinstance(mine, exp.Column) or not isinstance(theirs, exp.Column):
                continue
            column = columns.get(mine.name.lower())
            if column is None or mine.table.lower() not in target or theirs.table.lower() != source:
                continue
            if mine.args.get("db") is not None or theirs.args.get("db") is not None:
                continue
            found.add((column, column_key(theirs)))
    return found
