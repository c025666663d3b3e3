"""``ConflictReport``: what one alert says about a failed (or retried) write task, as a value
and as the text a human reads. ``ConflictNotifier`` (``conflict.py``) gathers it from what the
task left behind (its write report, the retry policy's XCom, the exception) and delivers it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..core.kinds import ConflictKind, WinningCommit

# The column the values of ``ConflictReport.text`` start at: continuation lines align with it.
_VALUE_INDENT = " " * 18


@dataclass(frozen=True)
class ConflictReport:
    """Everything an alert says about one failed (or retried) write task."""

    task: str
    kind: ConflictKind
    error: str
    try_number: int | None = None
    table: str | None = None
    partition: str | None = None
    operation: str | None = None
    profile: str | None = None
    classification_reason: str | None = None
    winner: WinningCommit | None = None
    winner_task: str | None = None
    attempts: int | None = None
    wasted_seconds: float | None = None
    decision: str | None = None
    advice: tuple[str, ...] = field(default_factory=tuple)
    # What a commit touched beyond its declaration (``core.observed.Excess.describe``): this
    # task's own commit, and the winning commit when its task's write report says so.
    footprint_exceeded: str | None = None
    winner_footprint_exceeded: str | None = None
    #: Whether Airflow will run the task again (``None``: not known here).
    retried_by_airflow: bool | None = None
    #: How the write's try ended (``WriteReport.status``), when the task pushed a report.
    status: str | None = None

    @property
    def is_conflict(self) -> bool:
        return self.kind.is_conflict

    @property
    def subject(self) -> str:
        where = self.table or "a table"
        if not self.is_conflict:
            return f"occflow: {self.task} failed (not a write conflict)"
        return f"occflow: {self.task} lost a write conflict on {where} ({self.kind.value})"

    def text(self) -> str:
        if not self.is_conflict:
            lines = [self.subject]
            if self.table:
                lines.append(
                    f"  table:          {self.table}"
                    + (f", partition {self.partition}" if self.partition else "")
                )
            if self.operation:
                lines.append(
                    f"  operation:      {self.operation}" + (f" (profile {self.profile})" if self.profile else "")
                )
            lines += [
                f"  error:          {_indented(self.error)}",
                "  occflow did not retry it as a conflict; "
                + {
                    True: "Airflow will retry the task (its ordinary retries).",
                    False: "Airflow will not retry the task.",
                    None: "the task's ordinary retries decide.",
                }[self.retried_by_airflow],
            ]
            if self.footprint_exceeded:
                lines.append(f"  beyond declared: {self.footprint_exceeded}")
            return "\n".join(lines)
        lines = [self.subject]
        lines.append(
            f"  table:          {self.table or 'unknown'}"
            + (f", partition {self.partition}" if self.partition else "")
        )
        if self.operation:
            lines.append(
                f"  operation:      {self.operation}" + (f" (profile {self.profile})" if self.profile else "")
            )
        lines.append(f"  conflict:       {self.kind.value}: {self.kind.message}")
        winner = self.winner.describe() if self.winner is not None else "unknown (the engine did not name it)"
        if self.winner_task:
            winner += f", made by task {self.winner_task}"
        lines.append(f"  winning commit: {winner}")
        if self.winner_footprint_exceeded:
            lines.append(f"  the winner went beyond its declaration: {self.winner_footprint_exceeded}")
        if self.footprint_exceeded:
            lines.append(f"  this task went beyond its declaration: {self.footprint_exceeded}")
        if self.attempts is not None or self.wasted_seconds is not None:
            attempts = "unknown" if self.attempts is None else str(self.attempts)
            wasted = "unknown" if self.wasted_seconds is None else f"{self.wasted_seconds:.1f}s"
            lines.append(f"  attempts:       {attempts}, {wasted} spent in attempts thrown away")
        if self.try_number is not None:
            lines.append(f"  airflow try:    {self.try_number}")
        if self.decision:
            lines.append(f"  decision:       {self.decision}")
        lines.append("  what to change:")
        lines.extend(f"    - {advice}" for advice in self.advice)
        lines.append(f"  error:          {_indented(self.error)}")
        if self.classification_reason:
            lines.append(f"  evidence:       {self.classification_reason}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["kind"] = self.kind.value
        data["winner"] = None if self.winner is None else asdict(self.winner)
        data["advice"] = list(self.advice)
        data["subject"] = self.subject
        # The winner as the engine's log records it, and what this write touched, structured.
        data["winning_commit"] = None if self.winner is None else self.winner.to_dict()
        data["partitions"] = self.partition
        return data


def _indented(text: str) -> str:
    """A multi-line value under its label: continuation lines start at the value column."""
    return ("\n" + _VALUE_INDENT).join(line.rstrip() for line in text.splitlines()) if text else text
