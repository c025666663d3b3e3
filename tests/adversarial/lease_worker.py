"""One worker of the adversarial lease suite (``test_leases_adversarial.py``), run as a script.

It loops until the stop file appears: picks a table, a random footprint over mixed partition
column sets (or the whole table) and a random operation of the table's profile, polls the
store until admitted, holds the lease for a short random time while a ``LeaseKeeper``
heartbeats it, calls ``keeper.ensure_live()`` and only then "commits": appends one JSON line
(table, footprint, operation, fence, lease, pid, wall-clock commit time) to its log and fsyncs
it. A refused ``ensure_live`` is logged as an abort. The test's fault injector kills, stops and
starves these processes; the checker then reads the logs against the store's history.

Before each request the worker writes its intent (what it is about to request, as which try of
which task instance) to ``--intent``; after a ``kill -9`` the injector starts a new worker with
``--retry``, which asks again for that intent as the next try, as Airflow would.

Against an occflow without fenced leases (``--unfenced`` or no ``ensure_live``), it commits
without the check, as the operators did.

With ``--delta PATH`` the commit is real: the worker writes the partitioned delta-rs table at
``PATH`` (partition column ``ds``) through ``DeltaRsTarget.run_attempt``, as an operator runs a
delta-rs write (``BeforeCommit(keeper)`` right before the engine call, the lease's fence on the
commit, and the commit fence from the store: a write admitted over a lapsed lease first fences
the table). It compacts, appends a few rows with ids no other write uses, overwrites or deletes
one ``ds`` partition. Inside the engine call (an append or overwrite: while delta-rs pulls its
rows; a compaction or delete: right after its last check, ``before_commit`` then the commit
fence, as the call starts) it marks itself in ``--marker`` and the engine works
``--engine-pause`` seconds: the test's injector stops it (SIGSTOP) there, past its TTL.
``--no-commit-fence`` takes the fence away (no fence asked, none made): the planted fault that
shows the oracle can fail.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import random
import time
from pathlib import Path
from typing import Any

from occflow.leases import Holder, LeaseKeeper, LeaseLostError, LeaseRequest, LeaseStore

TABLES = {"db.events": "delta-rs", "db.orders": "iceberg-serializable"}
DOMAINS = {"ds": ("1", "2", "3"), "country": ("NL", "DE"), "hour": ("0", "1")}
COLUMN_SETS = (("ds",), ("ds", "country"), ("country", "hour"), ("ds", "country", "hour"))
OPERATIONS = {
    "delta-rs": ("insert_overwrite", "truncate", "insert_into", "update", "delete", "merge", "optimize",
                 "alter_metadata"),
    "iceberg-serializable": ("insert_overwrite", "truncate", "insert_into", "update", "delete", "merge",
                             "optimize", "alter_metadata"),
}
WHOLE_TABLE_SHARE = 0.05

# -- delta mode: a real delta-rs table --------------------------------------------------------
DELTA_TABLE, DELTA_PROFILE = "db.events", "delta-rs"
DELTA_PARTITIONS = ("1", "2", "3")
#: Weighted: appends bring the files that compactions merge, overwrites and deletes rewrite them.
DELTA_OPERATIONS = ("optimize", "optimize", "insert_into", "insert_into", "insert_into", "insert_into",
                    "insert_overwrite", "delete")
#: The control run (``--control``): compactions and appends of one partition only, so a stalled
#: compaction without the fence meets a compaction admitted in its place (rows doubled).
CONTROL_OPERATIONS, CONTROL_PARTITIONS = ("optimize", "insert_into"), ("1",)
ROWS_PER_WRITE = 3


def random_intent(rnd: random.Random, worker: int, cycle: int) -> dict[str, Any]:
    """What to request next: table, profile, operation, footprint, and the task instance."""
    table = rnd.choice(sorted(TABLES))
    profile = TABLES[table]
    footprint = None
    if rnd.random() >= WHOLE_TABLE_SHARE:
        footprint = []
        for _ in range(rnd.choice((1, 1, 2))):
            columns = rnd.choice(COLUMN_SETS)
            footprint.append({c: rnd.choice(DOMAINS[c]) for c in columns})
    return {
        "table": table, "profile": profile, "operation": rnd.choice(OPERATIONS[profile]),
        "footprint": footprint, "dag_id": "adversarial", "task_id": f"w{worker}", "run_id": f"c{cycle}",
        "try_number": 1,
    }


def random_delta_intent(rnd: random.Random, worker: int, cycle: int, control: bool) -> dict[str, Any]:
    """A write of one ``ds`` partition of the delta-rs table."""
    operations, partitions = (CONTROL_OPERATIONS, CONTROL_PARTITIONS) if control else (DELTA_OPERATIONS,
                                                                                      DELTA_PARTITIONS)
    return {
        "table": DELTA_TABLE, "profile": DELTA_PROFILE, "operation": rnd.choice(operations),
        "footprint": [{"ds": rnd.choice(partitions)}], "dag_id": "adversarial", "task_id": f"w{worker}",
        "run_id": f"c{cycle}", "try_number": 1,
    }


def write_intent(path: Path, intent: dict[str, Any]) -> None:
    part = path.with_suffix(".part")
    part.write_text(json.dumps(intent))
    os.replace(part, path)  # never half-written for the injector


class Log:
    """Append-only JSON lines, each on disk (fsync) before the worker moves on."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, record: dict[str, Any]) -> None:
        os.write(self.fd, (json.dumps(record) + "\n").encode())
        os.fsync(self.fd)


def acquire(store: LeaseStore, request: LeaseRequest, stop: Path, rnd: random.Random) -> Any:
    """Poll until admitted; ``None`` if told to stop or refused as a stale try. Store errors
    (an outage) are waited out: the worker backs off and asks again with the same request."""
    pause = 0.02
    while not stop.exists():
        try:
            lease = store.try_acquire(request)
        except LeaseLostError:
            return None
        except Exception:  # noqa: BLE001 - the store is down or locked: wait and ask again
            lease = None
            pause = 0.5
        if lease is not None:
            return lease
        time.sleep(pause * (0.5 + rnd.random()))
        pause = min(pause * 2, 0.3)
    with contextlib.suppress(Exception):  # leaving anyway; the place lapses after its queue TTL
        store.cancel(request)
    return None


def hold_and_commit(store: LeaseStore, lease: Any, intent: dict[str, Any], args: argparse.Namespace,
                    rnd: random.Random, log: Log) -> None:
    """Hold the lease a while, check it, commit; then let it go."""
    fenced = not args.unfenced and hasattr(LeaseKeeper, "ensure_live")
    record = {**intent, "lease_id": lease.lease_id, "fence": getattr(lease, "fence", None), "pid": os.getpid()}
    with LeaseKeeper(store, lease, interval=args.ttl / 3) as keeper:
        time.sleep(rnd.uniform(0.05, args.hold_max))
        try:
            if fenced:
                if hasattr(keeper, "wait_gate"):
                    keeper.wait_gate()  # order-aware admission: the leases this commit follows end first
                keeper.ensure_live()  # the last thing before the commit
        except LeaseLostError as exc:
            log.write({**record, "kind": "abort", "why": str(exc), "t": time.time()})
        else:
            log.write({**record, "kind": "commit", "t_commit": time.time()})
    with contextlib.suppress(Exception):  # the store is down: the lease lapses after its TTL
        store.release(lease)


def write_json(path: Path, record: dict[str, Any]) -> None:
    part = path.with_suffix(".part")
    part.write_text(json.dumps(record))
    os.replace(part, path)


def hold_and_write(store: LeaseStore, lease: Any, intent: dict[str, Any], args: argparse.Namespace,
                   rnd: random.Random, log: Log) -> None:
    """Hold the lease a while, then write the delta-rs table as an operator does
    (``DeltaRsTarget.run_attempt``), retrying a lost conflict from a fresh snapshot; log what
    happened. The marker says when the worker is inside the engine call (after its last check)."""
    # optional heavy dependencies (pyarrow, deltalake), needed in delta mode only
    import pyarrow as pa
    from deltalake import DeltaTable

    from occflow.core.declaration import WriteDeclaration
    from occflow.engines.deltars.target import DeltaRsTarget, DeltaRsWrite
    from occflow.engines.ledger import CommitRefused, FencedOut
    from occflow.engines.target import AttemptContext
    from occflow.operators.exactly_once import BeforeCommit

    ds = intent["footprint"][0]["ds"]
    record = {**intent, "lease_id": lease.lease_id, "fence": lease.fence, "pid": os.getpid()}
    # ids no other write (nor another try of this one: its generation differs) ever uses
    first_id = ((args.seed * 100_000 + int(intent["run_id"][1:])) * 10 + intent["try_number"]) * 100

    schema = pa.schema([("id", pa.int64()), ("ds", pa.string()), ("writer", pa.int64())])
    # An append or overwrite streams its rows: delta-rs pulls them inside write_deltalake, so the
    # worker marks itself and the engine pauses there, inside the engine call itself. A compaction
    # or delete gives no such hook: it does both right after its last check, as the call starts.
    streamed = intent["operation"] in ("insert_into", "insert_overwrite")

    def in_engine(where: str, files: int | None = None) -> None:
        write_json(args.marker, {"state": "in", "pid": os.getpid(), "lease_id": lease.lease_id, "where": where,
                                 "operation": intent["operation"], "ds": ds, "files": files, "t": time.time()})
        time.sleep(args.engine_pause)  # the engine at work (reading, rewriting files)

    def batches() -> Any:
        in_engine("write_deltalake, pulling the rows")
        ids = list(range(first_id, first_id + ROWS_PER_WRITE))
        yield pa.record_batch([pa.array(ids, pa.int64()), pa.array([ds] * len(ids), pa.string()),
                               pa.array([args.worker] * len(ids), pa.int64())], schema=schema)

    def rows(_context: Any, _snapshot: Any) -> Any:
        return pa.RecordBatchReader.from_batches(schema, batches())  # read by delta-rs, inside its call

    declaration = WriteDeclaration.create(intent["table"], intent["operation"], intent["profile"],
                                          partitions={"ds": ds})
    target = DeltaRsTarget(str(args.delta), write=DeltaRsWrite(data=rows), table_name=intent["table"])
    with LeaseKeeper(store, lease, interval=args.ttl / 3) as keeper:
        time.sleep(rnd.uniform(0.02, args.hold_max))
        check = BeforeCommit(keeper)
        checked = False  # per attempt: whether its last check passed

        def before_commit() -> None:
            nonlocal checked
            check()  # the gate, then the lease: the last check before the engine call
            checked = True

        def commit_fence() -> Any:
            fence = None if args.no_commit_fence else store.commit_fence(keeper.lease)
            if checked and not streamed:  # asked right after the last check: the call starts now
                # the partition's files (a compaction of one file or none commits nothing);
                # read here, never from inside delta-rs (its runtime cannot be re-entered)
                in_engine("after the last check, as the engine call starts",
                          sum(f"/ds={ds}/" in uri for uri in DeltaTable(str(args.delta)).file_uris()))
            return fence

        for number in (1, 2, 3):
            checked = False
            attempt = AttemptContext(number=number, before_commit=before_commit, fence=lease.fence,
                                     commit_fence=commit_fence)
            try:
                outcome = target.run_attempt(declaration, attempt)
            except FencedOut as exc:
                log.write({**record, "kind": "fenced_out", "why": str(exc), "t": time.time()})
                break
            except CommitRefused as exc:  # the lease lapsed before the engine call, or a gate timed out
                log.write({**record, "kind": "abort", "why": str(exc), "t": time.time()})
                break
            except Exception as exc:  # noqa: BLE001 - the store failed: logged, the worker goes on
                log.write({**record, "kind": "error", "why": f"{type(exc).__name__}: {exc}"[:1000], "t": time.time()})
                break
            finally:
                write_json(args.marker, {"state": "out", "pid": os.getpid(), "t": time.time()})
            kind = outcome.classification.kind if outcome.classification is not None else None
            if outcome.committed:
                log.write({**record, "kind": "commit", "version": outcome.version, "t_commit": time.time()})
                break
            conflict = kind is not None and kind.is_conflict
            log.write({**record, "kind": "lost" if conflict else "error", "attempt": number, "t": time.time(),
                       "why": f"{kind.value if kind is not None else ''}: {outcome.error}"[:1000]})
            if not conflict:
                break  # not a conflict: a retry would fail the same way
    with contextlib.suppress(Exception):  # the store is down: the lease lapses after its TTL
        store.release(lease)


def cycle(store: LeaseStore, intent: dict[str, Any], args: argparse.Namespace, rnd: random.Random,
          log: Log) -> None:
    holder = Holder(intent["dag_id"], intent["task_id"], intent["run_id"], intent["try_number"])
    # Writers that hold their commit at the gate may be admitted beside a lease they must
    # commit after (an occflow tree from before order-aware admission has no such option).
    gate = {"commit_gate": True} if "commit_gate" in inspect.signature(LeaseRequest.create).parameters else {}
    request = LeaseRequest.create(
        intent["table"], intent["operation"], intent["profile"], intent["footprint"],
        whole_table=intent["footprint"] is None, holder=holder, ttl=args.ttl, queue_ttl=60, **gate,
    )
    write_intent(args.intent, intent)
    lease = acquire(store, request, args.stop, rnd)
    if lease is not None:
        (hold_and_commit if args.delta is None else hold_and_write)(store, lease, intent, args, rnd, log)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("worker", type=int)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--intent", type=Path, required=True)
    parser.add_argument("--stop", type=Path, required=True)
    parser.add_argument("--ttl", type=float, default=3.0)
    parser.add_argument("--hold-max", type=float, default=0.6)
    parser.add_argument("--retry", action="store_true", help="first ask again for --intent as the next try")
    parser.add_argument("--unfenced", action="store_true", help="commit without ensure_live (as before fencing)")
    parser.add_argument("--delta", type=Path, help="write this delta-rs table for real (partition column ds)")
    parser.add_argument("--marker", type=Path, help="delta mode: where the worker says it is inside the engine")
    parser.add_argument("--engine-pause", type=float, default=0.3, help="delta mode: the engine's work, seconds")
    parser.add_argument("--no-commit-fence", action="store_true", help="delta mode: no commit fence (planted)")
    parser.add_argument("--control", action="store_true", help="delta mode: compactions and appends of ds=1")
    args = parser.parse_args()
    rnd = random.Random(args.seed)
    store = LeaseStore.from_url(args.url, history=True, create=False)
    log = Log(args.log)
    first = 0
    if args.retry:
        intent = json.loads(args.intent.read_text())
        intent["try_number"] += 1
        first = int(intent["run_id"][1:]) + 1
        cycle(store, intent, args, rnd, log)
    number = first
    while not args.stop.exists():
        intent = (random_intent(rnd, args.worker, number) if args.delta is None
                  else random_delta_intent(rnd, args.worker, number, args.control))
        cycle(store, intent, args, rnd, log)
        number += 1
    store.dispose()


if __name__ == "__main__":
    main()
