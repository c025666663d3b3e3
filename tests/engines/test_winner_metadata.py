"""Naming a metadata-only commit as a winner, over metadata log entries as Iceberg's
``metadata_log_entries`` table lists them (the Spark-backed check with Iceberg's own files is in
test_iceberg_schema_change.py)."""

from __future__ import annotations

import pytest

from occflow.engines.spark.winner import iceberg_metadata_winner, metadata_version

W = "file:/w/db/t/metadata/"


@pytest.mark.parametrize(
    ("name", "number"),
    [
        (W + "00000-9f1c.metadata.json", 0),
        (W + "00012-9f1c-4b.metadata.json", 12),
        (W + "00003-9f1c.gz.metadata.json", 3),  # write.metadata.compression-codec=gzip
        ("hdfs://nn/w/db/t/metadata/v7.metadata.json", 7),  # the Hadoop catalog's names
        (W + "v7.gz.metadata.json", 7),
        (W + "snap-1-1-abc.avro", None),
        (W + "00003-x.metadata.json.bak", None),
    ],
)
def test_a_metadata_file_is_numbered_by_its_name(name: str, number: int | None) -> None:
    assert metadata_version(name) == number


def _entries() -> list[dict[str, object]]:
    return [
        {"at": "t0", "file": W + "00000-a.metadata.json", "snapshot_id": None},
        {"at": "t1", "file": W + "00001-b.metadata.json", "snapshot_id": 11},
        {"at": "t2", "file": W + "00002-c.metadata.json", "snapshot_id": 11},  # a property
        {"at": "t3", "file": W + "00003-d.metadata.json", "snapshot_id": 11},  # ADD COLUMN
    ]


def test_the_first_metadata_version_after_the_start_wins() -> None:
    entries = _entries()
    prop = iceberg_metadata_winner(entries, W + "00001-b.metadata.json")
    assert prop is not None and prop.tag == {"metadata_file": W + "00002-c.metadata.json", "metadata_version": "2"}
    assert prop.operation == "metadata change" and prop.metadata_version == 2 and prop.timestamp == "t2"
    schema = iceberg_metadata_winner(entries, W + "00002-c.metadata.json")
    assert schema is not None and schema.operation == "metadata change" and schema.metadata_version == 3
    assert schema.snapshot_id is None and schema.version is None  # an Iceberg version is a snapshot's
    assert "metadata version 3" in schema.describe()


def test_no_metadata_winner_without_a_later_version_or_a_known_start() -> None:
    entries = _entries()
    assert iceberg_metadata_winner(entries, W + "00003-d.metadata.json") is None  # nothing after it
    assert iceberg_metadata_winner(entries, W + "00009-z.metadata.json") is None  # expired from the log
    # A snapshot came after the start: that is a data commit, for the snapshot winner to name.
    assert iceberg_metadata_winner(entries, W + "00000-a.metadata.json") is None
