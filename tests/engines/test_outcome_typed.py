"""``WriteOutcome``'s typed parts (what the write flow branches on) survive the JSON a spark-submit
driver writes, and an outcome written before they existed still loads, its tag keys lifted into
them (issue 32 item 3).

The old format's oracle is the old writer itself: ``to_json`` before this change was
``asdict(outcome)`` of a class without ``found`` / ``lease_refused`` / ``metadata_commit``, the same
facts carried as tag keys (the driver wrote ``{lease_not_live, fence, lease_refused_at}``, the
exactly-once settle ``{exactly_once, committed_by}``). Dropping the typed keys from today's dict
gives exactly that file; the literal below is one such file as the previous driver wrote it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from occflow.core.kinds import Classification, ConflictKind, WinningCommit
from occflow.core.operations import Operation
from occflow.engines.outcome import (
    ErrorInfo,
    FoundInTable,
    LeaseRefusal,
    MalformedOutcome,
    MetadataCommit,
    WriteOutcome,
)
from occflow.engines.spark.submit import outcome_from_dict
from occflow.engines.spark.submit_fence import AT_COMMIT, AT_STATEMENT_START

TYPED = ("found", "lease_refused", "metadata_commit")


def _outcomes() -> list[WriteOutcome]:
    lost = Classification(
        kind=ConflictKind.VALIDATION_CONFLICT, engine="spark-iceberg", reason="new files match the filter",
        winning_commit=WinningCommit(snapshot_id=7, operation="append", tag={"k": "v"}, basis="first after 6"),
        exception_class="ValidationException",
    )
    plain = WriteOutcome(engine="spark-iceberg", table="lake.db.t", operation=Operation.INSERT_INTO,
                         committed=True, seconds=1.5, version=3, snapshot_id=11, rows=4, tag={"job": "sql"})
    return [
        plain,
        WriteOutcome(engine="spark-iceberg", table="lake.db.t", operation=Operation.MERGE, committed=False,
                     seconds=2.0, error=ErrorInfo("ValidationException", ("Found conflicting files",)),
                     classification=lost),
        WriteOutcome.already_committed("delta-rs", "/lake/t", Operation.MERGE, "already committed by an earlier "
                                       "attempt", by="try 2", version=5, tag={"write_id": "w1"}),
        WriteOutcome.refused_by_lease("spark-iceberg", "lake.db.t", Operation.UPDATE, 0.5,
                                      "lease not live at the commit of lake.db.t", at=AT_COMMIT, fence=12),
        WriteOutcome.refused_by_lease("spark-iceberg", "lake.db.t", Operation.UPDATE, 0.5, "past its validity",
                                      at=AT_STATEMENT_START, fence=None),
        replace(plain, operation=Operation.ALTER_METADATA, version=None, snapshot_id=None,
                metadata_commit=MetadataCommit(4, "file:/w/db/t/metadata/00004-ab.metadata.json")),
        replace(plain, damage="two compactions rewrote the same files"),
    ]


@pytest.mark.parametrize("outcome", _outcomes(), ids=lambda o: f"{o.operation.value}-{o.committed}")
def test_an_outcome_reads_back_from_its_json_equal(outcome: WriteOutcome) -> None:
    assert WriteOutcome.from_dict(json.loads(outcome.to_json())) == outcome


@pytest.mark.parametrize("outcome", _outcomes(), ids=lambda o: f"{o.operation.value}-{o.committed}")
def test_an_outcome_written_before_the_typed_fields_loads_with_them(outcome: WriteOutcome) -> None:
    old = {k: v for k, v in json.loads(outcome.to_json()).items() if k not in TYPED}
    loaded = WriteOutcome.from_dict(old)
    # What the old format carried comes back typed; a schema change's metadata it never carried.
    assert loaded == replace(outcome, metadata_commit=None)


def test_the_previous_drivers_lease_refusal_file_loads_as_a_typed_refusal() -> None:
    # An outcome file of the driver before the typed fields (driver.py's not_live then).
    old_driver_file: dict[str, Any] = {
        "classification": None, "committed": False, "damage": None, "engine": "spark-iceberg", "error": None,
        "operation": "insert_overwrite", "rows": None, "seconds": 3.25, "snapshot_id": None,
        "table": "lake.db.events", "version": None,
        "tag": {"lease_not_live": "lease 9 (fence 41) is not certainly live", "fence": "41",
                "lease_refused_at": "commit", "lease_checked_at": "commit"},
        "driver": {"application_id": "local-1", "seconds_total": 4.0},
    }
    outcome = outcome_from_dict(old_driver_file)
    assert outcome.lease_refused == LeaseRefusal("lease 9 (fence 41) is not certainly live", AT_COMMIT, 41)
    assert not outcome.committed and outcome.found is None and outcome.metadata_commit is None
    # Without a lease the old driver wrote the fence as the text "None".
    no_lease = {**old_driver_file, "tag": {**old_driver_file["tag"], "fence": "None"}}
    refused = outcome_from_dict(no_lease).lease_refused
    assert refused is not None and refused.fence is None


def test_a_tag_key_named_like_an_old_field_settles_nothing() -> None:
    plain = _outcomes()[0]
    # A user's commit label that happens to be called "exactly_once" settles nothing ...
    labelled = replace(plain, tag={"exactly_once": "a user's label"})
    assert WriteOutcome.from_dict(json.loads(labelled.to_json())).found is None
    assert not labelled.changed_nothing and labelled.found is None
    # ... and a write found in the table is found without any tag key.
    found = replace(plain, tag={}, found=FoundInTable("already committed by an earlier attempt", "try 1"))
    assert WriteOutcome.from_dict(json.loads(found.to_json())).found == found.found
    # A schema change committed something, though neither a version nor a snapshot.
    schema = replace(plain, version=None, snapshot_id=None, metadata_commit=MetadataCommit(2, "v2.metadata.json"))
    assert not schema.changed_nothing
    assert replace(schema, metadata_commit=None).changed_nothing


def test_a_verified_absent_failure_is_not_read_as_found() -> None:
    # The exactly-once guard labels a failure it verified absent; the tag key it shares with the
    # old "found" must not make a failed outcome look committed.
    failed = _outcomes()[1]
    old = {k: v for k, v in json.loads(failed.to_json()).items() if k not in TYPED}
    old["tag"] = {"exactly_once": "verified absent"}
    assert WriteOutcome.from_dict(old).found is None


@pytest.mark.parametrize(
    ("change", "names"),
    [
        ({"committed": "yes"}, "outcome.committed"),
        ({"operation": "upsert"}, "outcome.operation"),
        ({"seconds": None}, "outcome.seconds"),
        ({"table": ""}, "outcome.table"),
        ({"version": "3"}, "outcome.version"),
        ({"found": {"by": "try 1"}}, "outcome.found.reason"),
        ({"metadata_commit": {"version": 1.5}}, "outcome.metadata_commit.version"),
        ({"classification": {"kind": "nope"}}, "outcome.classification.kind"),
        ({"tag": ["a"]}, "outcome.tag"),
    ],
)
def test_a_malformed_outcome_names_the_field_that_is_wrong(change: dict[str, Any], names: str) -> None:
    data = {**json.loads(_outcomes()[2].to_json()), **change}
    with pytest.raises(MalformedOutcome, match=names.replace(".", r"\.")):
        WriteOutcome.from_dict(data)


def test_contradictory_typed_fields_are_refused() -> None:
    with pytest.raises(ValueError, match="found= with committed=False"):
        WriteOutcome(engine="e", table="t", operation=Operation.MERGE, committed=False, seconds=0.0,
                     found=FoundInTable("x"))
    with pytest.raises(ValueError, match="lease_refused= with committed=True"):
        WriteOutcome(engine="e", table="t", operation=Operation.MERGE, committed=True, seconds=0.0,
                     lease_refused=LeaseRefusal("x"))


def _commit_files(path: Path) -> dict[int, list[dict[str, Any]]]:
    """Oracle: every commit file's actions by the number in its file name."""
    return {
        int(entry.stem): [json.loads(line) for line in entry.read_text().splitlines()]
        for entry in sorted((path / "_delta_log").glob("*.json"))
    }


def test_a_delta_rs_schema_change_names_the_log_version_of_its_metadata_commit(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pytest.importorskip("deltalake")
    from occflow.engines.deltars import DeltaRsTable

    table = DeltaRsTable(tmp_path / "t")
    table.create(pa.table({"id": [1, 2], "ds": ["a", "b"]}), partition_by=["ds"])
    altered = table.add_columns({"note": "string"})
    appended = table.append(pa.table({"id": [3], "ds": ["a"], "note": ["x"]}))
    logged = _commit_files(tmp_path / "t")
    # Delta's record: the version whose file holds a metaData action with the new column.
    with_column = [v for v, actions in logged.items()
                   if any("note" in a.get("metaData", {}).get("schemaString", "") for a in actions)]
    assert with_column and altered.metadata_commit == MetadataCommit(version=min(with_column))
    assert altered.version == min(with_column) and not altered.changed_nothing
    assert appended.committed and appended.metadata_commit is None  # a data commit is no schema change
