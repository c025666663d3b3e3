"""Random SQL writes and a differential oracle the derivation does not share (issue 23).

A generator makes random write statements on a table partitioned by ``ds`` and ``region``:
MERGE with every kind of WHEN clause, UPDATE (partition columns SET to literals, CASE, columns,
functions, NULL) and DELETE with random predicates, INSERT INTO / OVERWRITE with static and
dynamic partitions, Iceberg's ``rewrite_data_files`` and (delta-rs) ``REPLACE WHERE``. Each
statement is a small tree that renders to Spark SQL, to the delta-rs calls that do the same, and
to smaller statements for shrinking.

The oracle runs the statement on a real engine and reads what it really changed from the engine's
own record, with code of its own: Iceberg's ``files`` metadata table before and after (files gone
were removed, files new were added; data and delete files), the Delta log's ``add`` / ``remove``
actions. Every partition a file was added to or removed from must lie in
``derive_write(sql).partitions`` (``None``, the whole table, holds everything). Partition values
are compared in the one spelling partition keys use (``core.identifiers.canonical_value``); a
range bound that does not compare with a value holds it, as admission's overlap rule reads it.
Tables with evolved Iceberg partition specs, whose footprints go through ``TableFacts.reach``
(``Engine.table_facts``) and whose old-spec files are ``OldSpecFile``: ``sqlgen_evolved.py``.
"""

from __future__ import annotations

import dataclasses
import decimal
import json
import random
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from occflow.core.errors import InvalidDeclarationError
from occflow.core.identifiers import canonical_value
from occflow.core.sqlderive import DerivedWrite, derive_write
from occflow.core.tablefacts import TableFacts

PARTITION_COLUMNS = ("ds", "region")
DAYS = ("2024-01-01", "2024-01-02", "2024-01-03")
REGIONS = ("eu", "us", "ap")
# Partitions that hold data: not every pair, so some statements write into empty partitions.
FILLED = tuple((d, r) for d in DAYS for r in REGIONS if (d, r) not in {("2024-01-02", "ap"), ("2024-01-03", "us")})
ROWS_PER_PARTITION = 3
#: (id, ds, region, v); ids 1.. in partition order, v = id % 5.
BASE_ROWS = tuple(
    (i + 1, d, r, (i + 1) % 5) for i, (d, r) in enumerate((d, r) for d, r in FILLED for _ in range(ROWS_PER_PARTITION))
)
BASE_IDS = tuple(row[0] for row in BASE_ROWS)

Partition = tuple[str | None, str | None]  # (ds, region) as the engine records it


# ---------------------------------------------------------------- predicates


@dataclass(frozen=True)
class Atom:
    """A leaf condition; ``{t}`` stands for the target's qualifier (``t.``, ``fz.`` or nothing),
    ``{s}`` for the source's (``s.``)."""

    text: str


@dataclass(frozen=True)
class And:
    items: tuple[Pred, ...]


@dataclass(frozen=True)
class Or:
    items: tuple[Pred, ...]


@dataclass(frozen=True)
class Not:
    item: Pred


Pred = Atom | And | Or | Not


def render(pred: Pred | None, t: str, s: str = "s.") -> str:
    if pred is None:
        return "TRUE"
    if isinstance(pred, Atom):
        return pred.text.replace("{t}", t).replace("{s}", s)
    if isinstance(pred, Not):
        return f"NOT ({render(pred.item, t, s)})"
    joiner = " AND " if isinstance(pred, And) else " OR "
    return "(" + joiner.join(render(p, t, s) for p in pred.items) + ")"


def pred_shrinks(pred: Pred) -> Iterator[Pred]:
    """Smaller predicates: a child instead of its parent, a conjunct or disjunct left out."""
    if isinstance(pred, Not):
        yield pred.item
        for smaller in pred_shrinks(pred.item):
            yield Not(smaller)
    elif isinstance(pred, (And, Or)):
        yield from pred.items
        if len(pred.items) > 2:
            for i in range(len(pred.items)):
                yield type(pred)(pred.items[:i] + pred.items[i + 1 :])
        for i, item in enumerate(pred.items):
            for smaller in pred_shrinks(item):
                yield type(pred)(pred.items[:i] + (smaller,) + pred.items[i + 1 :])


def _shrink_optional(pred: Pred | None) -> Iterator[Pred | None]:
    if pred is not None:
        yield None
        yield from pred_shrinks(pred)


# ---------------------------------------------------------------- statements

Row = tuple[int, str | None, str | None, int]


def _values(rows: Sequence[Row]) -> str:
    def lit(value: object) -> str:
        if value is None:
            return "CAST(NULL AS STRING)"
        return f"'{value}'" if isinstance(value, str) else str(value)

    return ", ".join("(" + ", ".join(lit(v) for v in row) + ")" for row in rows)


@dataclass(frozen=True)
class Update:
    table: str
    alias: str | None
    sets: tuple[tuple[str, str], ...]  # (column, expression with {t})
    where: Pred | None

    def qualifier(self) -> str:
        return "" if self.alias is None else f"{self.alias}."

    def sql(self) -> str:
        t = self.qualifier()
        alias = f" {self.alias}" if self.alias else ""
        sets = ", ".join(f"{t}{c} = {render(Atom(e), t)}" for c, e in self.sets)
        where = "" if self.where is None else f" WHERE {render(self.where, t)}"
        return f"UPDATE {self.table}{alias} SET {sets}{where}"

    def shrinks(self) -> Iterator[Statement]:
        for i in range(len(self.sets)):
            if len(self.sets) > 1:
                yield dataclasses.replace(self, sets=self.sets[:i] + self.sets[i + 1 :])
        for where in _shrink_optional(self.where):
            yield dataclasses.replace(self, where=where)


@dataclass(frozen=True)
class Delete:
    table: str
    where: Pred | None

    def sql(self) -> str:
        where = "" if self.where is None else f" WHERE {render(self.where, '')}"
        return f"DELETE FROM {self.table}{where}"

    def shrinks(self) -> Iterator[Statement]:
        for where in _shrink_optional(self.where):
            yield dataclasses.replace(self, where=where)


@dataclass(frozen=True)
class When:
    """One WHEN clause: ``kind`` matched / not_matched / by_source; ``action`` update / delete /
    insert; ``sets`` (column, expression) or ``None`` for ``UPDATE SET *`` / ``INSERT *``."""

    kind: str
    action: str
    condition: Pred | None = None
    sets: tuple[tuple[str, str], ...] | None = None

    def sql(self, t: str) -> str:
        head = {"matched": "WHEN MATCHED", "not_matched": "WHEN NOT MATCHED",
                "by_source": "WHEN NOT MATCHED BY SOURCE"}[self.kind]
        cond = "" if self.condition is None else f" AND {render(self.condition, t)}"
        if self.action == "delete":
            body = "DELETE"
        elif self.action == "update":
            body = "UPDATE SET *" if self.sets is None else "UPDATE SET " + ", ".join(
                f"{t}{c} = {render(Atom(e), t)}" for c, e in self.sets)
        elif self.sets is None:
            body = "INSERT *"
        else:
            body = (f"INSERT ({', '.join(c for c, _ in self.sets)}) "
                    f"VALUES ({', '.join(render(Atom(e), t) for _, e in self.sets)})")
        return f"{head}{cond} THEN {body}"

    def shrinks(self) -> Iterator[When]:
        for cond in _shrink_optional(self.condition):
            yield dataclasses.replace(self, condition=cond)
        if self.sets is not None and self.action == "update" and len(self.sets) > 1:
            for i in range(len(self.sets)):
                yield dataclasses.replace(self, sets=self.sets[:i] + self.sets[i + 1 :])


@dataclass(frozen=True)
class Merge:
    table: str
    alias: str | None
    source: tuple[Row, ...]
    on: Pred
    whens: tuple[When, ...]

    def qualifier(self) -> str:
        return f"{self.alias or self.table.split('.')[-1]}."

    def sql(self) -> str:
        t = self.qualifier()
        alias = f" {self.alias}" if self.alias else ""
        source = f"(SELECT * FROM VALUES {_values(self.source)} AS src(id, ds, region, v)) s"
        whens = " ".join(w.sql(t) for w in self.whens)
        return f"MERGE INTO {self.table}{alias} USING {source} ON {render(self.on, t)} {whens}"

    def shrinks(self) -> Iterator[Statement]:
        for i in range(len(self.whens)):
            if len(self.whens) > 1:
                yield dataclasses.replace(self, whens=self.whens[:i] + self.whens[i + 1 :])
        for i, when in enumerate(self.whens):
            for smaller in when.shrinks():
                yield dataclasses.replace(self, whens=self.whens[:i] + (smaller,) + self.whens[i + 1 :])
        for on in pred_shrinks(self.on):
            yield dataclasses.replace(self, on=on)
        for i in range(len(self.source)):
            if len(self.source) > 1:
                yield dataclasses.replace(self, source=self.source[:i] + self.source[i + 1 :])


@dataclass(frozen=True)
class Insert:
    """INSERT INTO / OVERWRITE with a PARTITION clause (static values, dynamic columns) or none;
    ``dynamic_mode``: ``spark.sql.sources.partitionOverwriteMode=dynamic`` while it runs."""

    table: str
    overwrite: bool
    static: tuple[tuple[str, str], ...]
    dynamic: tuple[str, ...]
    rows: tuple[Row, ...]
    dynamic_mode: bool = False

    def sql(self) -> str:
        verb = "INSERT OVERWRITE" if self.overwrite else "INSERT INTO"
        parts = [f"{c} = '{v}'" for c, v in self.static] + list(self.dynamic)
        partition = f" PARTITION ({', '.join(parts)})" if parts else ""
        fixed = {c for c, _ in self.static}
        columns = [c for c in ("id", "ds", "region", "v") if c not in fixed]
        index = {"id": 0, "ds": 1, "region": 2, "v": 3}
        rows = [tuple(row[index[c]] for c in columns) for row in self.rows]
        values = _values(rows)  # type: ignore[arg-type]
        return f"{verb} {self.table}{partition} SELECT * FROM VALUES {values} AS src({', '.join(columns)})"

    def shrinks(self) -> Iterator[Statement]:
        for i in range(len(self.rows)):
            if len(self.rows) > 1:
                yield dataclasses.replace(self, rows=self.rows[:i] + self.rows[i + 1 :])
        if self.dynamic_mode:
            yield dataclasses.replace(self, dynamic_mode=False)

    def session_settings(self) -> dict[str, str]:
        return {"spark.sql.sources.partitionOverwriteMode": "dynamic"} if self.dynamic_mode else {}


@dataclass(frozen=True)
class Rewrite:
    """``CALL <catalog>.system.rewrite_data_files(table => ..., where => ...)`` rewriting every
    file its filter selects (``rewrite-all``)."""

    table: str
    where: Pred | None

    def sql(self) -> str:
        catalog, db, name = self.table.split(".")
        where = "" if self.where is None else f', where => "{render(self.where, "")}"'
        return (f"CALL {catalog}.system.rewrite_data_files(table => '{db}.{name}'{where}, "
                "options => map('rewrite-all', 'true'))")

    def shrinks(self) -> Iterator[Statement]:
        for where in _shrink_optional(self.where):
            yield dataclasses.replace(self, where=where)


@dataclass(frozen=True)
class ReplaceWhere:
    """Delta's ``INSERT INTO t REPLACE WHERE p SELECT ...``: delta-rs's overwrite with a predicate."""

    table: str
    where: Pred
    rows: tuple[Row, ...]

    def sql(self) -> str:
        rows, empty = (self.rows, "") if self.rows else (((0, DAYS[0], REGIONS[0], 0),), " WHERE FALSE")
        return (f"INSERT INTO {self.table} REPLACE WHERE {render(self.where, '')} "
                f"SELECT * FROM VALUES {_values(rows)} AS src(id, ds, region, v){empty}")

    def shrinks(self) -> Iterator[Statement]:
        for where in pred_shrinks(self.where):
            yield dataclasses.replace(self, where=where)
        for i in range(len(self.rows)):
            yield dataclasses.replace(self, rows=self.rows[:i] + self.rows[i + 1 :])


Statement = Update | Delete | Merge | Insert | Rewrite | ReplaceWhere


# ---------------------------------------------------------------- the generator


class StatementGenerator:
    """Random statements from a seeded ``random.Random``. ``dialect`` ``spark`` uses all of Spark
    SQL the generator knows (``DATE`` literals, INSERT, ``rewrite_data_files``); ``deltars`` the
    subset delta-rs runs (DataFusion predicates; DELETE, UPDATE, MERGE, REPLACE WHERE)."""

    def __init__(self, rng: random.Random, dialect: str, tables: Sequence[str]) -> None:
        self.rng, self.dialect, self.tables = rng, dialect, tuple(tables)

    # -- values
    def day(self, odd: bool = True) -> str:
        r = self.rng.random()
        if odd and r < 0.08:
            return self.rng.choice(["2024-01-04", "2023-12-31"])
        if odd and r < 0.12:
            return self.rng.choice(["2024-1-2", "2024-01-1"])  # another spelling of a day
        return self.rng.choice(DAYS)

    def region(self, odd: bool = True) -> str:
        r = self.rng.random()
        if odd and r < 0.08:
            return self.rng.choice(["sa", "af"])
        if odd and r < 0.12:
            return self.rng.choice(["EU", "e", "u"])
        return self.rng.choice(REGIONS)

    def value(self, column: str, odd: bool = True) -> str:
        return self.day(odd) if column == "ds" else self.region(odd)

    def literal(self, column: str) -> str:
        value = self.value(column)
        if column == "ds" and self.dialect == "spark" and value in DAYS and self.rng.random() < 0.1:
            return self.rng.choice([f"DATE '{value}'", f"CAST('{value}' AS DATE)"])
        return f"'{value}'"

    # -- predicates
    def atom(self, side: str = "{t}") -> Atom:
        rng, q = self.rng, side
        r = rng.random()
        column = rng.choice(PARTITION_COLUMNS)
        c = f"{q}{column}"
        if r < 0.30:
            op = rng.choice(["=", "=", "=", "<>", "<", "<=", ">", ">="])
            lit = self.literal(column)
            return Atom(f"{c} {op} {lit}" if rng.random() < 0.8 else f"{lit} {_flip(op)} {c}")
        if r < 0.45:
            values = ", ".join(self.literal(column) for _ in range(rng.randint(1, 3)))
            return Atom(f"{c} {'NOT IN' if rng.random() < 0.25 else 'IN'} ({values})")
        if r < 0.52:
            low, high = sorted([self.value(column, odd=False), self.value(column, odd=False)])
            return Atom(f"{c} {'NOT ' if rng.random() < 0.2 else ''}BETWEEN '{low}' AND '{high}'")
        if r < 0.56:
            return Atom(f"{c} IS {'NOT ' if rng.random() < 0.5 else ''}NULL")
        if r < 0.70:
            op = rng.choice(["=", "<>", "<", ">", ">="])
            other = rng.choice(["id", "v"])
            return Atom(f"{q}{other} {op} {rng.randint(0, 12) if other == 'id' else rng.randint(0, 4)}")
        if r < 0.76:
            ids = ", ".join(str(rng.choice(BASE_IDS)) for _ in range(rng.randint(1, 4)))
            return Atom(f"{q}id IN ({ids})")
        functions = [
            f"upper({q}region) = '{self.region().upper()}'",
            f"lower({q}region) IN ('{self.region()}', '{self.region()}')",
            f"substr({q}ds, 1, 7) = '2024-01'",
            f"substr({q}ds, 9, 2) = '0{rng.randint(1, 4)}'",
            f"length({q}region) = 2",
            f"coalesce({q}region, 'zz') = '{self.region()}'",
            f"concat({q}ds, {q}region) = '{self.day()}{self.region()}'",
            f"{q}ds = {q}region",
        ]
        return Atom(rng.choice(functions))

    def pred(self, depth: int = 0, side: str = "{t}") -> Pred:
        r = self.rng.random()
        if depth >= 3 or r < 0.45:
            return self.atom(side)
        if r < 0.70:
            return And(tuple(self.pred(depth + 1, side) for _ in range(self.rng.randint(2, 3))))
        if r < 0.90:
            return Or(tuple(self.pred(depth + 1, side) for _ in range(self.rng.randint(2, 3))))
        return Not(self.pred(depth + 1, side))

    def pinning(self, side: str = "{t}") -> Pred:
        """A predicate that usually pins a partition (so the footprint is not the whole table)."""
        rng = self.rng
        column = rng.choice(PARTITION_COLUMNS)
        c = f"{side}{column}"
        r = rng.random()
        if r < 0.5:
            first: Pred = Atom(f"{c} = {self.literal(column)}")
        elif r < 0.75:
            first = Atom(f"{c} IN ({', '.join(self.literal(column) for _ in range(rng.randint(1, 3)))})")
        elif r < 0.9:
            first = Atom(f"{c} {rng.choice(['<', '<=', '>', '>='])} {self.literal(column)}")
        else:
            first = Or((Atom(f"{c} = {self.literal(column)}"), Atom(f"{c} = {self.literal(column)}")))
        if rng.random() < 0.6:
            return And((first, self.pred(1, side)))
        return first

    # -- assignments
    def partition_value(self, column: str, t: str, merge: bool, by_source: bool = False) -> str:
        rng = self.rng
        r = rng.random()
        if r < 0.45:
            return self.literal(column)
        if r < 0.60:
            return f"CASE WHEN {t}v > {rng.randint(0, 4)} THEN {self.literal(column)} ELSE {t}{column} END"
        if r < 0.75:
            return f"{t}{column}"
        if r < 0.85 and merge and not by_source:
            return f"s.{column}"
        if r < 0.92:
            return rng.choice([f"upper({t}{column})", f"concat({t}{column}, '')", f"{t}{'region' if column == 'ds' else 'ds'}"])
        return "NULL"

    def sets(self, merge: bool, by_source: bool = False) -> tuple[tuple[str, str], ...]:
        rng = self.rng
        out: list[tuple[str, str]] = []
        for column in PARTITION_COLUMNS:
            if rng.random() < 0.35:
                out.append((column, self.partition_value(column, "{t}", merge, by_source)))
        if rng.random() < 0.8 or not out:
            out.append(("v", rng.choice(["{t}v + 1", "0"] + ([] if by_source or not merge else ["s.v"]))))
        rng.shuffle(out)
        return tuple(out)

    # -- rows
    def rows(self, count: int, unique_base: bool = True) -> tuple[Row, ...]:
        rng = self.rng
        ids = rng.sample(BASE_IDS, k=min(count, len(BASE_IDS))) if unique_base else []
        out: list[Row] = []
        for i in range(count):
            known = ids[i] if i < len(ids) and rng.random() < 0.6 else 100 + rng.randint(0, 50) * 10 + i
            region: str | None = None if rng.random() < 0.05 else self.region()
            out.append((known, self.day(), region, rng.randint(0, 9)))
        seen: set[int] = set()
        return tuple(r for r in out if not (r[0] in seen or seen.add(r[0])))  # type: ignore[func-returns-value]

    # -- statements
    def statement(self) -> Statement:
        rng, table = self.rng, self.rng.choice(self.tables)
        kinds = ["merge"] * 5 + ["update"] * 3 + ["delete"] * 2
        kinds += ["insert"] * 2 + ["rewrite"] if self.dialect == "spark" else ["replace_where"]
        kind = rng.choice(kinds)
        if kind == "update":
            alias = rng.choice([None, None, "x"])
            where = self.pinning() if rng.random() < 0.8 else (self.pred() if rng.random() < 0.9 else None)
            return Update(table, alias, self.sets(merge=False), where)
        if kind == "delete":
            return Delete(table, self.pinning() if rng.random() < 0.8 else self.pred())
        if kind == "merge":
            return self.merge(table)
        if kind == "insert":
            return self.insert(table)
        if kind == "rewrite":
            return Rewrite(table, self.pinning() if rng.random() < 0.85 else None)
        # delta-rs refuses rows outside the predicate: often none (a delete by overwrite).
        return ReplaceWhere(table, self.pinning(), self.rows(rng.choice([0, 0, 1, 2])))

    def merge(self, table: str) -> Merge:
        rng = self.rng
        alias = "t" if rng.random() < 0.8 or self.dialect == "deltars" else None
        on_parts: list[Pred] = [Atom("{t}id = s.id")]
        if rng.random() < 0.9:
            on_parts.append(self.pinning())
        for column in PARTITION_COLUMNS:
            if rng.random() < 0.3:
                on_parts.append(Atom(f"{{t}}{column} = s.{column}"))
        if rng.random() < 0.1:
            on_parts.append(self.pred())
        rng.shuffle(on_parts)
        on: Pred = And(tuple(on_parts)) if len(on_parts) > 1 else on_parts[0]
        if rng.random() < 0.05:
            on = Or((on, self.atom()))
        whens: dict[str, list[When]] = {"matched": [], "not_matched": [], "by_source": []}
        for _ in range(rng.randint(1, 4)):
            kind = rng.choice(["matched", "matched", "not_matched", "by_source"])
            conditional = rng.random() < 0.5
            if kind == "matched":
                cond = self.pred(1) if conditional else None
                if rng.random() < 0.3:
                    whens[kind].append(When(kind, "delete", cond))
                else:
                    star = rng.random() < 0.15
                    whens[kind].append(When(kind, "update", cond, None if star else self.sets(merge=True)))
            elif kind == "by_source":
                cond = (self.pinning() if rng.random() < 0.8 else self.pred(1)) if conditional or rng.random() < 0.5 else None
                if rng.random() < 0.5:
                    whens[kind].append(When(kind, "delete", cond))
                else:
                    whens[kind].append(When(kind, "update", cond, self.sets(merge=True, by_source=True)))
            else:
                cond = self.pred(1, side="s.") if conditional else None
                whens[kind].append(When(kind, "insert", cond, self.inserted()))
        ordered: list[When] = []
        for kind in ("matched", "not_matched", "by_source"):
            # Spark: only the last clause of a kind may omit its condition.
            group = sorted(whens[kind], key=lambda w: w.condition is None)
            ordered += [w for i, w in enumerate(group) if w.condition is not None or i == len(group) - 1]
        rng.shuffle(ordered)
        return Merge(table, alias, self.rows(rng.randint(2, 5)), on, tuple(ordered))

    def inserted(self) -> tuple[tuple[str, str], ...] | None:
        rng = self.rng
        if rng.random() < 0.12:
            return None  # INSERT *
        out: list[tuple[str, str]] = [("id", "s.id"), ("v", "s.v")]
        for column in PARTITION_COLUMNS:
            r = rng.random()
            if r < 0.75:
                out.append((column, self.literal(column)))
            elif r < 0.92:
                out.append((column, f"s.{column}"))
            # else: left out (NULL)
        rng.shuffle(out)
        return tuple(out)

    def insert(self, table: str) -> Insert:
        rng = self.rng
        overwrite = rng.random() < 0.5
        static: list[tuple[str, str]] = []
        dynamic: list[str] = []
        for column in PARTITION_COLUMNS:
            r = rng.random()
            if r < 0.55:
                static.append((column, self.value(column)))
            elif r < 0.75:
                dynamic.append(column)
        return Insert(table, overwrite, tuple(static), tuple(dynamic), self.rows(rng.randint(1, 3), False),
                      dynamic_mode=overwrite and rng.random() < 0.5)


def _flip(op: str) -> str:
    return {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(op, op)


# ---------------------------------------------------------------- the containment check


def _number(text: str) -> decimal.Decimal | None:
    try:
        number = decimal.Decimal(text)
    except decimal.InvalidOperation:
        return None
    return number if number.is_finite() else None


def _order(a: str, b: str) -> int | None:
    """-1, 0, 1; ``None`` when one is a number and the other is not (they do not compare)."""
    x, y = _number(a), _number(b)
    if (x is None) != (y is None):
        return None
    left, right = (x, y) if x is not None else (a, b)
    return (left > right) - (left < right)  # type: ignore[operator]


def _text_order(a: str, b: str) -> int | None:
    return (a > b) - (a < b)


#: How partition keys spell the NULL partition (docs/derivation.md): the engines' own directory name.
NULL_KEY = "__HIVE_DEFAULT_PARTITION__"


def value_holds(constraint: Any, raw: str | None, spelled_type: str | None = None, nulls_below: bool = False) -> bool:
    """Whether a derived spec's constraint (a key value or a range) holds the partition value
    ``raw`` the engine recorded (``None``: the NULL partition, which only the NULL key names).
    ``spelled_type``: the column's type; a STRING column's values are their own text (the key
    ``'2024-5-1'``, quoted, or the plain text) and order as text (``'07' < '1'``), whatever digits
    or days they hold; other columns' values compare canonically. ``nulls_below``: the engine
    orders NULL below every value when it finds files (Iceberg: ``p < 8`` rewrites the files of
    ``p = NULL``); a range open below holds the NULL partition, as docs/derivation.md reads such
    a key (on any engine: checked with ``nulls_below`` off, that reading is only wider)."""
    if raw is None:
        if isinstance(constraint, str):
            return constraint == NULL_KEY
        return nulls_below and constraint.lower is None
    textual = spelled_type is not None and spelled_type.lower() in ("string", "varchar", "char")
    value = raw if textual else canonical_value("value", raw)
    if isinstance(constraint, str):
        if textual and len(constraint) >= 2 and constraint[0] == constraint[-1] == "'":
            return constraint[1:-1] == raw
        return value == constraint
    order_of = _text_order if textual else _order
    lower, upper = constraint.lower, constraint.upper
    if lower is not None:
        order = order_of(value, str(lower))
        if order is not None and (order < 0 or (order == 0 and not constraint.lower_inclusive)):
            return False
    if upper is not None:
        order = order_of(value, str(upper))
        if order is not None and (order > 0 or (order == 0 and not constraint.upper_inclusive)):
            return False
    return True


@dataclass(frozen=True)
class OldSpecFile:
    """A touched file written under a partition spec older than the table's current one (issue
    33): its spec id, the values of that spec's identity fields (column, value as the engine
    records it) and ``rows``: the current-spec partitions (tuples in the table's partition column
    order) of every row the base table's files of that old partition hold, read from the rows
    themselves (Iceberg's ``_file`` column).

    A file is the unit two writes conflict on, so every write that touches it must be keyed by
    all of its rows' partitions, not only the ones it changes: then any two such writes overlap.
    A footprint holds the file when it holds every one of ``rows``."""

    spec_id: int
    values: tuple[tuple[str, str | None], ...]
    rows: frozenset[tuple[str | None, ...]]

    def __str__(self) -> str:
        shown = ", ".join(f"{c}={v}" for c, v in self.values) or "unpartitioned"
        return f"spec {self.spec_id} file ({shown}) of rows {sorted(self.rows, key=str)}"


def outside(derived: DerivedWrite, touched: set[Any], columns: Sequence[str] = PARTITION_COLUMNS,
            column_types: Mapping[str, str] | None = None, nulls_below: bool = False) -> set[Any]:
    """The touched partitions the derived footprint does not hold (``columns``: the table's
    partition columns, in the order of the touched tuples; ``column_types``: their types;
    ``nulls_below``: see ``value_holds``)."""
    if derived.partitions is None:
        return set()
    found = set()
    for partition in touched:
        if isinstance(partition, OldSpecFile):
            if outside(derived, set(partition.rows), columns, column_types, nulls_below):
                found.add(partition)
            continue
        values = dict(zip(columns, partition, strict=True))
        held = any(
            all(value_holds(constraint, values[column.lower()], (column_types or {}).get(column.lower()), nulls_below)
                for column, constraint in spec.items())
            for spec in derived.partitions
        )
        if not held:
            found.add(partition)
    return found


# ---------------------------------------------------------------- engines


class Rejected(Exception):
    """The engine refused the statement (an analysis or runtime error of its own)."""


class Engine(Protocol):
    name: str
    #: The engine as ``derive_write(..., engine=)`` names it (``core.tablefacts.ENGINES``).
    engine: str
    #: The table's partition columns (the order of a touched tuple) and their types as the
    #: engine's schema names them: what ``TableFacts.partition_column_types`` would hold.
    columns: tuple[str, ...]
    column_types: Mapping[str, str]
    #: The partitions of the base table, as a touched tuple spells them (for counting "wider").
    base_partitions: tuple[tuple[str | None, ...], ...]
    #: Whether the engine's file finding orders NULL below every value (``value_holds``).
    nulls_below: bool

    def touched(self, statement: Statement) -> set[Partition]:
        """Run ``statement`` from the base table state; the partitions of every file it added or
        removed; the table is back in its base state afterwards. ``Rejected`` if the engine
        refuses it."""
        ...

    def table_facts(self, table: str) -> TableFacts | None:
        """The table's facts as occflow's reader read them from the engine, when a write's
        footprint goes through ``TableFacts.reach`` as the operator's does (evolved Iceberg
        specs); ``None``: the derivation's partitions as they are."""
        ...


def _spark_error(exc: BaseException) -> bool:
    name = type(exc).__name__
    return name in ("AnalysisException", "ParseException", "IllegalArgumentException", "Py4JJavaError",
                    "SparkRuntimeException", "UnsupportedOperationException", "PythonException",
                    "NumberFormatException", "ArithmeticException", "SparkUpgradeException") \
        or type(exc).__module__.startswith(("pyspark", "py4j"))


class IcebergOnSpark:
    """Two Iceberg tables (copy-on-write and merge-on-read, format v2) in one Spark session,
    reset to their base snapshot after every statement (``rollback_to_snapshot``)."""

    name = "iceberg"
    engine = "spark-iceberg"
    nulls_below = True
    columns: tuple[str, ...] = PARTITION_COLUMNS
    column_types: Mapping[str, str] = {"ds": "string", "region": "string"}
    base_partitions: tuple[tuple[str | None, ...], ...] = FILLED

    def __init__(self, spark: Any, database: str = "lake.db", prefix: str = "fz") -> None:
        self.spark = spark
        self.tables = (f"{database}.{prefix}_cow", f"{database}.{prefix}_mor")
        self.base: dict[str, int] = {}
        self.base_files: dict[str, dict[str, Partition]] = {}
        self.commits = 0
        for table in self.tables:
            self._create(table)

    def _create(self, table: str) -> None:
        spark = self.spark
        spark.sql(f"DROP TABLE IF EXISTS {table}")
        mode = "merge-on-read" if table.endswith("_mor") else "copy-on-write"
        spark.sql(
            f"CREATE TABLE {table} (id BIGINT, ds STRING, region STRING, v INT) USING iceberg "
            f"PARTITIONED BY (ds, region) TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='{mode}', "
            f"'write.update.mode'='{mode}', 'write.merge.mode'='{mode}')"
        )
        half = len(BASE_ROWS) // 2
        for rows in (BASE_ROWS[:half], BASE_ROWS[half:]):  # two files in most partitions
            spark.sql(f"INSERT INTO {table} VALUES {_values(rows)}")
        self.base[table] = self._current(table)
        self.base_files[table] = self._files(table)

    def _current(self, table: str) -> int:
        rows = self.spark.sql(
            f"SELECT snapshot_id FROM {table}.history WHERE is_current_ancestor ORDER BY made_current_at DESC LIMIT 1"
        ).collect()
        return int(rows[0][0])

    def _files(self, table: str) -> dict[str, Partition]:
        rows = self.spark.sql(f"SELECT file_path, partition.ds, partition.region FROM {table}.files").collect()
        return {r[0]: (r[1], r[2]) for r in rows}

    def table_facts(self, table: str) -> TableFacts | None:
        return None  # a table never evolved: the derivation's partitions are the footprint

    def touched(self, statement: Statement) -> set[Partition]:
        table, spark = statement.table, self.spark
        settings = statement.session_settings() if isinstance(statement, Insert) else {}
        try:
            for key, value in settings.items():
                spark.conf.set(key, value)
            try:
                spark.sql(statement.sql()).collect()
            except Exception as exc:
                if _spark_error(exc):
                    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
                    raise Rejected(f"{type(exc).__name__}: {lines[0][:300] if lines else ''}") from None
                raise
        finally:
            for key in settings:
                spark.conf.unset(key)
        before, after = self.base_files[table], self._files(table)
        changed = {p for f, p in after.items() if f not in before} | {p for f, p in before.items() if f not in after}
        if not changed:
            return changed  # no commit, or one that changed no file: the table is as it was
        table_name = table.split(".", 1)[1]
        spark.sql(f"CALL {table.split('.')[0]}.system.rollback_to_snapshot('{table_name}', {self.base[table]})")
        self.commits += 1
        if self.commits % 150 == 0:
            for name in self.tables:  # keep the metadata small: it is rewritten on every commit
                self._create(name)
        return changed


class DeltaRs:
    """A delta-rs table copied from a template (two files in most partitions) for every statement;
    what a statement did is read from the ``_delta_log`` JSON of the versions it committed."""

    name = "deltars"
    engine = "delta-rs"
    nulls_below = False  # delta-kernel prunes NULL partitions exactly (core.sqlfilefinding)
    columns: tuple[str, ...] = PARTITION_COLUMNS
    column_types: Mapping[str, str] = {"ds": "string", "region": "string"}
    base_partitions: tuple[tuple[str | None, ...], ...] = FILLED

    def __init__(self, workdir: Path) -> None:
        import pyarrow as pa  # optional heavy dependency
        from deltalake import write_deltalake  # optional heavy dependency

        self.pa = pa
        self.workdir = Path(workdir)
        self.template = self.workdir / "template"
        shutil.rmtree(self.template, ignore_errors=True)
        half = len(BASE_ROWS) // 2
        for rows in (BASE_ROWS[:half], BASE_ROWS[half:]):
            write_deltalake(str(self.template), self._arrow(rows), partition_by=list(PARTITION_COLUMNS), mode="append")
        self.base_version = 1
        self.tables = ("db.fz",)
        self.counter = 0

    def _arrow(self, rows: Sequence[Row]) -> Any:
        pa = self.pa
        schema = pa.schema([("id", pa.int64()), ("ds", pa.string()), ("region", pa.string()), ("v", pa.int64())])
        return pa.Table.from_pylist([dict(zip(("id", "ds", "region", "v"), r, strict=True)) for r in rows], schema=schema)

    def table_facts(self, table: str) -> TableFacts | None:
        return None  # a table never evolved: the derivation's partitions are the footprint

    def touched(self, statement: Statement) -> set[Partition]:
        from deltalake import DeltaTable, write_deltalake  # optional heavy dependency

        self.counter += 1
        path = self.workdir / f"t{self.counter % 4}"
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(self.template, path)
        table = DeltaTable(str(path))
        try:
            self._run(statement, table, write_deltalake, str(path))
        except (AssertionError, NameError, TypeError, AttributeError, KeyError):
            raise  # a mistake of this module, not the engine's refusal
        except Exception as exc:  # delta-rs raises its own, DataFusion's and Arrow's errors
            first = str(exc).splitlines()[0][:300] if str(exc) else ""
            raise Rejected(f"{type(exc).__name__}: {first}") from None
        touched: set[Any] = set()
        log = path / "_delta_log"
        version = self.base_version + 1
        while (log / f"{version:020d}.json").exists():
            for line in (log / f"{version:020d}.json").read_text().splitlines():
                action = json.loads(line)
                for key in ("add", "remove"):
                    if key in action:
                        touched.add(self._partition(action[key].get("partitionValues") or {}))
            version += 1
        return touched

    def _partition(self, values: Mapping[str, str | None]) -> tuple[str | None, ...]:
        return (values.get("ds"), values.get("region"))

    def _run(self, statement: Statement, table: Any, write: Callable[..., Any], path: str) -> None:
        if isinstance(statement, Delete):
            table.delete(None if statement.where is None else render(statement.where, ""))
        elif isinstance(statement, Update):
            table.update(updates={c: render(Atom(e), "") for c, e in statement.sets},
                         predicate=None if statement.where is None else render(statement.where, ""))
        elif isinstance(statement, ReplaceWhere):
            write(path, self._arrow(statement.rows), mode="overwrite", predicate=render(statement.where, ""))
        elif isinstance(statement, Merge):
            t = statement.qualifier()
            merger = table.merge(self._arrow(statement.source), predicate=render(statement.on, t),
                                 source_alias="s", target_alias="t")
            for when in statement.whens:
                cond = None if when.condition is None else render(when.condition, t)
                sets = None if when.sets is None else {c: render(Atom(e), t) for c, e in when.sets}
                if when.kind == "matched" and when.action == "delete":
                    merger = merger.when_matched_delete(predicate=cond)
                elif when.kind == "matched":
                    merger = (merger.when_matched_update_all(predicate=cond) if sets is None
                              else merger.when_matched_update(updates=sets, predicate=cond))
                elif when.kind == "not_matched":
                    merger = (merger.when_not_matched_insert_all(predicate=cond) if sets is None
                              else merger.when_not_matched_insert(updates=sets, predicate=cond))
                elif when.action == "delete":
                    merger = merger.when_not_matched_by_source_delete(predicate=cond)
                else:
                    merger = merger.when_not_matched_by_source_update(updates=sets or {}, predicate=cond)
            merger.execute()
        else:
            raise AssertionError(f"delta-rs runs no {type(statement).__name__}")


# ---------------------------------------------------------------- typed partition columns (issue 33)

#: A second table whose partition columns have types, and the spellings of a value the engines
#: cast (issue 33, item 5): text for a number on INT (``'07'``, ``' 7'``, ``'+7'``), partial and
#: unpadded days on DATE, BOOLEAN's ``1`` / ``'yes'`` / ``'t'``, numbers on a STRING holding digits.
TYPED_COLUMNS = ("p", "d", "b", "hh")
TYPED_TYPES: Mapping[str, str] = {"p": "int", "d": "date", "b": "boolean", "hh": "string"}
TypedPartition = tuple[int | None, str | None, bool | None, str | None]
#: The partitions that hold rows; one with a NULL ``p``, one NULL in every other column, ``hh``
#: holding ``'07'``, ``'7'``, ``' 7'``, a day spelled two ways (``'2024-5-1'``, ``'2024-05-01'``:
#: two partitions of a STRING column) and a text that starts with a letter (for ``LIKE 'x%'``).
TYPED_PARTITIONS: tuple[TypedPartition, ...] = (
    (7, "2024-01-01", True, "07"), (7, "2024-01-01", False, "7"), (8, "2024-05-01", True, " 7"),
    (10, "2024-05-01", False, "10"), (70, "2024-01-02", True, "07"), (None, "2024-01-01", True, "7"),
    (9, None, None, None), (11, "2023-12-31", True, "2024-5-1"), (11, "2024-05-01", False, "2024-05-01"),
    (12, "2025-01-01", True, "x7"),
)
TypedRow = tuple[int, int | None, str | None, bool | None, str | None, int]
#: (id, p, d, b, hh, v): two rows per partition, ids 1.. in partition order, v = id % 5.
TYPED_ROWS: tuple[TypedRow, ...] = tuple(
    (i + 1, *part, (i + 1) % 5) for i, part in enumerate(p for p in TYPED_PARTITIONS for _ in range(2))
)
TYPED_IDS = tuple(row[0] for row in TYPED_ROWS)

#: Each column's literals, as a write may spell them: (spelling, weight). Spellings an engine
#: refuses are kept (a refusal is counted, not checked); ``{day}`` / ``{n}`` are filled in.
TYPED_LITERALS: Mapping[str, tuple[str, ...]] = {
    "p": ("7", "8", "10", "'07'", "' 7'", "'7'", "'+7'", "'08'", "'010'", "7.0", "'7.0'", "70", "'x'", "9"),
    "d": ("'2024-01-01'", "'2024-1-1'", "'2024-05-01'", "'2024-5-1'", "'2024-01'", "'2024-05'", "'2024'",
          "DATE '2024-01-01'", "'2024-01-02'", "'2024-01-01 00:00:00'", "'2024-01-03'"),
    "b": ("true", "false", "1", "0", "'yes'", "'t'", "'f'", "'true'", "'no'", "'1'", "'on'"),
    "hh": ("'07'", "'7'", "' 7'", "'10'", "7", "10", "'08'", "8", "07", "'2024-5-1'", "'2024-05-01'", "'x7'",
           "'xa'"),
}
#: Issue 33, item 4's shapes: NULL partitions, prefix LIKE, CAST / date functions of a partition
#: column (``{q}``: the qualifier; ``{op}``, ``{day}``, ``{year}`` filled in). Functions delta-rs's
#: SQL lacks (``year``, ``date``) are Spark's only.
SHAPED_ATOMS: tuple[str, ...] = (
    "{q}hh LIKE 'x%'", "{q}hh LIKE 'x7%'", "{q}hh LIKE 'x_'", "{q}hh LIKE '0%'", "{q}hh LIKE '2024-0%'",
    "{q}hh LIKE '2024-5%'", "{q}hh NOT LIKE 'x%'", "CAST({q}hh AS STRING) LIKE 'x%'", "{q}hh LIKE 'X%'",
    "CAST({q}d AS DATE) {op} {day}", "to_date({q}d) {op} {day}", "CAST({q}hh AS STRING) {op} '2024-05-01'",
    "{q}d IS NULL", "{q}b IS NULL", "{q}hh IS NULL", "{q}p IS NULL", "NOT ({q}hh IS NOT NULL)",
    "CAST({q}p AS STRING) = '7'",
)
SPARK_SHAPED_ATOMS: tuple[str, ...] = ("year({q}d) {op} {year}", "date({q}d) {op} {day}", "{year} {op} year({q}d)")


def _typed_sql(value: object, column: str) -> str:
    """A typed row's value as a Spark SQL literal of the column's type (``d`` is the DATE; ``hh``
    holds day-shaped text too, which stays text: Spark's VALUES does not mix DATE and STRING)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if column == "d":
        return f"DATE '{value}'"
    return f"'{value}'" if isinstance(value, str) else str(value)


_ROW_COLUMNS = ("id", *TYPED_COLUMNS, "v")


def _typed_values(rows: Sequence[TypedRow]) -> str:
    return ", ".join("(" + ", ".join(_typed_sql(v, c) for v, c in zip(row, _ROW_COLUMNS, strict=True)) + ")"
                     for row in rows)


_TYPED_SOURCE = "AS src(id, p, d, b, hh, v)"


@dataclass(frozen=True)
class TypedMerge(Merge):
    """A MERGE whose source has the typed table's columns."""

    def sql(self) -> str:
        t = self.qualifier()
        alias = f" {self.alias}" if self.alias else ""
        source = f"(SELECT * FROM VALUES {_typed_values(self.source)} {_TYPED_SOURCE}) s"  # type: ignore[arg-type]
        whens = " ".join(w.sql(t) for w in self.whens)
        return f"MERGE INTO {self.table}{alias} USING {source} ON {render(self.on, t)} {whens}"


@dataclass(frozen=True)
class TypedReplaceWhere(ReplaceWhere):
    """delta-rs's overwrite with a predicate on the typed table; no rows: a delete by overwrite."""

    def sql(self) -> str:
        rows, empty = (self.rows, "") if self.rows else ((TYPED_ROWS[0],), " WHERE FALSE")
        return (f"INSERT INTO {self.table} REPLACE WHERE {render(self.where, '')} "
                f"SELECT * FROM VALUES {_typed_values(rows)} {_TYPED_SOURCE}{empty}")  # type: ignore[arg-type]


@dataclass(frozen=True)
class TypedInsert:
    """INSERT INTO / OVERWRITE the typed table with a static PARTITION clause whose values are
    spelled as ``TYPED_LITERALS`` spell them (``PARTITION (p = '07')``); Spark only."""

    table: str
    overwrite: bool
    static: tuple[tuple[str, str], ...]
    rows: tuple[TypedRow, ...]

    def sql(self) -> str:
        verb = "INSERT OVERWRITE" if self.overwrite else "INSERT INTO"
        fixed = {c for c, _ in self.static}
        columns = [c for c in ("id", *TYPED_COLUMNS, "v") if c not in fixed]
        index = {c: i for i, c in enumerate(("id", *TYPED_COLUMNS, "v"))}
        rows = ", ".join("(" + ", ".join(_typed_sql(row[index[c]], c) for c in columns) + ")" for row in self.rows)
        parts = ", ".join(f"{c} = {v}" for c, v in self.static)
        return f"{verb} {self.table} PARTITION ({parts}) SELECT * FROM VALUES {rows} AS src({', '.join(columns)})"

    def shrinks(self) -> Iterator[Any]:
        for i in range(len(self.rows)):
            if len(self.rows) > 1:
                yield dataclasses.replace(self, rows=self.rows[:i] + self.rows[i + 1 :])


class TypedStatementGenerator(StatementGenerator):
    """Statements on the typed table (``TYPED_COLUMNS``): every partition condition and SET uses
    one of ``TYPED_LITERALS``' spellings, so a footprint keyed by spelling rather than by value
    (``p=07`` where the engine rewrote ``p=7``) is caught."""

    def literal(self, column: str) -> str:
        spellings = TYPED_LITERALS[column]
        if column == "d" and self.dialect == "deltars" and self.rng.random() < 0.5:
            spellings = tuple(x for x in spellings if x.startswith("'2024-0") and len(x) == 12)  # days it parses
        return self.rng.choice(spellings)

    def shaped(self, side: str = "{t}") -> Atom:
        """One of issue 33's item 4 shapes (``SHAPED_ATOMS``)."""
        rng = self.rng
        shapes = SHAPED_ATOMS + (SPARK_SHAPED_ATOMS if self.dialect == "spark" else ())
        text = rng.choice(shapes).format(
            q=side, op=rng.choice(["=", "=", "<>", "<", "<=", ">", ">="]), day=self.literal("d"),
            year=rng.choice(["2023", "2024", "2025"]),
        )
        return Atom(text)

    def atom(self, side: str = "{t}") -> Atom:
        rng, q = self.rng, side
        if rng.random() < 0.15:
            return self.shaped(side)
        column = rng.choice(TYPED_COLUMNS)
        c = f"{q}{column}"
        r = rng.random()
        if r < 0.40:
            op = rng.choice(["=", "=", "=", "<>", "<", "<=", ">", ">="])
            lit = self.literal(column)
            return Atom(f"{c} {op} {lit}" if rng.random() < 0.8 else f"{lit} {_flip(op)} {c}")
        if r < 0.55:
            values = ", ".join(self.literal(column) for _ in range(rng.randint(1, 3)))
            return Atom(f"{c} {'NOT IN' if rng.random() < 0.25 else 'IN'} ({values})")
        if r < 0.62:
            low, high = self.literal(column), self.literal(column)
            return Atom(f"{c} {'NOT ' if rng.random() < 0.2 else ''}BETWEEN {low} AND {high}")
        if r < 0.67:
            return Atom(f"{c} IS {'NOT ' if rng.random() < 0.5 else ''}NULL")
        if r < 0.72:
            return Atom(rng.choice([f"{q}b", f"NOT {q}b"]))
        if r < 0.86:
            return Atom(f"{q}v {rng.choice(['=', '<>', '<', '>'])} {rng.randint(0, 4)}")
        ids = ", ".join(str(rng.choice(TYPED_IDS)) for _ in range(rng.randint(1, 4)))
        return Atom(f"{q}id IN ({ids})")

    def pinning(self, side: str = "{t}") -> Pred:
        rng = self.rng
        column = rng.choice(TYPED_COLUMNS)
        c = f"{side}{column}"
        r = rng.random()
        if r < 0.15:
            first: Pred = self.shaped(side)
        elif r < 0.55:
            first = Atom(f"{c} = {self.literal(column)}")
        elif r < 0.8:
            first = Atom(f"{c} IN ({', '.join(self.literal(column) for _ in range(rng.randint(1, 3)))})")
        else:
            first = Atom(f"{c} {rng.choice(['<', '<=', '>', '>='])} {self.literal(column)}")
        return And((first, self.pred(1, side))) if rng.random() < 0.5 else first

    def sets(self, merge: bool, by_source: bool = False) -> tuple[tuple[str, str], ...]:
        rng = self.rng
        out = [(c, self.literal(c)) for c in TYPED_COLUMNS if rng.random() < 0.3]
        if rng.random() < 0.8 or not out:
            out.append(("v", rng.choice(["{t}v + 1", "0"])))
        rng.shuffle(out)
        return tuple(out)

    def typed_rows(self, count: int) -> tuple[TypedRow, ...]:
        rng = self.rng
        chosen = rng.sample(TYPED_ROWS, k=count)
        return tuple((row[0] if rng.random() < 0.7 else 100 + i, *row[1:]) for i, row in enumerate(chosen))

    def statement(self) -> Any:
        rng, table = self.rng, self.rng.choice(self.tables)
        kinds = ["delete"] * 3 + ["update"] * 3 + ["merge"] * 2
        kinds += ["insert"] * 2 if self.dialect == "spark" else ["replace_where"]
        kind = rng.choice(kinds)
        if kind == "delete":
            return Delete(table, self.pinning() if rng.random() < 0.85 else self.pred())
        if kind == "update":
            return Update(table, None, self.sets(merge=False), self.pinning() if rng.random() < 0.85 else self.pred())
        if kind == "replace_where":
            return TypedReplaceWhere(table, self.pinning(), ())
        if kind == "insert":
            static = tuple((c, self.literal(c)) for c in TYPED_COLUMNS)
            return TypedInsert(table, rng.random() < 0.5, static, self.typed_rows(rng.randint(1, 2)))
        return self.typed_merge(table)

    def typed_merge(self, table: str) -> TypedMerge:
        rng = self.rng
        on: Pred = And((Atom("{t}id = s.id"), self.pinning()))
        whens: list[When] = []
        if rng.random() < 0.8:
            whens.append(When("matched", "delete" if rng.random() < 0.3 else "update", None,
                              None if rng.random() < 0.3 else self.sets(merge=True)))
        if rng.random() < 0.5 or not whens:
            values = tuple([("id", "s.id"), ("v", "s.v"), *((c, self.literal(c)) for c in TYPED_COLUMNS)])
            whens.append(When("not_matched", "insert", None, values))
        if rng.random() < 0.3:
            whens.append(When("by_source", "delete", self.pinning()))
        whens = [dataclasses.replace(w, sets=w.sets) if w.action != "update" or w.sets else
                 dataclasses.replace(w, sets=(("v", "{t}v + 1"),)) for w in whens]
        return TypedMerge(table, "t", self.typed_rows(rng.randint(1, 3)), on, tuple(whens))  # type: ignore[arg-type]


class TypedDeltaRs(DeltaRs):
    """``DeltaRs`` on the typed table (p INT, d DATE, b BOOLEAN, hh STRING; two files in most
    partitions), its types as delta-rs's schema names them."""

    name = "deltars-typed"
    columns = TYPED_COLUMNS
    column_types: Mapping[str, str] = {"p": "integer", "d": "date", "b": "boolean", "hh": "string"}
    base_partitions = tuple(
        tuple(None if v is None else str(v).lower() if isinstance(v, bool) else str(v) for v in part)
        for part in TYPED_PARTITIONS
    )

    def __init__(self, workdir: Path) -> None:
        import pyarrow as pa  # optional heavy dependency
        from deltalake import write_deltalake  # optional heavy dependency

        self.pa = pa
        self.workdir = Path(workdir)
        self.template = self.workdir / "typed-template"
        shutil.rmtree(self.template, ignore_errors=True)
        for half in (TYPED_ROWS[0::2], TYPED_ROWS[1::2]):  # one row of each partition per file
            write_deltalake(str(self.template), self._arrow(half), partition_by=list(TYPED_COLUMNS), mode="append")
        self.base_version = 1
        self.tables = ("db.fz_typed",)
        self.counter = 0

    def _arrow(self, rows: Sequence[Any]) -> Any:
        import datetime as dt

        pa = self.pa
        schema = pa.schema([("id", pa.int64()), ("p", pa.int32()), ("d", pa.date32()), ("b", pa.bool_()),
                            ("hh", pa.string()), ("v", pa.int64())])
        names = ("id", *TYPED_COLUMNS, "v")
        data = [{**dict(zip(names, r, strict=True)), "d": None if r[2] is None else dt.date.fromisoformat(r[2])}
                for r in rows]
        return pa.Table.from_pylist(data, schema=schema)

    def _partition(self, values: Mapping[str, str | None]) -> tuple[str | None, ...]:
        return tuple(values.get(c) for c in TYPED_COLUMNS)


class TypedIcebergOnSpark(IcebergOnSpark):
    """``IcebergOnSpark`` on the typed table (p INT, d DATE, b BOOLEAN, hh STRING), copy-on-write
    and merge-on-read, its types as Spark's schema names them."""

    name = "iceberg-typed"
    columns = TYPED_COLUMNS
    column_types: Mapping[str, str] = {"p": "int", "d": "date", "b": "boolean", "hh": "string"}
    base_partitions = TypedDeltaRs.base_partitions

    def __init__(self, spark: Any, database: str = "lake.db", prefix: str = "fz_typed") -> None:
        super().__init__(spark, database, prefix)

    def _create(self, table: str) -> None:
        spark = self.spark
        spark.sql(f"DROP TABLE IF EXISTS {table}")
        mode = "merge-on-read" if table.endswith("_mor") else "copy-on-write"
        spark.sql(
            f"CREATE TABLE {table} (id BIGINT, p INT, d DATE, b BOOLEAN, hh STRING, v INT) USING iceberg "
            f"PARTITIONED BY (p, d, b, hh) TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='{mode}', "
            f"'write.update.mode'='{mode}', 'write.merge.mode'='{mode}')"
        )
        for half in (TYPED_ROWS[0::2], TYPED_ROWS[1::2]):  # two files in every partition
            spark.sql(f"INSERT INTO {table} VALUES {_typed_values(half)}")
        self.base[table] = self._current(table)
        self.base_files[table] = self._files(table)

    def _files(self, table: str) -> dict[str, Any]:
        rows = self.spark.sql(f"SELECT file_path, partition.p, partition.d, partition.b, partition.hh FROM {table}.files").collect()

        def spelled(value: Any) -> str | None:  # as the Delta log spells a partition value
            if value is None:
                return None
            return str(value).lower() if isinstance(value, bool) else value.isoformat() if hasattr(value, "isoformat") else str(value)

        return {r[0]: tuple(spelled(v) for v in r[1:]) for r in rows}


# ---------------------------------------------------------------- the loop


@dataclass
class Finding:
    statement: Statement
    sql: str
    derived: dict[str, Any]
    outside: set[Partition]
    touched: set[Partition]

    def describe(self) -> str:
        settings = self.statement.session_settings() if isinstance(self.statement, Insert) else {}
        pre = "".join(f"SET {k}={v};\n" for k, v in settings.items())
        return (f"{pre}{self.sql}\n  derived partitions: {self.derived['partitions']}\n"
                f"  touched: {sorted(self.touched, key=str)}\n  outside the footprint: {sorted(self.outside, key=str)}\n"
                f"  why: {self.derived['why']}")


@dataclass
class Tally:
    engine: str
    seed: int
    generated: int = 0
    refused: int = 0
    whole_table: int = 0  # derived as the whole table: holds anything, not run
    run: int = 0  # run on the engine and checked (including rejected)
    rejected: int = 0
    no_change: int = 0
    contained: int = 0
    wider: int = 0  # contained, and the footprint holds a base partition the commit did not touch
    refused_ran: list[tuple[str, str]] = field(default_factory=list)  # (sql, error): the engine committed it
    narrower: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    rejections: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "engine": self.engine, "seed": self.seed, "generated": self.generated, "refused": self.refused,
            "whole_table_not_run": self.whole_table, "run": self.run, "rejected_by_engine": self.rejected,
            "no_change": self.no_change, "contained": self.contained, "wider": self.wider,
            "refused_but_committed": len(self.refused_ran), "narrower": len(self.narrower),
            "seconds": round(self.seconds, 1),
        }


def check(statement: Statement, engine: Engine, *, run_refused: bool = False) -> tuple[str, Any]:
    """``("refused", error)``, ``("refused_ran", (error, touched))`` (``run_refused``: the
    derivation refused what the engine committed), ``("whole", derived)``, ``("rejected",
    message)``, ``("contained", (touched, wider))`` (``wider``: the base partitions the footprint
    holds and the commit did not touch) or ``("narrower", Finding)``."""
    sql = statement.sql()
    try:
        derived = derive_write(sql, list(engine.columns), engine.engine, column_types=engine.column_types)
    except InvalidDeclarationError as exc:
        if run_refused:
            try:
                touched = engine.touched(statement)
            except Rejected:
                return "refused", str(exc)
            if touched:
                return "refused_ran", (str(exc), touched)
        return "refused", str(exc)
    facts = engine.table_facts(statement.table)
    if facts is not None:  # as SparkWriteOperator.declare_from_table widens it: older specs, the runtime filter
        reach = facts.reach(derived.operation, derived.partitions)
        derived = dataclasses.replace(derived, partitions=reach.partitions, why=(*derived.why, *reach.why))
    if derived.partitions is None:
        return "whole", derived
    try:
        touched = engine.touched(statement)
    except Rejected as exc:
        return "rejected", str(exc)
    missing = outside(derived, touched, engine.columns, engine.column_types, engine.nulls_below)
    if missing:
        return "narrower", Finding(statement, sql, derived.to_json(), missing, touched)
    untouched = set(engine.base_partitions) - touched
    held = untouched - outside(derived, untouched, engine.columns, engine.column_types, engine.nulls_below)
    return "contained", (touched, held)


def shrink(statement: Statement, engine: Engine, budget: int = 200) -> Finding:
    """Greedily the smallest statement that still touches a partition outside its footprint."""
    verdict, found = check(statement, engine)
    assert verdict == "narrower", verdict
    tries = 0
    progress = True
    while progress and tries < budget:
        progress = False
        for smaller in found.statement.shrinks():
            tries += 1
            verdict, result = check(smaller, engine)
            if verdict == "narrower":
                found, progress = result, True
                break
            if tries >= budget:
                break
    return found


def fuzz(engine: Engine, seed: int, count: int, dialect: str,
         progress: Callable[[Tally], None] | None = None, shrink_findings: bool = True,
         run_refused: bool = False) -> Tally:
    """``count`` random statements checked on ``engine`` from ``seed``; ``run_refused``: run the
    statements the derivation refuses too, and count those the engine committed."""
    rng = random.Random(seed)
    kind = TypedStatementGenerator if engine.columns == TYPED_COLUMNS else StatementGenerator
    generator = kind(rng, dialect, engine.tables)  # type: ignore[attr-defined]
    tally = Tally(engine.name, seed)
    start = time.perf_counter()
    for _ in range(count):
        statement = generator.statement()
        tally.generated += 1
        verdict, result = check(statement, engine, run_refused=run_refused)
        if verdict == "refused":
            tally.refused += 1
        elif verdict == "refused_ran":
            tally.refused += 1
            tally.refused_ran.append((statement.sql(), result[0]))
        elif verdict == "whole":
            tally.whole_table += 1
        else:
            tally.run += 1
            if verdict == "rejected":
                tally.rejected += 1
                kind = result.split(":")[0][:80]
                tally.rejections[kind] = tally.rejections.get(kind, 0) + 1
            elif verdict == "narrower":
                tally.narrower.append(shrink(statement, engine) if shrink_findings else result)
            else:
                touched, held = result
                tally.no_change += not touched
                tally.wider += bool(held)
                tally.contained += 1
        if progress is not None and tally.generated % 50 == 0:
            tally.seconds = time.perf_counter() - start
            progress(tally)
    tally.seconds = time.perf_counter() - start
    return tally


def summaries(tallies: Mapping[str, Tally]) -> list[dict[str, Any]]:
    return [t.summary() for t in tallies.values()]
