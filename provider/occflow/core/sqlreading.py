"""What one SQL write says before its condition is read as partition specs (``Reading``), and
the readers ``sqlderive`` and ``sqlmerge`` share: assignments to partition columns, a condition's
conjuncts, column names and whether the write reads its own target."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sqlglot import exp

from .errors import InvalidDeclarationError
from .identifiers import unquoted_parts
from .operations import Operation
from .partvalues import UNTYPED, ColumnTyping
from .sqlpredicates import Spec, read_literal
from .sqlread import DIALECT, shorten


@dataclass
class Reading:
    """What one statement says, before its condition is read as partition specs."""

    operation: Operation
    reads_target: bool
    why: list[str]
    whole: str | None = None  # why the footprint is the whole table, whatever else it says
    condition: exp.Expr | None = None
    label: str = "the condition"
    qualifiers: frozenset[str] = frozenset()
    bare: bool = True
    static: Spec | None = None
    #: Literal destinations of the rows the condition selects, one per assigning clause
    #: (``SET ds = 'B'``): partition column as declared -> canonical value of its type.
    moves: list[dict[str, str]] = field(default_factory=list)
    #: Rows added beside those the condition selects (a MERGE's WHEN NOT MATCHED inserts).
    pieces: list[Piece] = field(default_factory=list)
    #: Why rows it moves or adds may land in any partition (then the whole table).
    anywhere: list[str] = field(default_factory=list)
    zorder: bool = False
    #: The condition finds the files the write rewrites (UPDATE, DELETE, REPLACE WHERE): how much
    #: of it confines them depends on the engine (``core.sqlfilefinding``).
    finds_files: bool = False


@dataclass(frozen=True)
class Piece:
    """Rows a MERGE clause adds outside ``ON``'s partitions: where a ``WHEN NOT MATCHED`` clause
    inserts (``spec``, its literal value for every partition column)."""

    label: str
    spec: Spec


def assignments(
    assignments: Sequence[exp.Expr],
    columns: dict[str, str],
    label: str,
    same: Callable[[str, exp.Expr], bool],
    source: str = "",
    typing: ColumnTyping = UNTYPED,
) -> tuple[dict[str, str], str | None]:
    """An UPDATE SET's literal destinations for the partition columns, or why rows may move to
    any partition. ``same(column, value)``: ``value`` surely equals the row's own ``column``;
    ``SET *`` assigns each column from ``source``'s column of that name."""
    moves: dict[str, str] = {}
    for item in assignments:
        if isinstance(item, exp.Star):
            for lowered, column in columns.items():
                if not source or not same(column, exp.column(lowered, table=source)):
                    return {}, (
                        f"{label} THEN UPDATE SET * takes {column} from the source, which ON does not hold "
                        "equal to the target's: rows may move to any partition"
                    )
            continue
        if not isinstance(item, exp.EQ) or not isinstance(item.this, exp.Column):
            raise InvalidDeclarationError(
                f"{label}: the assignment {short(item)!r} cannot be read (column = value)"
            )
        assigned = columns.get(item.this.name.lower())
        if assigned is None:
            continue
        literal = read_literal(assigned, item.expression, typing, assigned=True)
        if literal is not None and literal.value is not None and assigned not in moves:
            moves[assigned] = literal.value
        elif literal is not None and (literal.nothing or literal.anywhere or len(literal.values) > 1):
            # NULL (the engine's cast of it) is a partition no key names yet; several values:
            # the engine in force decides which. Either way not one partition: the whole table.
            return {}, f"{label} sets {assigned} = {short(item.expression)}: {_destination(literal.anywhere)}"
        elif not same(assigned, item.expression):
            return (
                {},
                f"{label} sets {assigned} = {short(item.expression)}: "
                "rows move to partitions the data decides",
            )
    return moves, None


def _destination(anywhere: str | None) -> str:
    return anywhere or "not one partition of the column's type (NULL, or a value that depends on the engine)"


def conjuncts(node: exp.Expr) -> list[exp.Expr]:
    if isinstance(node, exp.Paren):
        return conjuncts(node.this)
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    return [node]


def column_key(node: exp.Column) -> str:
    return f"{node.table.lower()}.{node.name.lower()}"


def is_column(value: exp.Expr, column: str, qualifiers: frozenset[str], bare: bool) -> bool:
    """``value`` is the target's own ``column`` (``t.ds``; unqualified only where ``bare``)."""
    if isinstance(value, exp.Paren):
        return is_column(value.this, column, qualifiers, bare)
    if (
        not isinstance(value, exp.Column)
        or value.name.lower() != column.lower()
        or value.args.get("db") is not None
    ):
        return False
    return value.table.lower() in qualifiers if value.table else bare


def short(node: object) -> str:
    text = node.sql(dialect=DIALECT) if isinstance(node, exp.Expr) else str(node)
    return shorten(text)


def with_target_reads(reading: Reading, tree: exp.Expr, target: exp.Expr, table: str) -> Reading:
    """A statement that reads its target anywhere but through the target itself (a subquery,
    a self-MERGE) reads the whole table."""
    reader = reads_table(tree, target, table)
    if reader is not None:
        reading.reads_target = True
        reading.whole = reading.whole or f"it reads the target table in its query ({reader}): the whole table"
    return reading


def reads_table(tree: exp.Expr, target: exp.Expr, table: str) -> str | None:
    """Another reference to the target's table in the statement: a name that may resolve to it
    (``t``, ``db.t`` and ``cat.db.t`` may all be ``cat.db.t``); a CTE's own name is not."""
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    wanted = [p.lower() for p in unquoted_parts(table)]
    for node in tree.find_all(exp.Table):
        if node is target or not node.parts or not all(isinstance(p, exp.Identifier) for p in node.parts):
            continue
        parts = [p.name.lower() for p in node.parts]
        if len(parts) == 1 and parts[0] in ctes:
            continue
        shorter, longer = sorted((parts, wanted), key=len)
        if longer[len(longer) - len(shorter) :] == shorter:
            return node.sql(dialect=DIALECT)
    return None


def target_names(target: exp.Expr) -> frozenset[str]:
    """What a column of the target may be qualified with: its alias, else its name."""
    alias = target.args.get("alias")
    return frozenset({(alias.name if alias is not None else target.name).lower()})
