"""Real delta-rs conflicts: two writers load the same table version, one commits, the other loses.

Each loser's exception is what ``deltalake`` 1.6.6 really raised; the classifier must map it to
the kind that matches the reason delta-rs gave (its CommitConflictError), keep that through a
Python cause chain and through a formatted traceback (a task log tail), and through the line
Airflow 3 writes to its JSON task log for a task that failed with it (Airflow's own processors).

What delta-rs *logs* for these races (its commit loop's tracing records) never reaches a Python
task's log: from Python, ``RUST_LOG`` feeds only the ``log`` crate's records to stderr (measured
with deltalake 1.6.6 and ``RUST_LOG=trace``: no "conflict detected" line), and ``init_tracing``
sends the records to an OTLP collector. Those forms are in test_classify.py, and the strings they
are anchored on are checked here against the installed binary.
"""

from __future__ import annotations

import datetime as dt
import mmap
import traceback
from collections.abc import Callable
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from airflow.sdk._shared.logging.structlog import structlog_processors
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


def _airflow_task_log(error: BaseException) -> str:
    """The line Airflow 3 writes to a task's JSON log when the task fails with ``error``: the event
    through Airflow's own processors (``structlog_processors(json_output=True)``, as the task runner
    configures them), exception included."""
    shared, _, render = structlog_processors(json_output=True)
    event = {"event": "Task failed with exception", "logger": "task", "exc_info": error}
    event["timestamp"] = dt.datetime.now(dt.timezone.utc).isoformat()
    for processor in shared:
        event = processor(None, "error", event)
    line = render(None, "error", event)
    return line if isinstance(line, str) else bytes(line).decode()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_real_delta_rs_conflict_is_classified_by_its_reason(tmp_path: Path, name: str) -> None:
    winner, loser, expected = SCENARIOS[name]
    error = _lose(_table(tmp_path), winner, loser)
    assert isinstance(error, CommitFailedError)
    result = classify(error)
    assert result.kind is expected, f"{str(error)!r} -> {result.reason}"
    assert result.engine == "delta-rs"
    assert result.retry_safe is expected.retry_safe
    # Across the PyO3 boundary the class is deltalake's _internal one, in a traceback and in the
    # task log: the text alone must say the same.
    assert result.exception_class == "_internal.CommitFailedError"
    try:
        raise error
    except CommitFailedError:
        tail = traceback.format_exc()
    log_line = _airflow_task_log(error)
    assert '"exc_type":"CommitFailedError"' in log_line, log_line
    for form, text in (("traceback", tail), ("airflow json task log", log_line)):
        found = classify(text)
        assert found.kind is expected, (form, text, found.reason)
        assert found.engine == "delta-rs"


# The delta-rs texts the markers and log lines are anchored on (conflict_checker.rs #[error] texts,
# the commit loop's records in mod.rs): a release that rewords one fails here, not in production.
DELTA_RS_STRINGS = [
    "Failed to commit transaction: ",
    "Commit failed: a concurrent transactions added new data.",
    "Commit failed: a concurrent transaction deleted data this operation read.",
    "Commit failed: a concurrent transaction deleted the same data your transaction deletes.",
    "Metadata changed since last commit.",
    "Concurrent transaction failed.",
    "Protocol changed since last commit: ",
    "Tried committing existing table version: ",
    "conflict detected, aborting transaction",
    "exceeded maximum commit attempts",
    "table updated but max_retries is 0, failing immediately",
    "transaction committed successfully",
]


def test_the_installed_delta_rs_still_says_what_the_markers_are_anchored_on() -> None:
    library = next(Path(deltalake.__file__).parent.glob("_internal*.so"))
    with library.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as image:
        missing = [text for text in DELTA_RS_STRINGS if image.find(text.encode()) < 0]
    assert not missing, f"deltalake {deltalake.__version__} no longer contains {missing}"


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
