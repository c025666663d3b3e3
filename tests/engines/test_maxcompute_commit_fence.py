"""A MaxCompute job whose client stalled past its lease does not commit after the write admitted
in its place: that write stops the stalled job on the service before it submits its own.

MaxCompute cannot run here: the project is occflow's stand-in (``StandInProject``, a file shared
by processes), which runs each job for a set time and commits it at its end as the service does
(spec 001: of two UPDATEs of one partition, the one that ends later fails). The writer is a
real process, frozen by SIGSTOP while its UPDATE runs; its 2 s lease lapses; a second UPDATE of
the same partition is admitted; the frozen writer is resumed. The oracle is the project's own
record: its commit history and the admitted job's end. The control run (no fence) shows what the
fence prevents: the stalled job commits after its lease lapsed, beside the admitted one, and the
admitted write (whose lease is live) is the one the service refuses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from occflow.core.declaration import WriteDeclaration
from occflow.engines.maxcompute import StandInProject
from occflow.engines.maxcompute.target import MaxComputeTarget
from occflow.engines.target import AttemptContext
from occflow.leases import LeaseKeeper, LeaseRequest, LeaseStore
from occflow.operators.exactly_once import BeforeCommit

WRITER = Path(__file__).with_name("maxcompute_fence_writer.py")
TABLE = "mc.events"
UPDATE = f"UPDATE {TABLE} SET v = v + 1 WHERE ds='1'"


def _run(tmp_path: Path, *, fenced: bool) -> tuple[dict[str, object], StandInProject]:
    project_file = tmp_path / "project.json"
    project = StandInProject(project_file, job_seconds={"update": 4.0})
    project.create_table(TABLE, partition_columns=["ds"], partitions=[{"ds": "1"}])
    url = f"sqlite:///{tmp_path / 'leases.db'}"
    store = LeaseStore.from_url(url)
    out = tmp_path / "writer.json"
    writer = subprocess.Popen([sys.executable, str(WRITER), str(project_file), url, "1" if fenced else "0", str(out)],
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        deadline = time.monotonic() + 60
        while not Path(str(out) + ".stalling").exists():
            assert writer.poll() is None and time.monotonic() < deadline, "the writer never submitted its job"
            time.sleep(0.05)
        request = LeaseRequest.create(TABLE, "update", "maxcompute-standard", partitions=[{"ds": "1"}], ttl=30)
        # The two conflict: while the stalled writer's lease is live the second is not admitted.
        assert store.try_acquire(request) is None
        lease = store.acquire(request, timeout=20, poll=0.2)
        declaration = WriteDeclaration.create(TABLE, "update", "maxcompute-standard", partitions={"ds": "1"})
        with LeaseKeeper(store, lease) as keeper:
            attempt = AttemptContext(before_commit=BeforeCommit(keeper), fence=lease.fence,
                                     commit_fence=(lambda: store.commit_fence(keeper.lease)) if fenced else (lambda: None))
            os.kill(writer.pid, signal.SIGCONT)  # the stalled client wakes while the second job runs
            second = MaxComputeTarget(project, TABLE, UPDATE, poll_interval=0.1, exactly_once=False).run_attempt(
                declaration, attempt)
        store.release(lease)
    finally:
        os.kill(writer.pid, signal.SIGCONT)
        writer.wait(timeout=60)
    project.settle_due()
    return {**json.loads(out.read_text()), "second": second.committed, "second_kind":
            None if second.classification is None else second.classification.kind.value}, project


@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "control-without-fence"])
def test_a_stalled_maxcompute_job_does_not_commit_after_its_lease_lapsed(tmp_path: Path, fenced: bool) -> None:
    first, project = _run(tmp_path, fenced=fenced)
    committed = [c.operation.value for c in project.history(TABLE)]
    if fenced:
        # The admitted write stopped the stalled job on the service first: one UPDATE committed,
        # the admitted one; the stalled writer learns it was fenced out, not that it conflicted.
        assert first.get("refused") == "FencedOut" and "lapsed" in str(first["why"]), first
        assert first["second"] is True, first
        assert committed == ["update"], committed
    else:
        # Without the fence the stalled job commits after its lease lapsed, and the service
        # refuses the admitted write (the later of two UPDATEs) although its lease is live.
        assert first["committed"] is True, first
        assert first["second"] is False and first["second_kind"] == "operation_conflict", first
        assert committed == ["update"], committed
