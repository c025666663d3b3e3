"""How an engine finds the files a condition-driven write rewrites, and so which part of the
condition confines its footprint (issue 23).

An UPDATE, a DELETE and an INSERT ... REPLACE WHERE rewrite every file their engine *finds* for
the condition. Spark (Delta and Iceberg) and MaxCompute find the files holding a row the whole
condition selects. delta-rs does not quite (``crates/core/src/delta_datafusion/find_files.rs``,
``collect_matching_files``; ``table_provider/next/scan/plan.rs``): it prunes files with a
*dedicated* skipping predicate, the condition's top-level conjuncts that delta-kernel can
translate (``to_delta_predicate``), and scans what is left with the whole condition as a
DataFusion filter. DataFusion's optimizer may rewrite a conjunct kernel cannot translate so that
a partition-only piece splits off (``NOT IN`` expanded and factored out of an ``OR``, a ``CASE``
simplified to its comparison); the scan reports that piece ``Exact`` (kernel handles partition
columns), DataFusion drops it from the filter, and the scan never applies it, because the
dedicated predicate replaces the pushed filters. Measured on delta-rs 1.6:
``(ds <> 'C' AND upper(region) = 'AP') OR ds NOT IN ('C', 'A')`` rewrote files of ``ds = 'C'``;
``CASE WHEN ds = 'A' THEN true ELSE false END`` rewrote every file of the table. So on delta-rs
a conjunct kernel cannot translate confines no partition; the translatable ones do (kernel
prunes by partition value exactly, ``NULL`` partitions included).

What kernel translates, in the SQL the job is written in (``to_kernel.rs``): columns, literals
(a typed ``DATE '...'`` / ``TIMESTAMP '...'`` and a negative number too), comparisons, ``AND``,
``OR``, ``NOT``, ``IS [NOT] NULL``, ``[NOT] IN`` a list of non-NULL literals, ``BETWEEN``.
Anything else (a function call, ``CASE``, ``LIKE``, arithmetic, ``<=>``, a subquery) is read as
not translatable: that may only widen the footprint.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType

from sqlglot import exp

from .errors import InvalidDeclarationError
from .sqlpredicates import ColumnScope
from .sqlreading import Reading, conjuncts, short
from .tablefacts import ENGINES


class FileFinding(Enum):
    """Which part of a write's condition decides the files the engine rewrites."""

    #: The files holding a row the whole condition selects.
    WHOLE_CONDITION = "whole_condition"
    #: Only the condition's top-level conjuncts delta-kernel can translate confine the files.
    KERNEL_CONJUNCTS = "kernel_conjuncts"


#: Engine (``core.tablefacts.ENGINES``) -> how it finds the files an UPDATE / DELETE / REPLACE
#: WHERE rewrites. Sources: delta-rs ``find_files.rs`` (``collect_matching_files``) and
#: ``scan/plan.rs`` (``KernelScanPlan::try_new_with_contract``, ``process_predicate``), measured
#: in ``tests/engines/test_derivation_fuzz.py``; Spark and MaxCompute filter rows by the whole
#: condition (the Iceberg oracle of the same test).
FILE_FINDING: Mapping[str, FileFinding] = MappingProxyType({
    "delta-rs": FileFinding.KERNEL_CONJUNCTS,
    "delta-spark": FileFinding.WHOLE_CONDITION,
    "databricks": FileFinding.WHOLE_CONDITION,
    "spark-iceberg": FileFinding.WHOLE_CONDITION,
    "maxcompute": FileFinding.WHOLE_CONDITION,
    # pyiceberg runs no SQL (its writes take a filter expression); a statement derived for it is
    # read with the rule that confines least, until its file pruning is measured.
    "pyiceberg": FileFinding.KERNEL_CONJUNCTS,
})

_KERNEL_NODES = (
    exp.Paren, exp.And, exp.Or, exp.Not, exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE,
    exp.Between, exp.Boolean,
)
_TYPED_LITERALS = {exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ,
                   exp.DataType.Type.TIMESTAMPNTZ, exp.DataType.Type.TIMESTAMPLTZ}


def file_finding(engine: str | None) -> FileFinding:
    """The rule of ``engine``; ``None`` (not named): the one that confines least."""
    if engine is None:
        return FileFinding.KERNEL_CONJUNCTS
    if engine not in FILE_FINDING:
        raise InvalidDeclarationError(f"unknown engine {engine!r}; engines: {', '.join(ENGINES)}")
    return FILE_FINDING[engine]


def kernel_translates(node: exp.Expr) -> bool:
    """Whether delta-kernel's ``to_delta_predicate`` surely translates ``node`` (``False`` when
    in doubt: it may only widen the footprint)."""
    if isinstance(node, exp.Column):
        return isinstance(node.this, exp.Identifier)
    if isinstance(node, exp.Literal):
        return True
    if isinstance(node, exp.Neg):
        return isinstance(node.this, exp.Literal) and not node.this.is_string
    if isinstance(node, (exp.Cast, exp.TryCast)):
        return isinstance(node.this, exp.Literal) and node.this.is_string and node.to.this in _TYPED_LITERALS
    if isinstance(node, exp.Is):
        return isinstance(node.expression, exp.Null) and kernel_translates(node.this)
    if isinstance(node, exp.In):
        listed = node.expressions
        plain = not node.args.get("query") and not node.args.get("unnest") and not node.args.get("field")
        return plain and bool(listed) and kernel_translates(node.this) and all(_non_null_literal(e) for e in listed)
    if not isinstance(node, _KERNEL_NODES):
        return False
    return all(kernel_translates(child) for child in node.iter_expressions())


def _non_null_literal(node: exp.Expr) -> bool:
    return isinstance(node, (exp.Literal, exp.Boolean, exp.Neg, exp.Cast, exp.TryCast)) and kernel_translates(node)


def confine_to_found_files(reading: Reading, engine: str | None, columns: Mapping[str, str]) -> None:
    """Keep of ``reading.condition`` what confines the files ``engine`` rewrites (a write whose
    condition finds the files it rewrites: ``reading.finds_files``); say why for each conjunct
    left out that names a partition column."""
    condition = reading.condition
    if not reading.finds_files or condition is None or file_finding(engine) is FileFinding.WHOLE_CONDITION:
        return
    kept: list[exp.Expr] = []
    left: list[exp.Expr] = []
    for conjunct in conjuncts(condition):
        (kept if kernel_translates(conjunct) else left).append(conjunct)
    if not left:
        return
    scope = ColumnScope(columns, reading.qualifiers, reading.bare)
    named = "" if engine is not None else " (the engine is not named: read as delta-rs, which confines least)"
    pinning = [c for c in left if scope.mentions(c)]
    for conjunct in pinning:
        reading.why.append(
            f"{short(conjunct)}: delta-rs finds the files it rewrites with only the conjuncts delta-kernel "
            f"translates, and not this one, so it confines no partition{named}"
        )
    if not kept:
        reading.condition = None
        if pinning:
            reading.whole = f"{reading.label} has no conjunct delta-kernel translates: delta-rs may rewrite any file{named}"
        return
    reading.condition = exp.and_(*kept, copy=False) if len(kept) > 1 else kept[0]
