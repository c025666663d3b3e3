"""MaxCompute (ODPS) errors classified from the texts MaxCompute prints.

MaxCompute is a remote service that cannot run here, so the texts are its documentation's samples
(the error code pages, the SQL error codes page) and one a user posted, copied as printed;
``xxx`` placeholders of a sample are left as they are. Each text is classified three ways: as
text, as the exception PyODPS itself raises for a failed instance (the real
``odps.errors.parse_instance_error`` that ``Instance.wait_for_success`` calls, so the class and
``code`` are PyODPS's), and inside a traceback-like log. The expected kinds are written here, from
the pages' own descriptions of each error (a concurrent-write cause, or a user error), not taken
from the marker table.
"""

from __future__ import annotations

import traceback

import pytest
from odps import errors as odps_errors
from odps.tunnel.errors import MetaTransactionFailed, TunnelError, TunnelReadTimeout, TunnelWriteTimeout
from requests import Response

from occflow.core.classify import classify
from occflow.core.kinds import ConflictKind
from occflow.engines.maxcompute import errors as mc_errors

K = ConflictKind

# (text as MaxCompute prints it, the kind its documentation implies, where it is from)
CONFLICTS = [
    (
        "ODPS-0110061: Failed to run ddltask - Modify DDL meta encounter exception : ODPS-0429311:Transaction "
        "aborted - MaxC Transaction aborted. Can't update ObjectId(objectType:PARTITION, dbName:mc_gjpt, "
        "tableName:xxxx, tableId:xxx, partitionId:xxxx, partitionName:pt=20221125, tenantId:, catalogName:xxx, "
        "catalogId:xxx, dbId:, projectName:xxx). BeginTs is less than lastCommitTs.objectId:ObjectId(objectType:"
        "PARTITION, dbName:xxx, tableName:xxxx, tableId:xxx, partitionId:xxx, partitionName:pt=20221125, tenantId:, "
        "catalogName:xxxx, catalogId:xxx, dbId:, projectName:xxxx), txnId:xxxxx, lastCommitTs:1709410212584448, "
        "lastMaxBeginTs:1709410182400000, isolation:NONSTRICT_SNAPSHOT_ISOLATION, op:UPDATE, "
        "isConstraintNotAllowInsertIntoReorder:false",
        K.OPERATION_CONFLICT,
        "ODPS-0110061 page, error 2: MetaService OCC aborts the later transaction",
    ),
    (
        "ODPS-0121096:MetaStore transaction conflict - Reached maximum retry times because of "
        "OTSStorageTxnLockKeyFail(Inner exception: Transaction timeout because cannot acquire exclusive lock.)",
        K.METADATA_LOCK_CONFLICT,
        "ODPS-0121096 page, error 1: concurrent jobs compete for the table's metadata lock",
    ),
    (
        "ODPS-0110041: Invalid meta operation - AlreadyExistsException(message:Partition already exists, existed values:)",
        K.METADATA_LOCK_CONFLICT,
        "SQL error codes page: metadata contention between concurrent operations on one partition",
    ),
    (
        "ODPS-0110061: Failed to run ddltask - AlreadyExistsException(message:Partition already exists, existed values:)",
        K.METADATA_LOCK_CONFLICT,
        "SQL error codes page: the same contention, reported by the DDL task",
    ),
    (
        "failed: ODPS-0110061: Failed to run ddltask - AlreadyExistsException(message:Partition already exists, "
        'existed values: ["2017-09-05"])',
        K.METADATA_LOCK_CONFLICT,
        "developer.aliyun.com/ask/619904: an INSERT INTO from an ODPS Spark node, as the user posted it",
    ),
    (
        "ODPS-0110061:Failed to run ddltask - SimpleLock conflict failure, add partition is already on-going",
        K.METADATA_LOCK_CONFLICT,
        "SQL error codes page (help.aliyun.com 64654): two jobs adding one partition at once",
    ),
]

NEAR_MISSES = [
    (
        "FAILED: Catalog Service Failed, ErrorCode: 152, Error Message: ODPS-0110061: Failed to run "
        "ddltask-Schema evolution DDLs is not enabled in current project:xxxx",
        "ODPS-0110061 page, error 1: the same code for a project setting",
    ),
    (
        "ODPS-0110061: Failed to run ddltask - Your project is not allowed to install the package",
        "SQL error codes page: the same code for a data masking package",
    ),
    (
        "FAILED: ODPS-0130071:[1,24] Semantic analysis exception - the number of input partition columns (0) "
        "doesn't equal to table's partition columns (2)",
        "ODPS-0130071 page, error 1: a partition clause that does not match the table",
    ),
    (
        "FAILED: ODPS-0130071:[1,8] Semantic analysis exception - column reference t.value should appear in GROUP BY key",
        "Rewrite incompatible SQL statements page: group.by.with.star",
    ),
    (
        "FAILED: ODPS-0130071:[2,11] Semantic analysis exception - column cnt cannot be resolved\n"
        "ODPS-0130071:[2,11] Semantic analysis exception - column reference cnt should appear in GROUP BY key",
        "Rewrite incompatible SQL statements page: agg.having.ref.prev.agg.alias",
    ),
    (
        "FAILED: ODPS-0130161:[1,19] Parse exception - unexpected escape sequence: 01\n"
        "ODPS-0130161:[1,38] Parse exception - unexpected escape sequence: 0001",
        "Rewrite incompatible SQL statements page: bad.escape",
    ),
    (
        "ODPS-0123031:ODPS partition exception - maximum 60000 partitions allowed",
        "ODPS-0123031 page, error 1: a partition limit",
    ),
    (
        "ODPS-0123031:Partition exception - a single instance cannot output data to more than 10000 partitions",
        "ODPS-0123031 page, error 2: a partition limit",
    ),
]


def _pyodps(text: str) -> Exception:
    """The exception PyODPS raises for a failed instance whose task result is ``text``."""
    error: Exception = odps_errors.parse_instance_error(text)
    error.instance_id = "20241121120312345gabc1234"  # type: ignore[attr-defined]
    return error


def _in_a_log(text: str) -> str:
    return (
        "2024-11-21 12:03:12,345 INFO odps.models.instance: Instance ID: 20241121120312345gabc1234\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/airflow/dags/load.py", line 12, in <module>\n'
        "    instance.wait_for_success()\n"
        f"odps.errors.ODPSError: {text}\n"
    )


@pytest.mark.parametrize(("text", "kind", "source"), CONFLICTS, ids=[s for *_, s in CONFLICTS])
def test_a_documented_odps_conflict_is_classified_in_every_form(text: str, kind: ConflictKind, source: str) -> None:
    for form in (text, _pyodps(text), _in_a_log(text)):
        found = classify(form)
        assert found.kind is kind, (type(form).__name__, found)
        assert found.engine == "maxcompute"
        assert found.retry_safe


@pytest.mark.parametrize(("text", "source"), NEAR_MISSES, ids=[s for _, s in NEAR_MISSES])
def test_an_odps_error_that_is_not_a_conflict_is_never_one(text: str, source: str) -> None:
    for form in (text, _pyodps(text), _in_a_log(text)):
        found = classify(form)
        assert found.kind is K.NOT_A_CONFLICT, (type(form).__name__, found)
        assert not found.retry_safe


def test_the_aborted_transaction_names_the_last_commit_as_the_winner() -> None:
    found = classify(_pyodps(CONFLICTS[0][0]))
    assert found.winning_commit is not None
    assert found.winning_commit.tag == {"lastCommitTs": "1709410212584448"}
    assert found.error_class == "ODPS-0110061"


def test_pyodps_code_and_class_carry_the_lock_conflict_without_the_text() -> None:
    assert classify(odps_errors.ODPSError("timed out", code="ODPS-0121096")).kind is K.METADATA_LOCK_CONFLICT
    tunnel = MetaTransactionFailed("RequestId: 20241121120312abcdef", code="MetaTransactionFailed")
    assert classify(tunnel).kind is K.METADATA_LOCK_CONFLICT


# ODPS-0110999: the commit failed and its rollback failed too ("possible breach of atomicity"): the
# data may or may not have landed, so the write must never be retried blindly.
ROLLBACK_FAILED = (
    "ODPS-0110999: Critical! Internal error happened in commit operation and rollback failed, possible breach "
    "of atomicity - Rename directory failed during DDLTask."
)


def test_a_commit_whose_rollback_failed_is_an_unknown_commit_state_in_every_form() -> None:
    for form in (ROLLBACK_FAILED, _pyodps(ROLLBACK_FAILED), _in_a_log(ROLLBACK_FAILED), "FAILED: " + ROLLBACK_FAILED):
        found = classify(form)
        assert found.kind is K.COMMIT_STATE_UNKNOWN, (type(form).__name__, found)
        assert found.engine == "maxcompute"
        assert not found.retry_safe
    assert classify(odps_errors.ODPSError("rollback failed", code="ODPS-0110999")).kind is K.COMMIT_STATE_UNKNOWN


def test_an_unknown_odps_error_is_never_a_conflict() -> None:
    for text in (
        "ODPS-0010000:System internal error - fuxi job failed, caused by: the quota is exhausted",
        "ODPS-0130131:Table not found - table proj.events cannot be resolved",
        "ODPS-0110061: Failed to run ddltask - an error text occflow has never seen",
    ):
        assert classify(_pyodps(text)).kind is K.NOT_A_CONFLICT, text


def test_the_stand_in_fails_with_texts_classified_as_their_error_pages_say() -> None:
    aborted = mc_errors.transaction_aborted("proj", "events", "ds=2024-01-01", "t9", 1709410212584448, 1709410182400000, "update")
    assert classify(_pyodps(aborted)).kind is K.OPERATION_CONFLICT
    assert classify(_pyodps(mc_errors.METADATA_LOCK)).kind is K.METADATA_LOCK_CONFLICT
    exists = mc_errors.PARTITION_ALREADY_EXISTS.format(values="2024-01-01")
    assert classify(_pyodps(exists)).kind is K.METADATA_LOCK_CONFLICT
    mismatch = mc_errors.PARTITION_COLUMNS_MISMATCH.format(given=0, expected=2)
    assert classify(_pyodps(mismatch)).kind is K.NOT_A_CONFLICT


# --------------------------------------------------------------------------- outside SQL
#
# What MaxCompute raises outside an SQL instance: the tunnel's and the REST API's errors. Each is
# built the way PyODPS builds it from the service's answer: ``odps.errors.parse_response`` (what
# ``odps/rest.py`` RestClient.request raises for every failed request, tunnel requests included)
# and ``odps.tunnel.errors.TunnelError.parse`` (the tunnel's own parser), each given a real
# ``requests.Response`` holding the service's XML error body. The codes are the service's (the
# Tunnel error messages page, PyODPS's classes); MetaTransactionFailed's text is the one users
# posted. TableModified's and SchemaModified's texts are not published: theirs below only say what
# the code means, and the code decides. No MaxCompute runs here: the response is made up, the
# parsing and the classes are PyODPS's.


def _response(code: str, message: str, status: int = 409, headers: dict[str, str] | None = None) -> Response:
    response = Response()
    response.status_code = status
    response._content = (  # the body the service sends, as requests holds it after reading
        f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{message}</Message>"
        "<RequestId>20241121120312abcdef</RequestId><HostId>tunnel.odps.aliyun.com</HostId></Error>"
    ).encode()
    response.headers.update({"x-odps-request-id": "20241121120312abcdef", **(headers or {})})
    return response


def _api_error(code: str, message: str, **kw: object) -> Exception:
    error: Exception = odps_errors.parse_response(_response(code, message, **kw))  # type: ignore[arg-type]
    return error


def _tunnel_error(code: str, message: str, **kw: object) -> Exception:
    error: Exception = TunnelError.parse(_response(code, message, **kw))  # type: ignore[arg-type]
    return error


META_TRANSACTION_FAILED = "Operation failed due to concurrent upload/insert operations on the same table."
TABLE_MODIFIED = "The specified table has been modified since the download initiated."
SCHEMA_MODIFIED = "The specified table schema has been modified since the upload or download initiated."

# (error code, its text, the kind: what a concurrent writer did to this session)
OUTSIDE_SQL = [
    ("MetaTransactionFailed", META_TRANSACTION_FAILED, K.METADATA_LOCK_CONFLICT),
    ("TableModified", TABLE_MODIFIED, K.CONCURRENT_WRITE),
    ("SchemaModified", SCHEMA_MODIFIED, K.METADATA_CHANGED),
]


@pytest.mark.parametrize(("code", "message", "kind"), OUTSIDE_SQL, ids=[c for c, *_ in OUTSIDE_SQL])
def test_a_tunnel_conflict_is_classified_as_pyodps_raises_it_and_as_the_java_sdk_prints_it(
    code: str, message: str, kind: ConflictKind
) -> None:
    api, tunnel = _api_error(code, message), _tunnel_error(code, message)
    for form in (api, tunnel, _java_form(code, message), "".join(traceback.format_exception(api))):
        found = classify(form)
        assert found.kind is kind, (form if isinstance(form, str) else type(form).__qualname__, found.reason)
        assert found.engine == "maxcompute"
        assert found.retry_safe


def test_pyodps_gives_each_tunnel_conflict_its_own_class_where_it_has_one() -> None:
    # What the markers rely on: the class PyODPS picks, or the code it keeps.
    assert type(_tunnel_error("MetaTransactionFailed", META_TRANSACTION_FAILED)) is MetaTransactionFailed
    assert type(_api_error("TableModified", TABLE_MODIFIED)) is odps_errors.TableModified
    schema = _api_error("SchemaModified", SCHEMA_MODIFIED, headers={"odps-tunnel-latest-schema-version": "3"})
    assert type(schema) is odps_errors.SchemaModified and schema.latest_schema_version == "3"
    assert _tunnel_error("TableModified", TABLE_MODIFIED).code == "TableModified"  # type: ignore[attr-defined]


# Tunnel and API errors that are not a concurrent writer, though some say "Conflict": never retried
# as conflicts. (code, text, why)
NOT_CONFLICTS_OUTSIDE_SQL = [
    ("StatusConflict", "The upload session is expired", "Tunnel errors page: the session expired"),
    ("StatusConflict", "Cannot start upload now unless INITIATED", "the session was already committed"),
    (
        "DataVersionConflict",
        "The specified table has been modified since the upload or download initiated and table data is being "
        "replicated at this time. Please initiate another download or upload later",
        "Tunnel errors page: data being copied between clusters",
    ),
    (
        "DataUnderReplication",
        "The specified table data is under replication and you cannot initiate upload or download at this time. "
        "Please try again later",
        "Tunnel errors page: data being copied between clusters",
    ),
    ("FlowExceeded", "Your flow quota is exceeded", "Tunnel errors page: a traffic quota"),
    ("NoSuchPartition", "The specified partition does not exist", "Tunnel errors page: a user error"),
]


@pytest.mark.parametrize(("code", "message", "why"), NOT_CONFLICTS_OUTSIDE_SQL, ids=[w for *_, w in NOT_CONFLICTS_OUTSIDE_SQL])
def test_a_tunnel_error_that_no_concurrent_writer_causes_is_never_a_conflict(code: str, message: str, why: str) -> None:
    java = f"RequestId=20241121120312abcdef, ErrorCode={code}, ErrorMessage={message}"
    for form in (_api_error(code, message), _tunnel_error(code, message), java):
        found = classify(form)
        assert found.kind is K.NOT_A_CONFLICT, (form, found.reason)
        assert not found.retry_safe


def test_pyodps_timeouts_and_undocumented_codes_stay_unknown() -> None:
    unknown = [
        TunnelWriteTimeout("write to tunnel timed out"),
        TunnelReadTimeout("read from tunnel timed out"),
        odps_errors.WaitTimeoutError("instance 20241121120312345gabc1234 did not finish in 3600 s"),
        odps_errors.ConnectTimeout("Connecting to endpoint http://service.odps.aliyun.com/api timeout."),
        # ODPS-0110141 is PyODPS's DataVersionError; no MaxCompute page says what it means.
        _pyodps("ODPS-0110141:xxx"),
        _pyodps("ODPS-0010000:System internal error - fuxi job failed, caused by: xxx"),
    ]
    assert type(unknown[4]) is odps_errors.DataVersionError
    for error in unknown:
        assert classify(error).kind is K.NOT_A_CONFLICT, repr(error)


# The metadata lock's timeout (ODPS-0121096's inner text) quoted under another code. MaxCompute's
# pages show it only under ODPS-0121096; these wrappers are built from that documented inner text
# and the documented outer codes, so they say what the marker accepts, not what a page printed.
LOCK_TIMEOUT = (
    "Reached maximum retry times because of OTSStorageTxnLockKeyFail(Inner exception: Transaction timeout because "
    "cannot acquire exclusive lock.)"
)


def test_the_metadata_lock_timeout_is_a_lock_conflict_whichever_code_wraps_it() -> None:
    for text in (
        f"ODPS-0010000:System internal error - commit meta failed: {LOCK_TIMEOUT}",
        f"ODPS-0110061: Failed to run ddltask - Modify DDL meta encounter exception : {LOCK_TIMEOUT}",
    ):
        error = _pyodps(text)
        for form in (error, text, _in_a_log(text)):
            found = classify(form)
            assert found.kind is K.METADATA_LOCK_CONFLICT, (form, found.reason)
            assert found.engine == "maxcompute"
    assert type(_pyodps(f"ODPS-0010000:System internal error - {LOCK_TIMEOUT}")) is odps_errors.InternalServerError
    # A lock timeout inside a commit whose rollback failed: the unknown state decides.
    rollback = f"ODPS-0110999: Critical! Internal error happened in commit operation and rollback failed - {LOCK_TIMEOUT}"
    assert classify(_pyodps(rollback)).kind is K.COMMIT_STATE_UNKNOWN
    # The words alone, without MaxCompute's lock-store name, are no evidence.
    assert classify("Transaction timeout because cannot acquire exclusive lock.").kind is K.NOT_A_CONFLICT


def _java_form(code: str, message: str) -> str:
    """A tunnel error as the Java SDK's TunnelException prints it (Tunnel error messages page)."""
    return f"com.aliyun.odps.tunnel.TunnelException: RequestId=20241121120312abcdef, ErrorCode={code}, ErrorMessage={message}"


# Every text form of the MaxCompute markers above, with its kind (test_classify.py proves each
# message marker by one of these).
TEXT_FORMS = [(_java_form(code, message), kind) for code, message, kind in OUTSIDE_SQL] + [
    (str(_api_error(code, message)), kind) for code, message, kind in OUTSIDE_SQL
] + [
    (f"ODPS-0010000:System internal error - commit meta failed: {LOCK_TIMEOUT}", K.METADATA_LOCK_CONFLICT),
]


@pytest.mark.parametrize(("text", "kind"), TEXT_FORMS)
def test_each_text_form_of_a_maxcompute_marker_is_its_kind(text: str, kind: ConflictKind) -> None:
    assert classify(text).kind is kind
