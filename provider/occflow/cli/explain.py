"""``occflow explain SQL``: the write a SQL job declares, derived from its text and its table.

The table is given (``--table-format`` with ``--partition-columns`` and ``--property``) or read
from its engine (``--delta-location`` through delta-rs, ``--spark`` / ``--spark-conf`` on a local
Spark session); its facts decide the profile. The output names the operation, the partitions
(or the whole table), whether the job reads its target, the profile and why, the operations it
conflicts with under that profile, and, for each ``--against`` job, whether it may start while
that one runs: the one admission rule the lease store and the simulator apply
(``core.admission_rule.rule``: the footprints' reach on the engine, the matrix cells in both
commit orders, and with commit gates the order they keep), with a reason that says what decided.
Each job is keyed as ``SparkWriteOperator.declare`` keys it for its lease: by the table's reach
(``TableFacts.reach``: an older Iceberg spec with live files or the session's runtime file filter
make it the whole table, Delta column mapping keys it by physical columns), whose reasons join
``why``. A MaxCompute table
(``--table-format maxcompute*``) is read as ``MaxComputeWriteOperator`` reads its SQL
(``engines.maxcompute.sql``): MaxCompute's ``ALTER TABLE t [PARTITION (...)] COMPACT MINOR | MAJOR``
and ``... MERGE SMALLFILES`` (``core.sqlread.read_alter_write``), a MERGE held to UPDATE's row.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.admission_rule import Claim, Pairing, Ruling, Running, Verdict, rule
from ..core.declaration import partition_key
from ..core.engines import table_kind, table_kinds
from ..core.errors import InvalidDeclarationError
from ..core.footprint import footprints_overlap
from ..core.identifiers import canonical_table
from ..core.operations import Operation
from ..core.profiles import Cell, Profile
from ..core.ranges import spec_json
from ..core.sqlderive import DerivedWrite, derive_write
from ..core.sqlread import (
    MAXCOMPUTE_ALTER_FORMS,
    is_maxcompute_alter,
    job_text,
    read_alter_write,
    read_sql_write,
    shorten,
    split_statements,
)
from ..core.tablefacts import Reach, TableFacts
from ..engines import deltars as deltars_engine  # its modules load on first use (--delta-location)
from ..engines import spark as spark_engine  # its modules load on first use (--spark)
from ..engines.maxcompute.sql import read_maxcompute_write
from . import SUBCOMMANDS


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "explain",
        help=SUBCOMMANDS["explain"].help,
        description="Derive a SQL write job's declaration (operation, table, partitions or the whole "
        "table, whether it reads its target) and the profile its table's facts give, and say which "
        "operations it conflicts with. Name the table's format, or look the table up on its engine.",
    )
    p.add_argument("sql", help="the SQL job: its text, @FILE to read it from a file, or - for stdin")
    given = p.add_argument_group("the table, as given")
    given.add_argument("--table-format", choices=list(table_kinds()), help="the table's format (or engine)")
    given.add_argument("--partition-columns", default="", metavar="COL,COL", help="identity partition columns")
    given.add_argument("--partition-type", action="append", default=[], metavar="COL=TYPE",
                       help="a partition column's type (int, string, date, boolean, ...): literals are "
                       "keyed by the value the engine compares, p = '07' on an INT column is p=7 (repeatable)")
    given.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                       help="a table property, e.g. delta.isolationLevel=Serializable (repeatable)")
    looked_up = p.add_argument_group("the table, read from its engine")
    looked_up.add_argument("--delta-location", metavar="PATH_OR_URI", help="a Delta table, read by delta-rs")
    looked_up.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                           help="a delta-rs storage option (repeatable)")
    looked_up.add_argument("--spark", action="store_true",
                           help="look the table up on a local Spark session (occflow's embedded Iceberg catalog)")
    looked_up.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                           help="a Spark setting for that session (repeatable; implies --spark)")
    p.add_argument("--against", action="append", default=[], metavar="SQL",
                   help="another SQL job (text, @FILE): may the two run together? (repeatable)")
    p.add_argument("--commit-gate", action=argparse.BooleanOptionalAction, default=True,
                   help="for --against: both writes hold their commit at the lease's gate, as occflow's "
                   "operators do, so a pair clean in one commit order runs together in that order "
                   "(default); --no-commit-gate: any failing commit order keeps them apart")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=_explain)


@dataclass(frozen=True)
class Explained:
    """One SQL job's derived write on its table, the profile its table's facts give, and the
    table's reach: the partitions admission keys it by once the table itself is counted."""

    sql: str
    derived: DerivedWrite
    facts: TableFacts
    profile: Profile
    table_reach: Reach

    @property
    def why(self) -> tuple[str, ...]:
        return (*self.derived.why, *self.facts.why(self.derived.operation), *self.table_reach.why)

    @property
    def widened(self) -> bool:
        """The table's reach is not the SQL's own partitions (wider, or keyed by other columns)."""
        return bool(self.table_reach.why)

    @property
    def claim(self) -> Claim:
        """What its lease would claim: the operation on the table's reach of its partitions (or
        the whole table), keyed as ``LeaseRequest.from_declaration`` keys a declaration."""
        parts = self.table_reach.partitions
        return Claim(self.profile, self.derived.operation, None if parts is None else frozenset(map(partition_key, parts)))

    @property
    def reach(self) -> frozenset[str] | None:
        """The partitions its commit is validated against (``None``: the whole table)."""
        return self.claim.reach

    def reach_json(self) -> dict[str, Any]:
        """The table's reach: the partitions admission keys the job by (``null``: the whole
        table) and why they differ from the SQL's (empty: they do not)."""
        parts = self.table_reach.partitions
        return {"partitions": None if parts is None else [spec_json(p) for p in parts], "why": list(self.table_reach.why)}

    def to_json(self) -> dict[str, Any]:
        out = dict(self.derived.to_json())
        out.update(profile=self.profile.name, why=list(self.why), table_reach=self.reach_json(),
                   table_facts=self.facts.to_json())
        return out


def _explain(args: argparse.Namespace) -> int:
    sql = read_job(args.sql)
    maxcompute = args.table_format is not None and table_kind(args.table_format).table_format == "maxcompute"
    table = written_table(sql, maxcompute)
    facts = table_facts(args, table)
    job = explain_job(sql, facts)
    against = [compare(job, explain_other(read_job(text), facts), commit_gate=args.commit_gate) for text in args.against]
    if args.format == "json":
        out = job.to_json()
        out["conflicts_with"] = conflicts_with(job)
        out["against"] = against
        print(json.dumps(out, indent=2, default=str))
    else:
        print(render_text(job, against))
    return 0


def read_job(text: str) -> str:
    """The SQL text: given, ``@FILE``, or ``-`` (stdin)."""
    if text == "-":
        return sys.stdin.read()
    if text.startswith("@"):
        path = Path(text[1:])
        if not path.is_file():
            raise InvalidDeclarationError(f"SQL file {text[1:]!r} does not exist (write @FILE with a readable file)")
        return path.read_text()
    return text


def written_table(sql: str, maxcompute: bool = False) -> str:
    """The table the job writes, read as ``core.sqlread`` reads it; MaxCompute's ALTER TABLE ...
    COMPACT / MERGE SMALLFILES (which Spark SQL has not) read by ``read_alter_write``; on a
    MaxCompute table (``maxcompute``) read as ``MaxComputeWriteOperator`` reads it."""
    if maxcompute:
        return read_maxcompute_write(sql, None).table
    text, allow_settings = job_text(sql)
    statements = split_statements(text)
    if any(is_maxcompute_alter(s) for s in statements):
        if len(statements) != 1:
            raise InvalidDeclarationError(
                f"SQL job holds {len(statements)} statements ({'; '.join(shorten(s) for s in statements)}): "
                f"a MaxCompute ALTER TABLE write runs alone ({MAXCOMPUTE_ALTER_FORMS})"
            )
        return read_alter_write(statements[0]).table
    return read_sql_write(text, allow_settings).table


def table_facts(args: argparse.Namespace, table: str) -> TableFacts:
    """The table's facts from the one source the command line names."""
    spark = bool(args.spark or args.spark_conf)
    sources = [name for name, given in (("--table-format", args.table_format), ("--delta-location",
               args.delta_location), ("--spark/--spark-conf", spark)) if given]
    if len(sources) != 1:
        raise InvalidDeclarationError(
            ("name the table once: " + " or ".join(sources) if sources else "name the table: ")
            + "--table-format FORMAT (with --partition-columns), --delta-location PATH, or --spark / --spark-conf"
        )
    if args.delta_location:
        options = pairs(args.storage_option, "--storage-option") or None
        try:
            return deltars_engine.deltars_table_facts(args.delta_location, options, table)
        except InvalidDeclarationError:
            raise
        except Exception as exc:  # noqa: BLE001 - delta-rs's errors (no table there, no access) end the command
            raise InvalidDeclarationError(f"cannot read the Delta table at {args.delta_location}: {exc}") from exc
    if spark:
        return spark_engine.spark_table_facts(spark_session(pairs(args.spark_conf, "--spark-conf")), table)
    kind = table_kind(args.table_format)
    columns = tuple(c.strip() for c in args.partition_columns.split(",") if c.strip())
    return TableFacts(table, kind.table_format, kind.engine, columns, {**kind.properties, **pairs(args.property, "--property")},
                      partition_column_types=pairs(args.partition_type, "--partition-type"))


def spark_session(conf: dict[str, str]) -> Any:
    """A local session of occflow's embedded default config with ``conf`` on top (a running
    session of this process is reused when its catalog settings agree)."""
    return spark_engine.SparkEngine(spark_engine.SparkConfig(conf=conf, app_name="occflow-explain")).session()


def pairs(items: Sequence[str], option: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidDeclarationError(f"{option} {item!r}: write KEY=VALUE")
        found[key.strip()] = value.strip()
    return found


def explain_job(sql: str, facts: TableFacts) -> Explained:
    if facts.table_format == "maxcompute":
        # As MaxComputeWriteOperator reads it: its ALTER TABLE writes, MERGE held to UPDATE's row.
        derived = read_maxcompute_write(sql, facts.partition_columns)
    else:
        written_table(sql)  # the job's one statement, read before anything is derived from it
        text, _ = job_text(sql)
        if any(is_maxcompute_alter(s) for s in split_statements(text)):
            raise InvalidDeclarationError(
                f"{shorten(text)!r} is MaxCompute's ALTER TABLE write, not {facts.table_format} SQL: "
                "explain it with --table-format maxcompute-transactional (or maxcompute)"
            )
        derived = derive_write(sql, facts.partition_columns, facts.engine, column_types=facts.partition_column_types)
    # The reach SparkWriteOperator.declare leases: the same function on the same facts.
    return Explained(sql, derived, facts, facts.profile(derived.operation), facts.reach(derived.operation, derived.partitions))


def explain_other(sql: str, facts: TableFacts) -> Explained | str:
    """Another job: explained on the same table's facts, or the table it writes instead."""
    table = written_table(sql, facts.table_format == "maxcompute")
    if canonical_table(table) != canonical_table(facts.table):
        return table
    return explain_job(sql, facts)


def compare(job: Explained, other: Explained | str, *, commit_gate: bool = True) -> dict[str, Any]:
    """Whether ``job`` may start while ``other`` runs, by the one admission rule the lease store
    and the simulator apply (``core.admission_rule.rule``, ``other`` as the running write).
    ``commit_gate``: both hold their commit at the lease's gate, as occflow's operators do, so a
    pair clean in one commit order only runs together with that order held; without it every
    failing cell keeps them apart. Both are keyed by the table's reach, as their leases are.

    ``conflict``: admission keeps them apart (``admission``: ``blocked``); ``admission`` is the
    ruling (``granted``, ``awaits``: this job's commit waits for the other's, ``holds``: the
    other's commit waits for this job's, ``blocked``). The reason names what decided: disjoint
    partitions, an operation whose commit the engine validates against the whole table
    (delta-rs's appends and OPTIMIZE), the table's reach (older specs, the runtime filter), the
    matrix cells, and the commit order kept."""
    if isinstance(other, str):
        return {"table": other, "conflict": False, "admission": Verdict.GRANTED.value, "commit_gate": commit_gate,
                "reason": f"writes {other}, not {job.facts.table}"}
    mine, theirs = job.claim, other.claim
    ruling = rule(mine, [Running("other", theirs, commit_gate)], commit_gate=commit_gate)
    overlap = footprints_overlap(mine.partitions, theirs.partitions)
    meet = footprints_overlap(mine.reach, theirs.reach)
    clash = mine.blocks(theirs)  # a commit order fails (or corrupts the data): the cells decide
    where = f"{_reached(job)} vs {_reached(other)}"
    if overlap and not footprints_overlap(job.derived.partition_keys(), other.derived.partition_keys()):
        # Disjoint as the SQL names them; the table's reach (its why lines) is what makes them meet.
        widened = "; ".join(dict.fromkeys(w for x in (job, other) for w in x.table_reach.why))
        reason = (f"their partitions are disjoint as the SQL names them ({_where(job.derived)} vs "
                  f"{_where(other.derived)}), but the table's reach makes them overlap ({where}): {widened}; "
                  + _cells(job, other))
    elif overlap:
        reason = f"their footprints overlap ({where}); {_cells(job, other)}"
    elif not meet:
        reason = f"their partitions are disjoint ({where})"
    else:
        whole = " and ".join(dict.fromkeys(
            f"{x.derived.operation.value} ({x.profile.name})" for x in (job, other) if x.reach is None
        ))
        validated = f"the engine validates the commit of {whole} against the whole table"
        reason = (
            f"their partitions are disjoint ({where}), but the append reach makes them conflict: {validated}; "
            if clash else
            f"their partitions are disjoint ({where}); {validated} (append reach), and the matrix lets both commit: "
        ) + _cells(job, other)
    if clash:
        reason += "; " + _ruled(ruling, mine.pairing(theirs), commit_gate)
    out = other.derived.to_json()
    out.update(profile=other.profile.name, table_reach=other.reach_json(), overlap=overlap, conflict=not ruling.granted,
               admission=ruling.verdict.value, commit_gate=commit_gate, reason=reason)
    return out


def _ruled(ruling: Ruling[str], pairing: Pairing, commit_gate: bool) -> str:
    """What admission does with a pair that fails in some commit order."""
    if ruling.awaits:
        return ("admission runs both: this job's commit waits at its gate until the other's lease ends "
                "(only that commit order is clean)")
    if ruling.holds:
        return ("admission runs both: the other's commit waits at its gate until this job's lease ends "
                "(only that commit order is clean)")
    if pairing is Pairing.APART:
        return "admission keeps them apart: neither commit order is clean"
    if not commit_gate:
        return "admission keeps them apart: one commit order is clean, but without commit gates it cannot be kept"
    return "admission keeps them apart: " + "; ".join(b.why for b in ruling.blocked_by)


def _cells(job: Explained, other: Explained) -> str:
    """The cells of both commit orders, under each profile of the pair (admission keeps them
    apart when either says conflict)."""
    a, b = job.derived.operation, other.derived.operation
    profiles = dict.fromkeys((job.profile, other.profile))
    return "; ".join(
        (f"under {profile.name}: " if len(profiles) > 1 else "")
        + "; ".join(f"{x.value} then {y.value}: {_outcome(_cell(profile, x, y))}" for x, y in dict.fromkeys(((a, b), (b, a))))
        for profile in profiles
    )


def conflicts_with(job: Explained) -> list[dict[str, Any]]:
    """Per operation of the profile: what happens when it and this job commit in either order
    (on overlapping partitions: disjoint ones never conflict)."""
    op, profile = job.derived.operation, job.profile
    return [
        {
            "operation": other.value,
            "conflicts": profile.conflicts(op, other) if op in profile.operations else True,
            "this_first": _cell_json(_cell(profile, op, other)),
            "other_first": _cell_json(_cell(profile, other, op)),
        }
        for other in profile.operations
    ]


def _cell(profile: Profile, earlier: Operation, later: Operation) -> Cell | None:
    ops = profile.operations
    return profile.cell(earlier, later) if earlier in ops and later in ops else None


def _cell_json(cell: Cell | None) -> dict[str, Any] | None:
    if cell is None:
        return None
    found = cell.to_dict()
    return {key: found[key] for key in ("later_fails", "exception", "effect", "condition") if key in found}


def _outcome(cell: Cell | None) -> str:
    if cell is None:
        return "not in the profile's matrix (kept apart)"
    if cell.later_fails:
        rows = " on the same rows" if cell.to_dict().get("condition") == "same_rows" else ""
        return f"the later fails{rows} ({cell.exception.value if cell.exception else 'conflict'})"
    if cell.effect.corrupts_data:
        return f"both commit and the data is wrong ({cell.effect.value})"
    return f"both commit ({cell.effect.value})"


def _where(derived: DerivedWrite) -> str:
    if derived.partitions is None:
        return "whole table"
    return ", ".join(partition_key(p) for p in derived.partitions)


def _reach_where(job: Explained) -> str:
    """The table's reach as partitions (or the whole table)."""
    parts = job.table_reach.partitions
    return "whole table" if parts is None else ", ".join(partition_key(p) for p in parts)


def _reached(job: Explained) -> str:
    """The job's partitions, and its table's reach where that differs."""
    return f"{_where(job.derived)} (reach: {_reach_where(job)})" if job.widened else _where(job.derived)


def _plain_table(rows: list[tuple[str, ...]], headers: tuple[str, ...]) -> list[str]:
    """Left-aligned text columns two spaces apart under a dashed rule: tabulate's "simple"
    format for text, without importing tabulate and wcwidth (0.1 s of the command's start)."""
    widths = [max([len(h) + 2, *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return [line(headers), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]


def render_text(job: Explained, against: list[dict[str, Any]]) -> str:
    d = job.derived
    lines = [
        f"table:        {d.table}",
        f"operation:    {d.operation.value}",
        f"partitions:   {_where(d)}",
        *([f"reach:        {_reach_where(job)}"] if job.widened else []),
        f"reads_target: {'yes' if d.reads_target else 'no'}",
        f"profile:      {job.profile.name}",
        "why:",
        *(f"  - {reason}" for reason in job.why),
        "",
        f"conflicts under {job.profile.name} (on overlapping partitions):",
    ]
    rows: list[tuple[str, ...]] = [
        (r["operation"], "conflict" if r["conflicts"] else "-",
         _outcome(_cell(job.profile, d.operation, Operation(r["operation"]))),
         _outcome(_cell(job.profile, Operation(r["operation"]), d.operation)))
        for r in conflicts_with(job)
    ]
    table = _plain_table(rows, ("operation", "", "this job commits first", "it commits first"))
    lines += ["  " + line for line in table]
    for number, found in enumerate(against, 1):
        verdict = "CONFLICT" if found["conflict"] else "no conflict"
        lines += ["", f"against [{number}]: {found.get('operation', '-')} on {found['table']}: {verdict}",
                  f"  {found['reason']}"]
    return "\n".join(lines)
