"""The MaxCompute stand-in races jobs by the specs' matrices, and fails them as PyODPS would.

MaxCompute is a remote service that cannot run here: every test in this file runs on
``occflow.engines.maxcompute.StandInProject``, a stand-in behind PyODPS's client and instance
interface that commits through occflow's reference engine with the table's MaxCompute profile.
The expected outcomes are transcribed below from the specs' own tables (spec 000's outcome matrix,
spec 001's detection rules), not read from occflow's profiles; the data each cell ends with is
checked against a serial re-execution of the committed jobs in commit order, on a fresh
reference table (the serial result).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from occflow.core.classify import classify
from occflow.core.kinds import ConflictKind
from occflow.core.reference import ReferenceTable
from occflow.engines.maxcompute import MaxComputeWrite, ResidueError, StandInProject, maxcompute_commits
from occflow.engines.maxcompute.jobs import ProjectJobs
from occflow.engines.tags import CommitTag

T = "mc.events"
DAY = "ds='2024-01-01'"
SQL = {
    "overwrite": f"INSERT OVERWRITE TABLE {T} PARTITION ({DAY}) SELECT id, v FROM mc.staged",
    "truncate": f"TRUNCATE TABLE {T} PARTITION ({DAY})",
    "into": f"INSERT INTO {T} PARTITION ({DAY}) SELECT id, v FROM mc.staged",
    "update": f"UPDATE {T} SET v = v + 1 WHERE {DAY}",
    "delete": f"DELETE FROM {T} WHERE {DAY} AND id > 3",
    "minor": f"ALTER TABLE {T} PARTITION ({DAY}) COMPACT minor",
    "major": f"ALTER TABLE {T} PARTITION ({DAY}) COMPACT major",
    "smallfiles": f"ALTER TABLE {T} PARTITION ({DAY}) MERGE SMALLFILES",
}
# Spec 001, "Conflict detection rules": for each earlier job, the later jobs that fail.
SPEC_001_LATER_FAILS = {
    "overwrite": {"into", "update", "minor", "major"},
    "into": {"into", "update", "major"},
    "update": {"into", "update", "major"},
    "minor": {"minor"},
    "major": {"minor", "major"},
}
# Spec 000, "Conflict outcome matrix": whatever ended earlier, a later UPDATE / DELETE or small
# file MERGE reports an error; INSERT jobs never conflict with each other.
SPEC_000_LATER_FAILS = {"update", "delete", "smallfiles"}


def _project(transactional: bool, primary_key: tuple[str, ...] | None) -> StandInProject:
    project = StandInProject(job_seconds={"*": 3600})  # jobs end when the test ends them
    project.create_table(T, partition_columns=["ds"], partitions=[{"ds": "2024-01-01"}, {"ds": "2024-01-02"}],
                         transactional=transactional, primary_key=primary_key)
    seed = project.run_sql(SQL["into"])
    project.finish(seed.id)
    assert seed.is_successful()
    return project


def _serial(project: StandInProject) -> dict[str, dict[str, int]]:
    """The committed jobs re-run one at a time, in commit order, on a fresh reference table."""
    live = project.reference(T)
    fresh = ReferenceTable(live.profile.name, partitions=list(live.snapshot().rows), rows_per_insert=2)
    for commit in project.history(T):
        fresh.begin(commit.operation, sorted(commit.footprint.write_partitions or ()), txn_id=commit.txn_id).commit()
    return {p: dict(r) for p, r in fresh.snapshot().rows.items()}


def _race(project: StandInProject, earlier: str, later: str) -> tuple[bool, bool, Exception | None]:
    """Both jobs start on one snapshot; ``earlier`` ends first. Whether each succeeded, and the
    error PyODPS raises for the later one."""
    late = project.run_sql(SQL[later])
    early = project.run_sql(SQL[earlier])
    project.finish(early.id)
    project.finish(late.id)
    error = None
    try:
        late.wait_for_success()
    except Exception as exc:  # noqa: BLE001 - the later job's failure is what is checked
        error = exc
    return early.is_successful(), late.is_successful(), error


@pytest.mark.parametrize("earlier", sorted(SPEC_001_LATER_FAILS))
@pytest.mark.parametrize("later", sorted(SPEC_001_LATER_FAILS))
def test_delta_table_jobs_race_by_spec_001(earlier: str, later: str) -> None:
    project = _project(transactional=True, primary_key=("id",))
    first, second, error = _race(project, earlier, later)
    assert first, "the job that finishes first succeeds"
    assert second is (later not in SPEC_001_LATER_FAILS[earlier])
    if not second:
        assert error is not None and type(error).__module__ == "odps.errors"
        assert classify(error).kind is ConflictKind.OPERATION_CONFLICT
    assert project.rows(T) == _serial(project)


@pytest.mark.parametrize("earlier", ["overwrite", "into", "update", "smallfiles"])
@pytest.mark.parametrize("later", ["overwrite", "truncate", "into", "update", "delete", "smallfiles"])
def test_standard_table_jobs_race_by_spec_000(earlier: str, later: str) -> None:
    project = _project(transactional=False, primary_key=None)
    first, second, error = _race(project, earlier, later)
    assert first
    assert second is (later not in SPEC_000_LATER_FAILS)
    if not second:
        assert classify(error).kind is ConflictKind.OPERATION_CONFLICT
    assert project.rows(T) == _serial(project)


def test_a_rebased_commit_is_the_services_own_retry_and_a_compaction_has_no_time_version() -> None:
    project = _project(transactional=True, primary_key=("id",))
    minor = project.run_sql(SQL["minor"])
    into = project.run_sql(SQL["into"])
    project.finish(into.id)
    project.finish(minor.id)
    assert into.is_successful() and minor.is_successful()  # spec 001 row 9: both succeed
    info_into, info_minor = into.commit_info(), minor.commit_info()
    assert info_minor["rebased"] is True and info_into["rebased"] is False
    assert info_minor["id_version"] == info_into["id_version"] + 1
    assert info_minor["time_version"] is None and info_into["time_version"] is not None
    assert [c.version for c in project.reference(T).changes_since(0, by="time")] == [1, info_into["id_version"]]


def test_the_same_unique_identifier_gives_the_same_instance() -> None:
    project = _project(transactional=True, primary_key=("id",))
    first = project.run_sql(SQL["into"], unique_identifier_id="occflow-w-0")
    again = project.run_sql(SQL["into"], unique_identifier_id="occflow-w-0")
    assert again.id == first.id
    assert len(list(project.list_instances())) == 2  # the seed and this one


def _tag() -> CommitTag:
    return CommitTag.create("dag", "load", "run1", "insert_into", partitions={"ds": "2024-01-01"}, try_number=1)


def test_a_write_reconnects_to_its_running_instance_instead_of_submitting_again() -> None:
    project = _project(transactional=True, primary_key=("id",))
    write = MaxComputeWrite(project, T, SQL["into"], _tag().operation, partitions=("ds=2024-01-01",),
                            tag=_tag(), poll_interval=0.01)
    first = write.submit()  # what a try that died while its job ran left behind
    seen: list[tuple[str, bool]] = []

    def reached(instance, again):
        seen.append((instance.id, again))
        project.finish(instance.id)

    outcome = write.run(before_submit=lambda: pytest.fail("submitted a second time"), on_instance=reached)
    assert seen == [(first.id, True)]
    assert outcome.committed and outcome.tag["reconnected"] == "true"
    assert [t.id for t in ProjectJobs(project).of_write(T, _tag().write_id)] == [first.id]


def test_a_failed_into_on_a_standard_table_that_left_rows_is_named_not_retried() -> None:
    project = _project(transactional=False, primary_key=None)
    project.fail_next(T, "insert_into", "metadata_lock", residue=True)
    write = MaxComputeWrite(project, T, SQL["into"], _tag().operation, partitions=("ds=2024-01-01",),
                            tag=_tag(), leaves_residue=True, poll_interval=0.01)
    before = sum(len(r) for r in project.rows(T).values())
    with pytest.raises(ResidueError, match=r"left rows behind in ds=2024-01-01: its rows are in the table") as info:
        write.run(on_instance=lambda instance, again: project.finish(instance.id))
    assert info.value.instance_id in str(info.value)
    assert sum(len(r) for r in project.rows(T).values()) == before + 2  # the residue is really there


def test_a_failed_into_that_left_nothing_is_reported_verified_clean() -> None:
    project = _project(transactional=False, primary_key=None)
    project.fail_next(T, "insert_into", "metadata_lock", residue=False)
    write = MaxComputeWrite(project, T, SQL["into"], _tag().operation, partitions=("ds=2024-01-01",),
                            tag=_tag(), leaves_residue=True, poll_interval=0.01)
    outcome = write.run(on_instance=lambda instance, again: project.finish(instance.id))
    assert not outcome.committed
    assert outcome.classification is not None and outcome.classification.kind is ConflictKind.METADATA_LOCK_CONFLICT
    assert outcome.tag["residue"].startswith("none")


def test_a_file_backed_project_is_one_project_for_every_opener(tmp_path) -> None:
    path = tmp_path / "project.bin"
    one = StandInProject(path, job_seconds={"*": 3600})
    one.create_table(T, partition_columns=["ds"], partitions=[{"ds": "2024-01-01"}], transactional=True,
                     primary_key=["id"])
    job = one.run_sql(SQL["into"])
    other = StandInProject(path)
    other.finish(job.id)
    assert one.get_instance(job.id).is_successful()
    assert sum(len(r) for r in one.rows(T).values()) == 2


@pytest.mark.parametrize("transactional", [True, False])
def test_clustering_beside_an_insert_into_both_succeed_and_only_the_insert_has_a_time_version(transactional):
    """Specs 001/002, smart conflict resolution: clustering and an INSERT INTO that overlap both
    succeed; clustering changes no data, so it gets an ID version and no time version."""
    project = _project(transactional=transactional, primary_key=("id",) if transactional else None)
    clustering = project.run_clustering(T, {"ds": "2024-01-01"})
    into = project.run_sql(SQL["into"])
    project.finish(into.id)
    project.finish(clustering.id)
    assert into.is_successful() and clustering.is_successful()
    assert clustering.commit_info()["time_version"] is None and clustering.commit_info()["data_change"] is False
    assert into.commit_info()["time_version"] is not None
    assert project.rows(T) == _serial(project)


def test_the_commits_a_sensor_reads_tell_compactions_from_data_changes() -> None:
    project = _project(transactional=True, primary_key=("id",))
    for name in ("minor", "update"):
        job = project.run_sql(SQL[name])
        project.finish(job.id)
        assert job.is_successful(), name
    commits = maxcompute_commits(project, T)
    assert [(c["id_version"], c["operation"], c["data_change"]) for c in commits] == [
        (1, "insert_into", True), (2, "minor_compact", False), (3, "update", True)]
    assert commits[1]["time_version"] is None
    assert commits[0]["time_version"] < commits[2]["time_version"]


def test_without_a_history_the_commits_are_the_tagged_instances_that_succeeded() -> None:
    """A client with PyODPS's interface only (no stand-in history): the tagged instances."""
    project = _project(transactional=True, primary_key=("id",))
    write = MaxComputeWrite(project, T, SQL["into"], _tag().operation, partitions=("ds=2024-01-01",), tag=_tag(),
                            poll_interval=0.01)
    assert write.run(on_instance=lambda instance, again: project.finish(instance.id)).committed
    pyodps_like = SimpleNamespace(list_instances=project.list_instances)
    commits = maxcompute_commits(pyodps_like, T)
    assert [(c["operation"], c["partitions"], c["id_version"]) for c in commits] == [
        ("insert_into", [{"ds": "2024-01-01"}], None)]  # the untagged seed is not occflow's
