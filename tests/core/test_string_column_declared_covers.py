"""A declared text on a STRING partition column holds only its own spelling when checked against
the SQL (issue 33): ``{"hh": "2024-5-1"}`` does not cover ``WHERE hh = '2024-05-01'``, which is
another partition on the engine (delta-rs writes ``2024-5-1`` as its own directory:
tests/airflow/test_partition_values_leave_plain.py reads it from the log). Before, the check
accepted the pair and admission keyed the write narrower than the partition it deleted."""

from __future__ import annotations

import pytest

from occflow.core.declaration import WriteDeclaration
from occflow.core.errors import InvalidDeclarationError
from occflow.core.footprint import footprints_overlap
from occflow.core.sqlderive import check_derived_against, derive_write

TYPES = {"hh": "string", "p": "int"}


def _declared(value: str) -> WriteDeclaration:
    plain = WriteDeclaration.create(table="db.t", operation="delete", profile="delta-rs",
                                    partitions={"hh": value})
    return plain.with_typed_partitions(TYPES, "delta-rs")


def _derived(literal: str):  # noqa: ANN202 - core's DerivedWrite
    return derive_write(f"DELETE FROM db.t WHERE hh = '{literal}'", list(TYPES), "delta-rs", column_types=TYPES)


def test_a_declared_spelling_does_not_cover_another_spelling_of_the_same_day_on_a_string_column() -> None:
    with pytest.raises(InvalidDeclarationError, match="hh"):
        check_derived_against(_derived("2024-05-01"), _declared("2024-5-1"))
    # The converse too: the keys of the two really are two partitions.
    assert not footprints_overlap(_declared("2024-5-1").partition_keys(), _derived("2024-05-01").partition_keys())


@pytest.mark.parametrize("value", ["2024-5-1", "2024-05-01", "07"])
def test_the_same_spelling_covers_itself(value: str) -> None:
    check_derived_against(_derived(value), _declared(value))
    assert footprints_overlap(_declared(value).partition_keys(), _derived(value).partition_keys())


def test_without_the_columns_type_a_text_still_covers_both_spellings() -> None:
    # No facts: the type is unknown, the declaration names both spellings (wider, never a guess).
    untyped = WriteDeclaration.create(table="db.t", operation="delete", profile="delta-rs",
                                      partitions={"hh": "2024-5-1"})
    derived = derive_write("DELETE FROM db.t WHERE hh = '2024-05-01'", ["hh"], "delta-rs")
    check_derived_against(derived, untyped)
