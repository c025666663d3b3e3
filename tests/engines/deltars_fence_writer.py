"""A delta-rs OPTIMIZE that stalls after occflow's last check, run as its own process.

``python deltars_fence_writer.py TABLE_PATH STORE_URL TTL FENCED OUT_JSON``: takes a lease on the
table's partition ``p=1`` (``TTL`` seconds), keeps it with a ``LeaseKeeper``, and compacts the
partition through ``DeltaRsTable.optimize`` with the check an operator makes right before the
engine call (``BeforeCommit``). Right after that check (and after the commit fence was taken, when
``FENCED`` is 1) the process stops itself with SIGSTOP: the test resumes it with SIGCONT once its
lease has lapsed and another compaction was admitted. What happened is written to ``OUT_JSON``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from occflow.core.fencing import CommitFence
from occflow.engines.deltars.commit import CommitOptions
from occflow.engines.deltars.table import DeltaRsTable
from occflow.engines.ledger import LeaseNotLive
from occflow.leases import LeaseKeeper, LeaseRequest, LeaseStore
from occflow.operators.exactly_once import BeforeCommit

TABLE = "lake.fenced"


def main(path: str, store_url: str, ttl: float, fenced: bool, out: str) -> None:
    store = LeaseStore.from_url(store_url)
    lease = store.acquire(LeaseRequest.create(TABLE, "optimize", "delta-rs", partitions=[{"p": 1}], ttl=ttl),
                          timeout=30)
    result: dict[str, object] = {"fence": lease.fence, "lease_id": lease.lease_id}
    with LeaseKeeper(store, lease) as keeper:

        def fence_then_stall() -> CommitFence | None:
            fence = store.commit_fence(keeper.lease) if fenced else None
            Path(out + ".stalling").write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGSTOP)  # frozen right after the last check
            return fence

        table = DeltaRsTable(path)
        try:
            outcome = table.optimize(
                partition={"p": 1},
                snapshot=table.load(),
                commit=CommitOptions(before_commit=BeforeCommit(keeper), fence=lease.fence,
                                     commit_fence=fence_then_stall),
            )
            result.update(committed=outcome.committed, version=outcome.version,
                          kind=None if outcome.classification is None else outcome.classification.kind.value)
        except LeaseNotLive as refused:
            result.update(committed=False, refused=type(refused).__name__, why=str(refused))
    Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] == "1", sys.argv[5])
