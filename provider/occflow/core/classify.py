"""``classify(error)``: which ``ConflictKind`` an engine's error is, from which engine, and who won.

The knowledge is the marker table in ``classifiers/markers.py``; this module only collects the
evidence (classes, error classes, text) from the error's chain, finds the markers it holds, picks
one by ``PRECEDENCE`` and reads the winning commit out of the text where the engine names it.
Anything without a marker is ``NOT_A_CONFLICT`` and is never retried as a conflict.

An exception is one failure: every exception behind it (``core.causes``) is evidence. A text can
be a log, many records in order, and there the LAST decisive record wins:

- a record without a level (an exception's text, a traceback) or at ERROR level decides: a
  conflict if it holds a marker, else not a conflict (a later ``java.lang.OutOfMemoryError``
  after a conflict means the job failed for another reason);
- a line showing the commit succeeded (``LOG_LINES``, e.g. Iceberg's "Committed snapshot")
  decides: not a conflict, whatever was logged before;
- a record at WARN / INFO level decides only with a conflict in it, and not even then when it
  is an engine retrying its own commit (Iceberg's ``Tasks`` logs "Retrying task after failure"
  at WARN with the conflict): that is not evidence of this failure, unless the engine then gives
  up on the write ("Data source write support ... aborted.");
- a failure reported without its cause (Airflow's "Task failed with exception") decides nothing.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import re
from dataclasses import dataclass

from .classifiers.evidence import (
    ERROR_CLASS_IN_TEXT,
    MAX_TEXT,
    QUALIFIED_CLASS_IN_TEXT,
    Frame,
    LogRecord,
    RecordLevel,
    frames_of,
    log_records,
)
from .classifiers.loglines import LOG_LINES_COMPILED, LineRole
from .classifiers.markers import COMPILED, MARKERS, PRECEDENCE, Evidence, Marker
from .kinds import Classification, ConflictKind, WinningCommit

__all__ = ["classify", "Classification", "ConflictKind"]

_BY_CLASS: dict[str, Marker] = {m.value: m for m in MARKERS if m.evidence is Evidence.CLASS}
_BY_ERROR_CLASS: dict[str, Marker] = {m.value: m for m in MARKERS if m.evidence is Evidence.ERROR_CLASS}
_BY_MESSAGE: tuple[Marker, ...] = tuple(m for m in MARKERS if m.evidence is Evidence.MESSAGE)
_RANK: dict[ConflictKind, int] = {kind: i for i, kind in enumerate(PRECEDENCE)}


def classify(error: object) -> Classification:
    """Classify an exception (with everything behind it), a text or log tail, or an ``ErrorInfo``.

    Raises ``TypeError`` only for something that is none of these (e.g. ``None``).
    """
    if isinstance(error, str):
        return _classify_log(error[-MAX_TEXT:])
    frames = frames_of(error)
    text = "\n".join(_frame_text(f) for f in frames)
    hits = _frame_hits(frames) + [hit for _, hit in _text_hits(text)]
    return _classification(hits, frames, text)


@dataclass(frozen=True)
class _Hit:
    """A marker found in the error, with what matched and where."""

    marker: Marker
    exception_class: str | None
    error_class: str | None
    evidence: str


def _classification(hits: list[_Hit], frames: list[Frame], text: str, why_not: str | None = None) -> Classification:
    outer_class = next((c for f in frames for c in f.classes[:1]), None)
    first_error_class = next((f.error_class for f in frames if f.error_class), None)
    if not hits:
        return Classification(
            kind=ConflictKind.NOT_A_CONFLICT,
            engine="unknown",
            reason=why_not or f"no conflict marker in the error: {_first_line(text)}",
            exception_class=outer_class,
            error_class=first_error_class,
        )
    # min() keeps the first of equal rank: structured evidence from the outermost frame.
    hit = min(hits, key=lambda h: _RANK[h.marker.kind])
    marker = hit.marker
    return Classification(
        kind=marker.kind,
        engine=marker.engine,
        reason=f"{marker.evidence.value} {_short(hit.evidence)!r} is {marker.kind.value} (source: {marker.source})",
        winning_commit=_winning_commit(marker.engine, text),
        exception_class=hit.exception_class or outer_class,
        error_class=hit.error_class or first_error_class,
    )


def _frame_hits(frames: list[Frame]) -> list[_Hit]:
    hits: list[_Hit] = []
    for frame in frames:
        for name in frame.classes:
            marker = _BY_CLASS.get(name)
            if marker is not None:
                hits.append(_Hit(marker, name, frame.error_class, name))
        if frame.error_class:
            marker = _BY_ERROR_CLASS.get(frame.error_class.split(".", 1)[0])
            if marker is not None:
                hits.append(
                    _Hit(marker, frame.classes[0] if frame.classes else None, frame.error_class, frame.error_class)
                )
    return hits


def _text_hits(text: str) -> list[tuple[int, _Hit]]:
    """Markers in ``text``, each with the offset where it starts."""
    hits: list[tuple[int, _Hit]] = []
    for match in QUALIFIED_CLASS_IN_TEXT.finditer(text):
        marker = _BY_CLASS.get(match.group(1))
        if marker is not None:
            hits.append((match.start(), _Hit(marker, match.group(1), None, match.group(1))))
    for match in ERROR_CLASS_IN_TEXT.finditer(text):
        marker = _BY_ERROR_CLASS.get(match.group(1))
        if marker is not None:
            hits.append((match.start(), _Hit(marker, None, match.group(1) + match.group(2), match.group(0))))
    for marker in _BY_MESSAGE:
        for match in COMPILED[marker.value].finditer(text):
            hits.append((match.start(), _Hit(marker, None, None, match.group(0).strip())))
    return hits


# --------------------------------------------------------------------------- a log, in order


@dataclass(frozen=True)
class _Verdict:
    """The record that decides a log, and what it holds (no hits: not a conflict)."""

    record: int
    hits: list[_Hit]
    why_not: str | None = None


def _classify_log(text: str) -> Classification:
    frames = frames_of(text)
    records = log_records(text)
    starts = [record.start for record in records]
    hits_in: dict[int, list[_Hit]] = {}
    for offset, hit in _text_hits(text):
        hits_in.setdefault(bisect.bisect_right(starts, offset) - 1, []).append(hit)
    if not hits_in:
        return _classification([], frames, text)
    roles: dict[int, LineRole] = {}
    for offset, role in sorted(
        (match.start(), line.role) for line, pattern in LOG_LINES_COMPILED for match in pattern.finditer(text)
    ):
        roles[bisect.bisect_right(starts, offset) - 1] = role  # the last such line of a record counts
    verdict = _decide(records, hits_in, roles)
    if verdict is None:
        # Every conflict in the log is an engine's own retry (any other would have decided).
        last_retry = records[max(hits_in)].first_line
        why = f"a conflict logged at WARN/INFO is the engine's own retry, not this failure: {_short(last_retry)}"
        return _classification([], frames, text, why)
    end = starts[verdict.record + 1] if verdict.record + 1 < len(starts) else len(text)
    return _classification(verdict.hits, frames, text[starts[verdict.record]:end], verdict.why_not)


def _decide(records: list[LogRecord], hits_in: dict[int, list[_Hit]], roles: dict[int, LineRole]) -> _Verdict | None:
    """The last decisive record of a log (the rules are in the module docstring)."""
    verdict: _Verdict | None = None
    retried: int | None = None  # the last conflict an engine logged as its own retry
    for i, record in enumerate(records):
        hits, role = hits_in.get(i), roles.get(i)
        if hits and _is_retry(record):
            retried = i
        elif hits:
            verdict, retried = _Verdict(i, hits), None
        elif role is LineRole.COMMITTED:
            why = f"a later line shows the commit succeeded: {_short(record.first_line)}"
            verdict, retried = _Verdict(i, [], why), None
        elif role is LineRole.GAVE_UP:
            if retried is not None:  # the engine's retries ended in giving up the write
                verdict, retried = _Verdict(retried, hits_in[retried]), None
        elif role is not LineRole.REPORT and record.level is not RecordLevel.LOW:
            why = f"the last error in the log is not a conflict: {_short(record.first_line)}"
            verdict, retried = _Verdict(i, [], why), None
    return verdict


def _is_retry(record: LogRecord) -> bool:
    return record.level is RecordLevel.LOW and any(
        line.role is LineRole.RETRYING and pattern.search(record.first_line) for line, pattern in LOG_LINES_COMPILED
    )


def _frame_text(frame: Frame) -> str:
    if frame.classes and frame.message and not frame.message.startswith(frame.classes[0]):
        return f"{frame.classes[0]}: {frame.message}"
    return frame.message or (frame.classes[0] if frame.classes else "")


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return _short(line.strip())
    return "(empty)"


def _short(value: str, limit: int = 160) -> str:
    return value if len(value) <= limit else value[: limit - 3] + "..."


# Delta before 4.1: "Conflicting commit: {CommitInfo JSON}" (not always valid JSON, e.g.
# "mode":Append), so fields are read with anchored expressions, top-level ones before
# "operationParameters" (RESTORE keeps its own "version" in there).
_CONFLICTING_COMMIT = re.compile(r"Conflicting commit:\s*(\{.*)")
_JSON_VERSION = re.compile(r'"version"\s*:\s*(\d+)')
_JSON_OPERATION = re.compile(r'"operation"\s*:\s*"([^"]+)"')
_JSON_TIMESTAMP = re.compile(r'"timestamp"\s*:\s*(\d+)')
# Delta 4.1: "A concurrent UPDATE added data to table t committed at version 3" (or
# "... deleted data from table t (committed at version 3) ...").
_DELTA_41_WINNER = re.compile(
    r"[Aa] concurrent (?P<operation>[A-Z][A-Z _]{0,60}?) (?:added|deleted) data (?:to|from) table "
    r".{1,1000}? \(?committed at version (?P<version>\d+)"
)
_DELTA_RS_EXISTING = re.compile(
    r"Tried committing existing table version: (\d+)|Delta transaction failed, version (\d+) already exists"
)
_ODPS_LAST_COMMIT = re.compile(r"lastCommitTs:(\d+)")


def _winning_commit(engine: str, text: str) -> WinningCommit | None:
    if engine == "delta-spark":
        found = _DELTA_41_WINNER.search(text)
        if found:
            return WinningCommit(version=int(found["version"]), operation=found["operation"].strip())
        commit = _CONFLICTING_COMMIT.search(text)
        if commit:
            top = commit.group(1).split('"operationParameters"', 1)[0]
            version = _JSON_VERSION.search(top)
            operation = _JSON_OPERATION.search(commit.group(1))
            timestamp = _JSON_TIMESTAMP.search(top)
            return WinningCommit(
                version=int(version.group(1)) if version else None,
                operation=operation.group(1) if operation else None,
                timestamp=_millis_to_iso(timestamp.group(1)) if timestamp else None,
            )
    if engine == "delta-rs":
        existing = _DELTA_RS_EXISTING.search(text)
        if existing:
            # The version this writer tried to create is the one the winner wrote.
            return WinningCommit(version=int(existing.group(1) or existing.group(2)))
    if engine == "maxcompute":
        last = _ODPS_LAST_COMMIT.search(text)
        if last:
            return WinningCommit(tag={"lastCommitTs": last.group(1)})
    return None


def _millis_to_iso(millis: str) -> str:
    return _dt.datetime.fromtimestamp(int(millis) / 1000, tz=_dt.timezone.utc).isoformat()
