"""MaxCompute's conflict evidence: the texts the service prints (SQL instances, the tunnel, the
Java SDK and odpscmd), the codes PyODPS keeps on ``code``, and PyODPS's own exception classes, each
row cited to MaxCompute's error pages or to aliyun/aliyun-odps-python-sdk. ``markers`` takes them in
as MaxCompute markers. MaxCompute cannot run here: ``tests/core/test_classify_odps.py`` builds each
error as PyODPS itself does (its parsers of an instance result and of a service response).
"""

from __future__ import annotations

from ..kinds import ConflictKind

K = ConflictKind

ODPS_0110061 = "MaxCompute error code doc ODPS-0110061 (alibabacloud.com/help/en/maxcompute/user-guide/odps-0110061)"
ODPS_0121096 = "MaxCompute error code doc ODPS-0121096 (help.aliyun.com/en/maxcompute/user-guide/odps-0121096)"
PYODPS_TUNNEL = (
    "aliyun/aliyun-odps-python-sdk odps/tunnel/errors.py MetaTransactionFailed (TunnelError.parse turns the "
    "service's ErrorCode into the class); PyODPS 0.11.3b1-0.11.4 retried it when creating an upload session "
    "(odps/tunnel/tabletunnel.py TableUploadSession._create_or_reload_session, commit e612ec8, removed in "
    "04305ce); the service's text: 'Operation failed due to concurrent upload/insert operations on the same table'"
)
PYODPS_TABLE_MODIFIED = (
    "aliyun/aliyun-odps-python-sdk odps/errors.py TableModified (parse_response maps the service's Code to the "
    "class; odps/rest.py RestClient.request raises it for every failed request, tunnel ones included); "
    "odps/models/table.py drops its cached download session after each write 'to avoid TableModified error': "
    "the table's data changed under a tunnel session"
)
PYODPS_SCHEMA_MODIFIED = (
    "aliyun/aliyun-odps-python-sdk odps/errors.py SchemaModified (carries the header "
    "odps-tunnel-latest-schema-version: the table's schema changed under a tunnel session)"
)
TUNNEL_TEXT = (
    "MaxCompute Tunnel error messages page (alibabacloud.com/help/en/maxcompute/user-guide/common-tunnel-errors): "
    "'requestId=..., ErrorCode=..., ErrorMessage=...', as the Java SDK's TunnelException and odpscmd print it"
)
ODPS_LOCK_TIMEOUT = (
    "MaxCompute error code doc ODPS-0121096 (help.aliyun.com/en/maxcompute/user-guide/odps-0121096): "
    "OTSStorageTxnLockKeyFail 'Transaction timeout because cannot acquire exclusive lock' is the table-level "
    "metadata lock held by concurrent committers (~30 s); the same inner text under another outer code is "
    "the same lock timeout"
)
ODPS_0110999 = (
    "MaxCompute SQL error codes page (alibabacloud.com/help/en/maxcompute/user-guide/sql-errors): "
    "ODPS-0110999 'Critical! Internal error happened in commit operation and rollback failed, possible breach "
    "of atomicity' (concurrent META operations on one table); the MaxCompute console (odpscmd) "
    "never retries an error with this code"
)
ODPS_SQL_ERRORS = (
    "MaxCompute SQL error codes (ODPS-01CCCCX) page (alibabacloud.com/help/en/maxcompute/user-guide/sql-errors): "
    "metadata contention when jobs write one partition concurrently"
)


def _code_in_text(code: str) -> str:
    """The service's error ``code`` as a log prints it: "ErrorCode=Code, ErrorMessage=..." (the Java
    SDK's TunnelException, odpscmd) or PyODPS's own ``str()``, "Code: RequestId: ..." (odps/errors.py
    BaseODPSError.__str__ puts the code first, then whichever of request id, instance id, tag and
    endpoint it has, and the message on the next line), as a traceback of a generic ODPSError shows."""
    head = r"(?: (?:RequestId|InstanceId|Tag|Endpoint): |[ \t]*$)"
    return rf"(?m)(?:\bErrorCode={code}\b|(?<![\w.]){code}:{head})"


MAXCOMPUTE_TEMPLATES: tuple[tuple[ConflictKind, str, str], ...] = (
    # ODPS-0110061 alone is any failed DDL task (e.g. schema evolution disabled): only with the
    # inner ODPS-0429311 "Transaction aborted" is it an OCC conflict.
    (
        K.OPERATION_CONFLICT,
        r"(?s)ODPS-0110061\s*:.{0,400}?ODPS-0429311\s*:\s*Transaction aborted",
        ODPS_0110061,
    ),
    (K.METADATA_LOCK_CONFLICT, r"ODPS-0121096\s*:\s*MetaStore transaction conflict", ODPS_0121096),
    # The commit failed and so did its rollback: whether the data landed is unknown. The code alone
    # says so (odpscmd also prints unknown client-side failures under it, and never retries them).
    (K.COMMIT_STATE_UNKNOWN, r"(?<![\w-])ODPS-0110999\s*:", ODPS_0110999),
    # The SQL error codes page gives these three a metadata race between concurrent jobs on one
    # partition as their cause ("MaxCompute has no locking mechanism"). The same codes with any
    # other text (a permission, a package, schema evolution) are not conflicts.
    (
        K.METADATA_LOCK_CONFLICT,
        r"ODPS-0110041\s*:\s*Invalid meta operation - AlreadyExistsException\(message:Partition already exists",
        ODPS_SQL_ERRORS,
    ),
    (
        K.METADATA_LOCK_CONFLICT,
        r"ODPS-0110061\s*:\s*Failed to run ddltask - AlreadyExistsException\(message:Partition already exists",
        ODPS_SQL_ERRORS,
    ),
    (
        K.METADATA_LOCK_CONFLICT,
        r"ODPS-0110061\s*:\s*Failed to run ddltask - SimpleLock conflict failure, add partition is already on-going",
        ODPS_SQL_ERRORS,
    ),
    # The metadata lock timed out, whichever code the service wrapped it in (ODPS-0121096 says it
    # alone; a job's failure under ODPS-0010000 or a DDL task's under ODPS-0110061 quotes it inside).
    (
        K.METADATA_LOCK_CONFLICT,
        r"OTSStorageTxnLockKeyFail\(Inner exception: Transaction timeout because cannot acquire exclusive lock",
        ODPS_LOCK_TIMEOUT,
    ),
    # The tunnel's and the API's codes in a log that lost PyODPS's class (see ``_code_in_text``).
    (K.METADATA_LOCK_CONFLICT, _code_in_text("MetaTransactionFailed"), f"{TUNNEL_TEXT}; {PYODPS_TUNNEL}"),
    (K.CONCURRENT_WRITE, _code_in_text("TableModified"), f"{TUNNEL_TEXT}; {PYODPS_TABLE_MODIFIED}"),
    (K.METADATA_CHANGED, _code_in_text("SchemaModified"), f"{TUNNEL_TEXT}; {PYODPS_SCHEMA_MODIFIED}"),
)

# PyODPS's own exception classes and the service codes they are raised for (``code``): only the
# ones a concurrent writer causes. TunnelError's "StatusConflict" (a session already committed or
# expired), "DataVersionConflict" / "DataUnderReplication" (replication between clusters),
# DataVersionError (ODPS-0110141, undocumented) and the tunnel's read/write timeouts are not here:
# they stay not_a_conflict.
MAXCOMPUTE_CLASSES: tuple[tuple[str, ConflictKind, str], ...] = (
    ("odps.tunnel.errors.MetaTransactionFailed", K.METADATA_LOCK_CONFLICT, PYODPS_TUNNEL),
    ("odps.errors.TableModified", K.CONCURRENT_WRITE, PYODPS_TABLE_MODIFIED),
    ("odps.errors.SchemaModified", K.METADATA_CHANGED, PYODPS_SCHEMA_MODIFIED),
)

# Service codes alone on an error's ``code`` (PyODPS's ``parse_instance_error`` keeps the ODPS code
# there): these two say what happened whatever the message.
MAXCOMPUTE_CODES: tuple[tuple[str, ConflictKind, str], ...] = (
    ("ODPS-0121096", K.METADATA_LOCK_CONFLICT, ODPS_0121096),
    ("ODPS-0110999", K.COMMIT_STATE_UNKNOWN, ODPS_0110999),
)

__all__ = ["MAXCOMPUTE_CLASSES", "MAXCOMPUTE_CODES", "MAXCOMPUTE_TEMPLATES"]
