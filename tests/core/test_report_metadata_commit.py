"""A schema change's commit is typed where it is reported (issue 32 item 3): ``WriteReport``'s
``metadata_commit`` and ``WinningCommit.metadata_version``, not a mapping among the engine
details nor a number inside the winner's ``operation`` text.

Old XCom values must still load: the oracle for them is the layout the previous code wrote,
built here the way it built it (the flow put ``asdict(MetadataCommit)`` among the engine
details, which ``to_dict`` spread into the top level; the winner's label carried the number)."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from occflow.core.kinds import ConflictKind, MetadataCommit, WinningCommit
from occflow.core.policy import Action
from occflow.core.report import LostAttempt, MalformedReport, WriteReport, WriteStatus

FILE = "file:/w/db/t/metadata/00004-ab.metadata.json"


def _report(**kw: object) -> WriteReport:
    base: dict = dict(table="lake.db.t", operation="alter_metadata", profile="iceberg-serializable",
                      engine="spark-iceberg", status=WriteStatus.COMMITTED, attempts=1)
    base.update(kw)
    return WriteReport(**base)


def _xcom(report: WriteReport) -> dict:
    return json.loads(json.dumps(report.to_dict()))  # what XCom stores: JSON


def test_a_metadata_commit_survives_xcom_typed() -> None:
    report = _report(metadata_commit=MetadataCommit(4, FILE), engine_details={"spark": {"app": "a-1"}})
    data = _xcom(report)
    assert data["metadata_commit"] == {"version": 4, "location": FILE}
    back = WriteReport.from_dict(data)
    assert back == report and back.metadata_commit == MetadataCommit(4, FILE)
    assert back.engine_details == {"spark": {"app": "a-1"}}


def test_a_data_commit_has_none() -> None:
    data = _xcom(_report(operation="insert_into", snapshot_id=12))
    assert data["metadata_commit"] is None
    assert WriteReport.from_dict(data).metadata_commit is None


def test_a_report_that_carried_it_among_the_engine_details_loads_it_typed() -> None:
    # The previous flow: details["metadata_commit"] = asdict(outcome.metadata_commit).
    old = _report(engine_details={"metadata_commit": asdict(MetadataCommit(4, FILE)), "spark": {"app": "a"}})
    data = old.to_dict()
    data.pop("format")  # and from before the report had a format marker
    back = WriteReport.from_dict(data)
    assert back.metadata_commit == MetadataCommit(version=4, location=FILE)
    assert back.engine_details == {"spark": {"app": "a"}}  # no longer an engine detail


@pytest.mark.parametrize(("value", "field"), [
    ({"version": "4"}, "report.metadata_commit.version"),
    ({"version": 4, "location": 7}, "report.metadata_commit.location"),
    ("v4.metadata.json", "report.metadata_commit"),
])
def test_a_malformed_metadata_commit_is_refused_naming_the_field(value: object, field: str) -> None:
    data = _report().to_dict()
    data["metadata_commit"] = value
    with pytest.raises(MalformedReport, match=field.replace(".", r"\.")):
        WriteReport.from_dict(data)


def test_a_metadata_winner_is_numbered_by_its_own_field() -> None:
    winner = WinningCommit(operation="metadata change", metadata_version=3, timestamp="t3",
                           tag={"metadata_file": FILE}, basis="the first metadata version after the start")
    assert WinningCommit.from_dict(json.loads(json.dumps(winner.to_dict()))) == winner
    # Said as the label said it when the number rode inside the operation text.
    assert winner.describe() == "operation metadata change, metadata version 3, at t3"
    lost = LostAttempt(attempt=1, kind=ConflictKind.COMMIT_FAILED, action=Action.RETRY, winner=winner)
    assert lost.winner_text() == "metadata change, metadata version 3"
    assert WriteReport.from_dict(_xcom(_report(status=WriteStatus.FAILED, lost=(lost,)))).lost[0].winner == winner


def test_a_winner_from_before_the_field_loads_without_it() -> None:
    old = {"version": None, "snapshot_id": None, "operation": "metadata change, metadata version 3",
           "timestamp": "t3", "tag": {}, "tagged": False, "others": [], "basis": None}
    loaded = WinningCommit.from_dict(old)
    assert loaded.metadata_version is None and loaded.operation == old["operation"]
    assert loaded.describe() == "operation metadata change, metadata version 3, at t3"  # says it once


def test_a_data_winner_says_no_metadata_version() -> None:
    winner = WinningCommit(version=7, operation="WRITE")
    assert "metadata" not in winner.describe() and winner.to_dict()["metadata_version"] is None
    lost = LostAttempt(attempt=1, kind=ConflictKind.CONCURRENT_APPEND, action=Action.RETRY, winner=winner)
    assert lost.winner_text() == "v7 WRITE"
