"""A failed MaxCompute write is checked for what it left before anything retries it (issue 23).

MaxCompute is a remote service that cannot run on this machine: every test here runs on
``occflow.engines.maxcompute.StandInProject``, the stand-in behind PyODPS's client and instance
interface (it commits through occflow's reference engine, and fails a job with the text PyODPS
would raise). What is proved is occflow's side: after a failed INSERT INTO on a standard table,
whatever failed it (spec 000: "If a transaction rollback occurs, data cleansing may fail ...
residual data from the failed job may remain"), the write asks the service what the job
committed before the flow may retry; and a job whose commit state is unknown (``ODPS-0110999``)
fails fast and is never submitted again blindly.
"""

from __future__ import annotations

import pytest

from occflow.core.classify import classify
from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation
from occflow.engines.maxcompute import MaxComputeWrite, ResidueError, StandInProject
from occflow.engines.maxcompute.jobs import ProjectJobs
from occflow.engines.maxcompute.standin import STANDIN_FAULTS
from occflow.engines.maxcompute.writer import CommitStateUnknownError
from occflow.engines.outcome import WriteOutcome
from occflow.engines.tags import CommitTag

T = "mc.events"
INTO = f"INSERT INTO {T} PARTITION (ds='2024-01-01') SELECT id, v FROM mc.staged"
UPDATE = f"UPDATE {T} SET v = v + 1 WHERE ds='2024-01-01'"
ROWS_PER_INSERT = 2


def _project(transactional: bool = False) -> StandInProject:
    project = StandInProject(job_seconds={"*": 3600})  # jobs end when the test ends them
    project.create_table(T, partition_columns=["ds"], partitions=[{"ds": "2024-01-01"}],
                         transactional=transactional, primary_key=("id",) if transactional else None,
                         rows_per_insert=ROWS_PER_INSERT)
    return project


def _rows(project: StandInProject) -> int:
    return sum(len(r) for r in project.rows(T).values())


def _tag(operation: str = "insert_into") -> CommitTag:
    return CommitTag.create("dag", "load", "run1", operation, partitions={"ds": "2024-01-01"}, try_number=1)


def _write(project: StandInProject, sql: str = INTO, operation: Operation = Operation.INSERT_INTO,
           leaves_residue: bool = True) -> MaxComputeWrite:
    return MaxComputeWrite(project, T, sql, operation, partitions=("ds=2024-01-01",), tag=_tag(operation.value),
                           leaves_residue=leaves_residue, poll_interval=0.01)


def _finish(project: StandInProject):
    return lambda instance, again: project.finish(instance.id)


def _with_retries(project: StandInProject, write: MaxComputeWrite, attempts: int = 3) -> list[WriteOutcome | Exception]:
    """The flow's ordinary retries: a failed outcome is tried again, a ``ResidueError`` stops."""
    seen: list[WriteOutcome | Exception] = []
    for _ in range(attempts):
        try:
            outcome = write.run(on_instance=_finish(project))
        except ResidueError as stop:
            seen.append(stop)
            break
        seen.append(outcome)
        if outcome.committed:
            break
    return seen


def test_the_stand_in_faults_are_what_the_classifier_says() -> None:
    assert classify(STANDIN_FAULTS["internal_error"]).kind is ConflictKind.NOT_A_CONFLICT
    assert classify(STANDIN_FAULTS["rollback_failed"]).kind is ConflictKind.COMMIT_STATE_UNKNOWN


def test_a_lost_into_that_failed_with_no_conflict_is_never_written_twice_across_retries() -> None:
    project = _project()
    project.fail_next(T, "insert_into", "internal_error", residue=True)  # the rows land, the job fails
    seen = _with_retries(project, _write(project))
    assert len(seen) == 1 and isinstance(seen[0], ResidueError)  # named, not retried
    assert "left rows behind in ds=2024-01-01: its rows are in the table" in str(seen[0])
    assert "ODPS-0010000" in str(seen[0])  # the non-conflict error it failed with
    assert _rows(project) == ROWS_PER_INSERT  # once: the residue, and no retry wrote them again
    assert len(ProjectJobs(project).of_write(T, _tag().write_id)) == 1


def test_a_non_conflict_failure_verified_clean_is_retried_and_written_once() -> None:
    project = _project()
    project.fail_next(T, "insert_into", "internal_error", residue=False)
    seen = _with_retries(project, _write(project))
    assert [isinstance(s, WriteOutcome) and s.committed for s in seen] == [False, True]
    first = seen[0]
    assert isinstance(first, WriteOutcome) and first.classification is not None
    assert first.classification.kind is ConflictKind.NOT_A_CONFLICT
    assert first.tag["residue"].startswith("none")  # the service said the failed job committed nothing
    assert _rows(project) == ROWS_PER_INSERT


def test_without_residue_on_failure_a_failed_into_is_left_to_the_flow() -> None:
    """A transactional table's profile names no residue: the failure is an ordinary outcome."""
    project = _project(transactional=True)
    project.fail_next(T, "insert_into", "internal_error", residue=False)
    outcome = _write(project, leaves_residue=False).run(on_instance=_finish(project))
    assert not outcome.committed and "residue" not in outcome.tag


@pytest.mark.parametrize(("sql", "operation", "transactional"), [
    (INTO, Operation.INSERT_INTO, False),
    (UPDATE, Operation.UPDATE, True),
])
def test_an_unknown_commit_state_fails_fast_and_no_later_try_submits_again(sql, operation, transactional) -> None:
    project = _project(transactional)
    if operation is not Operation.INSERT_INTO:
        seed = project.run_sql(INTO)
        project.finish(seed.id)
    before = project.rows(T)
    project.fail_next(T, operation.value, "rollback_failed", residue=True)  # it committed, then "failed"
    with pytest.raises(CommitStateUnknownError, match=r"unknown commit state \(ODPS-0110999") as info:
        _write(project, sql, operation, leaves_residue=not transactional).run(on_instance=_finish(project))
    assert isinstance(info.value, ResidueError)  # what the write flow fails fast on
    after = project.rows(T)
    assert after != before  # the rows did land: a blind retry would have written them twice
    # A later try of the same write (the task cleared or retried) checks before it submits.
    retry = _write(project, sql, operation, leaves_residue=not transactional)
    with pytest.raises(CommitStateUnknownError, match="an earlier try's instance"):
        retry.run(before_submit=lambda: pytest.fail("submitted again after an unknown commit state"))
    assert project.rows(T) == after
    assert len(ProjectJobs(project).of_write(T, _tag(operation.value).write_id)) == 1
