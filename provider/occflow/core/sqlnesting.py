"""One limit on how deeply a SQL statement may nest (issue 24): checked on the text before any
parser (pure Python or compiled, their recursion limits differ) or occflow's own readers of the
tree recurse through it."""

from __future__ import annotations

from .errors import InvalidDeclarationError

#: Parentheses deeper than any write occflow reads needs; a statement nested deeper is refused
#: before a parser (pure Python or compiled: their limits differ) or occflow's own readers of
#: the tree recurse through it.
MAX_NESTING = 40


def check_nesting(statement: str, where: str) -> None:
    """Refuse ``statement`` when its parentheses nest deeper than ``MAX_NESTING`` (quoted text
    and comments skipped): one limit, whatever sqlglot build reads it."""
    depth = 0
    quote: str | None = None
    i, n = 0, len(statement)
    while i < n:
        char = statement[i]
        if quote is not None:
            if char == quote:
                quote = None
            elif char == "\\" and quote != "`":
                i += 1  # Spark SQL escapes with backslashes inside string literals
        elif char in "'\"`":
            quote = char
        elif statement.startswith("--", i):
            i = statement.find("\n", i)
            i = n if i < 0 else i
        elif statement.startswith("/*", i):
            i = statement.find("*/", i + 2)
            i = n if i < 0 else i + 1
        elif char == "(":
            depth += 1
            if depth > MAX_NESTING:
                raise nested_too_deeply(where)
        elif char == ")":
            depth -= 1
        i += 1


def nested_too_deeply(where: str) -> InvalidDeclarationError:
    """The error for SQL nested deeper than the parser can follow (issue 24)."""
    return InvalidDeclarationError(
        f"{where} is nested too deeply to read (too many levels of parentheses, subqueries or "
        "expressions); write it with fewer nested levels"
    )
