"""Commit tags: what identifies a logical write, and how it reads back from commit properties."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from occflow.core.errors import InvalidDeclarationError
from occflow.core.operations import Operation
from occflow.engines.deltars import deltars_commit
from occflow.engines.maxcompute import maxcompute_hints
from occflow.engines.spark import delta_spark_session_conf, delta_spark_write_options, iceberg_write_options
from occflow.engines.tags import APP_VERSION, WRITE_ID, CommitTag, write_id_of
from occflow.operators.exactly_once import from_context


def _context(try_number: int, run_id: str = "scheduled__2024-01-01", map_index: int = -1) -> dict[str, object]:
    # The attributes Airflow's RuntimeTaskInstance has; only these are read.
    ti = SimpleNamespace(dag_id="etl", task_id="load", run_id=run_id, map_index=map_index, try_number=try_number)
    return {"ti": ti, "logical_date": "2024-01-01T00:00:00+00:00"}


def test_the_write_id_is_the_same_on_every_try_and_differs_per_run_and_map_index() -> None:
    first = from_context(_context(1), "insert_into")
    third = from_context(_context(3), "insert_into")
    assert first is not None and third is not None
    assert first.write_id == third.write_id
    assert first.write_id != from_context(_context(1, run_id="scheduled__2024-01-02"), "insert_into").write_id  # type: ignore[union-attr]
    assert first.write_id != from_context(_context(1, map_index=0), "insert_into").write_id  # type: ignore[union-attr]
    assert first.write_id == write_id_of("etl", "load", -1, "scheduled__2024-01-01")


def test_outside_a_task_there_is_no_tag() -> None:
    assert from_context({}, "insert_into") is None


def test_properties_read_back_to_the_same_tag() -> None:
    tag = CommitTag.create("etl", "load", "r1", "INSERT OVERWRITE", map_index=2,
                           logical_date="2024-01-01T00:00:00+00:00", partitions=[{"ds": "2024-01-01", "r": 1}])
    props = tag.properties()
    assert props[WRITE_ID] == tag.write_id
    assert json.loads(props["occflow.write-partitions"]) == [{"ds": "2024-01-01", "r": "1"}]
    assert CommitTag.from_properties(props) == tag
    assert CommitTag.from_properties({"operation": "WRITE"}) is None
    assert tag.operation is Operation.INSERT_OVERWRITE and tag.is_overwrite


def test_each_format_gets_the_tag_through_its_own_mechanism() -> None:
    tag = CommitTag.create("etl", "load", "r1", "insert_into")
    assert delta_spark_write_options(tag)["txnAppId"] == tag.app_id
    assert delta_spark_write_options(tag)["txnVersion"] == str(APP_VERSION)
    conf = delta_spark_session_conf(tag)
    assert conf["spark.databricks.delta.write.txnAppId"] == tag.app_id
    assert json.loads(conf["spark.databricks.delta.commitInfo.userMetadata"])[WRITE_ID] == tag.write_id
    assert iceberg_write_options(tag)[f"snapshot-property.{WRITE_ID}"] == tag.write_id
    assert maxcompute_hints(tag)[f"odps.{WRITE_ID}"] == tag.write_id
    options = deltars_commit(tag)
    assert (options.app_id, options.app_version) == (tag.app_id, APP_VERSION)


def test_a_tag_whose_properties_do_not_hash_to_its_write_id_is_an_error() -> None:
    props = CommitTag.create("etl", "load", "r1", "insert_into").properties()
    props["occflow.run-id"] = "r2"
    with pytest.raises(InvalidDeclarationError, match="does not hash to its write id"):
        CommitTag.from_properties(props)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dag_id": ""}, "non-empty dag_id"),
        ({"logical_date": "yesterday"}, "not an ISO 8601"),
        ({"operation": "upsert everything"}, "operation"),
        ({"partitions": [{}]}, "non-empty mapping"),
    ],
)
def test_bad_tag_input_names_what_was_wrong(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"dag_id": "etl", "task_id": "load", "run_id": "r1", "operation": "insert_into"}
    args.update(kwargs)
    with pytest.raises(InvalidDeclarationError, match=message):
        CommitTag.create(**args)  # type: ignore[arg-type]


def test_partitions_overlap_and_logical_dates_order_overwrites() -> None:
    old = CommitTag.create("d", "t", "r1", "insert_overwrite", logical_date="2024-01-01", partitions={"ds": "a"})
    new = CommitTag.create("d", "t", "r2", "insert_overwrite", logical_date="2024-01-02T00:00:00+00:00",
                           partitions={"ds": "a"})
    other = CommitTag.create("d", "t", "r3", "insert_overwrite", logical_date="2024-01-03", partitions={"ds": "b"})
    whole = CommitTag.create("d", "t", "r4", "truncate", logical_date="2024-01-04")
    assert new.is_later_than(old) and not old.is_later_than(new)
    assert old.overlaps(new) and not old.overlaps(other) and whole.overlaps(other)
