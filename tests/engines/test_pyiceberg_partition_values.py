"""pyiceberg's partition-value rules (``core.partvalues``, ``CastRules.PYICEBERG``) against what real
pyiceberg selects, by brute force.

For each column type a table partitioned by identity on it holds one row per candidate value;
each text of the corpus is bound as ``p == text`` (``EqualTo``, as the operator's ``where`` and
declared partitions travel) and the scan says which partitions pyiceberg really selects, or that
the bind failed. The rules must name exactly the selected candidates (never fewer: a lease keyed
narrower than the write would let a conflicting write beside it), and refuse exactly where
pyiceberg refuses.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyiceberg", reason="needs pyiceberg (pip install 'airflow-provider-occflow[iceberg]')")

import pyarrow as pa  # noqa: E402
from pyiceberg.catalog.sql import SqlCatalog  # noqa: E402
from pyiceberg.expressions import EqualTo  # noqa: E402
from pyiceberg.partitioning import PartitionField, PartitionSpec  # noqa: E402
from pyiceberg.schema import Schema  # noqa: E402
from pyiceberg.transforms import IdentityTransform  # noqa: E402
from pyiceberg.types import BooleanType, DateType, DecimalType, IntegerType, LongType, NestedField, StringType  # noqa: E402

from occflow.core.partvalues import (  # noqa: E402
    ENGINE_RULES,
    ColumnType,
    LiteralKind,
    Named,
    Refused,
    SqlLiteral,
    partition_value,
    typed_partition_spec,
)

D = decimal.Decimal
#: (iceberg type, occflow's column type, the candidate partition values, each value's key as the
#: engine writes the partition: an independent spelling, not the rules under test).
COLUMNS: dict[str, tuple[Any, ColumnType, list[Any], Any]] = {
    "int": (IntegerType(), ColumnType.INTEGRAL, [7, 70, -7, 0, 10], str),
    "long": (LongType(), ColumnType.INTEGRAL, [7, 70, -7, 0, 10, 2**40], str),
    "decimal": (DecimalType(10, 2), ColumnType.DECIMAL, [D("7.00"), D("7.50"), D("0.00"), D("10.00")],
                lambda v: format(v.normalize(), "f") if v != v.to_integral_value() else str(int(v))),
    "date": (DateType(), ColumnType.DATE, [dt.date(2024, 1, 5), dt.date(2024, 1, 15), dt.date(1970, 1, 8)],
             lambda v: v.isoformat()),
    "boolean": (BooleanType(), ColumnType.BOOLEAN, [True, False], lambda v: "true" if v else "false"),
    "string": (StringType(), ColumnType.STRING, ["07", "7", " 7", "abc", "2024-01-05"], str),
}
TEXTS = [
    "07", "7", " 7 ", "+7", "-7", "7.0", "7.4", "7.9", "-7.9", "1e1", "1_0", "abc", "", "NaN", "Infinity",
    "7.50", "7.5", "2024-01-05", "20240105", "2024-1-5", "2024-01-05T00:00", "1970-01-08",
    "true", "TRUE", "False", "yes", "1", "0",
]


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("pyiceberg-partvalues")
    catalog = SqlCatalog("lake", uri=f"sqlite:///{root}/catalog.db", warehouse=(root / "wh").as_uri())
    catalog.create_namespace("pv")
    made = {}
    for name, (kind, _, values, _) in COLUMNS.items():
        schema = Schema(NestedField(1, "p", kind, required=False))
        table = catalog.create_table(f"pv.{name}", schema, partition_spec=PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "p")))
        table.append(pa.Table.from_pylist([{"p": v} for v in values], schema=schema.as_arrow()))
        made[name] = table
    yield made
    catalog.engine.dispose()


def selected(table: Any, text: str, key: Any) -> set[str] | None:
    """The keys of the partitions pyiceberg selects for ``p == text``; ``None``: it refused."""
    try:
        rows = table.scan(row_filter=EqualTo("p", text)).to_arrow().to_pylist()
    except (ValueError, TypeError, ArithmeticError):  # the bind's conversion (decimal.InvalidOperation too)
        return None
    return {key(r["p"]) for r in rows}


@pytest.mark.parametrize("column", sorted(COLUMNS))
def test_the_rules_name_exactly_the_partitions_pyiceberg_selects_and_refuse_where_it_refuses(tables: dict[str, Any], column: str) -> None:
    _, kind, values, key = COLUMNS[column]
    candidates = {key(v) for v in values}
    wrong = {}
    for text in TEXTS:
        engine = selected(tables[column], text, key)
        ruled = partition_value(SqlLiteral(LiteralKind.STRING, text), kind, ENGINE_RULES["pyiceberg"])
        if engine is None:
            # A DECIMAL text of another scale than the column's: pyiceberg refuses it, the rules
            # (which do not know the scale) name its value: wider, never narrower.
            other_scale = kind is ColumnType.DECIMAL and isinstance(ruled, Named) and D(text).as_tuple().exponent != -2
            ok = isinstance(ruled, Refused) or other_scale
        else:
            ok = isinstance(ruled, Named) and set(ruled.keys) & candidates == engine
        if not ok:
            wrong[text] = (ruled, engine)
    assert not wrong, f"{column}: rules vs pyiceberg: {wrong}"


def test_a_declared_partition_is_keyed_as_pyiceberg_binds_it_and_a_value_it_refuses_is_an_error() -> None:
    from occflow.core.errors import InvalidDeclarationError

    types = {"p": "int", "d": "date", "b": "boolean"}
    assert typed_partition_spec({"p": "07", "d": "20240105", "b": "TRUE"}, types, "pyiceberg") == {
        "p": "7", "d": "2024-01-05", "b": "true"
    }
    with pytest.raises(InvalidDeclarationError, match=r"partition value 'yes' for 'b' .*pyiceberg cannot convert 'yes' to a boolean"):
        typed_partition_spec({"b": "yes"}, types, "pyiceberg")
