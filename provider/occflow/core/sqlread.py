"""A SQL write job read as the engine will run it, with sqlglot (Spark dialect).

A rendered value can add a statement to a job: ``WHERE ds = '{{ params.ds }}'`` with
``x'; DROP TABLE lake.db.other; --`` is two statements. So a SQL job is read as the engine will
run it, split into statements by the tokenizer that splits it for running (``split_statements``),
each statement parsed; it must be exactly one write statement, on the declared table, of the
declared operation. ``SET key = value`` statements may precede the write only when the DAG
declares the job as a list of statements (``allow_settings``). Anything else is refused with a
message that names the statement and what differs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import ParseError, Token, TokenError, TokenType, exp

from .errors import InvalidDeclarationError, InvalidFootprintError, UnknownOperationError
from .identifiers import canonical_table, canonical_value, table_parts
from .operations import Operation, parse_operation
from .sqlnesting import check_nesting, nested_too_deeply
from .sqlpredicates import read_literal

DIALECT = "spark"

# Statements sqlglot's Spark dialect reads as an opaque command; occflow reads their target
# from the tokens that follow the keyword (Delta's OPTIMIZE / REORG, Iceberg's CALL).
_COMMAND_WRITES = ("OPTIMIZE", "REORG", "CALL", "VACUUM")

# Settings a SET may not change: where a name resolves (catalogs, the default catalog, case),
# how the next statement is parsed (parser, ANSI keywords, ${...} substitution), or what the
# session loads. Either would make the write that was checked differ from the write that runs.
_FORBIDDEN_SETTINGS = (
    "spark.sql.catalog",
    "spark.sql.defaultcatalog",
    "spark.sql.casesensitive",
    "spark.sql.extensions",
    "spark.sql.warehouse",
    "spark.sql.parser",
    "spark.sql.ansi",
    "spark.sql.variable",
    "spark.sql.legacy",
    "spark.jars",
    "spark.sql.hive.metastore",
)
_SETTING_KEY_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")

# A node of one of these types inside the statement is a statement of its own.
_STATEMENT_TYPES: tuple[type[exp.Expr], ...] = (
    exp.DML,
    exp.DDL,
    exp.Alter,
    exp.Drop,
    exp.TruncateTable,
    exp.Command,
    exp.Use,
    exp.Set,
    exp.Cache,
    exp.Uncache,
    exp.Refresh,
    exp.LoadData,
    exp.Grant,
    exp.Revoke,
    exp.Analyze,
    exp.Copy,
)


def split_statements(text: str) -> list[str]:
    """SQL statements separated by ``;`` outside quotes and comments, as written (comments kept).

    Spark SQL's tokenizer (sqlglot's Spark dialect) finds the separators; a piece that holds no
    token (empty, or only comments) is no statement. The engine runs exactly these pieces, so
    what ``read_sql_write`` checked is what runs.
    """
    statements: list[str] = []
    start, has_token = 0, False
    for token in sql_tokens(text, "the SQL job"):
        if token.token_type is not TokenType.SEMICOLON:
            has_token = True
            continue
        if has_token:
            statements.append(text[start : token.start].strip())
        start, has_token = token.end + 1, False
    if has_token:
        statements.append(text[start:].strip())
    return statements


@dataclass(frozen=True)
class SqlWrite:
    """The one write a SQL job performs: its statement, operation and target as written."""

    statement: str
    operation: Operation
    table: str
    settings: tuple[str, ...] = ()

    def table_key(self, catalog: str | None) -> str:
        """The target's identity; a name without a catalog is in ``catalog`` (the session's)."""
        return canonical_table(self.table, catalog)


def read_sql_write(text: str, allow_settings: bool = False) -> SqlWrite:
    """The job's single write statement; an error for anything else (see the module docstring)."""
    if not isinstance(text, str):
        raise InvalidDeclarationError(f"a SQL job is text, got {type(text).__name__}")
    if "${" in text:
        # Spark substitutes ${var} / ${env:X} in the text before parsing it: what runs would
        # not be what was checked.
        raise InvalidDeclarationError(
            f"SQL job {shorten(text)!r} holds '${{': Spark would substitute a variable into it before "
            "running it; render values with Airflow templates instead"
        )
    statements = split_statements(text)
    if not statements:
        raise InvalidDeclarationError(f"SQL job has no statement: {text!r}")
    settings: list[str] = []
    writes: list[SqlWrite] = []
    for number, statement in enumerate(statements, 1):
        where = f"statement {number} of {len(statements)} ({shorten(statement)!r})"
        if first_keyword(statement) == "SET":
            settings.append(_setting(statement, where, allow_settings))
            if writes:
                raise InvalidDeclarationError(f"{where}: a SET after the write changes nothing it did; remove it")
            continue
        writes.append(_write(statement, where))
    if len(writes) != 1:
        raise InvalidDeclarationError(
            f"SQL job {shorten(text)!r} holds no write statement" if not writes else
            f"SQL job holds {len(writes)} write statements ({'; '.join(shorten(w.statement) for w in writes)}): "
            "a write task runs exactly one"
        )
    found = writes[0]
    return SqlWrite(found.statement, found.operation, found.table, tuple(settings))


def job_text(job: str | Sequence[str]) -> tuple[str, bool]:
    """The text to run and whether SET statements were declared: a list of statements (each
    exactly one) is joined; a newline before each ``;`` ends any line comment."""
    if isinstance(job, str):
        return job, False
    if not isinstance(job, Sequence) or not job or not all(isinstance(s, str) for s in job):
        raise InvalidDeclarationError(f"a SQL job is text or a non-empty list of statements, got {job!r}")
    for number, statement in enumerate(job, 1):
        count = len(split_statements(statement))
        if count != 1:
            raise InvalidDeclarationError(
                f"statement {number} of the job's list ({shorten(statement)!r}) holds {count} statements; "
                "list each statement on its own"
            )
    return "\n;\n".join(job), True


def _write(statement: str, where: str) -> SqlWrite:
    check_nesting(statement, where)
    keyword = first_keyword(statement)
    if keyword in _COMMAND_WRITES:
        return _command_write(statement, keyword, where)
    tree = parse_statement(statement, where)
    try:
        _refuse_nested_statements(tree, where)
    except RecursionError:
        raise nested_too_deeply(where) from None
    operation, target = _operation_and_target(tree, statement, where)
    return SqlWrite(statement, operation, _table_text(target, where))


def parse_statement(statement: str, where: str) -> exp.Expr:
    """One statement parsed by sqlglot's Spark dialect; what it cannot read (its errors, a
    nesting deeper than Python's recursion limit, issue 24) is refused naming ``where``."""
    try:
        trees = [t for t in sqlglot.parse(statement, read=DIALECT) if t is not None]
    except RecursionError:
        raise nested_too_deeply(where) from None
    except (ParseError, TokenError, sqlglot.errors.SqlglotError) as exc:
        raise InvalidDeclarationError(f"{where} cannot be read as Spark SQL: {str(exc).splitlines()[0]}") from None
    if len(trees) != 1:
        raise InvalidDeclarationError(f"{where} is not one statement")
    return trees[0]


def _operation_and_target(tree: exp.Expr, statement: str, where: str) -> tuple[Operation, exp.Expr]:
    if isinstance(tree, exp.Insert):
        target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
        # Delta's INSERT ... REPLACE WHERE replaces the rows it matches: an overwrite.
        overwrite = bool(tree.args.get("overwrite") or tree.args.get("where"))
        return (Operation.INSERT_OVERWRITE if overwrite else Operation.INSERT_INTO), target
    if isinstance(tree, exp.Merge):
        return Operation.MERGE, tree.this
    if isinstance(tree, exp.Update):
        return Operation.UPDATE, tree.this
    if isinstance(tree, exp.Delete):
        return Operation.DELETE, tree.this
    if isinstance(tree, exp.TruncateTable):
        if len(tree.expressions) != 1 or tree.args.get("is_database"):
            raise InvalidDeclarationError(f"{where} truncates more than one table")
        return Operation.TRUNCATE, tree.expressions[0]
    if isinstance(tree, exp.Alter) and str(tree.args.get("kind") or "").upper() == "TABLE":
        for action in tree.args.get("actions") or ():
            if isinstance(action, (exp.AlterRename, exp.DropPartition)):
                # A rename makes the declared table vanish; a dropped partition loses its rows.
                raise InvalidDeclarationError(
                    f"{where} {'renames the table' if isinstance(action, exp.AlterRename) else 'drops a partition'}: "
                    "not a metadata change admission can order; run it outside occflow's write tasks"
                )
        try:
            return parse_operation(statement), tree.this  # MaxCompute's COMPACT / MERGE SMALLFILES
        except UnknownOperationError:
            return Operation.ALTER_METADATA, tree.this  # any other ALTER TABLE sqlglot could read
    raise InvalidDeclarationError(
        f"{where} is not a write ({_kind(tree)}): a SQL job is one INSERT, MERGE, UPDATE, DELETE, "
        "TRUNCATE, ALTER TABLE, OPTIMIZE / REORG TABLE or CALL ...rewrite_data_files statement"
    )


def _refuse_nested_statements(tree: exp.Expr, where: str) -> None:
    for node in tree.walk():
        if node is tree or not isinstance(node, _STATEMENT_TYPES):
            continue
        parent = node.parent
        # MERGE's WHEN ... THEN UPDATE / INSERT / DELETE clauses and ALTER TABLE's actions
        # (DROP COLUMN) belong to the statement; they name no table of their own.
        in_merge = isinstance(tree, exp.Merge) and isinstance(parent, exp.When) and node.arg_key == "then"
        in_alter = isinstance(tree, exp.Alter) and parent is tree and node.arg_key == "actions"
        if (in_merge or in_alter) and not isinstance(node.this, exp.Table):
            continue
        raise InvalidDeclarationError(f"{where} holds a second statement inside it ({_kind(node)})")


def _command_write(statement: str, keyword: str, where: str) -> SqlWrite:
    """OPTIMIZE t / REORG TABLE t / CALL cat.system.rewrite_data_files(table => 'db.t')."""
    operation = _parsed_operation(statement, where)
    tokens = sql_tokens(statement, where)
    if tokens and tokens[0].token_type is TokenType.COMMAND:
        # sqlglot keeps a command's remainder as one string token: read it as tokens again.
        tokens = sql_tokens(statement[tokens[0].end + 1 :], where)
    else:
        tokens = tokens[1:]
    if keyword == "REORG":
        tokens = tokens[1:] if tokens and tokens[0].token_type is TokenType.TABLE else []
    name, rest = dotted_name(tokens)
    if keyword != "CALL":
        if not name:
            raise InvalidDeclarationError(f"{where}: {keyword} must name the table (db.table), not a path")
        table_parts(name)  # delta.`/some/path` is a path, not a table
        return SqlWrite(statement, operation, name)
    return SqlWrite(statement, operation, _call_table(name, rest, where))


def _call_table(procedure: str, rest: list[Token], where: str) -> str:
    """The table a ``CALL`` names: ``table => 'db.t'`` or its first argument, in the catalog the
    procedure belongs to (``lake.system.rewrite_data_files``)."""
    if not rest or rest[0].token_type is not TokenType.L_PAREN:
        raise InvalidDeclarationError(f"{where}: CALL needs its arguments in parentheses")
    args = rest[1:]
    named = [i for i, t in enumerate(args[:-2]) if t.text.lower() == "table" and args[i + 1].text == "=>"]
    if named:
        value = args[named[0] + 2]
    elif args and args[0].token_type is TokenType.STRING:
        value = args[0]
    else:
        raise InvalidDeclarationError(f"{where}: name the table as table => 'db.table'")
    if value.token_type is not TokenType.STRING:
        raise InvalidDeclarationError(f"{where}: the table argument must be a string such as 'db.table'")
    parts = table_parts(value.text)
    proc = table_parts(procedure)
    return ".".join((proc[0], *parts)) if len(proc) == 3 and len(parts) == 2 else value.text


_WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _name_part(tokens: list[Token], i: int) -> bool:
    """``tokens[i]`` is a part of a dotted name: a name, or a word the tokenizer reads as a keyword
    (``default`` in ``default.events``, Spark's default database) where a dot joins it to
    another part; alone it stays a keyword (``OPTIMIZE t WHERE ...``)."""
    token = tokens[i]
    if token.token_type in (TokenType.VAR, TokenType.IDENTIFIER):
        return True
    if token.token_type is TokenType.STRING or not _WORD_RE.fullmatch(token.text):
        return False
    after_dot = i > 0 and tokens[i - 1].token_type is TokenType.DOT
    return after_dot or (i + 1 < len(tokens) and tokens[i + 1].token_type is TokenType.DOT)


def dotted_name(tokens: list[Token]) -> tuple[str, list[Token]]:
    """A leading ``a.b.c`` (back-quoted parts kept quoted) and the tokens after it."""
    parts: list[str] = []
    i = 0
    while i < len(tokens) and _name_part(tokens, i):
        token = tokens[i]
        quoted = token.token_type is TokenType.IDENTIFIER
        parts.append("`" + token.text.replace("`", "``") + "`" if quoted else token.text)
        i += 1
        if i < len(tokens) and tokens[i].token_type is TokenType.DOT:
            i += 1
            continue
        break
    return ".".join(parts), tokens[i:]


# ---------------------------------------------------------------- MaxCompute's ALTER TABLE writes

#: What MaxCompute writes by ALTER TABLE (Delta Table compactions, small file merge).
MAXCOMPUTE_ALTER_FORMS = (
    "MaxCompute writes by ALTER TABLE are ALTER TABLE t [PARTITION (col = 'v', ...)] COMPACT MINOR | MAJOR "
    "or ... MERGE SMALLFILES"
)
_ALTER_ENDINGS = {
    ("COMPACT", "MINOR"): Operation.MINOR_COMPACT,
    ("COMPACT", "MAJOR"): Operation.MAJOR_COMPACT,
    ("MERGE", "SMALLFILES"): Operation.SMALL_FILE_MERGE,
}
_PARTITION_COLUMN_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class AlterWrite:
    """MaxCompute's ``ALTER TABLE t [PARTITION (...)] COMPACT MINOR | MAJOR`` or ``... MERGE
    SMALLFILES``, as written: the table, the operation, the PARTITION clause's literal values
    (columns lower-cased; empty: no PARTITION clause, the whole table)."""

    statement: str
    table: str
    operation: Operation
    partition: Mapping[str, Any]


def is_alter(statement: str) -> bool:
    """Whether the statement is an ``ALTER ...`` (MaxCompute reads its writes by ALTER TABLE itself)."""
    return first_keyword(statement) == "ALTER"


def is_maxcompute_alter(statement: str) -> bool:
    """Whether the statement is an ALTER that ends as one of MaxCompute's ALTER TABLE writes
    (``COMPACT MINOR | MAJOR``, ``MERGE SMALLFILES``): ``read_alter_write`` reads it."""
    if not is_alter(statement):
        return False
    ending = tuple(t.text.upper() for t in sql_tokens(statement, "statement")[-2:])
    return ending in _ALTER_ENDINGS


def read_alter_write(statement: str) -> AlterWrite:
    """One of MaxCompute's ALTER TABLE writes (``MAXCOMPUTE_ALTER_FORMS``), read token by token
    (sqlglot's Spark dialect has no such statement); anything else is refused naming why."""
    where = f"statement {shorten(statement)!r}"
    if len(split_statements(statement)) != 1:
        raise InvalidDeclarationError(f"{where} is not one statement: {MAXCOMPUTE_ALTER_FORMS}")
    tokens = sql_tokens(statement, where)
    if tokens and tokens[0].token_type is TokenType.COMMAND:  # sqlglot keeps ALTER ... as one command
        tokens = sql_tokens(statement[tokens[0].end + 1 :], where)
    else:
        tokens = tokens[1:]
    if not tokens or tokens[0].token_type is not TokenType.TABLE:
        raise InvalidDeclarationError(f"{where} is not ALTER TABLE: {MAXCOMPUTE_ALTER_FORMS}")
    name, rest = dotted_name(tokens[1:])
    if not name:
        raise InvalidDeclarationError(f"{where} names no table: {MAXCOMPUTE_ALTER_FORMS}")
    table_parts(name)  # the one identifier grammar (no paths, no odd characters)
    spec, rest = _alter_partition(rest, where)
    ending = tuple(t.text.upper() for t in rest)
    operation = _ALTER_ENDINGS.get((ending[0], ending[1])) if len(ending) == 2 else None
    if operation is None:
        raise InvalidDeclarationError(f"{where}: {MAXCOMPUTE_ALTER_FORMS}")
    return AlterWrite(statement, name, operation, spec)


def _alter_partition(tokens: list[Token], where: str) -> tuple[dict[str, Any], list[Token]]:
    """``PARTITION (ds = '2024-01-01', region = 'eu')``: its literal values, and what follows."""
    if not tokens or tokens[0].token_type is not TokenType.PARTITION:
        return {}, tokens
    if len(tokens) < 2 or tokens[1].token_type is not TokenType.L_PAREN:
        raise InvalidDeclarationError(f"{where}: PARTITION needs (column = 'value', ...)")
    spec: dict[str, Any] = {}
    i = 2
    while i + 2 < len(tokens):
        column, eq, value = tokens[i], tokens[i + 1], tokens[i + 2]
        if eq.token_type is not TokenType.EQ or column.token_type not in (TokenType.VAR, TokenType.IDENTIFIER):
            break
        if not _PARTITION_COLUMN_RE.fullmatch(column.text):
            raise InvalidDeclarationError(
                f"{where}: invalid partition column {column.text!r} in PARTITION: use letters, digits, _"
            )
        if column.text.lower() in spec:
            raise InvalidDeclarationError(f"{where}: PARTITION names column {column.text!r} twice")
        literal = _alter_literal(column.text, value)
        if literal is None:
            raise InvalidDeclarationError(
                f"{where}: the value of partition column {column.text!r} is not a literal (write it quoted: "
                f"{column.text} = 'value')"
            )
        spec[column.text.lower()] = literal
        i += 3
        if i < len(tokens) and tokens[i].token_type is TokenType.COMMA:
            i += 1
            continue
        if i < len(tokens) and tokens[i].token_type is TokenType.R_PAREN:
            return spec, tokens[i + 1 :]
        break
    raise InvalidDeclarationError(f"{where}: PARTITION needs (column = 'value', ...) with literal values")


def _alter_literal(column: str, token: Token) -> Any:
    if token.token_type is TokenType.STRING:
        # A MaxCompute partition spec names the partition by its text (``pt='07'`` is not
        # ``pt='7'``), not a comparison the engine casts: the value as a declaration spells it.
        try:
            return canonical_value(column, token.text)
        except InvalidFootprintError:
            return None
    if token.token_type is TokenType.NUMBER:
        node = exp.Literal.number(token.text)
    else:
        return None
    found = read_literal(column, node)
    return None if found is None or found.value is None else found.value


def _setting(statement: str, where: str, allowed: bool) -> str:
    if not allowed:
        raise InvalidDeclarationError(
            f"{where} is a SET: a SQL job is exactly one write statement; to run settings before it, "
            "give the job as a list of statements (job=['SET k = v', 'INSERT ...'])"
        )
    tokens = sql_tokens(statement, where)[1:]
    eq = next((i for i, t in enumerate(tokens) if t.token_type is TokenType.EQ), None)
    key = "".join(t.text for t in tokens[:eq]) if eq else ""
    if not _SETTING_KEY_RE.fullmatch(key) or eq is None or eq + 1 >= len(tokens):
        raise InvalidDeclarationError(f"{where}: a setting is written SET key = value")
    if key.lower().startswith(_FORBIDDEN_SETTINGS):
        raise InvalidDeclarationError(
            f"{where}: {key} changes how the write's table name resolves or how SQL is read, so the "
            "checked write would not be the one that runs; set it in the Spark connection instead"
        )
    return key


def _table_text(target: exp.Expr | None, where: str) -> str:
    """The target as ``catalog.db.table`` text (quoted parts back-quoted); a path, a directory,
    a function (``IDENTIFIER(...)``) or anything but a plain name is refused."""
    if not isinstance(target, exp.Table) or not target.parts:
        raise InvalidDeclarationError(
            f"{where} does not write a named table (it writes {_kind(target)}); name the table (db.table)"
        )
    out = []
    for part in target.parts:
        if not isinstance(part, exp.Identifier):
            raise InvalidDeclarationError(f"{where}: the target table must be a plain name, not {part.sql(DIALECT)}")
        name = part.name
        out.append("`" + name.replace("`", "``") + "`" if part.quoted else name)
    if len(out) == 1 and out[0].upper() == "IDENTIFIER":
        raise InvalidDeclarationError(f"{where}: IDENTIFIER(...) names a table only at run time; write the name")
    text = ".".join(out)
    table_parts(text)  # the one identifier grammar (no paths, no odd characters)
    return text


def _parsed_operation(statement: str, where: str) -> Operation:
    try:
        return parse_operation(statement)
    except UnknownOperationError as exc:
        raise InvalidDeclarationError(f"{where} is not a write occflow knows: {exc}") from None


def sql_tokens(text: str, where: str) -> list[Token]:
    try:
        return list(sqlglot.tokenize(text, read=DIALECT))
    except TokenError as exc:
        raise InvalidDeclarationError(
            f"{where} cannot be read as Spark SQL (an unclosed quote or comment?): {exc}"
        ) from None


def first_keyword(statement: str) -> str:
    tokens = sql_tokens(statement, "statement")
    return tokens[0].text.split()[0].upper() if tokens else ""


def _kind(node: object) -> str:
    if isinstance(node, exp.Command):
        return f"{node.name.upper()} command"
    return type(node).__name__.upper() if node is not None else "nothing"


def shorten(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= 160 else flat[:157] + "..."
