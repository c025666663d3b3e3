"""The commit a lost Spark write lost to: Iceberg's snapshots since the attempt started, and the
conflicting commit delta-spark prints in its exception.

- Iceberg's ``ValidationException`` / ``CommitFailedException`` name files, not snapshots. Every
  snapshot committed since the attempt's starting snapshot is in the table's ``snapshots``
  metadata table; the winner is the first one whose operation and summary match the validation
  that failed (the operations Iceberg's ``MergingSnapshotProducer`` validates against), else the
  first one.
- The snapshot a committed Iceberg job made (``own_snapshot``): of the snapshots since the attempt
  started, the one carrying the write's own tag; never "the newest of this application", which is
  another thread's commit when two threads of one Spark application write the table at once.
- delta-spark (before 4.1, and still for metadata, protocol, transaction and write conflicts)
  appends ``Conflicting commit: {CommitInfo as JSON}`` to its message
  (``DeltaErrors.concurrentModificationExceptionMsg``, ``JsonUtils.toJson``): version, timestamp,
  operation, and the ``userMetadata`` occflow's tag travels in.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...core.kinds import WinningCommit
from ..tags import WRITE_ID, with_writer
from .identifiers import quote_table, sql_string

# ------------------------------------------------------------------------------------ delta-spark

_CONFLICTING = "Conflicting commit:"
# Fallbacks for a commit info that is not valid JSON (a raw operation parameter): each field by
# itself, top-level ones before "operationParameters" (RESTORE has its own "version" inside).
_FIELD_INT = r'"{}"\s*:\s*(-?\d+)'
_FIELD_STR = r'"{}"\s*:\s*("(?:[^"\\]|\\.)*")'


def delta_spark_winner(text: str) -> WinningCommit | None:
    """The ``Conflicting commit: {...}`` of a delta-spark conflict message, or ``None``.

    The commit's ``userMetadata``, when it holds occflow's tag (``delta_spark_session_conf``),
    names the Airflow try that made it.
    """
    at = text.find(_CONFLICTING)
    if at < 0:
        return None
    start = text.find("{", at)
    if start < 0:
        return None
    info = _commit_info(text[start:])
    version = info.get("version")
    millis = info.get("inCommitTimestamp", info.get("timestamp"))
    winner = WinningCommit(
        version=int(version) if isinstance(version, int) else None,
        operation=str(info["operation"]) if isinstance(info.get("operation"), str) else None,
        timestamp=_iso(millis),
        tag={k: str(info[k]) for k in ("readVersion", "txnId", "isolationLevel") if info.get(k) is not None},
        basis="the conflicting commit delta-spark named in its exception",
    )
    props = _user_metadata(info.get("userMetadata"))
    return winner if props is None else with_writer(winner, props)


def _commit_info(text: str) -> dict[str, Any]:
    try:
        found, _ = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return _commit_info_fields(text)
    return found if isinstance(found, dict) else {}


def _commit_info_fields(text: str) -> dict[str, Any]:
    """Field by field, for a commit info Jackson wrote with a raw (non-JSON) parameter value."""
    line = text.split("\n", 1)[0]
    top = line.split('"operationParameters"', 1)[0]
    out: dict[str, Any] = {}
    for name in ("version", "inCommitTimestamp", "timestamp"):
        found = re.search(_FIELD_INT.format(name), top)
        if found:
            out[name] = int(found.group(1))
    for name, where in (("operation", top), ("userMetadata", line), ("txnId", line)):
        found = re.search(_FIELD_STR.format(name), where)
        if found:
            out[name] = json.loads(found.group(1))
    return out


def _user_metadata(value: Any) -> Mapping[str, Any] | None:
    if not isinstance(value, str):
        return None
    try:
        props = json.loads(value)
    except ValueError:
        return None  # someone else's user metadata
    return props if isinstance(props, dict) else None


def _iso(millis: Any) -> str | None:
    if not isinstance(millis, int) or isinstance(millis, bool):
        return None
    return dt.datetime.fromtimestamp(millis / 1000, tz=dt.timezone.utc).isoformat()


# ---------------------------------------------------------------------------------------- Iceberg

ADDED, DELETED = 1, 2  # manifest entry status (Iceberg ManifestEntry.Status) of a file a snapshot changed

# Which snapshots each failed validation checks, as Iceberg's MergingSnapshotProducer does:
# (message marker, what the winner did, operations validated, summary counter that must be > 0,
# the status of the named files in the winner's manifests).
ICEBERG_VALIDATIONS: tuple[tuple[str, str, frozenset[str], tuple[str, ...], int], ...] = (
    (
        "Found conflicting files that can contain records matching",
        "added data files (validateAddedDataFiles: append, overwrite)",
        frozenset({"append", "overwrite"}),
        ("added-data-files",),
        ADDED,
    ),
    (
        "Found new conflicting delete files",
        "added delete files (validateNoNewDeleteFiles: overwrite, delete)",
        frozenset({"overwrite", "delete"}),
        ("added-delete-files", "added-position-delete-files", "added-equality-delete-files"),
        ADDED,
    ),
    (
        "Found conflicting deleted files",
        "deleted data files (validateDeletedDataFiles: overwrite, replace, delete)",
        frozenset({"overwrite", "replace", "delete"}),
        ("deleted-data-files",),
        DELETED,
    ),
    (
        "Missing required files to delete",
        "deleted data files (validateDataFilesExist: overwrite, replace, delete)",
        frozenset({"overwrite", "replace", "delete"}),
        ("deleted-data-files",),
        DELETED,
    ),
    (
        "Cannot commit, missing data files",
        "deleted data files (validateDataFilesExist: overwrite, replace, delete)",
        frozenset({"overwrite", "replace", "delete"}),
        ("deleted-data-files",),
        DELETED,
    ),
)


# A data or delete file as Iceberg's messages print it (the file name is unique: a UUID in it).
_FILE = re.compile(r"[^\s,\[\]:'\"]+\.(?:parquet|avro|orc)\b")


def named_files(messages: Sequence[str]) -> list[str]:
    """The names (last path part) of the data / delete files a validation message lists."""
    names = {m.group(0).rsplit("/", 1)[-1] for text in messages for m in _FILE.finditer(text)}
    return sorted(names)


def snapshots_changing(spark: Any, table: str, messages: Sequence[str]) -> dict[int, set[int]]:
    """For each manifest entry status (added / deleted), the snapshots whose manifests hold an
    entry of that status for a file the messages name (the table's ``all_entries``)."""
    names = named_files(messages)
    found: dict[int, set[int]] = {ADDED: set(), DELETED: set()}
    if not names:
        return found
    listed = ", ".join(sql_string(n) for n in names)
    rows = spark.sql(
        f"SELECT DISTINCT status, snapshot_id FROM {quote_table(table)}.all_entries "
        f"WHERE element_at(split(data_file.file_path, '/'), -1) IN ({listed})"
    ).collect()
    for row in rows:
        if row["snapshot_id"] is not None and int(row["status"]) in found:
            found[int(row["status"])].add(int(row["snapshot_id"]))
    return found


def snapshots_since(spark: Any, table: str, since: int | None) -> list[dict[str, Any]]:
    """The snapshots committed after snapshot ``since`` on the current branch, oldest first
    (every snapshot of the branch when ``since`` is ``None``)."""
    rows = spark.sql(
        "SELECT snapshot_id, parent_id, CAST(committed_at AS STRING) AS committed_at, operation, summary "
        f"FROM {quote_table(table)}.snapshots"
    ).collect()
    by_id = {
        int(r["snapshot_id"]): {
            "snapshot_id": int(r["snapshot_id"]),
            "parent_id": None if r["parent_id"] is None else int(r["parent_id"]),
            "committed_at": r["committed_at"],
            "operation": r["operation"],
            "summary": dict(r["summary"] or {}),
        }
        for r in rows
    }
    current = _current_snapshot_id(spark, table)
    chain: list[dict[str, Any]] = []
    sid = current
    while sid is not None and sid != since and sid in by_id and len(chain) < len(by_id):
        chain.append(by_id[sid])
        sid = by_id[sid]["parent_id"]
    return list(reversed(chain))


@dataclass(frozen=True)
class OwnSnapshot:
    """The snapshot a job committed (``None``: none that is surely its own), and how it was told."""

    snapshot: Mapping[str, Any] | None
    basis: str


def own_snapshot(snapshots: Sequence[Mapping[str, Any]], write_id: str | None, app_id: str | None) -> OwnSnapshot:
    """Of ``snapshots`` (those committed since the job started, oldest first, as
    :func:`snapshots_since` reads them), the one the job committed.

    With ``write_id`` (occflow's tag, which Iceberg writes into the summary of every commit the
    tagged thread makes): the newest snapshot carrying it, the job's last commit; none when no
    snapshot does (the job changed nothing; the others are other writers'). Without a tag, only
    ``spark.app.id`` is left, and every thread of the application shares it: the one snapshot the
    application committed is taken, and with several none is, since another thread's may be newer.
    """
    if write_id is not None:
        mine = [s for s in snapshots if (s.get("summary") or {}).get(WRITE_ID) == write_id]
        others = len(snapshots) - len(mine)
        if not mine:
            return OwnSnapshot(None, f"no snapshot since the start carries write id {write_id} ({others} by others)")
        basis = f"the newest of {len(mine)} snapshot(s) carrying write id {write_id}"
        return OwnSnapshot(mine[-1], basis + (f"; {others} by others skipped" if others else ""))
    by_app = [s for s in snapshots if app_id is None or (s.get("summary") or {}).get("spark.app.id") in (None, app_id)]
    if not by_app:
        return OwnSnapshot(None, f"none of the {len(snapshots)} snapshot(s) since the start is by this application")
    if len(by_app) == 1:
        return OwnSnapshot(by_app[0], "the only snapshot by this application since the start (no write id)")
    return OwnSnapshot(
        None,
        f"ambiguous: {len(by_app)} snapshots by this application since the start and no write id to tell "
        "this job's from another thread's",
    )


def _current_snapshot_id(spark: Any, table: str) -> int | None:
    rows = spark.sql(
        f"SELECT snapshot_id FROM {quote_table(table)}.history WHERE is_current_ancestor "
        "ORDER BY made_current_at DESC LIMIT 1"
    ).collect()
    return None if not rows else int(rows[0]["snapshot_id"])


def iceberg_winner(
    snapshots: Sequence[Mapping[str, Any]],
    since: int | None,
    messages: Sequence[str],
    changing: Mapping[int, set[int]] | None = None,
) -> WinningCommit | None:
    """The snapshot (of ``snapshots``, those committed since ``since``, oldest first) that a commit
    failing with ``messages`` lost to; ``None`` when there is none.

    ``changing`` (from :func:`snapshots_changing`) names the snapshots that added or deleted a
    file the message lists: the first of them wins. Without one, the first snapshot whose
    operation and summary match the failed validation (it may be in another partition), else
    the first snapshot.
    """
    if not snapshots:
        return None
    text = "\n".join(messages)
    rule = next((r for r in ICEBERG_VALIDATIONS if r[0] in text), None)
    start = "the table's first snapshot" if since is None else f"starting snapshot {since}"
    chosen, basis = None, ""
    if rule is not None:
        hit = (changing or {}).get(rule[4], set())
        chosen = next((s for s in snapshots if int(s["snapshot_id"]) in hit), None)
        basis = f"the first snapshot after {start} that {rule[1]} and changed a file the error names"
        if chosen is None:
            chosen = next((s for s in snapshots if _did(s, rule[2], rule[3])), None)
            basis = f"the first snapshot after {start} that {rule[1]}"
    if chosen is None:
        chosen = snapshots[0]
        why = "the error names no validation" if rule is None else f"no snapshot {rule[1]}"
        basis = f"the first snapshot after {start} ({why})"
    winner = WinningCommit(
        snapshot_id=int(chosen["snapshot_id"]),
        operation=None if chosen.get("operation") is None else str(chosen["operation"]),
        timestamp=None if chosen.get("committed_at") is None else str(chosen["committed_at"]),
        others=tuple(int(s["snapshot_id"]) for s in snapshots if s is not chosen),
        basis=basis,
    )
    return with_writer(winner, chosen.get("summary") or {})


def _did(snapshot: Mapping[str, Any], operations: frozenset[str], counters: Sequence[str]) -> bool:
    if str(snapshot.get("operation")) not in operations:
        return False
    summary = snapshot.get("summary") or {}
    return any(_count(summary.get(c)) > 0 for c in counters)


def _count(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


# A metadata file's own number: ``00004-<uuid>.metadata.json`` (catalogs on a metastore or JDBC),
# ``v4.metadata.json`` (the Hadoop catalog), either possibly compressed.
_METADATA_FILE = re.compile(r"(?:^|/)(?:v(\d+)|(\d+)-[^/]*)\.metadata\.json(?:\.gz)?$")


def metadata_version(location: str) -> int | None:
    """The number of an Iceberg metadata file (what the table's metadata versions are counted
    by); ``None`` for a name that follows neither convention."""
    found = _METADATA_FILE.search(location.replace(".gz.metadata.json", ".metadata.json"))
    if found is None:
        return None
    return int(found.group(1) or found.group(2))


def metadata_entries(spark: Any, table: str) -> list[dict[str, Any]]:
    """The table's ``metadata_log_entries``, oldest first: each metadata file with its time and
    the snapshot current in it (a schema change makes a new file, not a new snapshot)."""
    rows = spark.sql(
        "SELECT CAST(timestamp AS STRING) AS at, file, latest_snapshot_id "
        f"FROM {quote_table(table)}.metadata_log_entries ORDER BY timestamp"
    ).collect()
    return [{"at": r["at"], "file": str(r["file"]), "snapshot_id": r["latest_snapshot_id"]} for r in rows]


def iceberg_metadata_winner(entries: Sequence[Mapping[str, Any]], since_file: str) -> WinningCommit | None:
    """The metadata version a write lost to when no snapshot came after its start: the first of
    ``entries`` (``metadata_entries``, oldest first) after ``since_file``, the metadata the
    write started on, that kept its snapshot (a schema or property change); ``None`` when
    ``since_file`` is not among them or no such version followed it."""
    files = [str(e["file"]) for e in entries]
    if since_file not in files:
        return None
    start = files.index(since_file)
    base = entries[start]
    later = [e for e in entries[start + 1 :] if e.get("snapshot_id") == base.get("snapshot_id")]
    if not later:
        return None
    chosen = later[0]
    number = metadata_version(str(chosen["file"]))
    # The log's schema id is the current snapshot's, so it cannot tell a schema change from a
    # property change: both are named as what they are to Iceberg, a new metadata version.
    return WinningCommit(
        operation="metadata change",
        metadata_version=number,
        timestamp=None if chosen.get("at") is None else str(chosen["at"]),
        tag={"metadata_file": str(chosen["file"]), **({} if number is None else {"metadata_version": str(number)})},
        basis=(
            f"the first metadata version after the one the write started on ({since_file}); it added no "
            "snapshot: a schema or property change"
        ),
    )
