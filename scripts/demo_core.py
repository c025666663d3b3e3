"""The transaction core on its own: every profile's matrix, then a concurrent scenario.

Run: ``bash scripts/run.sh`` (or ``.venv/bin/python scripts/demo_core.py``).
"""

from __future__ import annotations

import random
import threading
from collections import Counter

from occflow.core.errors import CommitConflict
from occflow.core.profiles import PROFILES
from occflow.core.reference import ReferenceTable
from occflow.core.render import matrix_table


def concurrent_scenario(profile_name: str, seed: int = 7) -> None:
    """Eight threads run a mix of jobs on two partitions at once; print who lost to whom."""
    profile = PROFILES[profile_name]
    table = ReferenceTable(profile_name, partitions=["ds=2024-01-01", "ds=2024-01-02"])
    seed_op = next((op for op in profile.operations if op.value == "insert_into"), profile.operations[0])
    table.run(seed_op, None)
    rng = random.Random(seed)
    jobs = [(rng.choice(profile.operations), rng.choice(table.snapshot().partitions)) for _ in range(8)]
    txns = [table.begin(op, [part]) for op, part in jobs]
    barrier = threading.Barrier(len(txns))
    outcomes: dict[str, str] = {}

    def commit(txn):  # type: ignore[no-untyped-def]
        barrier.wait()
        try:
            c = txn.commit()
            outcomes[txn.txn_id] = f"committed version {c.version}" + (" (meta-level retry)" if c.rebased else "")
        except CommitConflict as exc:
            outcomes[txn.txn_id] = f"FAILED {exc.kind.value}: lost to {exc.winner.describe() if exc.winner else '?'}"

    threads = [threading.Thread(target=commit, args=(t,)) for t in txns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"\n== concurrent scenario on {profile_name}: 8 jobs started on version 1, committing at once")
    for txn in txns:
        part = next(iter(txn.footprint.write_partitions or {"*"}))
        print(f"  {txn.txn_id:4} {txn.operation.value:17} {part:15} {outcomes[txn.txn_id]}")
    kinds = Counter(
        "committed" if v.startswith("committed") else v.split(":")[0].removeprefix("FAILED ")
        for v in outcomes.values()
    )
    print(f"  versions: {[c.version for c in table.history]}; outcome counts: {dict(kinds)}")
    print(f"  rows now: {table.snapshot().row_count()}")


def main() -> None:
    for profile in PROFILES.values():
        print()
        print(matrix_table(profile))
    for name in PROFILES:
        concurrent_scenario(name)


if __name__ == "__main__":
    main()
