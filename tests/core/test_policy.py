"""Policies derived from the matrices: every kind of every operation on every profile, real
conflicts (delta-rs) and engine texts (fixtures) through ``classify``, overrides, printing and the
``occflow policy`` command. The in-task retry loop itself is the operator's (tests/airflow)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from occflow.cli import main
from occflow.core.classify import classify
from occflow.core.errors import InvalidDeclarationError, UnknownOperationError, UnknownProfileError
from occflow.core.kinds import Classification, ConflictKind
from occflow.core.operations import Operation
from occflow.core.policy import (
    LOSS_OF_KIND,
    TIMING,
    Action,
    KindPolicy,
    Loss,
    StopAfterAttempt,
    StopAfterDelay,
    WaitExponential,
    WaitFixed,
    WaitRandom,
    derive_policy,
    loss_of,
    overrides_to_dict,
    partitions_of,
)
from occflow.core.profiles import PROFILES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "classify"
PAIRS = [(name, op.value) for name, profile in PROFILES.items() for op in profile.operations]


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8").partition("\n---\n")[2]


def first_stage_actions(policy: KindPolicy) -> list[Action]:
    return [stage.action for stage in policy.stages()]


# ------------------------------------------------------------------ derivation over all the data


def test_loss_table_covers_exactly_the_retry_safe_conflict_kinds():
    retry_safe = {k for k in ConflictKind if k.is_conflict and k.retry_safe}
    assert set(LOSS_OF_KIND) == retry_safe
    assert loss_of(ConflictKind.NOT_A_CONFLICT) is Loss.NONE
    assert {k for k in ConflictKind if loss_of(k) is Loss.UNSAFE} == {
        ConflictKind.PROTOCOL_CHANGED,
        ConflictKind.CONCURRENT_TRANSACTION,
        ConflictKind.COMMIT_STATE_UNKNOWN,
    }


@pytest.mark.parametrize(("profile", "operation"), PAIRS, ids=[f"{p}:{o}" for p, o in PAIRS])
@pytest.mark.parametrize("replans", [True, False], ids=["replans", "no-replan"])
def test_every_kind_of_every_operation_gets_a_policy_that_follows_the_rules(profile, operation, replans):
    policy = derive_policy(profile, operation, replans_from_fresh_snapshot=replans)
    op = Operation(operation)
    assert [k for k, _ in policy.kinds] == list(ConflictKind)
    for kind, kind_policy in policy.kinds:
        actions = first_stage_actions(kind_policy)
        if kind is ConflictKind.NOT_A_CONFLICT:
            assert actions == [Action.DEFAULT]  # never retried as a conflict
        elif op in PROFILES[profile].residue_on_failure:
            assert actions == [Action.FAIL]  # a failed write may have left rows behind (spec 000)
        elif not kind.retry_safe:
            assert actions == [Action.FAIL]
            assert kind_policy.reason == kind.help
        elif op.is_compaction and loss_of(kind) is not Loss.POINTER_RACE:
            assert actions == [Action.SKIP]
        else:
            # Something that retries the write, bounded, and ends in FAIL.
            assert actions[0] in (Action.RETRY, Action.RESCHEDULE)
            assert actions[-1] is Action.FAIL
            assert all(s.stop.attempt_limit() for s in kind_policy.stages()[:-1])
        if op.reads_table and not replans:
            assert Action.RETRY not in actions  # a stale plan is never retried in the task


@pytest.mark.parametrize("profile", list(PROFILES))
def test_matrix_cells_where_a_compaction_loses_to_a_data_write_skip(profile):
    prof = PROFILES[profile]
    checked = 0
    for cell in prof.cells:
        # A kind that is not retry-safe (a protocol upgrade won) fails instead: checked elsewhere.
        if cell.later_fails and cell.later.is_compaction and cell.earlier.changes_data and cell.exception.retry_safe:
            policy = derive_policy(prof, cell.later)
            assert cell.exception is not None
            assert policy.for_kind(cell.exception).action is Action.SKIP
            assert cell.earlier in policy.winners_of(cell.exception)
            checked += 1
    compactions_fail = any(
        c.later_fails and c.later.is_compaction and c.earlier.changes_data and c.exception.retry_safe for c in prof.cells
    )
    assert (checked > 0) == compactions_fail


COMPACTION_LOSSES = [
    (name, cell)
    for name, prof in PROFILES.items()
    for cell in prof.cells
    if cell.later_fails and cell.later.is_compaction and cell.earlier.changes_data and cell.exception.retry_safe
    and loss_of(cell.exception) is Loss.WRITER_WON
]


@pytest.mark.parametrize(
    ("profile", "cell"), COMPACTION_LOSSES, ids=[f"{p}:{c.earlier.value}>{c.later.value}" for p, c in COMPACTION_LOSSES]
)
@pytest.mark.parametrize("partitions", [None, 2, 4], ids=["whole-table", "2-partitions", "4-partitions"])
def test_a_compaction_wider_than_one_partition_that_lost_to_a_writer_retries_what_is_left(profile, cell, partitions):
    """The cell's skip is about one partition: the winner changed *that* partition's files. A
    compaction of several partitions or of the whole table failed as one commit, so the
    partitions the winner did not touch are still uncompacted: it re-runs from a fresh snapshot."""
    one = derive_policy(profile, cell.later)
    wide = derive_policy(profile, cell.later, partitions=partitions)
    assert one.for_kind(cell.exception).action is Action.SKIP  # the cell, as the spec reads it
    kind_policy = wide.for_kind(cell.exception)
    stages = first_stage_actions(kind_policy)
    assert stages[0] is Action.RETRY and stages[-1] is Action.FAIL, stages
    assert all(s.stop.attempt_limit() for s in kind_policy.stages()[:-1])  # bounded
    assert "rest are still uncompacted" in kind_policy.reason and cell.earlier.value in kind_policy.reason
    decision = wide.decide(Classification(kind=cell.exception, engine="test", reason="lost"), attempt=1)
    assert decision.action is Action.RETRY and decision.delay_seconds > 0
    # A job that does not re-plan from a fresh snapshot must not retry in the task: it reschedules.
    stale = derive_policy(profile, cell.later, partitions=partitions, replans_from_fresh_snapshot=False)
    assert first_stage_actions(stale.for_kind(cell.exception))[0] is Action.RESCHEDULE
    # What the policy covers is printed and serialised.
    assert wide.to_dict()["partitions"] == partitions
    assert ("whole table" if partitions is None else f"{partitions} partitions") in wide.table().splitlines()[0]


def test_an_iceberg_whole_table_compaction_that_lost_to_a_delete_retries_and_one_partition_skips():
    found = classify(fixture_text("iceberg_validation_conflicting_files.txt"))
    assert derive_policy("iceberg-serializable", "optimize").decide(found, 1).action is Action.SKIP
    whole = derive_policy("iceberg-serializable", "optimize", partitions=partitions_of(None))
    assert whole.decide(found, 1).action is Action.RETRY
    several = derive_policy("iceberg-serializable", "optimize", partitions=partitions_of([{"ds": "a"}, {"ds": "b"}]))
    assert several.decide(found, 1).action is Action.RETRY
    single = derive_policy("iceberg-serializable", "optimize", partitions=partitions_of([{"ds": "a"}]))
    assert single.decide(found, 1).action is Action.SKIP


@pytest.mark.parametrize("partitions", [0, -1, True, "3", 1.5])
def test_a_number_of_partitions_that_is_not_one_or_more_is_refused(partitions):
    with pytest.raises(InvalidDeclarationError, match="partitions must be a number of partitions >= 1"):
        derive_policy("iceberg-serializable", "optimize", partitions=partitions)


@pytest.mark.parametrize("profile", list(PROFILES))
def test_blind_append_retries_in_the_task_whether_or_not_the_job_replans(profile):
    if Operation.INSERT_INTO not in PROFILES[profile].operations:
        pytest.skip(f"{profile} has no insert_into")
    if Operation.INSERT_INTO in PROFILES[profile].residue_on_failure:
        pytest.skip(f"{profile}: a failed insert_into may leave rows behind, it fails instead (tested below)")
    for replans in (True, False):
        policy = derive_policy(profile, "insert_into", replans_from_fresh_snapshot=replans)
        assert policy.for_kind(ConflictKind.CONCURRENT_APPEND).action is Action.RETRY
        assert policy.for_kind(ConflictKind.OPERATION_CONFLICT).action is Action.RETRY


def test_winners_come_from_the_matrix_cells():
    policy = derive_policy("maxcompute-standard", "update")
    expected = tuple(
        c.earlier for c in PROFILES["maxcompute-standard"].cells if c.later is Operation.UPDATE and c.later_fails
    )
    assert policy.winners_of(ConflictKind.OPERATION_CONFLICT) == expected
    assert ConflictKind.METADATA_LOCK_CONFLICT in policy.met_kinds()  # the profile's extra kind
    assert derive_policy("maxcompute-standard", "insert_into").winners_of(ConflictKind.OPERATION_CONFLICT) == ()


def test_spec_000_says_a_lost_into_may_leave_rows_on_standard_tables_only(specs_dir):
    spec = (specs_dir / "000_67b4bcfc3388519b.txt").read_text()
    assert "If an INTO job fails due to a conflict, data from the failed job may remain." in spec
    assert "If an INTO job fails due to a conflict, data from the failed job does not remain." in spec


def test_a_lost_insert_into_on_a_maxcompute_standard_table_fails_naming_the_residue_spec_000():
    """Spec 000: "If an INTO job fails due to a conflict, data from the failed job may remain" on
    standard tables, and "does not remain" on transactional ones (the text: the test above)."""
    standard = derive_policy("maxcompute-standard", "insert_into")
    for kind in (ConflictKind.METADATA_LOCK_CONFLICT, ConflictKind.OPERATION_CONFLICT):
        decision = standard.decide(Classification(kind=kind, engine="maxcompute", reason="lost"), attempt=1)
        assert decision.action is Action.FAIL
        assert "left its rows behind" in decision.reason and "partitions this task wrote" in decision.reason
    # Other operations on the same table, and INSERT INTO on a transactional table, still retry.
    assert derive_policy("maxcompute-standard", "update").for_kind(ConflictKind.OPERATION_CONFLICT).action is Action.RETRY
    transactional = derive_policy("maxcompute-transactional", "insert_into")
    assert transactional.for_kind(ConflictKind.OPERATION_CONFLICT).action is Action.RETRY


@pytest.mark.parametrize("action", ["retry", "reschedule"])
def test_retrying_a_residue_leaving_insert_into_is_refused_as_an_override(action):
    with pytest.raises(InvalidDeclarationError, match="may leave its rows behind"):
        derive_policy("maxcompute-standard", "insert_into", overrides={"metadata_lock_conflict": action})
    assert derive_policy("maxcompute-standard", "insert_into", overrides={"metadata_lock_conflict": "skip"})


# ------------------------------------------------------------------ decisions on real errors


def _stale_delete(path: Path, winner) -> BaseException:
    """A real two-writer race on delta-rs: ``winner`` commits after our snapshot was taken."""
    write_deltalake(str(path), pa.table({"ds": ["a", "a", "b"], "v": [1, 2, 3]}), partition_by=["ds"])
    mine = DeltaTable(str(path))
    winner(DeltaTable(str(path)))
    with pytest.raises(Exception) as lost:
        mine.delete("ds = 'a' and v = 2")
    return lost.value


def test_real_delta_rs_conflict_is_retried_with_exponential_backoff_and_jitter(tmp_path):
    error = _stale_delete(tmp_path / "t", lambda t: t.delete("ds = 'a' and v = 1"))
    found = classify(error)
    assert found.kind is ConflictKind.CONCURRENT_APPEND
    policy = derive_policy("delta-rs", "delete")
    timing = TIMING[Loss.WRITER_WON]
    rng = random.Random(7)
    for attempt in (1, 2, 3):
        decision = policy.decide(found, attempt, elapsed_seconds=5.0, rng=rng)
        low, high = timing.retry_wait.bounds(attempt)
        assert decision.action is Action.RETRY
        assert low <= decision.delay_seconds <= high
        assert low == 2.0 * 2 ** (attempt - 1)
    # The in-task budget (4 tries) is spent: reschedule number 1, the shortest reschedule wait.
    decision = policy.decide(found, 4, elapsed_seconds=30.0, rng=rng)
    assert decision.action is Action.RESCHEDULE
    low, high = timing.reschedule_wait.bounds(1)
    assert low <= decision.delay_seconds <= high
    # Ten minutes in the task also ends the in-task stage.
    assert policy.decide(found, 2, elapsed_seconds=601.0).action is Action.RESCHEDULE
    # 4 in-task tries + 8 reschedules, then fail.
    assert policy.decide(found, 11, 0.0).action is Action.RESCHEDULE
    assert policy.decide(found, 12, 0.0).action is Action.FAIL


def test_real_protocol_change_fails_fast(tmp_path):
    error = _stale_delete(
        tmp_path / "t", lambda t: t.alter.set_table_properties({"delta.enableChangeDataFeed": "true"})
    )
    found = classify(error)
    assert found.kind is ConflictKind.PROTOCOL_CHANGED
    decision = derive_policy("delta-rs", "delete").decide(found, 1)
    assert decision.action is Action.FAIL
    assert "upgrade the writer" in decision.reason


@pytest.mark.parametrize(
    ("fixture", "profile", "operation", "action"),
    [
        ("iceberg_validation_conflicting_files.txt", "iceberg-serializable", "merge", Action.RETRY),
        ("iceberg_commit_failed_jdbc.txt", "iceberg-serializable", "insert_into", Action.RETRY),
        ("iceberg_commit_state_unknown_spark_wrapped.txt", "iceberg-serializable", "insert_into", Action.FAIL),
        ("iceberg_validation_conflicting_files.txt", "iceberg-serializable", "optimize", Action.SKIP),
        ("delta_spark_concurrent_transaction_pre41.txt", "delta-write-serializable", "insert_into", Action.FAIL),
        ("delta_spark_max_commit_retries.txt", "delta-write-serializable", "insert_into", Action.RESCHEDULE),
        ("delta_spark_delete_read_pre41.txt", "delta-serializable", "optimize", Action.SKIP),
        ("maxcompute_operation_conflict_pyodps.txt", "maxcompute-transactional", "update", Action.RETRY),
        ("maxcompute_metadata_lock.txt", "maxcompute-standard", "insert_overwrite", Action.RETRY),
        ("near_miss_git_merge.txt", "delta-rs", "merge", Action.DEFAULT),
        ("near_miss_spark_oom.txt", "iceberg-serializable", "merge", Action.DEFAULT),
    ],
)
def test_engine_texts_go_through_classify_to_the_derived_action(fixture, profile, operation, action):
    found = classify(fixture_text(fixture))
    assert derive_policy(profile, operation).decide(found, 1).action is action


def test_a_pointer_race_retries_quicker_than_a_lost_writer():
    race = classify(fixture_text("iceberg_commit_failed_jdbc.txt"))
    lost = classify(fixture_text("iceberg_validation_conflicting_files.txt"))
    policy = derive_policy("iceberg-serializable", "merge")
    assert policy.for_kind(race.kind).wait.bounds(1)[1] < policy.for_kind(lost.kind).wait.bounds(1)[0]


# ------------------------------------------------------------------ overrides and printing


def test_overrides_by_action_name_dict_or_object():
    policy = derive_policy(
        "delta-write-serializable",
        "MERGE INTO",
        overrides={
            "concurrent_append": "reschedule",
            ConflictKind.METADATA_CHANGED: KindPolicy.fail("schema changes need a human"),
            "concurrent_delete_read": {"action": "retry", "wait": {"type": "fixed", "wait": 5},
                                       "stop": {"type": "after_attempt", "attempts": 2}},
        },
    )
    assert policy.for_kind("concurrent_append").action is Action.RESCHEDULE
    assert policy.for_kind("metadata_changed").reason == "schema changes need a human"
    assert policy.for_kind("concurrent_delete_read").wait == WaitFixed(5)
    assert policy.overridden == {
        ConflictKind.CONCURRENT_APPEND, ConflictKind.METADATA_CHANGED, ConflictKind.CONCURRENT_DELETE_READ
    }
    again = derive_policy("delta-write-serializable", "merge", overrides=overrides_to_dict({
        "concurrent_append": "reschedule",
        "metadata_changed": KindPolicy.fail("schema changes need a human"),
        "concurrent_delete_read": KindPolicy.retry(WaitFixed(5), StopAfterAttempt(2)),
    }))
    assert again.kinds == policy.kinds


@pytest.mark.parametrize(
    ("overrides", "replans", "message"),
    [
        ({"not_a_conflict": "retry"}, True, "not retry-safe"),
        ({"commit_state_unknown": "reschedule"}, True, "not retry-safe"),
        ({"concurrent_append": "retry"}, False, "does not re-plan"),
        ({"concurrent_appendd": "retry"}, True, "unknown conflict kind 'concurrent_appendd'"),
        ({"concurrent_append": "retry-forever"}, True, "unknown action 'retry-forever'"),
        ({"concurrent_append": {"action": "retry", "wait": {"type": "linear"},
                                "stop": {"type": "after_attempt", "attempts": 2}}}, True, "unknown wait"),
        ({"concurrent_append": {"action": "retry", "wait": {"type": "fixed", "wait": 1}}}, True, "needs a stop"),
        ({"concurrent_append": {"action": "retry", "stop": {"type": "after_attempt", "attempts": 0}}}, True,
         "attempts >= 1"),
    ],
)
def test_overrides_that_break_the_rules_are_refused_with_a_clear_message(overrides, replans, message):
    with pytest.raises(InvalidDeclarationError, match=message):
        derive_policy("delta-rs", "merge", overrides=overrides, replans_from_fresh_snapshot=replans)


def test_unknown_profile_and_operation_are_named():
    with pytest.raises(UnknownProfileError, match="'delta-9'"):
        derive_policy("delta-9", "merge")
    with pytest.raises(UnknownOperationError, match="'minor_compact' is not in profile 'delta-rs'"):
        derive_policy("delta-rs", "minor_compact")


def test_policy_prints_its_stages_like_tenacity():
    assert str(StopAfterAttempt(4) | StopAfterDelay(600)) == "4 tries or 10m"
    assert str(WaitExponential(multiplier=2, max=60) + WaitRandom(0, 2)) == "2s*2^(n-1) max 1m + jitter 0-2s"
    text = derive_policy("iceberg-serializable", "merge").table()
    first_rows = [line.split()[0] for line in text.splitlines()[3:6]]  # the kinds it meets come first
    assert sorted(first_rows) == ["commit_failed", "commit_state_unknown", "validation_conflict"]
    assert "retry [wait 2s*2^(n-1) max 1m + jitter 0-2s; until 4 tries or 10m] -> reschedule" in text


def test_occflow_policy_command_prints_table_and_json(capsys):
    assert main(["policy", "delta-write-serializable", "MERGE INTO", "--override", "concurrent_append=skip"]) == 0
    table = capsys.readouterr().out
    assert table.startswith("policy for merge on delta-write-serializable")
    assert "concurrent_append *" in table
    assert main(["policy", "maxcompute-transactional", "minor_compact", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["profile"] == "maxcompute-transactional" and data["operation"] == "minor_compact"
    assert data["kinds"]["operation_conflict"]["action"] == "skip"
    assert data["kinds"]["not_a_conflict"]["action"] == "default"
    assert data["met_kinds"] == ["operation_conflict", "metadata_lock_conflict"]


def test_occflow_policy_command_rejects_bad_input(capsys):
    assert main(["policy", "delta-rs", "upsert"]) == 2
    assert "unknown operation 'upsert'" in capsys.readouterr().err
    assert main(["policy", "delta-rs", "merge", "--override", "concurrent_append"]) == 2
    assert "write KIND=ACTION" in capsys.readouterr().err
