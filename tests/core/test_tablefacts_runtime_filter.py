"""A snapshot-isolation Iceberg table whose session runs the runtime file filter: a copy-on-write
MERGE is held to the serializable matrix, because the filter fails it on any commit through the
session, an append to another partition included (measured on real Spark + Iceberg in
tests/engines/test_iceberg_runtime_filtering_setting.py). Without the filter, or merge-on-read, the
table's own level stands."""

from __future__ import annotations

import pytest

from occflow.core.operations import Operation
from occflow.core.tablefacts import TableFacts

SNAPSHOT = {f"write.{k}.isolation-level": "snapshot" for k in ("delete", "update", "merge")}


def _facts(check: bool | None, mode: str = "copy-on-write") -> TableFacts:
    return TableFacts("db.t", "iceberg", "spark-iceberg", partition_columns=("ds",),
                      properties={**SNAPSHOT, "write.merge.mode": mode}, runtime_filter_check=check)


def test_the_runtime_filter_holds_a_copy_on_write_merge_to_serializable() -> None:
    facts = _facts(True)
    assert facts.profile_name(Operation.MERGE) == "iceberg-serializable"
    assert any("runtime file filter" in why for why in facts.why(Operation.MERGE))
    # The matrix it is held to keeps an append and the MERGE apart; the table's own does not.
    assert facts.profile(Operation.MERGE).conflicts(Operation.INSERT_INTO, Operation.MERGE)
    assert not _facts(False).profile(Operation.MERGE).conflicts(Operation.INSERT_INTO, Operation.MERGE)


@pytest.mark.parametrize(("check", "mode"), [(False, "copy-on-write"), (None, "copy-on-write"), (True, "merge-on-read")])
def test_without_the_filter_or_on_merge_on_read_the_tables_level_stands(check: bool | None, mode: str) -> None:
    assert _facts(check, mode).profile_name(Operation.MERGE) == "iceberg-snapshot"


def test_an_append_keeps_the_tables_level() -> None:
    assert _facts(True).profile_name(Operation.INSERT_INTO) == "iceberg-snapshot"
