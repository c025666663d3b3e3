"""MaxCompute ledger against a mocked job list: MaxCompute is a remote service that cannot run here.

The mock stands for the project's job history (what PyODPS lists as instances with their
settings); what is tested is occflow's side: the hints it sends carry the tag, and a job that
ran with them is found again, newest first, with others' jobs ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from occflow.engines.ledger import StaleOverwriteError
from occflow.engines.maxcompute import MaxComputeLedger, maxcompute_hints
from occflow.engines.tags import CommitTag
from occflow.operators.exactly_once import ExactlyOnce


class MockedProjectJobs:
    """Mock of MaxCompute's job history for one project (remote service: not available here)."""

    def __init__(self) -> None:
        self.jobs: list[dict[str, Any]] = []

    def run_sql(self, sql: str, hints: Mapping[str, str], end_time: str) -> None:
        self.jobs.append({"id": f"job{len(self.jobs)}", "sql": sql, "settings": dict(hints), "end_time": end_time})

    def successful_jobs(self, table: str) -> list[Mapping[str, Any]]:
        return [j for j in self.jobs if table in j["sql"]]


def _tag(day: str, op: str = "insert_overwrite") -> CommitTag:
    return CommitTag.create("mc_dag", "load", f"scheduled__{day}", op, logical_date=f"{day}T00:00:00+00:00",
                            partitions={"ds": "x"})


def test_a_job_run_with_the_tags_hints_is_found_and_others_are_not() -> None:
    jobs = MockedProjectJobs()
    jobs.run_sql("INSERT INTO proj.sales SELECT 1", {"odps.sql.allow.fullscan": "true"}, "2024-01-01 01:00")
    tag = _tag("2024-01-01", "insert_into")
    jobs.run_sql("INSERT INTO proj.sales SELECT 2", maxcompute_hints(tag), "2024-01-01 02:00")
    ledger = MaxComputeLedger(jobs, "proj.sales")
    found = ledger.find_commit(tag)
    assert found is not None and found.tag == tag and found.committed_at == "2024-01-01 02:00"
    assert ledger.find_commit(_tag("2024-01-02", "insert_into")) is None


def test_a_retry_of_a_job_that_already_ran_does_not_run_it_again() -> None:
    jobs = MockedProjectJobs()
    tag = _tag("2024-01-01", "insert_into")
    jobs.run_sql("INSERT INTO proj.sales SELECT 2", maxcompute_hints(tag), "2024-01-01 02:00")
    ran: list[str] = []

    def attempt() -> Any:
        ran.append("again")
        raise AssertionError("the job must not run again")

    outcome = ExactlyOnce(MaxComputeLedger(jobs, "proj.sales"), tag).run(attempt, verify_first=True)
    assert outcome.committed and ran == []


def test_an_older_overwrite_after_a_newer_one_is_refused() -> None:
    jobs = MockedProjectJobs()
    jobs.run_sql("INSERT OVERWRITE proj.sales PARTITION (ds='x') SELECT 1", maxcompute_hints(_tag("2024-01-05")),
                 "2024-01-05 01:00")
    with pytest.raises(StaleOverwriteError):
        ExactlyOnce(MaxComputeLedger(jobs, "proj.sales"), _tag("2024-01-01")).run(
            lambda: (_ for _ in ()).throw(AssertionError("must not run")), verify_first=True
        )
