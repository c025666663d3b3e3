"""The lease is fenced at the commit on real delta-rs: a compaction that stalls after occflow's
last check, past its lease's TTL, cannot commit once a compaction admitted in its place did.

The scenario the issue reported (two delta-rs OPTIMIZEs of one partition doubled its rows): a
writer process takes its lease (TTL 2 s), passes the check an operator makes before the engine
call, and is frozen (SIGSTOP) there; its lease lapses; a second compaction is admitted, runs and
commits; the first is resumed (SIGCONT). The oracle is the engine's own record: the table's rows
as delta-rs reads them and the commits in ``_delta_log``. The control run takes the fence away
(the same writer without ``commit_fence``): the rows double, so the test can see the fence missing.
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
from occflow.core.kinds import ConflictKind
from occflow.engines.deltars.commit import CommitOptions
from occflow.engines.deltars.table import DeltaRsTable
from occflow.engines.deltars.target import DeltaRsTarget
from occflow.engines.outcome import WriteOutcome
from occflow.engines.target import AttemptContext
from occflow.leases import LeaseKeeper, LeaseRequest, LeaseStore
from occflow.operators.exactly_once import BeforeCommit

pa = pytest.importorskip("pyarrow", reason="delta-rs tests need pyarrow")
pytest.importorskip("deltalake", reason="delta-rs tests need deltalake")

WRITER = Path(__file__).with_name("deltars_fence_writer.py")
TABLE = "lake.fenced"
FILES, ROWS_PER_FILE = 40, 200


def _table(path: Path) -> DeltaRsTable:
    table = DeltaRsTable(path)
    for n in range(FILES):
        ids = range(n * ROWS_PER_FILE, (n + 1) * ROWS_PER_FILE)
        data = pa.table({"id": pa.array(list(ids), pa.int64()), "p": pa.array([1] * ROWS_PER_FILE, pa.int64())})
        done = table.create(data, partition_by=["p"]) if n == 0 else table.append(data)
        assert done.committed, done
    return table


def _rows(path: Path) -> tuple[int, int]:
    """Rows and distinct ids, as delta-rs reads the latest version."""
    from deltalake import DeltaTable

    ids = DeltaTable(str(path)).to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    return len(ids), len(set(ids))


def _operations(path: Path) -> list[str]:
    ops = []
    for file in sorted((path / "_delta_log").glob("*.json")):
        for line in file.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                ops.append(action["commitInfo"].get("operation", ""))
    return ops


def _start_stalled_writer(path: Path, store_url: str, fenced: bool, out: Path) -> subprocess.Popen[bytes]:
    writer = subprocess.Popen(
        [sys.executable, str(WRITER), str(path), store_url, "2", "1" if fenced else "0", str(out)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    deadline = time.monotonic() + 60
    while not Path(str(out) + ".stalling").exists():
        assert writer.poll() is None, "the writer died before its stall"
        assert time.monotonic() < deadline, "the writer never reached its stall"
        time.sleep(0.05)
    time.sleep(0.2)  # its SIGSTOP lands
    return writer


def _admitted_compaction(path: Path, store: LeaseStore, *, fenced: bool) -> WriteOutcome:
    """The compaction admitted once the stalled writer's lease lapsed, run as an operator runs a
    delta-rs write (``DeltaRsTarget.run_attempt`` with the flow's ``AttemptContext``)."""
    lease = store.acquire(LeaseRequest.create(TABLE, "optimize", "delta-rs", partitions=[{"p": 1}], ttl=30),
                          timeout=20, poll=0.2)
    declaration = WriteDeclaration.create(TABLE, "optimize", "delta-rs", partitions={"p": 1})
    try:
        with LeaseKeeper(store, lease) as keeper:
            attempt = AttemptContext(
                before_commit=BeforeCommit(keeper), fence=lease.fence,
                commit_fence=(lambda: store.commit_fence(keeper.lease)) if fenced else (lambda: None),
            )
            return DeltaRsTarget(str(path), table_name=TABLE).run_attempt(declaration, attempt)
    finally:
        store.release(lease)


def _race(tmp_path: Path, *, fenced: bool) -> tuple[dict[str, object], WriteOutcome, Path]:
    path = tmp_path / "t"
    _table(path)
    store_url = f"sqlite:///{tmp_path / 'leases.db'}"
    store = LeaseStore.from_url(store_url, history=True)
    out = tmp_path / "writer.json"
    writer = _start_stalled_writer(path, store_url, fenced, out)
    try:
        # The stalled writer's lease lapses (TTL 2 s, no heartbeat from a stopped process); a
        # second compaction of the same partition is admitted in its place and commits.
        second = _admitted_compaction(path, store, fenced=fenced)
        assert second.committed and second.version is not None, second
    finally:
        os.kill(writer.pid, signal.SIGCONT)
        writer.wait(timeout=120)
    return json.loads(out.read_text()), second, path


@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "control-without-fence"])
def test_a_stalled_compaction_does_not_commit_after_its_lease_lapsed(tmp_path: Path, fenced: bool) -> None:
    first, second, path = _race(tmp_path, fenced=fenced)
    rows, distinct = _rows(path)
    compactions = _operations(path).count("OPTIMIZE")
    if fenced:
        # delta-rs refused the stalled writer's commit: one compaction in the log, no row doubled.
        assert first["committed"] is False and first.get("refused") == "FencedOut", first
        assert "lapsed" in str(first["why"])
        assert (rows, distinct, compactions) == (FILES * ROWS_PER_FILE, FILES * ROWS_PER_FILE, 1)
        assert "SET TBLPROPERTIES" in _operations(path)  # the fence, in the engine's own log
    else:
        # Without the fence the engine takes both: the partition's rows are in the table twice.
        assert first["committed"] is True, first
        assert compactions == 2 and rows == 2 * FILES * ROWS_PER_FILE and distinct == FILES * ROWS_PER_FILE


def test_a_stalled_writer_that_resumes_before_the_fence_is_read_by_the_admitted_one(tmp_path: Path) -> None:
    """The other order: the stalled writer resumes and commits late, before the write admitted
    in its place fenced the table. That write then reads the late commit: nothing doubled."""
    path = tmp_path / "t"
    _table(path)
    store_url = f"sqlite:///{tmp_path / 'leases.db'}"
    store = LeaseStore.from_url(store_url)
    out = tmp_path / "writer.json"
    writer = _start_stalled_writer(path, store_url, True, out)
    time.sleep(2.5)  # its lease lapses
    os.kill(writer.pid, signal.SIGCONT)
    writer.wait(timeout=120)
    assert json.loads(out.read_text())["committed"] is True  # late, but nobody had taken its place
    second = _admitted_compaction(path, store, fenced=True)
    assert second.committed, second
    assert _rows(path) == (FILES * ROWS_PER_FILE, FILES * ROWS_PER_FILE)
    assert _operations(path).count("OPTIMIZE") == 1  # the second found nothing left to compact


def test_a_lease_that_lapses_while_a_gated_write_waits_is_fenced_after_the_gate(tmp_path: Path) -> None:
    """A write whose supersession is learned only after its snapshot (a lease it awaited at its
    gate lapsed) fences the table then: its own commit, planned before the fence, is refused by
    delta-rs (``metadata_changed``) and a retry from a fresh snapshot commits."""
    path = tmp_path / "t"
    table = _table(path)
    store = LeaseStore.from_url(f"sqlite:///{tmp_path / 'leases.db'}")
    stalled = store.decide(LeaseRequest.create(TABLE, "optimize", "delta-rs", partitions=[{"p": 1}], ttl=1))
    assert stalled.lease is not None
    time.sleep(1.2)
    lease = store.acquire(LeaseRequest.create(TABLE, "optimize", "delta-rs", partitions=[{"p": 1}], ttl=30),
                          timeout=10, poll=0.2)
    snapshot = table.load()  # read before it learns what it supersedes
    with LeaseKeeper(store, lease) as keeper:
        commit = CommitOptions(before_commit=BeforeCommit(keeper), fence=lease.fence,
                               commit_fence=lambda: store.commit_fence(keeper.lease))
        lost = table.optimize(partition={"p": 1}, snapshot=snapshot, commit=commit)
        assert not lost.committed and lost.classification is not None
        assert lost.classification.kind is ConflictKind.METADATA_CHANGED, lost.classification
        again = table.optimize(partition={"p": 1}, commit=commit)
    assert again.committed, again
    assert _rows(path) == (FILES * ROWS_PER_FILE, FILES * ROWS_PER_FILE)
