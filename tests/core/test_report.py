"""``WriteReport``: one ``to_dict`` / ``from_dict`` for XCom, and a clear refusal of what is not a
report (the view and the notifier must survive one bad XCom value, issue 24).

Reports are generated (hypothesis) rather than picked: every field, every kind and action, with
and without winners; the round trip must give back an equal report, and its JSON must be JSON.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from occflow.core.kinds import ConflictKind, WinningCommit
from occflow.core.policy import Action
from occflow.core.report import LeaseLoss, LostAttempt, MalformedReport, WriteReport, WriteStatus

_text = st.text(min_size=0, max_size=12)
_name = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_.", min_size=1, max_size=12)
_seconds = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
_winners = st.none() | st.builds(
    WinningCommit,
    version=st.none() | st.integers(0, 10**6),
    operation=st.none() | _name,
    snapshot_id=st.none() | st.integers(0, 2**62),
    task_id=st.none() | _name,
    dag_id=st.none() | _name,
    tagged=st.booleans(),
)
_lost = st.builds(
    LostAttempt,
    attempt=st.integers(1, 50),
    kind=st.sampled_from(list(ConflictKind)),
    action=st.sampled_from(list(Action)),
    delay_seconds=_seconds,
    reason=_text,
    decision_reason=_text,
    winner=_winners,
    seconds=st.none() | _seconds,
    error=_text,
)


@st.composite
def reports(draw: st.DrawFn) -> WriteReport:
    lost = draw(st.lists(_lost, max_size=6))
    numbered = tuple(LostAttempt(**{**a.__dict__, "attempt": i + 1}) for i, a in enumerate(lost))
    return WriteReport(
        table=draw(_name),
        operation=draw(_name),
        profile=draw(_name),
        engine=draw(_name),
        status=draw(st.sampled_from(list(WriteStatus))),
        partitions=draw(st.none() | st.lists(st.dictionaries(_name, _name, min_size=1, max_size=2), max_size=3)
                        .map(tuple)),
        version=draw(st.none() | st.integers(0, 10**6)),
        snapshot_id=draw(st.none() | st.integers(0, 2**62)),
        rows=draw(st.none() | st.integers(0, 10**9)),
        seconds=draw(st.none() | _seconds),
        attempts=len(numbered) + draw(st.integers(0, 2)),
        lost=numbered,
        wasted_seconds=round(draw(_seconds), 3),
        tag=draw(st.dictionaries(_name, _name, max_size=3)),
        error=draw(st.none() | _text),
        fence=draw(st.none() | st.integers(1, 10**9)),
        lease_lost=tuple(draw(st.lists(st.builds(LeaseLoss, attempt=st.integers(1, 9),
                                                   fence=st.none() | st.integers(1, 99), reason=_text),
                                         max_size=2))),
        committed_by=draw(st.none() | _text),
        table_key=draw(st.none() | _name),
    )


@settings(max_examples=300, deadline=None)
@given(reports())
def test_a_report_survives_xcom_unchanged(report: WriteReport) -> None:
    data = json.loads(json.dumps(report.to_dict()))  # what XCom stores is JSON
    assert WriteReport.from_dict(data) == report
    assert WriteReport.looks_like(data)
    # the dict's two views of the lost attempts agree with the typed ones
    assert [c["attempt"] for c in data["conflicts"]] == [a.attempt for a in report.lost if a.kind.is_conflict]
    assert [d["action"] for d in data["decisions"]] == [a.action.value for a in report.lost]
    assert data["committed"] is (report.status is WriteStatus.COMMITTED)


def test_a_report_before_status_existed_is_read_by_its_committed_flag_and_joins_conflicts_to_decisions() -> None:
    old = {
        "table": "lake.events", "operation": "merge", "profile": "delta-rs", "engine": "delta-rs",
        "committed": False, "attempts": 2, "wasted_seconds": 3.5,
        "conflicts": [{"attempt": 1, "kind": "concurrent_append", "reason": "r1",
                       "winning_commit": {"version": 7, "operation": "WRITE"}, "seconds": 1.0, "error": "e"}],
        "decisions": [{"attempt": 1, "kind": "concurrent_append", "action": "retry", "delay_seconds": 2.0,
                       "reason": "d1"},
                      {"attempt": 2, "kind": "metadata_changed", "action": "fail", "reason": "d2"}],
    }
    report = WriteReport.from_dict(old)
    assert report.status is WriteStatus.FAILED
    assert [(a.attempt, a.kind, a.action) for a in report.lost] == [
        (1, ConflictKind.CONCURRENT_APPEND, Action.RETRY), (2, ConflictKind.METADATA_CHANGED, Action.FAIL)]
    assert report.lost[0].winner is not None and report.lost[0].winner.version == 7
    assert report.lost[0].winner_text() == "v7 WRITE"
    assert report.lost[1].decision_reason == "d2" and report.lost[0].reason == "r1"


def _valid() -> dict:
    return WriteReport(table="t", operation="merge", profile="p", engine="e", status=WriteStatus.FAILED,
                       attempts=1, lost=(LostAttempt(1, ConflictKind.CONCURRENT_APPEND, Action.FAIL),)).to_dict()


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("attempts",), "3", "report.attempts"),
        (("attempts",), True, "report.attempts"),
        (("wasted_seconds",), math.inf, "report.wasted_seconds"),
        (("wasted_seconds",), "nan", "report.wasted_seconds"),
        (("table",), None, "report.table"),
        (("table",), 12, "report.table"),
        (("status",), "exploded", "report.status"),
        (("partitions",), "ds=1", "report.partitions"),
        (("partitions",), ["ds=1"], "report.partitions[0]"),
        (("lost_attempts",), {"a": 1}, "report.lost_attempts"),
        (("lost_attempts", 0, "kind"), "meteor", "report.lost_attempts[0].kind"),
        (("lost_attempts", 0, "action"), "explode", "report.lost_attempts[0].action"),
        (("lost_attempts", 0, "attempt"), 1.5, "report.lost_attempts[0].attempt"),
        (("lost_attempts", 0, "winning_commit"), [1, 2], "report.lost_attempts[0].winning_commit"),
        (("lost_attempts", 0, "winning_commit"), {"version": "seven"}, "report.lost_attempts[0].winning_commit"),
        (("tag",), "x", "report.tag"),
        (("fence",), "9", "report.fence"),
    ],
)
def test_a_malformed_report_is_refused_naming_the_field(path: tuple, value: object, field: str) -> None:
    data = _valid()
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(MalformedReport) as refused:
        WriteReport.from_dict(data)
    assert field in str(refused.value)


@pytest.mark.parametrize("value", [None, 3, "report", ["table"], {"table": "t"}])
def test_what_is_not_a_report_is_not_taken_for_one(value: object) -> None:
    assert not WriteReport.looks_like(value)
    if not isinstance(value, dict):
        with pytest.raises(MalformedReport):
            WriteReport.from_dict(value)
