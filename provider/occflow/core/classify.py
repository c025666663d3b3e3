"""``classify(error)``: which ``ConflictKind`` an engine's error is, from which engine, and who won.

The knowledge is the marker table in ``classifiers/markers.py``; this module only collects the
evidence (classes, error classes, text) from the error's chain, finds the markers it holds, picks
one by ``PRECEDENCE`` and reads the winning commit out of the text where the engine names it.
Anything without a marker is ``NOT_A_CONFLICT`` and is never retried as a conflict.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass

from .classifiers.evidence import (
    ERROR_CLASS_IN_TEXT,
    QUALIFIED_CLASS_IN_TEXT,
    Frame,
    frames_of,
)
from .classifiers.markers import COMPILED, MARKERS, PRECEDENCE, Evidence, Marker
from .kinds import Classification, ConflictKind, WinningCommit

__all__ = ["classify", "Classification", "ConflictKind"]

_BY_CLASS: dict[str, Marker] = {m.value: m for m in MARKERS if m.evidence is Evidence.CLASS}
_BY_ERROR_CLASS: dict[str, Marker] = {m.value: m for m in MARKERS if m.evidence is Evidence.ERROR_CLASS}
_BY_MESSAGE: tuple[Marker, ...] = tuple(m for m in MARKERS if m.evidence is Evidence.MESSAGE)
_RANK: dict[ConflictKind, int] = {kind: i for i, kind in enumerate(PRECEDENCE)}


def classify(error: object) -> Classification:
    """Classify an exception (with its cause chain), its text, or an ``ErrorInfo``-like record.

    Raises ``TypeError`` only for something that is none of these (e.g. ``None``).
    """
    frames = frames_of(error)
    text = "\n".join(_frame_text(f) for f in frames)
    found = _matches(frames, text)
    outer_class = next((c for f in frames for c in f.classes[:1]), None)
    if not found:
        return Classification(
            kind=ConflictKind.NOT_A_CONFLICT,
            engine="unknown",
            reason=f"no conflict marker in the error: {_first_line(text)}",
            exception_class=outer_class,
            error_class=next((f.error_class for f in frames if f.error_class), None),
        )
    # min() keeps the first of equal rank: structured evidence from the outermost frame.
    hit = min(found, key=lambda h: _RANK[h.marker.kind])
    marker = hit.marker
    return Classification(
        kind=marker.kind,
        engine=marker.engine,
        reason=f"{marker.evidence.value} {_short(hit.evidence)!r} is {marker.kind.value} (source: {marker.source})",
        winning_commit=_winning_commit(marker.engine, text),
        exception_class=hit.exception_class or outer_class,
        error_class=hit.error_class or next((f.error_class for f in frames if f.error_class), None),
    )


@dataclass(frozen=True)
class _Hit:
    """A marker found in the error, with what matched and where."""

    marker: Marker
    exception_class: str | None
    error_class: str | None
    evidence: str


def _matches(frames: list[Frame], text: str) -> list[_Hit]:
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
    for match in QUALIFIED_CLASS_IN_TEXT.finditer(text):
        marker = _BY_CLASS.get(match.group(1))
        if marker is not None:
            hits.append(_Hit(marker, match.group(1), None, match.group(1)))
    for match in ERROR_CLASS_IN_TEXT.finditer(text):
        marker = _BY_ERROR_CLASS.get(match.group(1))
        if marker is not None:
            hits.append(_Hit(marker, None, match.group(1) + match.group(2), match.group(0)))
    for marker in _BY_MESSAGE:
        found = COMPILED[marker.value].search(text)
        if found:
            hits.append(_Hit(marker, None, None, found.group(0).strip()))
    return hits


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
