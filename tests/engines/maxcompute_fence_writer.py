"""A MaxCompute write whose client stalls while its job runs on the service (a script).

``python maxcompute_fence_writer.py PROJECT_FILE STORE_URL FENCED OUT_JSON``: takes a lease for an
UPDATE of ``mc.events`` partition ``ds=1`` (TTL 2 s), submits the job through
``MaxComputeTarget.run_attempt`` (the code ``MaxComputeSqlOperator`` runs) on the stand-in
project kept in ``PROJECT_FILE``, and, as soon as the instance is submitted, stops itself
(SIGSTOP): a frozen worker whose job keeps running on the service. The test resumes it later;
what happened is written to ``OUT_JSON``. ``FENCED`` 0 runs it without occflow's fence (the
control run).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from occflow.core.declaration import WriteDeclaration
from occflow.engines.ledger import LeaseNotLive
from occflow.engines.maxcompute import StandInProject
from occflow.engines.maxcompute.target import MaxComputeTarget
from occflow.engines.target import AttemptContext
from occflow.leases import LeaseKeeper, LeaseRequest, LeaseStore
from occflow.operators.exactly_once import BeforeCommit

TABLE = "mc.events"
UPDATE = f"UPDATE {TABLE} SET v = v + 1 WHERE ds='1'"


def main(project_file: str, store_url: str, fenced: bool, out: str) -> None:
    store = LeaseStore.from_url(store_url)
    declaration = WriteDeclaration.create(TABLE, "update", "maxcompute-standard", partitions={"ds": "1"})
    lease = store.acquire(LeaseRequest.create(TABLE, "update", "maxcompute-standard",
                                              partitions=[{"ds": "1"}], ttl=2), timeout=30)
    result: dict[str, Any] = {"fence": lease.fence}

    def stall(instance: Any, reconnected: bool) -> None:
        result["instance"] = str(instance.id)
        Path(out + ".stalling").write_text(str(instance.id))
        os.kill(os.getpid(), signal.SIGSTOP)  # frozen while the job runs on the service

    with LeaseKeeper(store, lease) as keeper:

        def live_until() -> float | None:
            deadline = keeper.deadline
            return 0.0 if keeper.lost.is_set() or deadline is None else time.time() + (deadline - time.monotonic())

        attempt = AttemptContext(before_commit=BeforeCommit(keeper), fence=lease.fence if fenced else None,
                                 lease_live_until=live_until)
        target = MaxComputeTarget(StandInProject(project_file), TABLE, UPDATE, poll_interval=0.1,
                                  exactly_once=False, on_instance=stall)
        try:
            outcome = target.run_attempt(declaration, attempt)
            result.update(committed=outcome.committed)
        except LeaseNotLive as refused:
            result.update(committed=False, refused=type(refused).__name__, why=str(refused))
    Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4])
