"""Admission sees one table and one matrix whatever the DAG wrote (issue 11, items 5 and 6):
every spelling of a table meets the same leases, numeric spellings of a partition value are one
partition, and a pair that corrupts data on the engine is refused even under a declared profile
that says it is safe. Real stores (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from occflow.core.declaration import WriteDeclaration
from occflow.core.profiles import get_profile
from occflow.leases import Holder, LeaseRequest, LeaseStore


def _request(table: str, operation: str, partitions, *, catalog=None, profile="iceberg-serializable",
             engine_profile=None, task="t") -> LeaseRequest:
    declaration = WriteDeclaration.create(
        table, operation, profile=profile, partitions=partitions, catalog=catalog, engine_profile=engine_profile
    )
    return LeaseRequest.from_declaration(declaration, holder=Holder(dag_id="d", task_id=task, run_id="r"), ttl=30)


@pytest.mark.parametrize(
    ("held", "asked"),
    [
        (("lake.db.events", "lake"), ("db.events", "lake")),
        (("db.events", None), ("`DB`.`Events`", None)),
        (("LAKE.db.EVENTS", "lake"), ("`db`.events", "lake")),
    ],
)
def test_spellings_of_one_table_meet_the_same_leases(store_url, held, asked):
    store = LeaseStore.from_url(store_url)
    first = store.decide(_request(held[0], "merge", {"ds": "1"}, catalog=held[1], task="a"))
    assert first.granted
    second = store.decide(_request(asked[0], "merge", {"ds": "1"}, catalog=asked[1], task="b"))
    assert not second.granted, f"{asked[0]} was admitted beside a MERGE on {held[0]}"


@pytest.mark.parametrize(("held", "asked"), [(1, "1"), (1, 1.0), ("1.0", 1), ("2024-01-01", "2024-01-01")])
def test_numeric_spellings_of_a_partition_value_are_one_partition(store_url, held, asked):
    store = LeaseStore.from_url(store_url)
    assert store.decide(_request("db.t", "merge", {"n": held}, task="a")).granted
    assert not store.decide(_request("db.t", "merge", {"n": asked}, task="b")).granted


def test_a_pair_that_corrupts_data_on_the_engine_is_refused_under_a_profile_that_allows_it(store_url):
    # Databricks' documented matrix lets a second OPTIMIZE fail cleanly; delta-rs commits both and
    # duplicates rows. The DAG declares the Databricks matrix on a delta-rs write.
    declared = get_profile("delta-write-serializable")
    assert declared.conflicts("optimize", "optimize")  # the documented one fails the later, too
    store = LeaseStore.from_url(store_url)
    kwargs = {"profile": "delta-write-serializable", "engine_profile": "delta-rs"}
    first = _request("db.t", "optimize", {"ds": "1"}, task="a", **kwargs)
    assert first.profile.name == "delta-rs"
    assert store.decide(first).granted
    assert not store.decide(_request("db.t", "optimize", {"ds": "1"}, task="b", **kwargs)).granted
    # and the engine's own matrix still lets compatible work through: an append beside nothing
    assert store.decide(_request("db.t", "insert_into", {"ds": "2"}, task="c", **kwargs)).granted


def test_an_append_beside_an_update_is_refused_on_delta_rs_though_the_declared_matrix_allows_it(store_url):
    # The case: under WriteSerializable a blind append never conflicts with an UPDATE; on
    # delta-rs the append loses. Admission follows the engine.
    assert not get_profile("delta-write-serializable").conflicts("update", "insert_into")
    assert get_profile("delta-rs").conflicts("update", "insert_into")
    store = LeaseStore.from_url(store_url)
    kwargs = {"profile": "delta-write-serializable", "engine_profile": "delta-rs"}
    assert store.decide(_request("db.t", "update", {"ds": "1"}, task="a", **kwargs)).granted
    assert not store.decide(_request("db.t", "insert_into", {"ds": "1"}, task="b", **kwargs)).granted
    # without the engine's profile the declared matrix alone would have let the pair run together
    other = LeaseStore.from_url(store_url)
    assert other.decide(_request("db.u", "update", {"ds": "1"}, task="a", profile="delta-write-serializable")).granted
    assert other.decide(
        _request("db.u", "insert_into", {"ds": "1"}, task="b", profile="delta-write-serializable")
    ).granted


def _delta_write(tmp_path, task_id: str, table: str, path: str):
    from occflow.operators.delta import DeltaWriteOperator

    return DeltaWriteOperator(task_id=task_id, table=table, path=path, operation="optimize",
                              partitions={"ds": "1"})


@pytest.mark.parametrize(
    "spell",
    [
        lambda p: str(p),
        lambda p: str(p) + "/",
        lambda p: f"file://{p}",
        lambda p: str(p.parent / "." / p.name),
        lambda p: str(p.parent / "sub" / ".." / p.name),
        "symlink",
    ],
)
def test_one_delta_table_under_two_names_meets_the_same_leases(store_url, tmp_path, spell):
    """Two delta-rs tasks that name different tables for one ``path`` write one directory:
    admission keeps them apart by where the table is, not by its name (two OPTIMIZEs of one
    partition duplicate its rows on delta-rs)."""
    place = tmp_path / "events"
    place.mkdir()
    if spell == "symlink":
        (tmp_path / "alias").symlink_to(place)
        other = str(tmp_path / "alias")
    else:
        other = spell(place)
    first = _delta_write(tmp_path, "a", "db.events", str(place)).declare()
    second = _delta_write(tmp_path, "b", "reporting.events_v2", other).declare()
    assert first.table_key == second.table_key
    store = LeaseStore.from_url(store_url)
    holder = {"dag_id": "d", "run_id": "r"}
    assert store.decide(LeaseRequest.from_declaration(first, holder=Holder(task_id="a", **holder), ttl=30)).granted
    refused = store.decide(LeaseRequest.from_declaration(second, holder=Holder(task_id="b", **holder), ttl=30))
    assert not refused.granted, "one directory under two names was admitted twice"


def test_two_delta_tables_at_different_paths_with_one_name_are_two_tables(store_url, tmp_path):
    first = _delta_write(tmp_path, "a", "db.events", str(tmp_path / "one")).declare()
    second = _delta_write(tmp_path, "b", "db.events", str(tmp_path / "two")).declare()
    store = LeaseStore.from_url(store_url)
    holder = {"dag_id": "d", "run_id": "r"}
    assert store.decide(LeaseRequest.from_declaration(first, holder=Holder(task_id="a", **holder), ttl=30)).granted
    assert store.decide(LeaseRequest.from_declaration(second, holder=Holder(task_id="b", **holder), ttl=30)).granted
