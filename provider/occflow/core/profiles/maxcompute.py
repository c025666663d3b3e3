"""MaxCompute conflict matrices, transcribed row by row from the specifications.

- ``maxcompute-standard``: spec 000 ("ACID semantics"), the conflict outcome matrix for standard
  and transactional tables. Rows are the job ending earlier, columns the job ending later.
- Both hold CLUSTERING: specs 001/002's smart conflict resolution ("a clustering operation and an
  INSERT INTO operation [that] overlap ... both succeed") for the INSERT INTO cells; the specs
  say nothing else about it, so its other cells copy the compaction it resembles (small file
  MERGE on standard tables, MINOR COMPACT on transactional ones) and each says so.
- ``maxcompute-transactional``: specs 001 and 002 ("Manage transactions" for Delta tables), the
  5x5 conflict detection rules including MINOR / MAJOR COMPACT. 002 is the earlier version of
  001; both say the same in every cell (checked in tests/core/test_profiles_maxcompute.py).

Both are operation-level rules: "These rules apply at the transaction level, not at the row or
file level" (spec 001). A failing later job gets ``OPERATION_CONFLICT``; MaxCompute reports
metadata-lock conflicts separately (``METADATA_LOCK_CONFLICT``, spec 000, "Summary rules").
"""

from __future__ import annotations

from ..kinds import ConflictKind
from ..operations import Operation as Op
from .model import Effect, OverwriteScope, Profile, RuleKind, expand_groups

FAIL = ConflictKind.OPERATION_CONFLICT
OK = None
S000 = "spec 000, conflict outcome matrix"
S001 = "spec 001, conflict detection rules"
S_SMART = (
    "specs 001/002, smart conflict resolution: a clustering operation and an INSERT INTO that overlap in "
    "start and commit time both succeed"
)
# The specs say nothing else about clustering: it "reorganizes the physical layout of data without
# changing data status" and has no time version (001), as the compactions do. Every other cell of
# CLUSTERING copies the compaction it resembles, and says which.
AS_SFM = "not in the specs: clustering taken as the small file MERGE {} of spec 000"
AS_MINOR = (
    "not in the specs: clustering taken as the MINOR COMPACT {} of spec 001 (both merge small files without "
    "changing data; the one compaction spec 001 lets run beside INSERT INTO, as smart resolution does)"
)

_STANDARD_GROUPS = {
    "INSERT OVERWRITE / TRUNCATE": (Op.INSERT_OVERWRITE, Op.TRUNCATE),
    "INSERT INTO": (Op.INSERT_INTO,),
    "UPDATE / DELETE": (Op.UPDATE, Op.DELETE),
    "Small file MERGE": (Op.SMALL_FILE_MERGE,),
    "CLUSTERING": (Op.CLUSTERING,),
}

# (job ending earlier, job ending later, exception of the later job, effect, source)
MAXCOMPUTE_STANDARD_MATRIX = (
    ("INSERT OVERWRITE / TRUNCATE", "INSERT OVERWRITE / TRUNCATE", OK, Effect.OVERWRITE, f"{S000}, row 1, col 1"),
    ("INSERT OVERWRITE / TRUNCATE", "INSERT INTO", OK, Effect.APPEND, f"{S000}, row 1, col 2"),
    ("INSERT OVERWRITE / TRUNCATE", "UPDATE / DELETE", FAIL, Effect.LATER_FAILS, f"{S000}, row 1, col 3"),
    ("INSERT OVERWRITE / TRUNCATE", "Small file MERGE", FAIL, Effect.LATER_FAILS, f"{S000}, row 1, col 4"),
    ("INSERT INTO", "INSERT OVERWRITE / TRUNCATE", OK, Effect.OVERWRITE, f"{S000}, row 2, col 1"),
    ("INSERT INTO", "INSERT INTO", OK, Effect.APPEND, f"{S000}, row 2, col 2"),
    ("INSERT INTO", "UPDATE / DELETE", FAIL, Effect.LATER_FAILS, f"{S000}, row 2, col 3"),
    ("INSERT INTO", "Small file MERGE", FAIL, Effect.LATER_FAILS, f"{S000}, row 2, col 4"),
    ("UPDATE / DELETE", "INSERT OVERWRITE / TRUNCATE", OK, Effect.OVERWRITE, f"{S000}, row 3, col 1"),
    ("UPDATE / DELETE", "INSERT INTO", OK, Effect.APPEND, f"{S000}, row 3, col 2"),
    ("UPDATE / DELETE", "UPDATE / DELETE", FAIL, Effect.LATER_FAILS, f"{S000}, row 3, col 3"),
    ("UPDATE / DELETE", "Small file MERGE", FAIL, Effect.LATER_FAILS, f"{S000}, row 3, col 4"),
    ("Small file MERGE", "INSERT OVERWRITE / TRUNCATE", OK, Effect.OVERWRITE, f"{S000}, row 4, col 1"),
    ("Small file MERGE", "INSERT INTO", OK, Effect.APPEND, f"{S000}, row 4, col 2"),
    ("Small file MERGE", "UPDATE / DELETE", FAIL, Effect.LATER_FAILS, f"{S000}, row 4, col 3"),
    ("Small file MERGE", "Small file MERGE", FAIL, Effect.LATER_FAILS, f"{S000}, row 4, col 4"),
    # CLUSTERING: spec 001/002's smart resolution for INSERT INTO, small file MERGE's cells otherwise
    ("INSERT OVERWRITE / TRUNCATE", "CLUSTERING", FAIL, Effect.LATER_FAILS, AS_SFM.format("column, row 1")),
    ("INSERT INTO", "CLUSTERING", OK, Effect.COMPACTION_COMPLETES, f"{S_SMART} (spec 000's small file MERGE fails here)"),
    ("UPDATE / DELETE", "CLUSTERING", FAIL, Effect.LATER_FAILS, AS_SFM.format("column, row 3")),
    ("Small file MERGE", "CLUSTERING", FAIL, Effect.LATER_FAILS, AS_SFM.format("column, row 4")),
    ("CLUSTERING", "INSERT OVERWRITE / TRUNCATE", OK, Effect.OVERWRITE, AS_SFM.format("row, col 1")),
    ("CLUSTERING", "INSERT INTO", OK, Effect.APPEND, f"{S_SMART}; spec 000 row 4, col 2 agrees"),
    ("CLUSTERING", "UPDATE / DELETE", FAIL, Effect.LATER_FAILS, AS_SFM.format("row, col 3")),
    ("CLUSTERING", "Small file MERGE", FAIL, Effect.LATER_FAILS, AS_SFM.format("row, col 4")),
    ("CLUSTERING", "CLUSTERING", FAIL, Effect.LATER_FAILS, AS_SFM.format("row 4, col 4")),
)

_TRANSACTIONAL_GROUPS = {
    "INSERT OVERWRITE / TRUNCATE": (Op.INSERT_OVERWRITE, Op.TRUNCATE),
    "INSERT INTO": (Op.INSERT_INTO,),
    "UPDATE / DELETE": (Op.UPDATE, Op.DELETE),
    "MINOR COMPACT": (Op.MINOR_COMPACT,),
    "MAJOR COMPACT": (Op.MAJOR_COMPACT,),
    "CLUSTERING": (Op.CLUSTERING,),
}

# (earlier job, later job, exception of the later job, effect, source) -- spec 001's 25 rows in order.
MAXCOMPUTE_TRANSACTIONAL_MATRIX = (
    ("INSERT OVERWRITE / TRUNCATE", "INSERT OVERWRITE / TRUNCATE", OK, Effect.OVERWRITE, f"{S001}, row 1"),
    ("INSERT OVERWRITE / TRUNCATE", "INSERT INTO", FAIL, Effect.LATER_FAILS, f"{S001}, row 2"),
    ("INSERT OVERWRITE / TRUNCATE", "UPDATE / DELETE", FAIL, Effect.LATER_FAILS, f"{S001}, row 3"),
    ("INSERT OVERWRITE / TRUNCATE", "MINOR COMPACT", FAIL, Effect.LATER_FAILS, f"{S001}, row 4"),
    ("INSERT OVERWRITE / TRUNCATE", "MAJOR COMPACT", FAIL, Effect.LATER_FAILS, f"{S001}, row 5"),
    ("INSERT INTO", "INSERT OVERWRITE / TRUNCATE", OK, Effect.OVERWRITE, f"{S001}, row 6"),
    ("INSERT INTO", "INSERT INTO", FAIL, Effect.LATER_FAILS, f"{S001}, row 7"),
    ("INSERT INTO", "UPDATE / DELETE", FAIL, Effect.LATER_FAILS, f"{S001}, row 8"),
    ("INSERT INTO", "MINOR COMPACT", OK, Effect.COMPACTION_COMPLETES, f"{S001}, row 9"),
    ("INSERT INTO", "MAJOR COMPACT", FAIL, Effect.LATER_FAILS, f"{S001}, row 10"),
    ("UPDATE / DELETE", "INSERT OVERWRITE / TRUNCATE", OK, Effect.OVERWRITE, f"{S001}, row 11"),
    ("UPDATE / DELETE", "INSERT INTO", FAIL, Effect.LATER_FAILS, f"{S001}, row 12"),
    ("UPDATE / DELETE", "UPDATE / DELETE", FAIL, Effect.LATER_FAILS, f"{S001}, row 13"),
    ("UPDATE / DELETE", "MINOR COMPACT", OK, Effect.COMPACTION_COMPLETES, f"{S001}, row 14"),
    ("UPDATE / DELETE", "MAJOR COMPACT", FAIL, Effect.LATER_FAILS, f"{S001}, row 15"),
    ("MINOR COMPACT", "INSERT OVERWRITE / TRUNCATE", OK, Effect.OVERWRITE, f"{S001}, row 16"),
    ("MINOR COMPACT", "INSERT INTO", OK, Effect.APPEND, f"{S001}, row 17"),
    ("MINOR COMPACT", "UPDATE / DELETE", OK, Effect.APPLIED, f"{S001}, row 18"),
    ("MINOR COMPACT", "MINOR COMPACT", FAIL, Effect.LATER_FAILS, f"{S001}, row 19"),
    ("MINOR COMPACT", "MAJOR COMPACT", OK, Effect.COMPACTION_COMPLETES, f"{S001}, row 20"),
    ("MAJOR COMPACT", "INSERT OVERWRITE / TRUNCATE", OK, Effect.OVERWRITE, f"{S001}, row 21"),
    ("MAJOR COMPACT", "INSERT INTO", OK, Effect.APPEND, f"{S001}, row 22"),
    ("MAJOR COMPACT", "UPDATE / DELETE", OK, Effect.APPLIED, f"{S001}, row 23"),
    ("MAJOR COMPACT", "MINOR COMPACT", FAIL, Effect.LATER_FAILS, f"{S001}, row 24"),
    ("MAJOR COMPACT", "MAJOR COMPACT", FAIL, Effect.LATER_FAILS, f"{S001}, row 25"),
    # CLUSTERING: spec 001/002's smart resolution for INSERT INTO, MINOR COMPACT's cells otherwise
    ("INSERT OVERWRITE / TRUNCATE", "CLUSTERING", FAIL, Effect.LATER_FAILS, AS_MINOR.format("column, row 4")),
    ("INSERT INTO", "CLUSTERING", OK, Effect.COMPACTION_COMPLETES, f"{S_SMART}; {S001}, row 9 (MINOR COMPACT) agrees"),
    ("UPDATE / DELETE", "CLUSTERING", OK, Effect.COMPACTION_COMPLETES, AS_MINOR.format("column, row 14")),
    ("MINOR COMPACT", "CLUSTERING", FAIL, Effect.LATER_FAILS, AS_MINOR.format("column, row 19")),
    ("MAJOR COMPACT", "CLUSTERING", FAIL, Effect.LATER_FAILS, AS_MINOR.format("column, row 24")),
    ("CLUSTERING", "INSERT OVERWRITE / TRUNCATE", OK, Effect.OVERWRITE, AS_MINOR.format("row, row 16")),
    ("CLUSTERING", "INSERT INTO", OK, Effect.APPEND, f"{S_SMART}; {S001}, row 17 (MINOR COMPACT) agrees"),
    ("CLUSTERING", "UPDATE / DELETE", OK, Effect.APPLIED, AS_MINOR.format("row, row 18")),
    ("CLUSTERING", "MINOR COMPACT", FAIL, Effect.LATER_FAILS, AS_MINOR.format("row, row 19")),
    ("CLUSTERING", "MAJOR COMPACT", OK, Effect.COMPACTION_COMPLETES, AS_MINOR.format("row, row 20")),
    ("CLUSTERING", "CLUSTERING", FAIL, Effect.LATER_FAILS, AS_MINOR.format("row, row 19")),
)

MAXCOMPUTE_STANDARD = Profile(
    name="maxcompute-standard",
    title="MaxCompute standard and transactional tables",
    table_format="maxcompute",
    isolation="operation-level (the job that finishes first succeeds)",
    rules=RuleKind.OPERATION,
    overwrite_scope=OverwriteScope.PARTITION_AT_COMMIT,
    sources=(
        "shared/specs/000_67b4bcfc3388519b.txt",
        "shared/specs/001_91364fd8b65d11e0.txt (clustering)",
        "shared/specs/002_2c1a90b908fdf3e9.txt (clustering)",
    ),
    cells=expand_groups(_STANDARD_GROUPS, MAXCOMPUTE_STANDARD_MATRIX),
    description=(
        "INSERT jobs (OVERWRITE and INTO) never conflict with each other; UPDATE, DELETE and small "
        "file MERGE fail when the target table or partition was modified by an earlier job. Clustering "
        "runs beside INSERT INTO (smart conflict resolution) and otherwise follows small file MERGE. An "
        "INSERT INTO that fails may leave its rows behind: it is never retried blindly."
    ),
    extra_kinds=(ConflictKind.METADATA_LOCK_CONFLICT,),
    # spec 000: "If an INTO job fails due to a conflict, data from the failed job may remain."
    residue_on_failure=(Op.INSERT_INTO,),
    residue_source="spec 000, Consistency, standard tables: if an INTO job fails due to a conflict, data "
    "from the failed job may remain (Atomicity: on rollback, data cleansing may fail)",
)

MAXCOMPUTE_TRANSACTIONAL = Profile(
    name="maxcompute-transactional",
    title="MaxCompute Delta tables (transactional, primary key)",
    table_format="maxcompute",
    isolation="MetaService MVCC snapshots + OCC, transaction-level rules",
    rules=RuleKind.OPERATION,
    overwrite_scope=OverwriteScope.PARTITION_AT_COMMIT,
    sources=("shared/specs/001_91364fd8b65d11e0.txt", "shared/specs/002_2c1a90b908fdf3e9.txt"),
    cells=expand_groups(_TRANSACTIONAL_GROUPS, MAXCOMPUTE_TRANSACTIONAL_MATRIX),
    description=(
        "Data writes after an overwrite, an insert or an update fail; a minor compaction may run "
        "beside INSERT INTO and UPDATE/DELETE (smart conflict resolution), a major compaction may "
        "not; two compactions of the same kind never both succeed. Clustering runs beside INSERT INTO "
        "(smart conflict resolution) and otherwise follows MINOR COMPACT."
    ),
    extra_kinds=(ConflictKind.METADATA_LOCK_CONFLICT,),
)

PROFILES = (MAXCOMPUTE_STANDARD, MAXCOMPUTE_TRANSACTIONAL)
