"""``occflow explain`` prints its conflict table without importing tabulate (0.1 s of its start):
the table must read exactly as tabulate's "simple" format would print it (the oracle here)."""

from __future__ import annotations

import random

from tabulate import tabulate

from occflow.cli.explain import _plain_table

HEADERS = ("operation", "", "this job commits first", "it commits first")
CELLS = ["merge", "conflict", "-", "fails (concurrent_append)", "commits", "", "ä ü", "x" * 40]


def test_the_table_reads_as_tabulate_prints_it() -> None:
    rnd = random.Random(20261126)
    for _ in range(300):
        rows = [tuple(rnd.choice(CELLS) + "y" * rnd.randint(0, 3) for _ in HEADERS) for _ in range(rnd.randint(1, 9))]
        assert _plain_table(rows, HEADERS) == tabulate(
            rows, headers=HEADERS, tablefmt="simple", disable_numparse=True
        ).splitlines(), rows
