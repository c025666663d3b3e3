"""A spark-submit driver's view of its write's lease (docs/exactly-once.md, issue 23).

The driver commits in another process, so the lease's keeper (in the task) cannot run its check
there. The task keeps a small file beside the driver's outcome fresh: the lease's fencing token
and until when it is certainly live (epoch seconds). The driver reads it right before the
statement that writes starts and refuses to write when it is missing, stale, lost or names
another fence: a lease that lapsed before the write started (the task died, the store took the
footprint back) does not commit on a cluster either. On Iceberg and Delta the same file is read
once more inside the commit, by the lease-fenced catalog or log store (``submit_fence.py``, the
same rules in Java: ``java/occflow/lease/LeaseWindow.java``), so a lease that lapses while the
statement runs stops its commit too.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from ..ledger import LeaseNotLive
from ..outcome import LEGACY_LEASE_NOT_LIVE
from .submit_fence import COMMIT_MARGIN
from .submit_files import write_atomically

#: The tag key of a driver's outcome that refused to commit because the lease was not live: payload
#: beside the typed ``WriteOutcome.lease_refused``, which is what the target decides on.
LEASE_NOT_LIVE = LEGACY_LEASE_NOT_LIVE


def window_path(outcome_path: str | Path) -> Path:
    return Path(str(outcome_path) + ".lease.json")


def write_window(path: str | Path, fence: int, live_until: float) -> None:
    write_atomically(Path(path), json.dumps({"fence": int(fence), "live_until": float(live_until)}))


def check_window(path: str | Path, fence: int, margin: float = COMMIT_MARGIN) -> None:
    """Raise ``LeaseNotLive`` unless the lease with ``fence`` is live for ``margin`` more seconds."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        found, live_until = int(data["fence"]), float(data["live_until"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LeaseNotLive(
            f"the task's lease window {path} cannot be read ({exc}): not committing", fence
        ) from None
    if found != fence:
        raise LeaseNotLive(
            f"the lease window names fence {found}, this driver was started under {fence}", fence
        )
    left = live_until - time.time()
    if left >= margin:
        return
    if live_until <= 0:
        why = "the task lost it"
    elif left < 0:
        why = f"{-left:.1f}s past its last confirmed validity"
    else:
        why = f"only {left:.1f}s of it left, less than the commit margin of {margin:.1f}s"
    raise LeaseNotLive(f"the write's lease (fence {fence}) is not certainly live: {why}", fence)


class WindowPublisher:
    """Keeps the window file fresh while a driver runs: ``live_until()`` every ``interval``."""

    def __init__(
        self, path: str | Path, fence: int, live_until: Callable[[], float | None], interval: float = 1.0
    ) -> None:
        self.path, self.fence, self.live_until, self.interval = Path(path), fence, live_until, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"occflow-lease-window-{fence}", daemon=True)

    def publish(self) -> None:
        until = self.live_until()
        write_window(self.path, self.fence, 0.0 if until is None else until)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.publish()

    def __enter__(self) -> WindowPublisher:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.publish()
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        write_window(self.path, self.fence, 0.0)  # the task stopped watching: no later commit


__all__ = [
    "COMMIT_MARGIN",
    "LEASE_NOT_LIVE",
    "WindowPublisher",
    "check_window",
    "window_path",
    "write_window",
]
