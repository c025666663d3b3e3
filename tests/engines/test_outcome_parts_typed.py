"""What engines put in an outcome, typed where it is produced (issue 32 item 3): a commit a
ledger found is settled by ``already_committed`` (nobody patches its tag afterwards), MaxCompute's
instance details are values of their own types (not tag text parsed back by the target), and an
Iceberg metadata winner carries its number in a field (not in its operation text).

MaxCompute runs on the stand-in (the service cannot run here): the oracle for its details is the
service's own record of the instance (``Instance.commit_info()``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from occflow.core.declaration import WriteDeclaration
from occflow.core.operations import Operation
from occflow.engines.ledger import FoundCommit
from occflow.engines.maxcompute import MaxComputeWrite, StandInProject
from occflow.engines.maxcompute.target import MaxComputeTarget
from occflow.engines.outcome import FoundInTable, WriteOutcome
from occflow.engines.spark.winner import iceberg_metadata_winner
from occflow.engines.tags import CommitTag

T = "mc.events"
DAY = "ds='2024-01-01'"
INTO = f"INSERT INTO {T} PARTITION ({DAY}) SELECT id, v FROM mc.staged"
MINOR = f"ALTER TABLE {T} PARTITION ({DAY}) COMPACT minor"


def _tag(try_number: int | None) -> CommitTag:
    return CommitTag.create("dag", "load", "run1", "merge", partitions={"ds": "a"}, try_number=try_number)


@pytest.mark.parametrize(("try_number", "by"), [(2, "try 2"), (None, "another try")])
def test_a_found_commit_is_settled_by_the_try_its_tag_names(try_number: int | None, by: str) -> None:
    found = FoundCommit("delta-rs", "/lake/t", _tag(try_number), version=5, committed_at="2024-01-01 02:00")
    outcome = found.outcome(Operation.MERGE, "found right before this attempt's commit")
    assert outcome.found == FoundInTable("found right before this attempt's commit", by)
    assert outcome.committed and outcome.seconds == 0.0 and outcome.version == 5 and not outcome.changed_nothing
    assert outcome.tag["write_id"] == _tag(try_number).write_id and outcome.tag["committed_at"] == "2024-01-01 02:00"
    assert WriteOutcome.from_dict(json.loads(outcome.to_json())) == outcome


def _project() -> StandInProject:
    project = StandInProject(job_seconds={"*": 3600})  # jobs end when the test ends them
    project.create_table(T, partition_columns=["ds"], partitions=[{"ds": "2024-01-01"}],
                         transactional=True, primary_key=("id",))
    seed = project.run_sql(INTO)
    project.finish(seed.id)
    return project


def _declaration(operation: str) -> WriteDeclaration:
    return WriteDeclaration.create(T, operation, profile="maxcompute-transactional", partitions={"ds": "2024-01-01"})


def test_a_maxcompute_commits_details_are_the_services_values_typed() -> None:
    project = _project()
    seen: list[Any] = []

    def finish(instance: Any, reconnected: bool) -> None:
        seen.append(instance)
        project.finish(instance.id)

    write = MaxComputeWrite(project, T, INTO, Operation.INSERT_INTO, partitions=("ds=2024-01-01",), poll_interval=0.01)
    outcome = write.run(on_instance=finish)
    info = seen[0].commit_info()
    assert outcome.committed and info["time_version"] is not None
    details = outcome.engine_details
    assert details["time_version"] == float(info["time_version"]) and isinstance(details["time_version"], float)
    assert details["instance_id"] == seen[0].id and details["reconnected"] is False
    assert details["meta_level_retry"] is False
    report = MaxComputeTarget(project, T, INTO).report_details(_declaration("insert_into"), outcome)["maxcompute"]
    assert report == {"instance_id": seen[0].id, "logview": details["logview"], "id_version": info["id_version"],
                      "time_version": float(info["time_version"]), "data_change": True,
                      "meta_level_retry": False, "reconnected": False}
    assert WriteOutcome.from_dict(json.loads(outcome.to_json())).engine_details == details


def test_a_compaction_the_service_rebased_says_so_and_has_no_time_version() -> None:
    project = _project()

    def an_insert_commits_first(instance: Any, reconnected: bool) -> None:
        into = project.run_sql(INTO)
        project.finish(into.id)
        project.finish(instance.id)

    write = MaxComputeWrite(project, T, MINOR, Operation.MINOR_COMPACT, partitions=("ds=2024-01-01",),
                            poll_interval=0.01)
    outcome = write.run(on_instance=an_insert_commits_first)
    info = project.get_instance(outcome.engine_details["instance_id"]).commit_info()
    assert outcome.committed and info["rebased"] is True and info["time_version"] is None  # spec 001
    report = MaxComputeTarget(project, T, MINOR).report_details(_declaration("minor_compact"), outcome)["maxcompute"]
    assert report["meta_level_retry"] is True and report["time_version"] is None
    assert report["data_change"] is False and report["id_version"] == info["id_version"]


def test_no_outcome_reports_empty_details() -> None:
    report = MaxComputeTarget(_project(), T, INTO).report_details(_declaration("insert_into"), None)["maxcompute"]
    assert report == {"instance_id": None, "logview": None, "id_version": None, "time_version": None,
                      "data_change": None, "meta_level_retry": False, "reconnected": False}


def test_an_iceberg_metadata_winner_is_numbered_by_its_field() -> None:
    w = "file:/w/db/t/metadata/"
    entries = [{"at": "t1", "file": w + "00001-b.metadata.json", "snapshot_id": 11},
               {"at": "t2", "file": w + "00002-c.metadata.json", "snapshot_id": 11}]
    winner = iceberg_metadata_winner(entries, w + "00001-b.metadata.json")
    assert winner is not None and winner.metadata_version == 2 and winner.operation == "metadata change"
    assert winner.describe().count("metadata version 2") == 1
