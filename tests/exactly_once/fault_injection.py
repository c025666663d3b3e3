"""Fault injection for exactly-once writes on real engines (used by the tests and the bench).

A *logical write* ``n`` appends ``ROWS_PER_WRITE`` rows with ids ``n*100 .. n*100+k`` to a real
table. It runs as a task would under Airflow: tries (a new process or a new call, numbered from
1), each with in-task attempts that ``occflow.operators.exactly_once.ExactlyOnce`` guards and the real
write policy (``derive_policy``) retries. A fault is injected into the first attempt of the
first try, at the engine boundary, around the real engine call:

- ``kill``: the process is SIGKILLed right after the engine committed, before anything records
  success (run the try as a subprocess: ``python faults.py ...``);
- ``unknown_after``: the engine committed, then the call raises Iceberg's
  ``CommitStateUnknownException`` text (commit landed, caller told "unknown");
- ``unknown_before``: the same error, but the commit never happened;
- ``timeout_after``: the engine committed, then the call raises a timeout (not a conflict: the
  task fails and the next try runs, as Airflow would retry it);
- ``crash_after``: the engine committed, then the try dies with an exception nothing handles
  (what a killed worker looks like to an in-process caller).

Counting rows per write afterwards tells duplicates (more than k rows) and lost writes (none).

Run one try in a subprocess::

    python tests/exactly_once/fault_injection.py deltars PATH WRITE_NO TRY_NO FAULT
    python tests/exactly_once/fault_injection.py iceberg SPARK_CONFIG_JSON TABLE WRITE_NO TRY_NO FAULT
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from occflow.core.policy import Action, derive_policy
from occflow.engines.ledger import CommitLedger
from occflow.engines.outcome import WriteOutcome
from occflow.engines.tags import CommitTag
from occflow.operators.exactly_once import ExactlyOnce

ROWS_PER_WRITE = 3
FAULTS = ("kill", "unknown_after", "unknown_before", "timeout_after", "crash_after")
UNKNOWN_TEXT = (
    "org.apache.iceberg.exceptions.CommitStateUnknownException: injected by occflow's fault tests\n"
    "Cannot determine whether the commit was successful or not, the underlying data files may or "
    "may not be needed."
)
KILLED = -signal.SIGKILL


class InjectedCommitStateUnknown(RuntimeError):
    """Raised at the engine boundary: the text Iceberg's CommitStateUnknownException carries."""


class InjectedTimeout(TimeoutError):
    """The engine call timed out (after or before its commit landed)."""


class InjectedCrash(BaseException):
    """The try dies after the commit; BaseException so no ``except Exception`` swallows it."""


def ids_of(write_no: int) -> list[int]:
    return [write_no * 100 + i for i in range(ROWS_PER_WRITE)]


def tag_of(write_no: int, operation: str = "insert_into") -> CommitTag:
    return CommitTag.create(
        "exactly_once_faults", "append", f"run-{write_no:04d}", operation,
        logical_date="2024-01-01T00:00:00+00:00",
    )


def with_fault(attempt: Callable[[], WriteOutcome], fault: str | None) -> Callable[[], WriteOutcome]:
    """``attempt`` with ``fault`` injected around the real engine call."""
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")

    def faulty() -> WriteOutcome:
        if fault == "unknown_before":
            raise InjectedCommitStateUnknown(UNKNOWN_TEXT)
        outcome = attempt()
        if not outcome.committed or fault is None:
            return outcome
        if fault == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if fault == "unknown_after":
            raise InjectedCommitStateUnknown(UNKNOWN_TEXT)
        if fault == "timeout_after":
            raise InjectedTimeout("the commit call timed out (injected after the commit landed)")
        if fault == "crash_after":
            raise InjectedCrash("the try died after the commit (injected)")
        return outcome

    return faulty


@dataclass(frozen=True)
class TryResult:
    """What one try ended with: committed (and how), or failed for Airflow to retry."""

    committed: bool
    attempts: int
    verified: bool = False  # the commit was found by verification, not made by this try
    version: int | None = None
    snapshot_id: int | None = None
    reason: str = ""


def run_try(
    ledger: CommitLedger,
    tag: CommitTag,
    attempt: Callable[[], WriteOutcome],
    *,
    try_number: int,
    fault: str | None,
    profile: str,
    max_attempts: int = 4,
    blind: bool = False,
) -> TryResult:
    """One try of the task: guarded attempts while the real write policy says retry.

    ``blind=True`` is the control: no tag, no verification, every failure retried, as a plain
    retry loop would (it duplicates writes; the bench shows how often).
    """
    if blind:
        for number in range(1, max_attempts + 1):
            job = with_fault(attempt, fault) if (try_number == 1 and number == 1) else attempt
            try:
                outcome = job()
            except (InjectedCommitStateUnknown, InjectedTimeout):
                continue
            if outcome.committed:
                return TryResult(True, number, False, outcome.version, outcome.snapshot_id, "blind")
        return TryResult(False, max_attempts, reason="attempts exhausted")
    guard = ExactlyOnce(ledger, tag)
    policy = derive_policy(profile, tag.operation)
    for number in range(1, max_attempts + 1):
        job = with_fault(attempt, fault) if (try_number == 1 and number == 1) else attempt
        try:
            outcome = guard.run(job, verify_first=try_number > 1 or number > 1)
        except InjectedTimeout as exc:
            return TryResult(False, number, reason=f"not a conflict, left to Airflow: {exc}")
        if outcome.committed:
            found = outcome.found
            return TryResult(True, number, found is not None, outcome.version, outcome.snapshot_id,
                             "committed" if found is None else found.reason)
        assert outcome.classification is not None, outcome
        decision = policy.decide(outcome.classification, number)
        if decision.action is not Action.RETRY:
            return TryResult(False, number, reason=decision.reason)
    return TryResult(False, max_attempts, reason="attempts exhausted")


# ---------------------------------------------------------------------------------------------
# The two engines


def deltars_attempt(path: str, write_no: int) -> tuple[CommitLedger, Callable[[], WriteOutcome]]:
    import pyarrow as pa  # type: ignore[import-untyped]

    from occflow.engines.deltars import DeltaRsLedger, DeltaRsTable

    table = DeltaRsTable(path)
    ids = ids_of(write_no)
    data = pa.table({"id": pa.array(ids, pa.int64()), "w": pa.array([write_no] * len(ids), pa.int64())})
    return DeltaRsLedger(table), lambda: table.append(data)


def deltars_try(path: str, write_no: int, try_number: int, fault: str | None, blind: bool = False) -> TryResult:
    ledger, attempt = deltars_attempt(path, write_no)
    return run_try(ledger, tag_of(write_no), attempt, try_number=try_number, fault=fault,
                   profile="delta-write-serializable", blind=blind)


def deltars_rows(path: str) -> list[int]:
    from deltalake import DeltaTable

    return [int(r["w"]) for r in DeltaTable(path).to_pyarrow_table(columns=["w"]).to_pylist()]


def create_deltars_table(path: str) -> None:
    import pyarrow as pa

    from occflow.engines.deltars import DeltaRsTable

    done = DeltaRsTable(path).create(pa.table({"id": pa.array([], pa.int64()), "w": pa.array([], pa.int64())}))
    assert done.committed, done


def iceberg_attempt(engine: Any, table: str, write_no: int) -> tuple[CommitLedger, Callable[[], WriteOutcome]]:
    from occflow.engines.spark import IcebergLedger

    values = ", ".join(f"({i}, {int(write_no)})" for i in ids_of(write_no))
    sql = f"INSERT INTO {table} VALUES {values}"
    return IcebergLedger(engine.session(), table), lambda: engine.run(sql, table)


def iceberg_try(engine: Any, table: str, write_no: int, try_number: int, fault: str | None) -> TryResult:
    ledger, attempt = iceberg_attempt(engine, table, write_no)
    return run_try(ledger, tag_of(write_no), attempt, try_number=try_number, fault=fault,
                   profile="iceberg-serializable")


def iceberg_rows(spark: Any, table: str) -> list[int]:
    return [int(r[0]) for r in spark.sql(f"SELECT w FROM {table}").collect()]


def session_config(spark: Any, catalog: str = "lake") -> dict[str, Any]:
    """A ``SparkConfig`` dict for another driver on the same Iceberg catalog as ``spark``."""
    conf = spark.sparkContext.getConf()
    uri = conf.get(f"spark.sql.catalog.{catalog}.uri", None)
    warehouse = conf.get(f"spark.sql.catalog.{catalog}.warehouse", None)
    return {
        "app_name": "occflow-fault-try",
        "catalog": {"name": catalog, "uri": uri, "warehouse": warehouse},
        "conf": {"spark.driver.memory": "1g"},
    }


def count(rows: list[int], writes: range) -> dict[str, Any]:
    """Duplicates (writes with more rows than they wrote) and lost writes (no rows at all)."""
    per_write = {n: rows.count(n) for n in writes}
    duplicated = sorted(n for n, c in per_write.items() if c > ROWS_PER_WRITE)
    lost = sorted(n for n, c in per_write.items() if c == 0)
    partial = sorted(n for n, c in per_write.items() if 0 < c < ROWS_PER_WRITE)
    strays = sorted(set(rows) - set(writes))
    return {"writes": len(per_write), "rows": len(rows), "duplicated_writes": duplicated,
            "lost_writes": lost, "partial_writes": partial, "stray_rows": strays}


def main(argv: list[str]) -> int:
    """One try in this process; prints the ``TryResult`` as JSON (unless the fault kills it)."""
    if argv[:1] == ["deltars"] and len(argv) == 5:
        _, path, write_no, try_no, fault = argv
        result = deltars_try(path, int(write_no), int(try_no), None if fault == "none" else fault)
    elif argv[:1] == ["iceberg"] and len(argv) == 6:
        _, config, table, write_no, try_no, fault = argv
        from occflow.engines.spark import SparkConfig, SparkEngine

        engine = SparkEngine(SparkConfig.from_dict(json.loads(config)))
        engine.session().sparkContext.setLogLevel("ERROR")
        try:
            result = iceberg_try(engine, table, int(write_no), int(try_no), None if fault == "none" else fault)
        finally:
            engine.stop()
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(result.__dict__))
    return 0 if result.committed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
