"""The differential oracle of issue 23 at length: N random SQL writes per engine, each run on a
real engine from the same base table, and every partition its commit really touched checked
against the footprint ``occflow.core.sqlderive.derive_write`` derived from its text.

    .venv/bin/python bench/fuzz_derivation.py --count 3000 --seed S [--engine iceberg|deltars|both] [--tables plain|typed|evolved|both|all]

Every derivation is given the table's partition column types (``column_types=``). ``plain``: the
table partitioned by two STRING columns (ds, region); ``typed``: p INT, d DATE, b BOOLEAN, hh
STRING holding digits, with every spelling of a value the engines cast (issue 33).

Reports per engine and table: statements generated, refused by the derivation
(``InvalidDeclarationError``; on the typed tables each is run too, and one the engine committed
is reported), derived as the whole table (they hold anything: not run), run on the engine,
rejected by the engine, run without changing a file, contained, **wider** (contained, and the
footprint holds a partition of the table the commit did not touch) and **narrower** (must be 0;
each one is printed as the statement the fuzzer shrank it to). Writes
bench/results/fuzz_derivation.json; exits 1 if any footprint was narrower or any refused
statement was committed. The generator and the oracle are in tests/engines/sqlgen.py.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "engines"))  # the generator and oracle live with the tests
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import machine  # noqa: E402
from sqlgen import DeltaRs, IcebergOnSpark, Tally, TypedDeltaRs, TypedIcebergOnSpark, fuzz  # noqa: E402
from sqlgen_evolved import evolved_engines, fuzz_evolved  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "fuzz_derivation.json"


def _progress(tally: Tally) -> None:
    print(f"  {tally.engine}: {tally.summary()}", flush=True)


def run_iceberg(seed: int, count: int, home: Path, tables: str) -> list[Tally]:
    from occflow.engines.spark import SparkConfig, SparkEngine  # optional heavy dependency

    engine = SparkEngine(SparkConfig(home=str(home), app_name="occflow-fuzz-derivation"))
    spark = engine.session()
    spark.sparkContext.setLogLevel("ERROR")
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")
    out: list[Tally] = []
    try:
        if tables in ("plain", "both", "all"):
            out.append(fuzz(IcebergOnSpark(spark), seed, count, "spark", progress=_progress))
        if tables in ("typed", "both", "all"):
            out.append(fuzz(TypedIcebergOnSpark(spark), seed, count, "spark", progress=_progress, run_refused=True))
        if tables in ("evolved", "all"):  # Delta has no partition evolution: Iceberg only
            out.append(fuzz_evolved(evolved_engines(spark), seed, count))
        return out
    finally:
        engine.stop()


def run_deltars(seed: int, count: int, home: Path, tables: str) -> list[Tally]:
    out: list[Tally] = []
    if tables in ("plain", "both", "all"):
        out.append(fuzz(DeltaRs(home / "delta"), seed, count, "deltars", progress=_progress))
    if tables in ("typed", "both", "all"):
        out.append(fuzz(TypedDeltaRs(home / "delta"), seed, count, "deltars", progress=_progress, run_refused=True))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=3000, help="statements per engine")
    parser.add_argument("--seed", type=int, default=None, help="default: a fresh one, printed")
    parser.add_argument("--engine", choices=["iceberg", "deltars", "both"], default="both")
    parser.add_argument("--tables", choices=["plain", "typed", "evolved", "both", "all"], default="both")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    print(f"seed {seed}, {args.count} statements per engine", flush=True)
    tallies: list[Tally] = []
    with tempfile.TemporaryDirectory(prefix="occflow-fuzz-") as tmp:
        home = Path(tmp)
        (home / "delta").mkdir()
        if args.engine in ("deltars", "both"):
            tallies += run_deltars(seed, args.count, home, args.tables)
        if args.engine in ("iceberg", "both"):
            tallies += run_iceberg(seed, args.count, home / "spark", args.tables)
    out: dict[str, Any] = {
        "what": "random SQL writes on real engines; touched partitions (engine metadata) vs derive_write's footprint",
        "seed": seed,
        "count": args.count,
        "machine": machine(),
        "results": [t.summary() | {"rejections": t.rejections} for t in tallies],
        "narrower": [f.describe() for t in tallies for f in t.narrower],
        "refused_but_committed": [{"engine": t.engine, "sql": sql, "why": why} for t in tallies for sql, why in t.refused_ran],
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    header = ("engine", "generated", "refused", "whole_table_not_run", "run", "rejected_by_engine", "no_change",
              "contained", "wider", "refused_but_committed", "narrower", "seconds")
    print(" ".join(f"{h:>12}" for h in header))
    for tally in tallies:
        row = tally.summary()
        print(" ".join(f"{row[h]!s:>12}" for h in header))
    for tally in tallies:
        for finding in tally.narrower:
            print(f"\nNARROWER ({tally.engine}, seed {seed}):\n{finding.describe()}")
        for sql, why in tally.refused_ran:
            print(f"\nREFUSED, BUT COMMITTED ({tally.engine}, seed {seed}):\n{sql}\n  {why}")
    print(f"written: {RESULTS.relative_to(ROOT)}")
    return 1 if any(t.narrower or t.refused_ran for t in tallies) else 0


if __name__ == "__main__":
    sys.exit(main())
