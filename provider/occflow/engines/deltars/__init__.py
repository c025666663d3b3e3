"""delta-rs: Delta tables through ``deltalake`` (no JVM), with occflow's commit tags, exactly-once
ledger, error records and conformance runners. ``deltalake`` / ``pyarrow`` are imported where a
table is used, so importing this package costs nothing where they are not installed."""

from __future__ import annotations

from .commit import COMMIT_ID_KEY, CommitOptions, ambient_commit, deltars_commit
from .compaction import CompactionRace, duplicate_compaction
from .conformance import (
    OTHER_PARTITION,
    PAIR_PARTITION,
    DeltaRsPairRunner,
    PairJobs,
    conformance_meta,
    conformance_runners,
)
from .errors import classify_error, error_info
from .ledger import DeltaRsLedger
from .log import DeltaLog, LoggedCommit
from .predicates import Compare, Literal, Where, column, literal
from .table import ENGINE, DeltaRsTable

__all__ = [
    "COMMIT_ID_KEY",
    "ENGINE",
    "OTHER_PARTITION",
    "PAIR_PARTITION",
    "CommitOptions",
    "CompactionRace",
    "Compare",
    "DeltaLog",
    "DeltaRsLedger",
    "DeltaRsPairRunner",
    "DeltaRsTable",
    "Literal",
    "LoggedCommit",
    "PairJobs",
    "Where",
    "ambient_commit",
    "classify_error",
    "column",
    "conformance_meta",
    "conformance_runners",
    "deltars_commit",
    "duplicate_compaction",
    "error_info",
    "literal",
]
