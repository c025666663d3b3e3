"""A Delta physical column as a lease key's column (issue 33, item 2): spelled so that a write keyed
by logical names alone is never called disjoint from one keyed by physical names.

A table that had column mapping turned on after its columns existed keeps their names as their
physical names; rename ``p`` to ``x`` and add a new ``p`` and the physical name ``p`` now belongs to
``x``. The physical columns here are the ones such a table's log records (the delta-rs test in
tests/airflow/test_column_mapping_admission.py reads generated ones from a real log).
"""

from __future__ import annotations

from occflow.core.footprint import footprints_overlap
from occflow.core.operations import Operation
from occflow.core.tablefacts import TableFacts


def _keys(facts: TableFacts, spec: dict[str, str]) -> frozenset[str]:
    reach = facts.reach(Operation.DELETE, (spec,)).partitions
    assert reach is not None
    return frozenset("/".join(f"{c}={v}" for c, v in sorted(p.items())) for p in reach)


def test_a_kept_physical_name_never_meets_a_logical_key_of_the_same_spelling() -> None:
    # x was p (its physical name is still p); the new p got a generated physical name.
    facts = TableFacts("lake.t", "delta", "delta-rs", ("x", "p"),
                       physical_columns={"x": "p", "p": "col-0a1b2c3d-0000-4000-8000-00000000000a"})
    old_x = _keys(facts, {"x": "2"})  # the rows stored under physical p with value 2
    logical_p = frozenset({"p=1"})  # a writer that keys by logical names: the new p, value 1
    # Both may touch the file (x=2, p=1): kept apart. Keyed by the bare name "p" they would compare
    # 2 with 1 across two different columns and be called disjoint.
    assert footprints_overlap(old_x, logical_p)
    assert old_x == {"_physical_p=2"}
    # Keyed by physical names on both sides, the same stored column still compares values.
    assert not footprints_overlap(old_x, _keys(facts, {"x": "3"}))
    assert footprints_overlap(old_x, _keys(facts, {"x": "2"}))


def test_a_generated_physical_name_is_its_uuid_and_unrenamed_columns_keep_their_names() -> None:
    facts = TableFacts("lake.t", "delta", "delta-rs", ("a", "b"),
                       physical_columns={"a": "col-0A1B2C3D-0000-4000-8000-00000000000B", "b": "b"})
    assert _keys(facts, {"a": "1", "b": "2"}) == {"b=2/col_0a1b2c3d_0000_4000_8000_00000000000b=1"}
