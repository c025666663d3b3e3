"""Real delta-rs conflicts: two writers load the same table version, one commits, the other loses.

Each loser's exception is what ``deltalake`` 1.6.6 really raised; the classifier must map it to
the kind that matches the reason delta-rs gave (its CommitConflictError), keep that through a
Python cause chain and through a formatted traceback (a task log tail).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.table import TableFeatures

from occflow.core.classify import classify
from occflow.core.kinds import ConflictKind


def _table(path: Path) -> str:
    uri = str(path)
    write_deltalake(uri, pa.table({"ds": ["a", "a", "b"], "v": [1, 2, 3]}), partition_by=["ds"])
    return uri


def _lose(uri: str, winner: Callable[[DeltaTable], object], loser: Callable[[DeltaTable], object]) -> Exception:
    """Both writers read the same version; the winner commits first, the loser's commit fails."""
    first, second = DeltaTable(uri), DeltaTable(uri)
    assert first.version() == second.version()
    winner(first)
    with pytest.raises(DeltaError) as info:
        loser(second)
    return info.value


def _append(dt: DeltaTable, value: int, txn: str | None = None) -> None:
    props = CommitProperties(app_transactions=[Transaction(app_id=txn, version=1)]) if txn else None
    write_deltalake(dt, pa.table({"ds": ["a"], "v": [value]}), mode="append", commit_properties=props)


SCENARIOS: dict[str, tuple[Callable[[DeltaTable], object], Callable[[DeltaTable], object], ConflictKind]] = {
    "delete_then_update_same_partition": (
        lambda t: t.delete("v = 1"),
        lambda t: t.update(updates={"v": "v + 10"}, predicate="v = 2"),
        ConflictKind.CONCURRENT_APPEND,
    ),
    "delete_then_delete_same_rows": (
        lambda t: t.delete("v = 1"),
        lambda t: t.delete("v = 1"),
        ConflictKind.CONCURRENT_DELETE_READ,
    ),
    "overwrite_then_overwrite_same_partition": (
        lambda t: write_deltalake(t, pa.table({"ds": ["a"], "v": [9]}), mode="overwrite", predicate="ds = 'a'"),
        lambda t: write_deltalake(t, pa.table({"ds": ["a"], "v": [8]}), mode="overwrite", predicate="ds = 'a'"),
        ConflictKind.CONCURRENT_APPEND,
    ),
    "delete_then_merge": (
        lambda t: t.delete("v = 2"),
        lambda t: t.merge(pa.table({"ds": ["a"], "v": [2]}), "t.v = s.v", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .execute(),
        ConflictKind.CONCURRENT_APPEND,
    ),
    "set_properties_then_update": (
        lambda t: t.alter.set_table_properties({"delta.appendOnly": "false"}),
        lambda t: t.update(updates={"v": "1"}, predicate="v = 2"),
        ConflictKind.METADATA_CHANGED,
    ),
    "protocol_upgrade_then_delete": (
        lambda t: t.alter.add_feature(TableFeatures.DeletionVectors, allow_protocol_versions_increase=True),
        lambda t: t.delete("v = 2"),
        ConflictKind.PROTOCOL_CHANGED,
    ),
    "same_app_transaction_twice": (
        lambda t: _append(t, 9, txn="job-1"),
        lambda t: _append(t, 8, txn="job-1"),
        ConflictKind.CONCURRENT_TRANSACTION,
    ),
    "no_commit_retries_left": (
        lambda t: t.delete("v = 1"),
        lambda t: t.update(
            updates={"v": "v + 10"}, predicate="v = 2", commit_properties=CommitProperties(max_commit_retries=0)
        ),
        ConflictKind.COMMIT_RETRIES_EXHAUSTED,
    ),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_real_delta_rs_conflict_is_classified_by_its_reason(tmp_path: Path, name: str) -> None:
    winner, loser, expected = SCENARIOS[name]
    error = _lose(_table(tmp_path), winner, loser)
    assert isinstance(error, CommitFailedError)
    result = classify(error)
    assert result.kind is expected, f"{str(error)!r} -> {result.reason}"
    assert result.engine == "delta-rs"
    assert result.retry_safe is expected.retry_safe


def test_real_conflict_inside_a_python_cause_chain_and_a_log_tail(tmp_path: Path) -> None:
    winner, loser, expected = SCENARIOS["delete_then_delete_same_rows"]
    error = _lose(_table(tmp_path), winner, loser)
    try:
        raise RuntimeError("task load_events failed") from error
    except RuntimeError as wrapped:
        assert classify(wrapped).kind is expected
        log_tail = "".join(traceback.format_exception(wrapped))
    assert "CommitFailedError" in log_tail
    assert classify(log_tail).kind is expected


def test_real_delta_rs_errors_that_are_not_conflicts(tmp_path: Path) -> None:
    uri = _table(tmp_path / "t")
    with pytest.raises(DeltaError) as missing:
        DeltaTable(str(tmp_path / "no_such_table"))
    with pytest.raises(DeltaError) as schema:
        write_deltalake(uri, pa.table({"other": [1.5]}), mode="append")
    with pytest.raises(DeltaError) as predicate:
        DeltaTable(uri).delete("no_such_column = 1")
    for error in (missing.value, schema.value, predicate.value):
        result = classify(error)
        assert result.kind is ConflictKind.NOT_A_CONFLICT, f"{error!r} -> {result.reason}"
        assert not result.retry_safe
