"""What a SQL write job really does, checked against the task's declaration before an engine sees it.

The job is read as the engine will run it (``core.sqlread``): exactly one write statement,
``SET key = value`` statements before it only when the DAG lists the statements. It must write
the declared table, and its derived declaration (``core.sqlderive``: the operation, the
partitions its conditions confine it to, whether it reads its own target) must be no more than
the task declares. Anything else is refused with a message that names what differs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .declaration import WriteDeclaration
from .errors import InvalidDeclarationError
from .identifiers import table_parts
from .profiles import get_profile
from .sqlderive import check_derived_against, derive_sql_write
from .sqlread import DIALECT, SqlWrite, job_text, read_sql_write, shorten, split_statements

__all__ = ["DIALECT", "SqlWrite", "check_sql_write", "job_text", "read_sql_write", "split_statements"]

_TEMPLATE_RE = re.compile(r"\{\{|\{%")


def check_sql_write(
    text: str | Sequence[str],
    declaration: WriteDeclaration,
    sql_catalog: str | None,
    catalogs_known: bool = True,
) -> SqlWrite:
    """``text`` (or the DAG's list of statements) is the declared write, on the declared table,
    touching no partition the task does not declare.

    ``sql_catalog`` is the catalog the session resolves a name without one in. With
    ``catalogs_known=False`` (DAG parse time, before the connection is read) a name without a
    catalog matches the same name in any catalog, and partition values are not compared (they
    may still be templates; the check after rendering compares them); so too when the declared
    values or the SQL still hold a Jinja template. The partition columns are those the
    declaration names; a declaration without partitions (the whole table) accepts any.
    """
    sql, allow_settings = job_text(text)
    found = read_sql_write(sql, allow_settings)
    derived = derive_sql_write(found, _declared_columns(declaration), _engine_of(declaration))
    if derived.operation is not declaration.operation:
        reason = next((w for w in derived.why if "note (1)" in w), None)
        raise InvalidDeclarationError(
            f"the SQL job's write {shorten(found.statement)!r} is a {derived.operation.value} but the task "
            f"declares {declaration.operation.value}{f' ({reason})' if reason else ''}; declare the "
            "operation the job performs"
        )
    written, declared = found.table_key(sql_catalog), declaration.table_key
    if not _same_table(written, declared, catalogs_known):
        resolved = f" (a name without a catalog is in the session's catalog {sql_catalog})" if sql_catalog else ""
        raise InvalidDeclarationError(
            f"the SQL job's write {shorten(found.statement)!r} writes {written}{resolved} but the task "
            f"declares {declared}; a task writes the table it declares"
        )
    templated = not catalogs_known or bool(_TEMPLATE_RE.search(sql)) or _templated_values(declaration)
    check_derived_against(derived, declaration, templated=templated)
    return found


def _declared_columns(declaration: WriteDeclaration) -> list[str] | None:
    if not declaration.partitions:
        return None
    return list(dict.fromkeys(c.lower() for spec in declaration.partitions for c in spec))


def _templated_values(declaration: WriteDeclaration) -> bool:
    return any(
        isinstance(v, str) and bool(_TEMPLATE_RE.search(v)) for spec in declaration.partitions or () for v in spec.values()
    )


def _same_table(written: str, declared: str, catalogs_known: bool) -> bool:
    if written == declared or catalogs_known:
        return written == declared
    a, b = table_parts(written), table_parts(declared)
    return sorted((len(a), len(b))) == [2, 3] and a[-2:] == b[-2:]


def _engine_of(declaration: WriteDeclaration) -> str | None:
    """The engine a declaration's profiles name (how it finds the files an UPDATE or DELETE
    rewrites: ``core.sqlfilefinding``); ``None`` (the widest reading) for a Delta profile that
    may run on delta-rs or on Spark."""
    profile = get_profile(declaration.engine_profile or declaration.profile)
    if profile.name == "delta-rs":
        return "delta-rs"
    return {"iceberg": "spark-iceberg", "maxcompute": "maxcompute"}.get(profile.table_format)
