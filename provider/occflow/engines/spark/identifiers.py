"""Table identifiers and string literals as Spark SQL reads them: validated, then quoted."""

from __future__ import annotations

import re

from ...core.errors import InvalidDeclarationError

_IDENT_PART = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*|`(?:[^`]|``)+`)$")


def split_table(table: str) -> list[str]:
    """The parts of ``catalog.db.table`` (backquoted parts allowed); anything else is an error."""
    if not isinstance(table, str) or not table.strip():
        raise InvalidDeclarationError(f"table identifier must be a non-empty string, got {table!r}")
    parts = re.findall(r"`(?:[^`]|``)+`|[^.`]+", table.strip())
    if ".".join(parts) != table.strip() or not all(_IDENT_PART.match(p) for p in parts):
        raise InvalidDeclarationError(
            f"bad table identifier {table!r}: expected dot-separated names of letters, digits and "
            "underscores (or `backquoted` names), e.g. lake.db.events"
        )
    return [p[1:-1].replace("``", "`") if p.startswith("`") else p for p in parts]


def quote_table(table: str) -> str:
    """The identifier with every part backquoted, safe to put into SQL."""
    return ".".join("`" + p.replace("`", "``") + "`" for p in split_table(table))


def sql_string(value: str) -> str:
    """A SQL string literal for ``value`` (Spark SQL escapes with backslashes)."""
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"

