"""What the write operators say about an attempt that did not commit, for a person to act on:
the engine's own message (class and text, not only the class), one log line per such attempt
with what happens next, and which try made a commit a later try found in the table."""

from __future__ import annotations

import re

from ..core.advice import kind_help
from ..core.policy import Action, Decision
from ..core.report import LostAttempt, WriteReport
from ..engines.outcome import WriteOutcome

# A JVM stack frame line ("\tat org.apache.spark...(File.java:12)"): where a Py4J message's own
# text ends; the frames are in the task log's traceback already.
_JVM_FRAME = re.compile(r"^\s+at [\w$.<>]+\(")


def engine_message(outcome: WriteOutcome | None, error: BaseException | None) -> str:
    """The engine's own error as a person reads it: ``Class: message`` (the outermost exception,
    whole but for a JVM stack), e.g. ``SchemaMismatchError: Cannot cast schema, ...``, not only
    the class name."""
    if outcome is not None and outcome.error is not None:
        info = outcome.error
        message = next((m.strip() for m in info.messages if m and m.strip()), "")
        name = info.exception_class
    elif error is not None:
        message, name = str(error).strip(), type(error).__name__
    else:
        return "no error recorded"
    lines = message.splitlines()
    cut = next((i for i, line in enumerate(lines) if _JVM_FRAME.match(line)), len(lines))
    message = "\n".join(lines[:cut]).strip()
    return f"{name}: {message}" if message else name


def commit_text(report: WriteReport, outcome: WriteOutcome | None = None) -> str:
    """``version 3`` / ``snapshot 123`` / ``metadata version 4 (file)``: what the engine names
    the commit by (never ``None``)."""
    parts = []
    if report.version is not None:
        parts.append(f"version {report.version}")
    if report.snapshot_id is not None:
        parts.append(f"snapshot {report.snapshot_id}")
    meta = None if outcome is None else outcome.metadata_commit
    if meta is not None and not (parts and meta.location is None):
        # Delta numbers a schema change by its log version (said already); Iceberg by its metadata file.
        parts.append(meta.describe())
    return " ".join(parts) or "no new version"


def attempt_line(lost: LostAttempt, operation: str, table: str, decision: Decision) -> str:
    """The one log line for an attempt that did not commit: what it lost to (the winning
    commit, where the engine's log names it), or that it failed without a conflict with the
    engine's message, and what happens next."""
    what = f"attempt {lost.attempt} of {operation} on {table}"
    if not lost.is_conflict:
        return (
            f"{what} failed (not a conflict): {lost.error}; occflow does not retry it, "
            "the task's ordinary retries decide"
        )
    next_step = {
        Action.RETRY: f"retrying in {decision.delay_seconds:.1f}s from a fresh snapshot",
        Action.RESCHEDULE: f"rescheduling the task in {max(decision.delay_seconds, 1.0):.0f}s",
        Action.SKIP: "skipping the task",
        Action.FAIL: "failing the task without retries",
    }.get(decision.action, decision.action.value)
    winner = lost.winner_text()
    if winner and decision.action is Action.RETRY:
        # The winner is known: the policy's list of operations that could have won says nothing more.
        return f"{what} lost a write conflict ({lost.kind.value}) to {winner}; {next_step}"
    to = f" to {winner}" if winner else ""
    return f"{what} lost a write conflict ({lost.kind.value}){to}; {next_step}: {why(decision)}"


def fitted_to_engine(decision: Decision, engine: str) -> Decision:
    """A fail-fast decision whose reason is its kind's generic help, worded for ``engine``
    (``core.advice``): delta-rs's protocol change is not fixed by upgrading delta-rs."""
    if decision.action is not Action.FAIL:
        return decision
    return decision.with_advice(kind_help(decision.kind, engine))


def why(decision: Decision) -> str:
    """The decision's reason without the ``kind:`` prefix the policy puts before it."""
    return decision.why


def sentence(text: str) -> str:
    """``text`` ending in exactly one full stop (a reason that already ends in one keeps it)."""
    text = text.rstrip()
    return text if text.endswith((".", "!", "?")) else text + "."
