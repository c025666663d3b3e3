"""delta-rs: Delta tables through ``deltalake`` (no JVM), with occflow's commit tags, exactly-once
ledger, error records and conformance runners. ``deltalake`` / ``pyarrow`` are imported where a
table is used, so importing this package costs nothing where they are not installed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:  # the names below load on first use (``__getattr__``)
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
    from .facts import deltars_table_facts
    from .ledger import DeltaRsLedger
    from .log import DeltaLog, LoggedCommit
    from .predicates import Compare, Literal, Where, column, literal
    from .table import ENGINE, DeltaRsTable

#: Each public name and the module that defines it. Loaded on first use: a caller that needs
#: one reader (a trigger, ``occflow explain``) does not load the whole engine with it.
_LAZY = {
    "deltars_table_facts": ".facts",
    "COMMIT_ID_KEY": ".commit",
    "CommitOptions": ".commit",
    "CompactionRace": ".compaction",
    "Compare": ".predicates",
    "DeltaLog": ".log",
    "DeltaRsLedger": ".ledger",
    "DeltaRsPairRunner": ".conformance",
    "DeltaRsTable": ".table",
    "ENGINE": ".table",
    "Literal": ".predicates",
    "LoggedCommit": ".log",
    "OTHER_PARTITION": ".conformance",
    "PAIR_PARTITION": ".conformance",
    "PairJobs": ".conformance",
    "Where": ".predicates",
    "ambient_commit": ".commit",
    "classify_error": ".errors",
    "column": ".predicates",
    "conformance_meta": ".conformance",
    "conformance_runners": ".conformance",
    "deltars_commit": ".commit",
    "duplicate_compaction": ".compaction",
    "error_info": ".errors",
    "literal": ".predicates",
}

__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "deltars_table_facts",
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
