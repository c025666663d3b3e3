"""The classifier on fixture texts copied from the engines' sources, on near misses, and on chains.

Real engine errors (delta-rs here, Spark/py4j and Iceberg in test_classify_real_*.py) are
classified there; this module covers the texts of engines that cannot run on this machine and
the mechanics (chains, duck typing, precedence, bad input).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import occflow
from occflow.core.classifiers.markers import COMPILED, MARKERS, PRECEDENCE, Evidence
from occflow.core.classify import classify
from occflow.core.kinds import ConflictKind
from occflow.engines.outcome import ErrorInfo

FIXTURE_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "classify"


@dataclass(frozen=True)
class Fixture:
    name: str
    kind: str
    engine: str
    source: str
    text: str
    winner_version: int | None
    winner_operation: str | None


def load(path: Path) -> Fixture:
    raw = path.read_text(encoding="utf-8")
    head, sep, text = raw.partition("\n---\n")
    if not sep:
        raise ValueError(f"{path.name}: no '---' line between the header and the text")
    fields: dict[str, str] = {}
    for line in head.splitlines():
        if not line.startswith("# ") or ":" not in line:
            raise ValueError(f"{path.name}: header line {line!r} is not '# key: value'")
        key, value = line[2:].split(":", 1)
        fields[key.strip()] = value.strip()
    missing = {"kind", "engine", "source"} - fields.keys()
    if missing:
        raise ValueError(f"{path.name}: header lacks {sorted(missing)}")
    version = fields.get("winner_version")
    return Fixture(
        name=path.stem,
        kind=fields["kind"],
        engine=fields["engine"],
        source=fields["source"],
        text=text.rstrip("\n"),
        winner_version=int(version) if version is not None else None,
        winner_operation=fields.get("winner_operation"),
    )


def all_fixtures() -> list[Fixture]:
    return [load(p) for p in sorted(FIXTURE_DIR.glob("*.txt"))]


FIXTURES = all_fixtures()


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.name for f in FIXTURES])
def test_every_fixture_classifies_to_its_expected_kind_and_engine(fixture: Fixture) -> None:
    result = classify(fixture.text)
    assert result.kind.value == fixture.kind, result.reason
    assert result.engine == fixture.engine
    assert result.is_conflict == (fixture.kind != "not_a_conflict")


@pytest.mark.parametrize(
    "fixture",
    [f for f in FIXTURES if f.winner_version is not None or f.winner_operation is not None],
    ids=lambda f: f.name,
)
def test_winning_commit_is_read_from_the_text_where_the_engine_names_it(fixture: Fixture) -> None:
    winner = classify(fixture.text).winning_commit
    assert winner is not None
    assert winner.version == fixture.winner_version
    assert winner.operation == fixture.winner_operation


def test_fixtures_cover_every_conflict_kind_and_name_their_source() -> None:
    covered = {f.kind for f in FIXTURES}
    assert covered == {k.value for k in ConflictKind}
    assert all(len(f.source) > 20 for f in FIXTURES)


def test_conflict_without_a_named_winner_has_no_winning_commit() -> None:
    text = "Failed to commit transaction: Metadata changed since last commit."
    assert classify(text).winning_commit is None


@pytest.mark.parametrize(
    "text",
    [
        "ConcurrentModificationException in HashMap",
        "merge conflict in git",
        "concurrent update detected by the scheduler; conflict resolution pending",
        "Concurrent transaction failed.",  # delta-rs's text, but without its TransactionError prefix
        "Metadata changed since last commit.",
        "Files were added",
        "DELTA_CONCURRENT_APPEND",  # an error class name in prose, not "[CLASS]" as Spark prints it
        "com.example.ConcurrentAppendException: Files were added to partition x",  # not Delta's class
        "CommitFailedException",
        "Failed to commit transaction: 15 rows rejected by constraint",
        "CommitConflict(Predicate { source: Plan(\"bad\") })",  # a delta-rs variant that is no race
        "Error: Transaction { source: CommitConflict(NoMetadata) }",
        "conflict detected, aborting transaction conflicts_checked=1",  # the record without its error
        "Requirement failed: current table metadata is missing",
        "Timed out after 60000 ms waiting for lock on db.events",  # no Iceberg LockException
        "ODPS-01109990: not the code",
        "an error text occflow has never seen",
        "",
    ],
)
def test_text_that_merely_mentions_a_conflict_word_is_not_a_conflict(text: str) -> None:
    result = classify(text)
    assert result.kind is ConflictKind.NOT_A_CONFLICT
    assert not result.retry_safe
    assert result.engine == "unknown"


def test_python_cause_chain_is_followed() -> None:
    try:
        try:
            raise RuntimeError(
                "Failed to commit transaction: Commit failed: a concurrent transactions added new data."
            )
        except RuntimeError as inner:
            raise ValueError("load of events failed") from inner
    except ValueError as outer:
        result = classify(outer)
    assert result.kind is ConflictKind.CONCURRENT_APPEND
    assert result.engine == "delta-rs"
    assert result.exception_class == "builtins.ValueError"


def test_python_implicit_context_is_followed_even_when_suppressed() -> None:
    # Issue 11: ``raise ... from None`` hides the context from the printed traceback, not from the
    # classifier: a wrapper that swallowed a conflict still lost a conflict.
    conflict = "Failed to commit transaction: Metadata changed since last commit."
    try:
        try:
            raise RuntimeError(conflict)
        except RuntimeError:
            raise KeyError("while handling")  # noqa: B904 - the implicit __context__ is the point
    except KeyError as err:
        assert classify(err).kind is ConflictKind.METADATA_CHANGED
    try:
        try:
            raise RuntimeError(conflict)
        except RuntimeError:
            raise KeyError("unrelated") from None
    except KeyError as err:
        assert classify(err).kind is ConflictKind.METADATA_CHANGED


def test_a_cyclic_cause_chain_terminates() -> None:
    a = RuntimeError("a")
    b = RuntimeError("b")
    a.__cause__ = b
    b.__cause__ = a
    assert classify(a).kind is ConflictKind.NOT_A_CONFLICT


# Duck-typed stand-ins for py4j's JavaObject / Py4JJavaError: the classifier must work from
# getClass().getName(), getMessage(), getCause() without importing py4j. A real py4j chain from a
# real JVM is classified in test_classify_real_spark.py.
class _JavaClass:
    def __init__(self, name: str) -> None:
        self._name = name

    def getName(self) -> str:  # noqa: N802 - the Java method name
        return self._name


class _JavaThrowable:
    def __init__(self, name: str, message: str | None, cause: _JavaThrowable | None = None) -> None:
        self._cls = _JavaClass(name)
        self._message = message
        self._cause = cause

    def getClass(self) -> _JavaClass:  # noqa: N802
        return self._cls

    def getMessage(self) -> str | None:  # noqa: N802
        return self._message

    def getCause(self) -> _JavaThrowable | None:  # noqa: N802
        return self._cause


class Py4JJavaError(Exception):
    """Shaped like py4j.protocol.Py4JJavaError, whose str() needs a live gateway."""

    def __init__(self, java_exception: _JavaThrowable) -> None:
        super().__init__("An error occurred while calling o42.sql.")
        self.java_exception = java_exception

    def __str__(self) -> str:
        raise ConnectionError("py4j gateway is closed")


def test_py4j_like_error_is_classified_from_its_java_cause_chain_even_when_str_fails() -> None:
    chain = _JavaThrowable(
        "org.apache.spark.SparkException",
        "Writing job aborted",
        _JavaThrowable(
            "org.apache.iceberg.exceptions.ValidationException",
            "Found conflicting files that can contain records matching true: [a.parquet]",
        ),
    )
    result = classify(Py4JJavaError(chain))
    assert result.kind is ConflictKind.VALIDATION_CONFLICT
    assert result.engine == "iceberg"


def test_java_class_alone_is_enough_for_delta_and_iceberg_conflict_classes() -> None:
    for name, kind in [
        ("io.delta.exceptions.ConcurrentDeleteReadException", ConflictKind.CONCURRENT_DELETE_READ),
        ("org.apache.spark.sql.delta.ConcurrentDeleteDeleteException", ConflictKind.CONCURRENT_DELETE_DELETE),
        ("io.delta.exceptions.ConcurrentWriteException", ConflictKind.CONCURRENT_WRITE),
        ("org.apache.iceberg.exceptions.CommitStateUnknownException", ConflictKind.COMMIT_STATE_UNKNOWN),
    ]:
        chain = _JavaThrowable("org.apache.spark.SparkException", "Job aborted", _JavaThrowable(name, None))
        result = classify(Py4JJavaError(chain))
        assert (result.kind, result.exception_class) == (kind, name)


def test_a_java_cause_that_points_to_itself_terminates() -> None:
    node = _JavaThrowable("java.lang.RuntimeException", "loop")
    node._cause = node
    assert classify(Py4JJavaError(node)).kind is ConflictKind.NOT_A_CONFLICT


class CapturedException(Exception):
    """Shaped like pyspark.errors.exceptions.captured.CapturedException (PySpark 3.5)."""

    def __init__(self, desc: str, error_class: str | None, cause: _JavaThrowable | None) -> None:
        super().__init__(desc)
        self.desc = desc
        self.stackTrace = "\tat org.apache.spark.sql.delta.ConflictChecker.check(ConflictChecker.scala:1)"
        self.cause = cause
        self._error_class = error_class

    def getErrorClass(self) -> str | None:  # noqa: N802
        return self._error_class


def test_captured_exception_error_class_is_used_with_its_sub_class() -> None:
    err = CapturedException(
        "Transaction conflict detected.", "DELTA_CONCURRENT_APPEND.WITH_PARTITION_HINT", None
    )
    result = classify(err)
    assert result.kind is ConflictKind.CONCURRENT_APPEND
    assert result.error_class == "DELTA_CONCURRENT_APPEND.WITH_PARTITION_HINT"


def test_captured_exception_java_cause_is_followed() -> None:
    cause = _JavaThrowable("io.delta.exceptions.MetadataChangedException", "changed")
    err = CapturedException("[INTERNAL] wrapped", None, cause)
    assert classify(err).kind is ConflictKind.METADATA_CHANGED


def _delta_python_class(module: str, name: str) -> type[Exception]:
    return type(name, (Exception,), {"__module__": module})


@pytest.mark.parametrize(
    ("module", "name", "kind"),
    [
        ("delta.exceptions.captured", "ConcurrentAppendException", ConflictKind.CONCURRENT_APPEND),
        ("delta.exceptions.captured", "ConcurrentDeleteReadException", ConflictKind.CONCURRENT_DELETE_READ),
        (
            "delta.exceptions.captured",
            "ConcurrentDeleteDeleteException",
            ConflictKind.CONCURRENT_DELETE_DELETE,
        ),
        ("delta.exceptions.captured", "MetadataChangedException", ConflictKind.METADATA_CHANGED),
        ("delta.exceptions.captured", "ProtocolChangedException", ConflictKind.PROTOCOL_CHANGED),
        ("delta.exceptions.captured", "ConcurrentTransactionException", ConflictKind.CONCURRENT_TRANSACTION),
        ("delta.exceptions", "ConcurrentWriteException", ConflictKind.CONCURRENT_WRITE),
        ("delta.connect.exceptions", "ConcurrentAppendException", ConflictKind.CONCURRENT_APPEND),
    ],
)
def test_delta_spark_python_classes_match_by_qualified_name_without_a_shared_base(
    module: str, name: str, kind: ConflictKind
) -> None:
    # delta-spark's Python classes subclass CapturedException and their own base, not one conflict
    # base; an empty message shows the class alone decides.
    err = _delta_python_class(module, name)("")
    assert classify(err).kind is kind


def test_pyiceberg_commit_classes_match_by_qualified_name() -> None:
    # PyIceberg is not installed here: classes with its module path stand in for it.
    failed = _delta_python_class("pyiceberg.exceptions", "CommitFailedException")("Requirement failed")
    unknown = _delta_python_class("pyiceberg.exceptions", "CommitStateUnknownException")("504")
    assert classify(failed).kind is ConflictKind.COMMIT_FAILED
    assert classify(unknown).kind is ConflictKind.COMMIT_STATE_UNKNOWN


def test_same_simple_name_in_another_module_is_not_a_delta_conflict() -> None:
    err = _delta_python_class("myapp.errors", "ConcurrentAppendException")("")
    assert classify(err).kind is ConflictKind.NOT_A_CONFLICT


def test_error_info_from_the_spark_submit_channel_is_classified() -> None:
    info = ErrorInfo(
        exception_class="org.apache.spark.SparkException",
        messages=("Writing job aborted", "Cannot commit: stale table metadata"),
        error_class=None,
        cause_classes=("org.apache.iceberg.exceptions.CommitFailedException",),
    )
    result = classify(info)
    assert result.kind is ConflictKind.COMMIT_FAILED
    assert result.retry_safe
    assert result.exception_class == "org.apache.iceberg.exceptions.CommitFailedException"


def test_error_info_error_class_alone_is_enough() -> None:
    info = ErrorInfo(
        exception_class="py4j.protocol.Py4JJavaError", messages=(), error_class="DELTA_CONCURRENT_WRITE"
    )
    assert classify(info).kind is ConflictKind.CONCURRENT_WRITE


def test_error_info_without_markers_is_not_a_conflict() -> None:
    info = ErrorInfo(exception_class="java.lang.OutOfMemoryError", messages=("Java heap space",))
    result = classify(info)
    assert result.kind is ConflictKind.NOT_A_CONFLICT
    assert result.exception_class == "java.lang.OutOfMemoryError"


def test_least_retry_safe_kind_wins_when_a_chain_holds_several() -> None:
    chain = _JavaThrowable(
        "org.apache.iceberg.exceptions.CommitFailedException",
        "Cannot commit: stale table metadata",
        _JavaThrowable("org.apache.iceberg.exceptions.CommitStateUnknownException", "Unknown failure"),
    )
    result = classify(Py4JJavaError(chain))
    assert result.kind is ConflictKind.COMMIT_STATE_UNKNOWN
    assert not result.retry_safe


def test_retry_safety_derives_from_the_kind() -> None:
    assert not classify("Failed to commit transaction: Concurrent transaction failed.").retry_safe
    assert not classify("Failed to commit transaction: Protocol changed since last commit: x").retry_safe
    assert classify("Failed to commit transaction: Metadata changed since last commit.").retry_safe
    assert classify("ODPS-0121096:MetaStore transaction conflict - Reached maximum retry times").retry_safe


def test_marker_found_at_the_end_of_a_long_log_tail() -> None:
    noise = "24/11/21 20:00:00 INFO Executor: Finished task 0.0 in stage 1.0 (TID 1)\n" * 40_000
    text = (
        noise + "org.apache.iceberg.exceptions.CommitFailedException: Cannot commit: stale table metadata\n"
    )
    assert len(text) > 1_000_000
    assert classify(text).kind is ConflictKind.COMMIT_FAILED


# PyODPS is the client of a remote service (MaxCompute) that cannot run here: these classes mock
# PyODPS's errors (odps/errors.py ODPSError with ``code`` and its __str__, odps/tunnel/errors.py).
class ODPSError(RuntimeError):
    __module__ = "odps.errors"

    def __init__(self, msg: str, code: str | None = None, instance_id: str | None = None) -> None:
        super().__init__(msg)
        self.code = code
        self.instance_id = instance_id

    def __str__(self) -> str:
        head = " ".join(
            p for p in (f"{self.code}:" if self.code else "", f"InstanceId: {self.instance_id}") if p
        )
        return f"{head}\n{self.args[0]}"


class MetaTransactionFailed(ODPSError):
    __module__ = "odps.tunnel.errors"


def test_pyodps_transaction_abort_is_an_operation_conflict() -> None:
    msg = (
        "ODPS-0110061: Failed to run ddltask - Modify DDL meta encounter exception : ODPS-0429311:Transaction "
        "aborted - MaxC Transaction aborted. Can't update ObjectId(objectType:PARTITION). BeginTs is less than "
        "lastCommitTs.objectId:ObjectId(objectType:PARTITION), txnId:1, lastCommitTs:1709410212584448"
    )
    result = classify(ODPSError(msg, code="ODPS-0110061", instance_id="20241121"))
    assert result.kind is ConflictKind.OPERATION_CONFLICT
    assert result.engine == "maxcompute"
    assert result.winning_commit is not None
    assert result.winning_commit.tag == {"lastCommitTs": "1709410212584448"}


def test_pyodps_ddl_failure_without_transaction_abort_is_not_a_conflict() -> None:
    msg = "ODPS-0110061: Failed to run ddltask-Schema evolution DDLs is not enabled in current project:p"
    assert classify(ODPSError(msg, code="ODPS-0110061")).kind is ConflictKind.NOT_A_CONFLICT


def test_pyodps_metastore_lock_code_is_a_metadata_lock_conflict() -> None:
    assert classify(ODPSError("MetaStore transaction conflict", code="ODPS-0121096")).kind is (
        ConflictKind.METADATA_LOCK_CONFLICT
    )


def test_pyodps_tunnel_meta_transaction_failed_is_a_metadata_lock_conflict() -> None:
    err = MetaTransactionFailed("server message", code="MetaTransactionFailed")
    result = classify(err)
    assert result.kind is ConflictKind.METADATA_LOCK_CONFLICT
    assert result.exception_class == "odps.tunnel.errors.MetaTransactionFailed"


@pytest.mark.parametrize("bad", [None, 42, object(), b"bytes are not text"])
def test_something_that_is_not_an_error_is_rejected_with_its_type_named(bad: object) -> None:
    with pytest.raises(TypeError, match="classify\\(\\) takes an exception") as info:
        classify(bad)
    assert type(bad).__qualname__ in str(info.value)


def test_package_exports_classify_and_to_dict_is_json() -> None:
    result = occflow.classify(
        "[DELTA_CONCURRENT_APPEND] ConcurrentAppendException: Files were added to x by a concurrent update."
    )
    data = json.loads(json.dumps(result.to_dict()))
    assert data["kind"] == "concurrent_append"
    assert data["retry_safe"] is True


def test_marker_table_rows_name_their_source_and_every_kind_has_a_precedence() -> None:
    assert all(m.source and m.engine for m in MARKERS)
    assert {m.kind for m in MARKERS} <= set(PRECEDENCE)
    assert set(PRECEDENCE) == set(ConflictKind) - {ConflictKind.NOT_A_CONFLICT}
    classes = [m.value for m in MARKERS if m.evidence is Evidence.CLASS]
    assert all("." in name for name in classes), "class markers must be qualified names"


def test_docs_list_every_class_and_error_class_marker() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "classifier.md").read_text(encoding="utf-8")
    for marker in MARKERS:
        if marker.evidence is Evidence.ERROR_CLASS:
            assert marker.value in doc, marker
        elif marker.evidence is Evidence.CLASS:
            assert marker.value.rsplit(".", 1)[1] in doc, marker


# delta-rs's CommitConflictError variants that are concurrent-writer losses: the variant, its
# Display (crates/core/src/kernel/transaction/conflict_checker.rs #[error(...)], first line), and the
# kind. Each is rendered the ways delta-rs prints it: TransactionError's Display (what deltalake's
# Python CommitFailedError says), the Debug of DeltaTableError::Transaction { source } (a Rust
# job's `{:?}` / `main` error), and the commit loop's "conflict detected, aborting transaction"
# record in tracing's text and JSON layouts (mod.rs, error = %err: the Display without prefix).
DELTA_RS_VARIANTS = [
    ("ConcurrentAppend", "Commit failed: a concurrent transactions added new data.", ConflictKind.CONCURRENT_APPEND),
    (
        "ConcurrentDeleteRead",
        "Commit failed: a concurrent transaction deleted data this operation read.",
        ConflictKind.CONCURRENT_DELETE_READ,
    ),
    (
        "ConcurrentDeleteDelete",
        "Commit failed: a concurrent transaction deleted the same data your transaction deletes.",
        ConflictKind.CONCURRENT_DELETE_DELETE,
    ),
    ("MetadataChanged", "Metadata changed since last commit.", ConflictKind.METADATA_CHANGED),
    ("ConcurrentTransaction", "Concurrent transaction failed.", ConflictKind.CONCURRENT_TRANSACTION),
    (
        'ProtocolChanged("protocol changed")',
        "Protocol changed since last commit: protocol changed",
        ConflictKind.PROTOCOL_CHANGED,
    ),
]


def _delta_rs_renderings(variant: str, display: str) -> dict[str, str]:
    json_display = json.dumps(display)
    return {
        "display": f"Failed to commit transaction: {display}",
        "debug": f"Error: Transaction {{ source: CommitConflict({variant}) }}",
        "log_text": (
            "2025-06-01T10:00:00.131002Z ERROR commit{base_version=3 max_retries=15 attempt=1}: "
            f"deltalake_core::kernel::transaction: conflict detected, aborting transaction conflicts_checked=1 "
            f"error={display}"
        ),
        "log_json": (
            '{"timestamp":"2025-06-01T10:00:00.131002Z","level":"ERROR","fields":{"message":"conflict detected, '
            f'aborting transaction","conflicts_checked":1,"error":{json_display}}},'
            '"target":"deltalake_core::kernel::transaction"}'
        ),
    }


DELTA_RS_RENDERED = [
    (form, text, kind)
    for variant, display, kind in DELTA_RS_VARIANTS
    for form, text in _delta_rs_renderings(variant, display).items()
] + [
    ("debug", "Transaction { source: MaxCommitAttempts(15) }", ConflictKind.COMMIT_RETRIES_EXHAUSTED),
    ("debug", "Error: VersionAlreadyExists(7)", ConflictKind.CONCURRENT_WRITE),
    (
        "log_text",
        "2025-06-01T10:00:07.004511Z ERROR commit{attempt=16}: deltalake_core::kernel::transaction: "
        "exceeded maximum commit attempts max_retries=15",
        ConflictKind.COMMIT_RETRIES_EXHAUSTED,
    ),
    (
        "log_json",
        '{"level":"ERROR","fields":{"message":"exceeded maximum commit attempts","max_retries":15},'
        '"target":"deltalake_core::kernel::transaction"}',
        ConflictKind.COMMIT_RETRIES_EXHAUSTED,
    ),
    # With max_retries 0 the loop's only record is this WARN, and MaxCommitAttempts(0) follows.
    (
        "log_text",
        "2025-06-01T10:00:00.131002Z  WARN commit_with_retries{base_version=3 max_retries=0 attempt=1}: "
        "deltalake_core::kernel::transaction: table updated but max_retries is 0, failing immediately "
        "base_version=3 latest_version=4",
        ConflictKind.COMMIT_RETRIES_EXHAUSTED,
    ),
    # Airflow 3's task log (JSON lines): the exception as structlog's dict transformer writes it;
    # the real rendering of a real loser is in test_classify_real_deltars.py.
    (
        "airflow_json",
        '{"timestamp":"2026-11-28T10:02:51.969012+00:00","level":"error","event":"Task failed with exception",'
        '"logger":"task","exception":[{"exc_type":"CommitFailedError","exc_value":"Failed to commit transaction: 15",'
        '"exc_notes":[],"syntax_error":null,"is_cause":false,"frames":[{"filename":"/opt/airflow/dags/load.py",'
        '"lineno":9,"name":"load"}],"is_group":false,"exceptions":[]}]}',
        ConflictKind.COMMIT_RETRIES_EXHAUSTED,
    ),
]

# Records of the same commit loop that are not a lost race (mod.rs, PreparedCommit::into_future):
# it found newer versions and goes on to check them; or a commit failed for another reason.
DELTA_RS_LOOP_NOT_LOST = [
    "2025-06-01T10:00:00.131002Z  WARN commit_with_retries{base_version=3 max_retries=15 attempt=1}: "
    "deltalake_core::kernel::transaction: table updated during transaction, checking for conflicts "
    "base_version=3 latest_version=4 versions_behind=1",
    "2025-06-01T10:00:00.131002Z ERROR commit_with_retries{base_version=3 max_retries=15 attempt=1}: "
    "deltalake_core::kernel::transaction: commit failed, aborting version=4 "
    "error=Generic LocalFileSystem error: Permission denied (os error 13)",
]


@pytest.mark.parametrize("text", DELTA_RS_LOOP_NOT_LOST, ids=["checking", "commit_failed_io"])
def test_a_delta_rs_commit_loop_record_without_a_lost_race_is_not_a_conflict(text: str) -> None:
    assert classify(text).kind is ConflictKind.NOT_A_CONFLICT


def test_a_delta_rs_conflict_logged_before_a_later_successful_commit_is_not_the_failure() -> None:
    conflict = _delta_rs_renderings("ConcurrentAppend", "Commit failed: a concurrent transactions added new data.")
    committed = (
        "2025-06-01T10:00:03.400000Z  INFO commit_with_retries{base_version=4 max_retries=15 attempt=1}: "
        "deltalake_core::kernel::transaction: transaction committed successfully version=5 num_retries=0"
    )
    assert classify(conflict["log_text"]).kind is ConflictKind.CONCURRENT_APPEND
    result = classify(conflict["log_text"] + "\n" + committed)
    assert result.kind is ConflictKind.NOT_A_CONFLICT and "commit succeeded" in result.reason


@pytest.mark.parametrize(("form", "text", "kind"), DELTA_RS_RENDERED, ids=lambda v: getattr(v, "value", None))
def test_a_delta_rs_error_keeps_its_kind_in_every_form_rust_prints_it(form: str, text: str, kind: ConflictKind) -> None:
    result = classify(text)
    assert result.kind is kind, (form, result.reason)
    assert result.engine == "delta-rs"
    try:
        raise RuntimeError(text)  # the same text as an exception's message
    except RuntimeError as err:
        assert classify(err).kind is kind


def test_every_message_marker_is_proven_by_a_text() -> None:
    """Each template in the marker table matches at least one text these tests classify."""
    from test_classify_odps import CONFLICTS as ODPS_TEXTS  # the MaxCompute page samples
    from test_classify_odps import TEXT_FORMS as ODPS_TEXT_FORMS  # tunnel codes, the wrapped lock timeout

    texts = [f.text for f in FIXTURES] + [t for _, t, _ in DELTA_RS_RENDERED] + [t for t, _, _ in ODPS_TEXTS]
    texts += [t for t, _ in ODPS_TEXT_FORMS]
    unproven = [
        f"{m.engine} {m.kind.value}: {m.value}"
        for m in MARKERS
        if m.evidence is Evidence.MESSAGE and not any(COMPILED[m.value].search(t) for t in texts)
    ]
    assert not unproven


_CONFLICT_WORDS = [
    "conflict",
    "Conflict",
    "concurrent",
    "Concurrent",
    "ConcurrentModificationException",
    "ConcurrentAppendException",
    "CommitFailedException",
    "ValidationException",
    "MetadataChangedException",
    "transaction",
    "Transaction",
    "commit",
    "failed",
    "Failed",
    "retry",
    "version",
    "DELTA_CONCURRENT_APPEND",
    "ODPS",
    "aborted",
    "merge",
    "metadata",
    "changed",
    "protocol",
    "lock",
    "MetaStore",
    "delete",
    "files",
    "added",
    "update",
    "12",
    "0",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_CONFLICT_WORDS), max_size=40), st.sampled_from([" ", "\n", "  "]))
def test_conflict_words_without_an_anchor_never_classify_as_a_conflict(words: list[str], sep: str) -> None:
    # Every marker needs a qualified class, a bracketed error class or a template with its
    # punctuation; bare words, however alarming, are not enough.
    assert classify(sep.join(words)).kind is ConflictKind.NOT_A_CONFLICT


_CONFLICT_FIXTURES = [f for f in FIXTURES if f.kind != "not_a_conflict"]
_NOISE_LINE = st.text(alphabet=st.characters(whitelist_categories=("Lu", "Ll", "Nd", "Zs")), max_size=80)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(_CONFLICT_FIXTURES),
    st.lists(_NOISE_LINE, max_size=20),
    st.lists(_NOISE_LINE, max_size=20),
)
def test_a_conflict_text_keeps_its_kind_inside_a_log_tail(
    fixture: Fixture, before: list[str], after: list[str]
) -> None:
    text = "\n".join([*before, fixture.text, *after])
    assert classify(text).kind.value == fixture.kind
