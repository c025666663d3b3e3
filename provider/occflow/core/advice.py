"""What to do about a lost commit, worded for the engine that raised it.

``ConflictKind.help`` is the advice that holds whatever wrote the table. Some of it is wrong for
a particular engine: delta-rs reports ``protocol_changed`` when a concurrent delta-rs commit
enabled a table feature, so "upgrade your library" sends its user after the library that made
the change. The table below holds the engine-specific wording, next to the kinds it replaces;
anything not in it falls back to the kind's own help.
"""

from __future__ import annotations

from collections.abc import Mapping

from .engines import committers, find_committer
from .kinds import ConflictKind

#: Engine families (``core.engines.Committer.family``): whose wording of the advice applies.
DELTA_RS = "delta-rs"
DELTA_SPARK = "delta-spark"
ICEBERG = "iceberg"
MAXCOMPUTE = "maxcompute"

ENGINE_HELP: Mapping[tuple[ConflictKind, str], str] = {
    (ConflictKind.PROTOCOL_CHANGED, DELTA_RS): (
        "Do not retry in the task: a concurrent commit changed the table's protocol (it enabled or "
        "dropped a reader/writer feature) while this write ran. delta-rs read the new protocol to "
        "say so, so this is not an outdated library: re-run the task once the protocol change has "
        "committed, and schedule protocol changes (table features, ALTER TABLE) outside the write window."
    ),
    (ConflictKind.PROTOCOL_CHANGED, DELTA_SPARK): (
        "Do not retry in the task: a concurrent commit changed the table's protocol (reader/writer "
        "features). Re-run the task once the change has committed; if it then fails on an "
        "unsupported feature, the cluster's delta-spark is older than the writer that made the "
        "change and needs the newer version."
    ),
    (ConflictKind.PROTOCOL_CHANGED, ICEBERG): (
        "Do not retry in the task: a concurrent commit upgraded the table's format version. Re-run "
        "the task once the upgrade has committed; if it then fails on the format version, the job's "
        "Iceberg runtime is older than the writer that upgraded the table and needs the newer version."
    ),
    (ConflictKind.CONCURRENT_TRANSACTION, DELTA_RS): (
        "Do not retry: two writers committed with the same application transaction id (`CommitOptions.app_id`, "
        "a Delta `txn` action); give each writer its own app id."
    ),
}


def engine_family(engine: str | None) -> str | None:
    """The family of the engine an operator or outcome reports (``delta-rs``, ``spark-iceberg``,
    ``spark-delta``, ``maxcompute``), looked up in the engine registry by name or alias, any case;
    a family's own name (``iceberg``) is its family. ``None`` when the name is no engine's
    (``spark-submit``, ``unknown``): the kind's own help applies."""
    found = find_committer(engine)
    if found is not None:
        return found.family
    name = (engine or "").strip().lower()
    return name if name in {c.family for c in committers()} else None


def kind_help(kind: ConflictKind, engine: str | None = None) -> str:
    """The advice for ``kind`` as the engine ``engine`` raised it (the kind's help otherwise)."""
    family = engine_family(engine)
    if family is not None:
        found = ENGINE_HELP.get((kind, family))
        if found is not None:
            return found
    return kind.help
