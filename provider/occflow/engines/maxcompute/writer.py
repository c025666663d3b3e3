"""One attempt of a MaxCompute SQL write: submit (or reconnect), wait, and say what happened.

- **Tagged.** The instance's settings carry the write's commit tag (``maxcompute_hints``), so the
  ledger can tell later whether the write landed.
- **One instance per attempt, whatever the retries.** Before submitting, the write looks for a
  still-running instance carrying its write id (a try that died while its job ran) and waits on
  it instead of submitting again. The submission's ``unique_identifier_id`` is the write id and
  the number of its instances that already failed, so a resubmission of the same attempt is the
  same instance to MaxCompute as well.
- **Versions.** A committed outcome carries the instance id, the ID version and the time version
  where the service reports them (a compaction or clustering has no time version: spec 001), and
  whether MaxCompute rebased the commit itself (meta-level retry: not an occflow attempt).
- **Residue.** A failed INSERT INTO on a standard table may leave its rows behind (spec 000: a
  rolled-back INTO may leave residue, whatever failed it), so after *any* failure of one the
  write asks the service what it committed: ``ResidueError`` names the instance and partitions
  instead of a failed outcome a retry would repeat; only a verified-clean failure goes on to the
  flow's ordinary retries.
- **Unknown commit state.** ``ODPS-0110999`` (the commit failed and its rollback failed: a
  possible breach of atomicity) is classified ``commit_state_unknown``. It is checked before
  anything else: the write fails fast (``CommitStateUnknownError``), and a later try of the same
  write that finds such an instance refuses to submit again until someone has checked the table.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...core.classify import classify
from ...core.kinds import ConflictKind
from ...core.operations import Operation
from ..ledger import FencedOut
from ..outcome import ErrorInfo, WriteOutcome
from ..tags import CommitTag
from .errors import ResidueError
from .jobs import FENCE_SETTING, ProjectJobs, TaggedInstance
from .ledger import maxcompute_hints

ENGINE = "maxcompute"


class CommitStateUnknownError(ResidueError):
    """A MaxCompute job whose commit state is unknown (``ODPS-0110999``: the commit failed and so
    did its rollback): its rows may be in the table, all or in part. Not retried: a
    ``ResidueError``, which the write flow fails fast on."""

    def __init__(self, instance_id: str, table: str, partitions: tuple[str, ...], error: str, earlier: bool) -> None:
        where = ", ".join(partitions) if partitions else "the whole table"
        when = "an earlier try's" if earlier else "the"
        Exception.__init__(
            self,
            f"{when} instance {instance_id} writing {table} ({where}) failed with an unknown commit state "
            f"({error.splitlines()[0]}): MaxCompute could neither commit nor roll back, so some, all or none "
            "of its rows may be in the table. occflow does not run the write again (it could write rows "
            "twice): check the table; if the rows are there mark the task successful, otherwise remove any "
            "partial rows (INSERT OVERWRITE the partition from its source) and run the task with "
            "exactly_once=False",
        )
        self.instance_id = instance_id
        self.table = table
        self.partitions = partitions


@dataclass
class MaxComputeWrite:
    """One SQL write on one table through a PyODPS client (``odps.ODPS`` or the stand-in)."""

    client: Any
    table: str
    sql: str
    operation: Operation
    partitions: tuple[str, ...] | None = None
    tag: CommitTag | None = None
    hints: Mapping[str, str] = field(default_factory=dict)
    leaves_residue: bool = False  # the profile says a failed INTO may leave its rows (spec 000)
    poll_interval: float = 1.0
    #: The lease's fencing token, carried in the job's settings (``jobs.FENCE_SETTING``): a
    #: write admitted after the lease lapsed finds and stops the job by it.
    fence: int | None = None

    def find_running(self) -> TaggedInstance | None:
        """A still-running instance of this write (the one a dead try left), if any."""
        if self.tag is None:
            return None
        return next((t for t in ProjectJobs(self.client).of_write(self.table, self.tag.write_id) if t.running), None)

    def submit(self) -> Any:
        hints = {**{str(k): str(v) for k, v in self.hints.items()}}
        if self.fence is not None:
            hints[FENCE_SETTING] = str(self.fence)
        unique = None
        if self.tag is not None:
            hints.update(maxcompute_hints(self.tag))
            failed = [t for t in ProjectJobs(self.client).of_write(self.table, self.tag.write_id) if not t.running]
            unique = f"occflow-{self.tag.write_id}-{len(failed)}"
        return self.client.run_sql(self.sql, hints=hints, unique_identifier_id=unique)

    def run(
        self,
        before_submit: Callable[[], None] = lambda: None,
        on_instance: Callable[[Any, bool], None] = lambda instance, reconnected: None,
        lease_lapsed: Callable[[], bool] = lambda: False,
    ) -> WriteOutcome:
        """Reconnect or submit, wait, and return the outcome (``ResidueError`` for a failed INTO
        that may have left rows behind on a standard table)."""
        started = time.monotonic()
        running = self.find_running()
        if running is not None:
            instance, reconnected = running.instance, True
        else:
            self._refuse_after_unknown_state()  # before anything else: never resubmit blindly
            before_submit()  # the last check before the job can commit: MaxCompute commits at its end
            instance, reconnected = self.submit(), False
        on_instance(instance, reconnected)
        error = self._wait(instance)
        seconds = time.monotonic() - started
        info = _commit_info(instance)
        instance_id, logview = str(instance.id), _logview(instance)
        tag = {"instance_id": instance_id, "logview": logview}
        if reconnected:
            tag["reconnected"] = "true"
        # The same, typed, for the report (``time_version`` and ``meta_level_retry``: ``_committed``).
        details: dict[str, Any] = {"instance_id": instance_id, "logview": logview, "time_version": None,
                                   "meta_level_retry": False, "reconnected": reconnected}
        if error is None:
            return self._committed(info, tag, details, seconds)
        if self.fence is not None and lease_lapsed() and not instance.is_successful():
            # The lease lapsed while the job ran (this client stalled): a write admitted in its
            # place stopped the job on the service before it committed (jobs.stop_fenced_jobs).
            raise FencedOut(
                f"the lease of this write (fence {self.fence}) lapsed while its instance {instance.id} ran, "
                f"and the instance ended without committing ({error}): a write admitted in its place "
                "stops such jobs before it submits its own", self.fence,
            ) from error
        found = classify(error)
        if found.kind is ConflictKind.COMMIT_STATE_UNKNOWN:  # first: nothing may retry it blindly
            raise CommitStateUnknownError(str(instance.id), self.table, self.partitions or (), str(error),
                                          earlier=False) from error
        if self.leaves_residue and self.operation is Operation.INSERT_INTO:
            # spec 000: a rolled-back INTO may leave residue whatever failed it, not only a conflict
            residue = _residue(instance, info)
            if residue is not None:
                raise ResidueError(str(instance.id), self.table, self.partitions or (), residue, str(error)) from error
            tag["residue"] = "none: the service reports that the failed job committed nothing"
        return WriteOutcome(
            engine=ENGINE, table=self.table, operation=self.operation, committed=False, seconds=seconds,
            error=ErrorInfo.from_exception(error), classification=found, tag=tag, engine_details=details,
        )

    def _refuse_after_unknown_state(self) -> None:
        """``CommitStateUnknownError`` when this write's latest ended instance failed with an
        unknown commit state (a try that died, or failed, after ``ODPS-0110999``)."""
        if self.tag is None:
            return
        ended = [t for t in ProjectJobs(self.client).of_write(self.table, self.tag.write_id) if not t.running]
        if not ended or ended[-1].successful:
            return
        text = _task_error(ended[-1].instance)
        if text and classify(text).kind is ConflictKind.COMMIT_STATE_UNKNOWN:
            raise CommitStateUnknownError(ended[-1].id, self.table, self.partitions or (), text, earlier=True)

    def _wait(self, instance: Any) -> BaseException | None:
        """Wait for the instance; the error PyODPS raises for a failed one, ``None`` on success."""
        try:
            instance.wait_for_success(interval=self.poll_interval)
        except Exception as exc:  # noqa: BLE001 - the instance's failure, classified by the caller
            if _settled_successfully(instance):  # a failed poll, not a failed job: MaxCompute settled it
                return None
            return exc
        return None

    def _committed(
        self, info: Mapping[str, Any], tag: dict[str, str], details: dict[str, Any], seconds: float
    ) -> WriteOutcome:
        time_version = info.get("time_version")
        details["time_version"] = None if time_version is None else float(time_version)
        details["meta_level_retry"] = bool(info.get("rebased"))
        # The tag carries the same as the commit's labels, in text.
        if time_version is not None:
            tag["time_version"] = repr(time_version)
        if "data_change" in info:
            tag["data_change"] = str(bool(info["data_change"])).lower()
        if info.get("rebased"):
            # MaxCompute retried the commit at the metadata level itself: one occflow attempt.
            tag["meta_level_retry"] = "true"
        version = info.get("id_version")
        return WriteOutcome(engine=ENGINE, table=self.table, operation=self.operation, committed=True,
                            seconds=seconds, version=None if version is None else int(version), tag=tag,
                            engine_details=details)


def _settled_successfully(instance: Any) -> bool:
    try:
        return bool(instance.is_terminated()) and bool(instance.is_successful())
    except Exception:  # noqa: BLE001 - the service cannot say: the failure stands
        return False


def _commit_info(instance: Any) -> Mapping[str, Any]:
    """What the service reports about the commit (ID / time version, rebased); PyODPS's
    ``Instance`` reports none of it, the stand-in does (``commit_info()``)."""
    report = getattr(instance, "commit_info", None)
    return report() if callable(report) else {}


def _task_error(instance: Any) -> str:
    """The error text a failed instance's SQL task reported ("" when the service cannot say)."""
    try:
        return str(instance.get_task_result() or "")
    except Exception:  # noqa: BLE001 - no text: the instance is not taken for an unknown state
        return ""


def _logview(instance: Any) -> str:
    try:
        return str(instance.get_logview_address())
    except Exception:  # noqa: BLE001 - a log link is information, never worth failing the write
        return ""


def _residue(instance: Any, info: Mapping[str, Any]) -> str | None:
    """What a failed INTO left behind, as far as the service says; ``None``: verified nothing."""
    if info.get("id_version") is not None:
        return f"its rows are in the table: the service committed them as ID version {info['id_version']}"
    if callable(getattr(instance, "commit_info", None)):
        return None
    return "MaxCompute does not report whether the rows were cleaned up (spec 000: they may remain)"
