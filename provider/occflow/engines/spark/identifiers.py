"""Table identifiers and string literals as Spark SQL reads them: validated, then quoted.

The grammar is core's (``occflow.core.identifiers.table_parts``): one rule for what a table name
is, whether admission, the linter or Spark reads it.
"""

from __future__ import annotations

from ...core.errors import InvalidDeclarationError
from ...core.identifiers import unquoted_parts


def split_table(table: str) -> list[str]:
    """The parts of ``catalog.db.table``, back-quotes removed; anything else is an error
    (core's reason, worded as the Spark engine has always worded it)."""
    try:
        return list(unquoted_parts(table))
    except InvalidDeclarationError as exc:
        raise InvalidDeclarationError(f"bad table identifier {table!r}: {exc}") from exc


def quote_table(table: str) -> str:
    """The identifier with every part backquoted, safe to put into SQL."""
    return ".".join("`" + p.replace("`", "``") + "`" for p in split_table(table))


def sql_string(value: str) -> str:
    """A SQL string literal for ``value`` (Spark SQL escapes with backslashes)."""
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"
