"""delta-spark names the commit a write lost to in its exception; occflow reads all of it.

delta-spark cannot run here (occflow ships no Delta jars), so these texts are built the way
Delta builds them, from its source (delta-io/delta at bb1057f436):

- the message templates of ``spark/src/main/resources/error/delta-error-classes.json``
  (DELTA_METADATA_CHANGED, DELTA_CONCURRENT_WRITE, DELTA_PROTOCOL_CHANGED,
  DELTA_CONCURRENT_TRANSACTION; DELTA_CONCURRENT_APPEND as of v3.3.0), with Spark's
  ``[ERROR_CLASS] `` prefix;
- ``<conflictingCommit>`` as ``DeltaErrors`` fills it: ``"\\nConflicting commit: " +
  JsonUtils.toJson(commitInfo)``, the ``CommitInfo`` of the winning commit with its version
  filled in by ``ConflictChecker`` (``ci.copy(version = Some(commitVersion))``), its fields in
  the case class's order, absent ones left out (``Include.NON_ABSENT``), compact JSON;
- ``userMetadata`` as occflow's ``delta_spark_session_conf`` writes it.

The classifier fixtures in tests/fixtures/classify (each citing its source) are read too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation
from occflow.engines.spark.delta_spark import delta_spark_session_conf
from occflow.engines.spark.errors import classify_error
from occflow.engines.spark.winner import delta_spark_winner
from occflow.engines.tags import CommitTag

FIXTURES = Path(__file__).parents[1] / "fixtures" / "classify"
DOCS = "https://docs.delta.io/latest/concurrency-control.html"
TAG = CommitTag.create("nightly", "compact_events", "scheduled__2024-05-01T00:00:00+00:00", Operation.OPTIMIZE,
                       try_number=2)
USER_METADATA = delta_spark_session_conf(TAG)["spark.databricks.delta.commitInfo.userMetadata"]

TEMPLATES = {
    ConflictKind.METADATA_CHANGED: (
        "[DELTA_METADATA_CHANGED] MetadataChangedException: The metadata of the Delta table "
        "`spark_catalog`.`db`.`events` has been changed by a concurrent update. Please try the operation "
        "again.{conflicting}\nRefer to {docs} for more details."
    ),
    ConflictKind.CONCURRENT_WRITE: (
        "[DELTA_CONCURRENT_WRITE] ConcurrentWriteException: A concurrent transaction has written new data "
        "since the current transaction read the table. Please try the operation again.{conflicting}\n"
        "Refer to {docs} for more details."
    ),
    ConflictKind.PROTOCOL_CHANGED: (
        "[DELTA_PROTOCOL_CHANGED] ProtocolChangedException: The protocol version of the Delta table has "
        "been changed by a concurrent update. {conflicting}\nRefer to {docs} for more details."
    ),
    ConflictKind.CONCURRENT_TRANSACTION: (
        "[DELTA_CONCURRENT_TRANSACTION] ConcurrentTransactionException: This error occurs when multiple "
        "streaming queries are using the same checkpoint to write into this table. Did you run multiple "
        "instances of the same streaming query at the same time?{conflicting}\nRefer to {docs} for more details."
    ),
    ConflictKind.CONCURRENT_APPEND: (  # v3.3.0's template (before Delta 4.1 named the version itself)
        "[DELTA_CONCURRENT_APPEND] ConcurrentAppendException: Files were added to partition [ds=2024-05-01] "
        "by a concurrent update. Please try the operation again.{conflicting}\nRefer to {docs} for more details."
    ),
}


def _commit_info(version: int, operation: str, user_metadata: str | None = USER_METADATA, **extra: object) -> str:
    info: dict[str, object] = {"version": version, **extra, "timestamp": 1714521600000, "operation": operation,
                               "operationParameters": {"predicate": '["(ds = 2024-05-01)"]'},
                               "readVersion": version - 1, "isolationLevel": "WriteSerializable",
                               "isBlindAppend": False, "operationMetrics": {"numRemovedFiles": "4"}}
    if user_metadata is not None:
        info["userMetadata"] = user_metadata
    info["engineInfo"] = "Apache-Spark/3.5.3 Delta-Lake/3.3.0"
    info["txnId"] = "0d3c5bb3-5d1a-4a39-9c3f-0c8f3c1b2a11"
    return json.dumps(info, separators=(",", ":"))


def _message(kind: ConflictKind, commit_info: str) -> str:
    return TEMPLATES[kind].format(conflicting=f"\nConflicting commit: {commit_info}", docs=DOCS)


@pytest.mark.parametrize("kind", list(TEMPLATES), ids=lambda k: k.value)
def test_the_conflicting_commit_names_version_time_operation_and_the_airflow_try(kind: ConflictKind) -> None:
    text = _message(kind, _commit_info(41, "OPTIMIZE"))
    winner = delta_spark_winner(text)
    assert winner is not None
    assert (winner.version, winner.operation, winner.timestamp) == (41, "OPTIMIZE", "2024-05-01T00:00:00+00:00")
    assert (winner.dag_id, winner.task_id, winner.run_id, winner.try_number, winner.tagged) == (
        "nightly", "compact_events", "scheduled__2024-05-01T00:00:00+00:00", 2, True
    )
    assert winner.tag["readVersion"] == "40"
    # through the engine's classifier, as a failed outcome records it
    classified = classify_error(f"io.delta.exceptions.{TEMPLATES[kind].split('] ')[1].split(':')[0]}: {text}")
    assert classified.kind is kind
    assert classified.winning_commit == winner


def test_in_commit_timestamp_is_the_commit_time_when_the_table_has_it() -> None:
    text = _message(ConflictKind.METADATA_CHANGED, _commit_info(7, "ADD COLUMNS", inCommitTimestamp=1714608000000))
    winner = delta_spark_winner(text)
    assert winner is not None and winner.timestamp == "2024-05-02T00:00:00+00:00"


def test_user_metadata_that_is_not_occflows_names_no_task() -> None:
    text = _message(ConflictKind.CONCURRENT_WRITE, _commit_info(3, "WRITE", user_metadata="nightly backfill by ops"))
    winner = delta_spark_winner(text)
    assert winner is not None and winner.version == 3 and not winner.tagged and winner.task_id is None


def test_a_commit_info_with_a_raw_parameter_is_read_field_by_field() -> None:
    # JsonMapSerializer writes parameter values raw: one that is not JSON breaks the whole object
    # (a real Delta 3.1 message, tests/fixtures/classify/delta_spark_append_root_qbeast441.txt,
    # has "mode":Append)
    info = _commit_info(12, "WRITE").replace('"operationParameters":{', '"operationParameters":{"mode":Append,')
    with pytest.raises(ValueError):
        json.loads(info)
    winner = delta_spark_winner(_message(ConflictKind.CONCURRENT_APPEND, info))
    assert winner is not None and (winner.version, winner.operation, winner.task_id) == (12, "WRITE", "compact_events")


@pytest.mark.parametrize(
    "path", sorted(p for p in FIXTURES.glob("*.txt") if "Conflicting commit:" in p.read_text()), ids=lambda p: p.stem
)
def test_classifier_fixtures_with_a_conflicting_commit_give_its_version_and_operation(path: Path) -> None:
    header, _, text = path.read_text().partition("\n---\n")
    fields = dict(line[2:].split(": ", 1) for line in header.splitlines() if line.startswith("# "))
    winner = delta_spark_winner(text)
    assert winner is not None
    expected = fields.get("winner_version")  # older Deltas left the version out of the JSON
    assert winner.version == (None if expected is None else int(expected))
    assert winner.operation == fields["winner_operation"]


def test_a_message_without_a_conflicting_commit_names_none_here() -> None:
    # Delta 4.1's DELTA_CONCURRENT_APPEND names operation and version in its text instead: the
    # core classifier reads those (no commit info, so no Airflow try to name)
    text = (
        "[DELTA_CONCURRENT_APPEND.WITHOUT_HINT] Transaction conflict detected. a concurrent UPDATE added data to "
        "table `spark_catalog`.`db`.`events` committed at version 9. The concurrent operation modified data that "
        f"should have been read by this operation. Please retry the operation. Refer to {DOCS} for more information."
    )
    assert delta_spark_winner(text) is None
    winner = classify_error(text).winning_commit
    assert winner is not None and (winner.version, winner.operation, winner.tagged) == (9, "UPDATE", False)


def _history_row(version: int, operation: str, read_version: int, user_metadata: str | None = None) -> dict:
    return {"version": version, "operation": operation, "readVersion": read_version, "userMetadata": user_metadata,
            "timestamp": f"2024-05-01 00:00:{version:02d}"}


def test_delta_spark_3_prints_no_version_so_the_history_gives_it() -> None:
    # delta-spark 3.3's real "Conflicting commit" JSON has no "version" (tests/engines/
    # test_delta_spark_races.py sees it on the engine): the winner's version comes from the
    # table's history, the oldest newer commit that agrees with what the message printed.
    from occflow.engines.spark.delta_spark import winner_in_history

    info = json.loads(_commit_info(0, "UPDATE"))
    del info["version"]
    info["readVersion"] = 4
    printed = delta_spark_winner(_message(ConflictKind.CONCURRENT_APPEND, json.dumps(info, separators=(",", ":"))))
    assert printed is not None and printed.version is None and printed.tagged
    rows = [
        _history_row(7, "UPDATE", 5, USER_METADATA),  # a later commit of the same task: not the winner
        _history_row(6, "UPDATE", 4, USER_METADATA),
        _history_row(5, "WRITE", 4),
        _history_row(4, "WRITE", 3),  # before the loser read: never the winner
    ]
    winner = winner_in_history(rows, 4, printed)
    assert winner is not None and winner.version == 6 and winner.others == (5, 7)
    assert (winner.operation, winner.task_id, winner.tagged) == ("UPDATE", "compact_events", True)
    # Nothing printed that matches: the oldest commit since the read.
    untagged = winner_in_history(rows, 4, None)
    assert untagged is not None and untagged.version == 5 and untagged.operation == "WRITE"
