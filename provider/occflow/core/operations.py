"""Canonical write operations, and the parser for the SQL spellings users write."""

from __future__ import annotations

import enum
import re

from .errors import UnknownOperationError


class Operation(str, enum.Enum):
    INSERT_OVERWRITE = "insert_overwrite"
    TRUNCATE = "truncate"
    INSERT_INTO = "insert_into"
    UPDATE = "update"
    DELETE = "delete"
    MERGE = "merge"
    SMALL_FILE_MERGE = "small_file_merge"
    MINOR_COMPACT = "minor_compact"
    MAJOR_COMPACT = "major_compact"
    OPTIMIZE = "optimize"
    ALTER_METADATA = "alter_metadata"
    # Delta's REORG TABLE ... APPLY (UPGRADE ...): a protocol change, conflicts with every
    # ongoing operation (spec 004), unlike REORG ... APPLY (PURGE), which rewrites like OPTIMIZE.
    UPGRADE_PROTOCOL = "upgrade_protocol"
    # MaxCompute's clustering: reorganises the layout, no new time version (specs 001, 002).
    CLUSTERING = "clustering"

    @property
    def changes_data(self) -> bool:
        """False for operations that only reorganise files (no new time version, spec 001)."""
        return self not in _LAYOUT_ONLY

    @property
    def is_compaction(self) -> bool:
        return self in _LAYOUT_ONLY

    @property
    def reads_table(self) -> bool:
        """Read-modify-write: the job reads the target before writing (not a blind append)."""
        return self in _READ_MODIFY_WRITE

    @property
    def is_blind_append(self) -> bool:
        return self is Operation.INSERT_INTO

    @property
    def changes_table_metadata(self) -> bool:
        """A schema / property change or a protocol upgrade: one for all partitions, so its
        footprint is the whole table whatever partitions it names (a Delta write of any
        partition fails with ``metadata_changed`` / "protocol changed" across it)."""
        return self in (Operation.ALTER_METADATA, Operation.UPGRADE_PROTOCOL)


_LAYOUT_ONLY = frozenset(
    {
        Operation.SMALL_FILE_MERGE,
        Operation.MINOR_COMPACT,
        Operation.MAJOR_COMPACT,
        Operation.OPTIMIZE,
        Operation.CLUSTERING,
    }
)
_READ_MODIFY_WRITE = frozenset(
    {
        Operation.INSERT_OVERWRITE,
        Operation.TRUNCATE,
        Operation.UPDATE,
        Operation.DELETE,
        Operation.MERGE,
        Operation.SMALL_FILE_MERGE,
        Operation.MINOR_COMPACT,
        Operation.MAJOR_COMPACT,
        Operation.OPTIMIZE,
        Operation.CLUSTERING,
    }
)

# Ordered: the first pattern that matches the start of the statement wins. Word boundaries and
# free whitespace, so "insert   overwrite table t" and "INSERT INTO TABLE t" both parse.
_SQL_SPELLINGS: tuple[tuple[str, Operation], ...] = (
    (r"insert\s+overwrite\b", Operation.INSERT_OVERWRITE),
    (r"dynamic\s+insert\s+overwrite\b", Operation.INSERT_OVERWRITE),
    (r"truncate(\s+table)?\b", Operation.TRUNCATE),
    (r"insert\s+into\b", Operation.INSERT_INTO),
    (r"dynamic\s+insert\s+into\b", Operation.INSERT_INTO),
    (r"insert\b", Operation.INSERT_INTO),
    (r"append\b", Operation.INSERT_INTO),
    (r"update\b", Operation.UPDATE),
    (r"delete(\s+from)?\b", Operation.DELETE),
    (r"merge\s+into\b", Operation.MERGE),
    (r"merge\s+smallfiles\b", Operation.SMALL_FILE_MERGE),
    (r"small\s+file\s+merge\b", Operation.SMALL_FILE_MERGE),
    (r"optimize\b", Operation.OPTIMIZE),
    (r"reorg\s+table\s+\S+\s+apply\s*\(\s*upgrade\b", Operation.UPGRADE_PROTOCOL),
    (r"reorg\s+table\b", Operation.OPTIMIZE),
    (r"rewrite\s+data\s+files\b", Operation.OPTIMIZE),
    (r"call\s+[\w.`]*rewrite_data_files\b", Operation.OPTIMIZE),
    (r"cluster\s+by\b", Operation.OPTIMIZE),
    (r"(minor\s+compact(ion)?|compact\s+minor)\b", Operation.MINOR_COMPACT),
    (r"(major\s+compact(ion)?|compact\s+major)\b", Operation.MAJOR_COMPACT),
)

# ALTER TABLE has many endings; these decide what it is, anything else is a metadata change.
_ALTER_ENDINGS: tuple[tuple[str, Operation], ...] = (
    (r"\bcompact\s+minor\b", Operation.MINOR_COMPACT),
    (r"\bcompact\s+major\b", Operation.MAJOR_COMPACT),
    (r"\bmerge\s+smallfiles\b", Operation.SMALL_FILE_MERGE),
)

_ALTER_METADATA = re.compile(
    r"alter\s+table\s+\S+(\s+partition\s*\(.*?\))?\s+"
    r"(add|drop|rename|change|alter|replace|set|unset|modify)\b",
    re.IGNORECASE | re.DOTALL,
)


def known_spellings() -> list[str]:
    names = [op.value for op in Operation]
    sql = [
        "INSERT OVERWRITE",
        "TRUNCATE",
        "INSERT INTO",
        "UPDATE",
        "DELETE",
        "MERGE INTO",
        "ALTER TABLE ... MERGE SMALLFILES",
        "ALTER TABLE ... COMPACT MINOR",
        "ALTER TABLE ... COMPACT MAJOR",
        "OPTIMIZE",
        "REORG TABLE ... APPLY (PURGE)",
        "REORG TABLE ... APPLY (UPGRADE ...)",
        "CALL ...rewrite_data_files",
        "ALTER TABLE ... ADD/DROP/RENAME/SET ...",
    ]
    return names + sql


def parse_operation(text: str | Operation) -> Operation:
    """An operation from its canonical name or from the SQL statement (or its leading words).

    Raises ``UnknownOperationError`` naming the known spellings.
    """
    if isinstance(text, Operation):
        return text
    if not isinstance(text, str) or not text.strip():
        raise UnknownOperationError(
            f"empty operation {text!r}; known operations: {', '.join(known_spellings())}"
        )
    stripped = _strip_sql_prefix(text)
    canonical = stripped.lower().replace("-", "_").replace(" ", "_")
    for op in Operation:
        if canonical == op.value:
            return op
    lowered = stripped.lower()
    if re.match(r"alter\s+table\b", lowered):
        for pattern, op in _ALTER_ENDINGS:
            if re.search(pattern, lowered):
                return op
        if _ALTER_METADATA.match(stripped):
            return Operation.ALTER_METADATA
    else:
        for pattern, op in _SQL_SPELLINGS:
            if re.match(pattern, lowered):
                return op
    first = " ".join(stripped.split()[:3])
    raise UnknownOperationError(
        f"unknown operation {first!r}; known operations: {', '.join(known_spellings())}"
    )


def _strip_sql_prefix(text: str) -> str:
    """Drop leading comments and CTEs' ``WITH`` so ``WITH s AS (...) MERGE INTO`` parses."""
    out = re.sub(r"^\s*(--[^\n]*\n|/\*.*?\*/\s*)*", "", text, flags=re.DOTALL).strip()
    if re.match(r"with\b", out, re.IGNORECASE):
        depth = 0
        for i, ch in enumerate(out):
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
                if depth == 0:
                    rest = out[i + 1 :].lstrip()
                    if not rest.startswith(","):
                        return rest
    return out
