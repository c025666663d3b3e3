"""Observed footprints of real delta-rs commits, against their declarations.

The oracle is the Delta log itself: each test reads ``_delta_log/<version>.json`` with ``json``
(independent of ``deltalake`` and of occflow's reader) and derives the partitions a commit's
``add`` / ``remove`` actions name; the race is real (a writer planned on an older snapshot,
delta-rs's conflict checker decides).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from occflow.core.declaration import WriteDeclaration
from occflow.core.footprint import footprints_overlap
from occflow.core.observed import ADVICE, ObservedFootprint, excess, uncovered
from occflow.engines.deltars import Compare, DeltaRsTable, Where
from occflow.engines.deltars.observed import (
    diff_snapshots,
    footprint_of,
    observe_deltars_commit,
    pins_partition,
)

pytest.importorskip("deltalake")


def _log_partitions(path: str, version: int) -> tuple[set[str], set[str], dict]:
    """Oracle: partitions of the files commit ``version`` added and removed, and its commitInfo,
    read straight from the JSON commit file."""
    added, removed, info = set(), set(), {}
    for line in (Path(path) / "_delta_log" / f"{version:020d}.json").read_text().splitlines():
        action = json.loads(line)
        for kind, bucket in (("add", added), ("remove", removed)):
            if kind in action:
                values = action[kind]["partitionValues"]
                bucket.add("/".join(f"{k}={values[k]}" for k in sorted(values)))
        info = action.get("commitInfo", info)
    return added, removed, info


def _declare(operation: str, ds: str | None) -> WriteDeclaration:
    return WriteDeclaration.create(
        "db.events", operation, profile="delta-rs", partitions=None if ds is None else {"ds": ds}
    )


@pytest.fixture
def events(tmp_path: Path) -> DeltaRsTable:
    """Partition ds=1 holds ids 1, 2, 5; partition ds=2 holds ids 3, 4, 6 (one file each)."""
    table = DeltaRsTable(tmp_path / "events")
    rows = pa.table({"id": [1, 2, 5, 3, 4, 6], "ds": ["1", "1", "1", "2", "2", "2"], "v": [0] * 6})
    assert table.create(rows, partition_by=["ds"]).committed
    return table


def test_a_delete_whose_predicate_names_no_partition_rewrites_both_and_makes_a_disjoint_writer_lose(events):
    """Task A declares ds=1 but deletes ``id >= 5`` (rows in ds=1 and ds=2); task B declares
    ds=2 and updates it. Admission sees disjoint footprints and runs them together; B, planned
    before A committed, loses to A's removal of a ds=2 file. The observed footprint shows why."""
    declared_a, declared_b = _declare("delete", "1"), _declare("update", "2")
    assert not footprints_overlap(declared_a.partition_keys(), declared_b.partition_keys())

    b_snapshot = events.load()  # B plans here
    a = events.delete(Where((Compare("id", ">=", 5),)))
    assert a.committed and a.version == 1
    b = events.update(Where.equals(id=4), set_values={"v": 9}, partition={"ds": "2"}, snapshot=b_snapshot)
    assert not b.committed and b.classification is not None and b.classification.is_conflict

    added, removed, info = _log_partitions(events.uri, a.version)
    assert added == removed == {"ds=1", "ds=2"}  # the oracle: A rewrote files of both partitions

    observed = observe_deltars_commit(events.uri, a.version)
    assert observed.partitions_added == frozenset(added)
    assert observed.partitions_removed == frozenset(removed)
    assert observed.operation == info["operation"] == "DELETE"
    assert observed.predicate == info["operationParameters"]["predicate"]
    assert observed.read_version == info["readVersion"] == 0
    assert observed.whole_table and not observed.blind_append

    found = excess(declared_a, observed)
    assert found is not None
    assert found.partitions == frozenset({"ds=2"})
    assert found.read_whole_table
    assert "make the write's condition name its partition" in found.advice
    assert "touched partition(s) ds=2" in found.describe()

    # B, retried from a fresh snapshot, touches exactly what it declared.
    retried = events.update(Where.equals(id=4), set_values={"v": 9}, partition={"ds": "2"})
    assert retried.committed
    b_observed = observe_deltars_commit(events.uri, retried.version)
    assert _log_partitions(events.uri, retried.version)[:2] == ({"ds=2"}, {"ds=2"})
    assert b_observed.partitions_touched == frozenset({"ds=2"}) and not b_observed.whole_table
    assert excess(declared_b, b_observed) is None


def test_a_merge_on_the_key_alone_reads_the_whole_table_even_when_it_writes_one_partition(events):
    """Spec 004's MERGE: ``t.id = s.id`` with source rows of ds=1 writes only ds=1, but delta-rs
    reads (and conflict-checks) every partition; naming the partition in the condition does not."""
    source = pa.table({"id": [1, 7], "ds": ["1", "1"], "v": [5, 5]})
    loose = events.merge(source, ["id"])
    assert loose.committed
    added, removed, info = _log_partitions(events.uri, loose.version)
    assert added | removed == {"ds=1"}
    assert info["operationParameters"]["mergePredicate"] == "t.id = s.id"
    observed = observe_deltars_commit(events.uri, loose.version)
    assert observed.predicate == "t.id = s.id"
    assert observed.partitions_touched == frozenset({"ds=1"}) and observed.whole_table
    found = excess(_declare("merge", "1"), observed)
    assert found is not None and found.partitions == frozenset() and found.read_whole_table

    narrow = events.merge(source, ["id"], partition={"ds": "1"})
    assert narrow.committed
    observed = observe_deltars_commit(events.uri, narrow.version)
    assert observed.partitions_touched == frozenset({"ds=1"}) and not observed.whole_table
    assert excess(_declare("merge", "1"), observed) is None
    # The same commit against a declaration of the other partition: the check can tell.
    assert excess(_declare("merge", "2"), observed).partitions == frozenset({"ds=1"})


def test_a_whole_table_declaration_covers_anything_and_a_blind_append_reads_nothing(events):
    delete_all = events.delete(Where((Compare("v", ">=", 0),)))
    assert delete_all.committed
    assert excess(_declare("delete", None), observe_deltars_commit(events.uri, delete_all.version)) is None
    append = events.append(pa.table({"id": [8], "ds": ["2"], "v": [1]}))
    observed = observe_deltars_commit(events.uri, append.version)
    assert observed.blind_append and not observed.whole_table
    assert observed.partitions_added == frozenset({"ds=2"}) and not observed.partitions_removed
    assert excess(_declare("insert_into", "2"), observed) is None
    assert excess(_declare("insert_into", "1"), observed).partitions == frozenset({"ds=2"})


def test_the_deltalake_snapshot_diff_reads_what_the_commit_file_says(events):
    """The object-store path (no local commit file): versions ``v - 1`` and ``v`` compared."""
    events.delete(Where((Compare("id", ">=", 5),)))
    events.merge(pa.table({"id": [3], "ds": ["2"], "v": [1]}), ["id"], partition={"ds": "2"})
    for version in (0, 1, 2):
        from_file = observe_deltars_commit(events.uri, version)
        diffed = footprint_of(events.uri, version, diff_snapshots(events.uri, version, None, events.load(version)), ["ds"])
        assert diffed == from_file
        added, removed, _ = _log_partitions(events.uri, version)
        assert diffed.partitions_added == frozenset(added) and diffed.partitions_removed == frozenset(removed)


@pytest.mark.parametrize(
    ("predicate", "pins"),
    [
        ("t.id = s.id AND t.ds = '1'", True),
        ("\"ds\" = '1'", True),
        ("ds IN ('1', '2') AND id > 3", True),
        ("t.ds = s.ds AND t.id = s.id", False),  # spec 004: names the column, pins nothing
        ("ds = '1' OR id = 2", False),
        ("id >= 5", False),
        (None, False),
    ],
)
def test_a_predicate_pins_a_partition_only_with_a_value_in_a_top_level_conjunct(predicate, pins):
    assert pins_partition(predicate, ["ds"]) is pins


def test_an_observed_partition_is_covered_by_a_declared_spec_that_agrees_on_every_shared_column():
    assert uncovered({"ds=1"}, {"country=nl/ds=1", "ds=1", ""}) == frozenset()
    assert uncovered({"country=NL/ds=1"}, {"ds=1", "country=NL/ds=2"}) == frozenset({"country=NL/ds=2"})
    observed = ObservedFootprint("t", 3, "UPDATE", frozenset({"ds=1"}), frozenset({"ds=2"}))
    assert ObservedFootprint.from_dict(observed.to_dict()) == observed
    assert excess(_declare("update", "1"), observed).to_dict()["partitions"] == ["ds=2"]
    assert excess(_declare("update", "1"), observed).advice == ADVICE
