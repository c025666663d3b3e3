"""Iceberg's ``rewrite_data_files`` with occflow's commit tag in its ``replace`` snapshot.

occflow tags an Iceberg SQL commit through ``CommitMetadata``'s per-thread commit properties
(``iceberg.iceberg_commit_properties``): Spark's writes (``SparkWrite.commitOperation``) copy them
into the snapshot summary. The ``rewrite_data_files`` procedure does not: its action commits with
only the properties set by ``snapshotProperty`` (``BaseSnapshotUpdateSparkAction.commit``), the
procedure has no argument for them (Iceberg 1.10: ``table``, ``strategy``, ``sort_order``,
``options``, ``where``), and apache/iceberg#13012, which would make it read ``CommitMetadata``, is
not merged. So a compaction's snapshot carried no tag and the ledger and ``TableCommitSensor``
could not find it.

``run_statement`` closes that gap: a ``CALL ... rewrite_data_files(...)`` made while the thread
carries commit properties runs as the procedure's own action (``SparkActions.rewriteDataFiles``)
with the same arguments, plus each property as ``snapshotProperty``. The ``where`` is read as the
procedure reads it (``SparkExpressionConverter``), and ``strategy`` / ``sort_order`` are applied
by the procedure's own ``checkAndApplyStrategy``, so both mean exactly what they mean in the CALL.
Any other statement, or a CALL with no properties to carry, is ``spark.sql`` unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlglot import Token, TokenType

from ...core.errors import InvalidDeclarationError
from ...core.sqlread import dotted_name, read_sql_write, sql_tokens
from .identifiers import quote_table, split_table

_REWRITE_CALL = re.compile(r"^\s*call\s+[\w.`]*rewrite_data_files\s*\(", re.IGNORECASE)
#: The procedure's parameters in their positional order (``RewriteDataFilesProcedure.PARAMETERS``).
PARAMETERS = ("table", "strategy", "sort_order", "options", "where")
_PROCEDURE = "org.apache.iceberg.spark.procedures.RewriteDataFilesProcedure"


@dataclass(frozen=True)
class RewriteCall:
    """A ``CALL <catalog>.system.rewrite_data_files(...)`` as written: the table it names (in the
    procedure's catalog), and its other arguments."""

    table: str
    strategy: str | None = None
    sort_order: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)
    where: str | None = None


def is_rewrite_call(statement: str) -> bool:
    return bool(_REWRITE_CALL.match(statement))


def read_rewrite_call(statement: str) -> RewriteCall:
    """The arguments of a ``rewrite_data_files`` CALL, named (``where => '...'``) or positional."""
    where = "CALL rewrite_data_files"
    table = read_sql_write(statement).table
    tokens = sql_tokens(statement, where)
    if tokens and tokens[0].token_type is TokenType.COMMAND:
        # sqlglot keeps a command's remainder as one string token: read it as tokens again.
        tokens = sql_tokens(statement[tokens[0].end + 1 :], where)
    else:
        tokens = tokens[1:]
    _, rest = dotted_name(tokens)
    strings: dict[str, str] = {}
    options: dict[str, str] = {}
    for position, argument in enumerate(_arguments(rest, where)):
        if len(argument) >= 2 and argument[1].text == "=>":
            name, value = argument[0].text.lower(), argument[2:]
        elif position < len(PARAMETERS):
            name, value = PARAMETERS[position], argument
        else:
            raise InvalidDeclarationError(f"{where}: more arguments than its {len(PARAMETERS)} parameters")
        if name not in PARAMETERS:
            raise InvalidDeclarationError(
                f"{where}: unknown argument {name!r}; rewrite_data_files takes {', '.join(PARAMETERS)}"
            )
        if len(value) == 1 and value[0].token_type is TokenType.NULL:
            continue  # as if not given: the procedure's default
        if name == "options":
            options = _map(value, where)
        else:
            strings[name] = _string(name, value, where)
    return RewriteCall(
        table=table,
        strategy=strings.get("strategy"),
        sort_order=strings.get("sort_order"),
        options=options,
        where=strings.get("where"),
    )


def _arguments(tokens: list[Token], where: str) -> list[list[Token]]:
    """The comma-separated arguments between the CALL's parentheses."""
    if not tokens or tokens[0].token_type is not TokenType.L_PAREN:
        raise InvalidDeclarationError(f"{where}: CALL needs its arguments in parentheses")
    arguments: list[list[Token]] = [[]]
    depth = 0
    for token in tokens[1:]:
        if token.token_type is TokenType.L_PAREN:
            depth += 1
        elif token.token_type is TokenType.R_PAREN:
            if depth == 0:
                return [a for a in arguments if a]
            depth -= 1
        elif token.token_type is TokenType.COMMA and depth == 0:
            arguments.append([])
            continue
        arguments[-1].append(token)
    raise InvalidDeclarationError(f"{where}: its argument list is not closed")


def _literal(token: Token) -> str | None:
    return token.text if token.token_type in (TokenType.STRING, TokenType.NUMBER) else None


def _string(name: str, value: list[Token], where: str) -> str:
    # Spark SQL joins adjacent string literals: 'ds = ' '"a"' is one string.
    strings = value and all(t.token_type is TokenType.STRING for t in value)
    text = "".join(t.text for t in value) if strings else _literal(value[0]) if len(value) == 1 else None
    if text is None:
        raise InvalidDeclarationError(f"{where}: {name} must be a string literal, got {' '.join(t.text for t in value)!r}")
    return text


def _map(value: list[Token], where: str) -> dict[str, str]:
    """``map('k1', 'v1', 'k2', 'v2')``: the procedure's options."""
    shape = "options must be map('key', 'value', ...) with literal keys and values"
    if len(value) < 3 or value[0].text.lower() != "map" or value[1].token_type is not TokenType.L_PAREN:
        raise InvalidDeclarationError(f"{where}: {shape}")
    if value[-1].token_type is not TokenType.R_PAREN:
        raise InvalidDeclarationError(f"{where}: {shape}")
    items = [t for t in value[2:-1] if t.token_type is not TokenType.COMMA]
    literals = [_literal(t) for t in items]
    if len(items) % 2 or any(v is None for v in literals):
        raise InvalidDeclarationError(f"{where}: {shape}")
    texts = [str(v) for v in literals]
    return dict(zip(texts[::2], texts[1::2], strict=True))


# ---------------------------------------------------------------------------------------------
# Running it


def commit_properties(spark: Any) -> dict[str, str]:
    """The commit properties this thread carries (``CommitMetadata.commitProperties()``, on the
    JVM thread PySpark pins to this Python thread); empty on Spark Connect (no JVM here)."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return {}
    found = jvm.org.apache.iceberg.spark.CommitMetadata.commitProperties()
    return {} if found is None else {str(k): str(found.get(k)) for k in found.keySet()}


def run_statement(spark: Any, statement: str) -> Any:
    """``spark.sql(statement)``; a ``rewrite_data_files`` CALL while the thread carries commit
    properties runs as the procedure's action with them in its snapshot summary."""
    if not is_rewrite_call(statement):
        return spark.sql(statement)
    properties = commit_properties(spark)
    if not properties:
        return spark.sql(statement)
    rewrite(spark, read_rewrite_call(statement), properties)
    return None


def rewrite(spark: Any, call: RewriteCall, properties: Mapping[str, str]) -> Any:
    """Run ``call`` as ``RewriteDataFilesProcedure`` runs it, each of ``properties`` in the
    summary of the snapshots it commits; Iceberg's ``RewriteDataFiles.Result``."""
    jvm, jspark = spark._jvm, spark._jsparkSession
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(jspark, call.table)
    action = jvm.org.apache.iceberg.spark.actions.SparkActions.get(jspark).rewriteDataFiles(table)
    options = jvm.java.util.HashMap()
    for key, value in call.options.items():
        options.put(key, value)
    action = action.options(options)
    if call.strategy is not None or call.sort_order is not None:
        action = _procedure_method(spark, call.table, "checkAndApplyStrategy")(
            action, call.strategy, call.sort_order, table.schema()
        )
    if call.where is not None:
        # BaseProcedure.filterExpression: the condition resolved against the table, then converted.
        converter = jvm.org.apache.spark.sql.execution.datasources.SparkExpressionConverter
        resolved = converter.collectResolvedSparkExpression(jspark, quote_table(call.table), call.where)
        action = action.filter(converter.convertToIcebergExpression(resolved))
    for key, value in properties.items():
        action = action.snapshotProperty(key, value)
    result = action.execute()
    spark.catalog.refreshTable(call.table)  # as the procedure does after it modified the table
    return result


def _procedure_method(spark: Any, table: str, name: str) -> Any:
    """A private method of the ``rewrite_data_files`` procedure of ``table``'s catalog, callable
    with Python arguments (py4j reflection)."""
    jvm, jspark = spark._jvm, spark._jsparkSession
    catalogs = jspark.sessionState().catalogManager()
    parts = split_table(table)
    catalog = catalogs.catalog(parts[0]) if len(parts) >= 3 else catalogs.currentCatalog()
    builder = jvm.org.apache.iceberg.spark.procedures.SparkProcedures.newBuilder("rewrite_data_files")
    procedure = builder.withTableCatalog(catalog).build()
    cls = jvm.org.apache.spark.util.Utils.classForName(_PROCEDURE, True, False)
    method = next((m for m in cls.getDeclaredMethods() if m.getName() == name), None)
    if method is None:
        raise InvalidDeclarationError(
            f"this Iceberg runtime's {_PROCEDURE} has no {name}: occflow cannot apply the CALL's "
            "strategy / sort_order to a tagged compaction"
        )
    method.setAccessible(True)
    gateway = spark.sparkContext._gateway

    def call(*args: Any) -> Any:
        array = gateway.new_array(jvm.java.lang.Object, len(args))
        for i, arg in enumerate(args):
            array[i] = arg
        return method.invoke(procedure, array)

    return call
