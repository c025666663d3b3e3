"""Evolved Iceberg partition specs for the derivation fuzzer (issue 33, items 2 and 5).

Each table of ``EVOLUTIONS`` holds the fuzzer's rows (``id, ds, region, v``), some written under
an older partition spec and the rest under the current one after ``ALTER TABLE ... ADD / DROP /
REPLACE PARTITION FIELD``, so live files of every older spec remain. A statement's footprint is
derived from its SQL with the current spec's partition columns and then goes through
``TableFacts.reach`` with the facts occflow's Spark reader reads from the real table, as
``SparkWriteOperator.declare_from_table`` does (``through_reach=False``: the derivation alone,
the control that shows the oracle catches an old-spec rewrite).

The oracle reads the ``files`` metadata table with code of its own: a file of the current spec
is its current partition (as ``sqlgen`` reads one); a file of an older spec is an
``OldSpecFile``, held by a footprint only if it holds the current partitions of every row of
that old partition (read from the rows, by Iceberg's ``_file`` column): a file is what two writes
conflict on. Which spec id is which is learnt while the table is built: the spec id of the files
each stage's insert added, beside the fields the stage declared.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlgen import BASE_ROWS, IcebergOnSpark, OldSpecFile, Row, Tally, _values, fuzz

from occflow.core.tablefacts import TableFacts


@dataclass(frozen=True)
class Stage:
    """``alter``: the partition field changes made before this stage (``ADD PARTITION FIELD
    region``); ``identity``: the identity fields of the spec they leave (the oracle's own account,
    checked against the files); ``rows``: which of ``BASE_ROWS`` this stage inserts."""

    alter: tuple[str, ...]
    identity: tuple[str, ...]
    rows: Callable[[Row], bool]


@dataclass(frozen=True)
class Evolution:
    name: str
    partitioned_by: str  # the CREATE TABLE's clause; "" for an unpartitioned first spec
    stages: tuple[Stage, ...]

    def current(self) -> tuple[str, ...]:
        return self.stages[-1].identity


def _odd(row: Row) -> bool:
    return row[0] % 2 == 1


#: Every row lands in exactly one stage (a MERGE meets each target id once). Old-spec rows are
#: chosen so that some current-spec partitions have no old-spec file (a write pinned there keeps
#: a narrow footprint and runs) and others share one with old-spec files (it reaches them).
EVOLUTIONS: tuple[Evolution, ...] = (
    # The case: a column added; ds=2024-01-03 only under the current spec.
    Evolution("add", "PARTITIONED BY (ds)", (
        Stage((), ("ds",), lambda r: r[1] != "2024-01-03" and _odd(r)),
        Stage(("ADD PARTITION FIELD region",), ("ds", "region"), lambda r: not (r[1] != "2024-01-03" and _odd(r))),
    )),
    # A column dropped: the old files are keyed by (ds, region), the current ones by region; ap
    # only under the current spec.
    Evolution("drop", "PARTITIONED BY (ds, region)", (
        Stage((), ("ds", "region"), lambda r: r[2] == "eu" or (r[2] == "us" and r[1] == "2024-01-01")),
        Stage(("DROP PARTITION FIELD ds",), ("region",), lambda r: not (r[2] == "eu" or (r[2] == "us" and r[1] == "2024-01-01"))),
    )),
    # One column replaced by the other: no column in common, so every row-level write reaches
    # the old files; an INSERT OVERWRITE of a day may still delete a whole old file (its rows
    # all of that day).
    Evolution("replace", "PARTITIONED BY (region)", (
        Stage((), ("region",), lambda r: r[1] == "2024-01-01"),
        Stage(("REPLACE PARTITION FIELD region WITH ds",), ("ds",), lambda r: r[1] != "2024-01-01"),
    )),
    # Unpartitioned at first: old files pin nothing.
    Evolution("unpartitioned", "", (
        Stage((), (), lambda r: r[1] == "2024-01-01" and _odd(r)),
        Stage(("ADD PARTITION FIELD ds", "ADD PARTITION FIELD region"), ("ds", "region"),
              lambda r: not (r[1] == "2024-01-01" and _odd(r))),
    )),
    # Three specs: a bucket transform in the middle one pins no region value.
    Evolution("transform", "PARTITIONED BY (ds)", (
        Stage((), ("ds",), lambda r: r[1] == "2024-01-01" and _odd(r)),
        Stage(("ADD PARTITION FIELD bucket(2, region)",), ("ds",), lambda r: r[1] == "2024-01-02" and _odd(r)),
        Stage(("REPLACE PARTITION FIELD bucket(2, region) WITH region",), ("ds", "region"),
              lambda r: not (r[1] in ("2024-01-01", "2024-01-02") and _odd(r))),
    )),
)


class EvolvedIcebergOnSpark(IcebergOnSpark):
    """One evolved table (``evolution``, copy-on-write or merge-on-read) in a Spark session, reset
    to its base snapshot after every statement; its partition columns are the current spec's."""

    engine = "spark-iceberg"
    nulls_below = True

    def __init__(self, spark: Any, evolution: Evolution, mode: str, *, through_reach: bool = True,
                 database: str = "lake.db", prefix: str = "fz_evo") -> None:
        self.spark, self.evolution, self.mode, self.through_reach = spark, evolution, mode, through_reach
        self.name = f"iceberg-evolved-{evolution.name}-{mode}"
        self.columns = evolution.current()
        self.column_types: Mapping[str, str] = {c: "string" for c in self.columns}
        self.tables = (f"{database}.{prefix}_{evolution.name}_{'cow' if mode == 'copy-on-write' else 'mor'}",)
        self.base: dict[str, int] = {}
        self.base_files: dict[str, dict[str, Any]] = {}
        self.facts: dict[str, TableFacts] = {}
        self.spec_identity: dict[int, tuple[str, ...]] = {}
        self.old_rows: dict[tuple[int, Any], frozenset[tuple[str | None, ...]]] = {}
        self.commits = 0
        for table in self.tables:
            self._create(table)
        self.base_partitions = tuple(sorted(
            {p for p in self.base_files[self.tables[0]].values() if not isinstance(p, OldSpecFile)}, key=str))

    def _create(self, table: str) -> None:
        from occflow.engines.spark.facts import spark_table_facts  # optional heavy dependency (Spark)

        spark, mode = self.spark, self.mode
        spark.sql(f"DROP TABLE IF EXISTS {table}")
        spark.sql(
            f"CREATE TABLE {table} (id BIGINT, ds STRING, region STRING, v INT) USING iceberg "
            f"{self.evolution.partitioned_by} TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='{mode}', "
            f"'write.update.mode'='{mode}', 'write.merge.mode'='{mode}')"
        )
        self.spec_identity = {}
        for stage in self.evolution.stages:
            for change in stage.alter:
                spark.sql(f"ALTER TABLE {table} {change}")
            before = {r[0] for r in spark.sql(f"SELECT file_path FROM {table}.files").collect()}
            spark.sql(f"INSERT INTO {table} VALUES {_values([r for r in BASE_ROWS if stage.rows(r)])}")
            added = {int(r[1]) for r in spark.sql(f"SELECT file_path, spec_id FROM {table}.files").collect()
                     if r[0] not in before}
            assert len(added) == 1, (table, stage, added)  # one insert writes under one spec
            self.current_spec = added.pop()
            self.spec_identity[self.current_spec] = stage.identity
        self.base[table] = self._current(table)
        self.old_rows = self._old_rows(table)
        self.base_files[table] = self._files(table)
        # occflow's own reader on the real table, as the operator reads it before admission.
        self.facts[table] = spark_table_facts(spark, table)

    def table_facts(self, table: str) -> TableFacts | None:
        return self.facts[table] if self.through_reach else None

    def _raw_files(self, table: str) -> dict[str, tuple[int, tuple[tuple[str, str | None], ...] | tuple[str | None, ...]]]:
        """Each live file's spec id and partition: a current-spec file's values in ``columns``
        order, an older spec's identity fields (column, value), as the ``files`` table records them."""
        out: dict[str, Any] = {}
        for row in self.spark.sql(f"SELECT file_path, spec_id, partition FROM {table}.files").collect():
            spec_id = int(row["spec_id"])
            values = {} if row["partition"] is None else row["partition"].asDict()
            if spec_id not in self.spec_identity:
                raise AssertionError(f"{table}: a file of spec {spec_id}, which no stage wrote: {row}")
            if spec_id == self.current_spec:
                out[row["file_path"]] = (spec_id, tuple(values[c] for c in self.columns))
            else:
                out[row["file_path"]] = (spec_id, tuple((c, values[c]) for c in self.spec_identity[spec_id]))
        return out

    def _old_rows(self, table: str) -> dict[tuple[int, Any], frozenset[tuple[str | None, ...]]]:
        """(spec id, identity values) of each old-spec partition of the base table -> the current
        partitions of the rows its files hold (the rows' own values, by Iceberg's ``_file``)."""
        files = self._raw_files(table)
        cols = ", ".join(self.columns)
        out: dict[tuple[int, Any], set[tuple[str | None, ...]]] = {}
        for row in self.spark.sql(f"SELECT DISTINCT _file, {cols} FROM {table}").collect():
            spec_id, values = files[row[0]]
            if spec_id != self.current_spec:
                out.setdefault((spec_id, values), set()).add(tuple(row[1:]))
        return {k: frozenset(v) for k, v in out.items()}

    def _files(self, table: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for path, (spec_id, values) in self._raw_files(table).items():
            if spec_id == self.current_spec:
                out[path] = values
                continue
            # A delete file of an old spec (merge-on-read) deletes rows of that old partition's
            # data files; none of a partition the base table did not hold.
            if (spec_id, values) not in self.old_rows:
                raise AssertionError(f"{table}: a spec {spec_id} file of {values}, a partition the base held no rows of")
            out[path] = OldSpecFile(spec_id, values, self.old_rows[(spec_id, values)])
        return out


def evolved_engines(spark: Any, *, evolutions: Sequence[Evolution] = EVOLUTIONS,
                    modes: Sequence[str] = ("copy-on-write", "merge-on-read"),
                    through_reach: bool = True, prefix: str = "fz_evo") -> list[EvolvedIcebergOnSpark]:
    return [EvolvedIcebergOnSpark(spark, e, m, through_reach=through_reach, prefix=prefix)
            for e in evolutions for m in modes]


def fuzz_evolved(engines: Sequence[EvolvedIcebergOnSpark], seed: int, count: int,
                 shrink_findings: bool = True) -> Tally:
    """``count`` statements spread over ``engines`` (seed ``seed + i`` for the i-th), summed into
    one tally per engine kind (``iceberg-evolved``); a finding keeps its own table's statement."""
    total = Tally("iceberg-evolved", seed)
    for i, engine in enumerate(engines):
        share = count // len(engines) + (1 if i < count % len(engines) else 0)
        tally = fuzz(engine, seed + i, share, "spark", shrink_findings=shrink_findings)
        for name in ("generated", "refused", "whole_table", "run", "rejected", "no_change", "contained", "wider",
                     "seconds"):
            setattr(total, name, getattr(total, name) + getattr(tally, name))
        total.narrower += tally.narrower
        total.refused_ran += tally.refused_ran
        for kind, n in tally.rejections.items():
            total.rejections[kind] = total.rejections.get(kind, 0) + n
    return total
