"""The engine registry: what each engine is, declared once, in one list every table reads.

An ``EngineSpec`` is one engine folder (``engines/deltars/``, ``engines/spark/``,
``engines/maxcompute/``, ``engines/pyiceberg/``): the name ``--engine`` and ``@task.occflow_write(engine=...)`` take, its
operator, its ``WriteTarget`` class, its table-facts reader, and the ``Committer`` for each table
format it writes. A ``Committer`` is the engine as a table's facts name it (``TableFacts.engine``:
``delta-rs``, ``delta-spark``, ``spark-iceberg``, ``maxcompute``): its format, the family whose
advice applies, its other spellings, its own matrix if it has one, whether it has row-level
concurrency, and its conformance runner. ``ENGINES`` is the one list; ``committer`` and
``engine_spec`` are the lookups; ``table_kinds`` are the names ``table_format=`` accepts.

Why the specs live here, as data, and the behaviour as dotted paths: the tables that map engine
names are in core (``TableFacts``, declarations, advice) and the CLI, and core may not import
``engines`` (the layers contract). Loading the folders' modules by name from core would hide an
upward dependency from that contract, so the pure half of every spec is here, where core already
keeps each engine's matrix (``core/profiles/deltars.py``), and the half that runs (target, facts
reader, conformance runner, operator) is a dotted path that ``engines/registry.py`` resolves
only when asked. Adding an engine is its folder and one entry in ``ENGINES``; every lookup reads
``ENGINES`` when called, never a copy made at import.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .errors import InvalidDeclarationError

#: The table formats occflow knows the conflict matrices of.
TABLE_FORMATS = ("delta", "iceberg", "maxcompute")

# delta-io/delta#7360: open-source Delta has no row-level concurrency (Databricks Runtime 14.2+ has).
OSS_DELTA_NO_RLC = "open-source delta-spark has no row-level concurrency (delta-io/delta#7360)"


@dataclass(frozen=True)
class Committer:
    """The code that commits one table format, as a table's facts name it.

    ``family``: whose wording of the conflict advice applies (``core.advice``). ``aliases``: the
    other names the same committer is reported under (a ``WriteOutcome.engine``, a library name).
    ``own_profile``: the matrix it follows whatever the table's properties say (delta-rs runs its
    own conflict checker); ``None``: it follows the format's matrices. ``row_level_concurrency``:
    whether it can resolve Delta conflicts row by row (spec 004); when it cannot,
    ``no_rlc_reason`` says why. ``conformance``: the dotted module holding its
    ``conformance_runners`` and ``conformance_meta`` (``None``: occflow does not run it).
    """

    name: str
    table_format: str
    family: str
    aliases: tuple[str, ...] = ()
    own_profile: str | None = None
    row_level_concurrency: bool = False
    no_rlc_reason: str | None = None
    conformance: str | None = None

    def __post_init__(self) -> None:
        if self.table_format not in TABLE_FORMATS:
            raise InvalidDeclarationError(
                f"committer {self.name!r}: unknown table format {self.table_format!r}; known: {', '.join(TABLE_FORMATS)}"
            )

    @property
    def spellings(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


@dataclass(frozen=True)
class EngineSpec:
    """One engine folder: what it is and where its behaviour is.

    ``package``: the folder as a module (``occflow.engines.deltars``). ``target`` and ``facts``:
    ``.module:name`` inside it (its ``WriteTarget`` class, its table-facts reader);
    ``operator``: the ``module:Class`` of its Airflow operator. ``runs_functions``: its operator
    takes a Python function as the job (``@task.occflow_write`` can decorate one).
    """

    name: str
    package: str
    operator: str
    target: str
    facts: str
    commits: tuple[Committer, ...]
    runs_functions: bool = False
    aliases: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        formats = [c.table_format for c in self.commits]
        if not formats or len(set(formats)) != len(formats):
            raise InvalidDeclarationError(
                f"engine {self.name!r} must commit each of its table formats once, got {formats}"
            )

    @property
    def folder(self) -> str:
        """The folder's name under its parent package (``deltars``)."""
        return self.package.rpartition(".")[2]

    @property
    def operator_name(self) -> str:
        return self.operator.rpartition(":")[2]

    def committer_for(self, table_format: str) -> Committer | None:
        """The committer this engine writes ``table_format`` tables with (``None``: it does not)."""
        return next((c for c in self.commits if c.table_format == table_format), None)

    @property
    def table_formats(self) -> tuple[str, ...]:
        return tuple(c.table_format for c in self.commits)


# ---------------------------------------------------------------------- the engines

DELTA_RS = EngineSpec(
    name="delta-rs",
    package="occflow.engines.deltars",
    operator="occflow.operators.delta:DeltaWriteOperator",
    target=".target:DeltaRsTarget",
    facts=".facts:deltars_table_facts",
    runs_functions=True,
    commits=(
        Committer(
            "delta-rs", "delta", family="delta-rs", aliases=("deltars", "deltalake"), own_profile="delta-rs",
            conformance="occflow.engines.deltars.conformance",
        ),
    ),
)

SPARK = EngineSpec(
    name="spark",
    package="occflow.engines.spark",
    operator="occflow.operators.spark:SparkWriteOperator",
    target=".target:SparkTarget",
    facts=".facts:spark_table_facts",
    runs_functions=True,
    commits=(
        Committer(
            "delta-spark", "delta", family="delta-spark", aliases=("spark-delta",), no_rlc_reason=OSS_DELTA_NO_RLC,
            conformance="occflow.engines.spark.delta_conformance",
        ),
        Committer("spark-iceberg", "iceberg", family="iceberg", conformance="occflow.engines.spark.iceberg_conformance"),
    ),
)

MAXCOMPUTE = EngineSpec(
    name="maxcompute",
    package="occflow.engines.maxcompute",
    operator="occflow.operators.maxcompute:MaxComputeWriteOperator",
    target=".target:MaxComputeTarget",
    facts=".facts:maxcompute_table_facts",
    commits=(Committer("maxcompute", "maxcompute", family="maxcompute", aliases=("odps",)),),
)

PYICEBERG = EngineSpec(
    name="pyiceberg",
    package="occflow.engines.pyiceberg",
    operator="occflow.operators.pyiceberg:PyIcebergWriteOperator",
    target=".target:PyIcebergTarget",
    facts=".facts:pyiceberg_table_facts",
    runs_functions=True,
    commits=(
        # pyiceberg validates with its own checks, not Java Iceberg's: its measured matrices are
        # pyiceberg-serializable / pyiceberg-snapshot (core/profiles/pyiceberg.py), by isolation level.
        Committer("pyiceberg", "iceberg", family="iceberg", aliases=("py-iceberg",),
                  conformance="occflow.engines.pyiceberg.conformance"),
    ),
)

#: The one list. Every lookup below reads it when called.
ENGINES: tuple[EngineSpec, ...] = (DELTA_RS, SPARK, MAXCOMPUTE, PYICEBERG)

#: Committers occflow runs no engine for but a table's facts may name: Delta on Databricks
#: Runtime, the only Delta committer with row-level concurrency (14.2+, spec 004).
FACTS_ONLY: tuple[Committer, ...] = (Committer("databricks", "delta", family="databricks", row_level_concurrency=True),)


# ---------------------------------------------------------------------- lookups


def engine_specs() -> tuple[EngineSpec, ...]:
    """``ENGINES`` as it is now (a caller that imported the name would keep the list of then)."""
    return ENGINES


def committers() -> tuple[Committer, ...]:
    """Every committer: the engines' (in ``ENGINES`` order), then the facts-only ones."""
    return (*(c for spec in ENGINES for c in spec.commits), *FACTS_ONLY)


def engine_spec(name: str) -> EngineSpec:
    """The engine ``name`` (or one of its aliases) names; an unknown name is an error naming the known."""
    for spec in ENGINES:
        if name in (spec.name, *spec.aliases):
            return spec
    raise InvalidDeclarationError(f"unknown engine {name!r}; engines: {', '.join(s.name for s in ENGINES)}")


def find_committer(name: str | None) -> Committer | None:
    """The committer ``name`` spells (its name or an alias, any case); ``None`` when none does."""
    if not name:
        return None
    wanted = name.strip().lower()
    return next((c for c in committers() if wanted in c.spellings), None)


def committer(name: str) -> Committer:
    """``find_committer``, with an unknown name an error listing the committers and their formats."""
    found = find_committer(name)
    if found is None:
        raise InvalidDeclarationError(f"unknown engine {name!r}; engines: {describe_committers()}")
    return found


def describe_committers() -> str:
    """``delta-rs (delta), delta-spark (delta), ...``: for messages."""
    return ", ".join(f"{c.name} ({c.table_format})" for c in committers())


def own_profiles() -> frozenset[str]:
    """The profiles that are one committer's own matrix (``delta-rs``)."""
    return frozenset(c.own_profile for c in committers() if c.own_profile)


def conformance_committers() -> tuple[Committer, ...]:
    """The committers with a conformance runner (``occflow conformance --engine``)."""
    return tuple(c for c in committers() if c.conformance)


@dataclass(frozen=True)
class TableKind:
    """A name ``table_format=`` and ``--table-format`` take: a format, a kind of its tables
    (``properties`` it implies), or a committer (its tables written by that engine)."""

    name: str
    table_format: str
    engine: str | None = None
    properties: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


#: The formats and the one table kind that is not a format: MaxCompute's transactional tables.
FORMAT_KINDS: tuple[TableKind, ...] = (
    *(TableKind(f, f) for f in TABLE_FORMATS),
    TableKind("maxcompute-transactional", "maxcompute", properties=MappingProxyType({"transactional": "true"})),
)


def table_kinds() -> dict[str, TableKind]:
    """Every name ``table_format=`` takes: the formats and their kinds, then each committer
    (``delta-rs``: a Delta table that delta-rs commits, so its own matrix)."""
    kinds = {k.name: k for k in FORMAT_KINDS}
    for c in committers():
        kinds.setdefault(c.name, TableKind(c.name, c.table_format, engine=c.name))
    return kinds


def table_kind(name: str) -> TableKind:
    """The kind ``name`` means; an unknown name is an error naming the known."""
    try:
        return table_kinds()[name]
    except KeyError:
        raise InvalidDeclarationError(
            f"unknown table_format {name!r}; known: {', '.join(table_kinds())}"
        ) from None


__all__ = [
    "DELTA_RS",
    "ENGINES",
    "FACTS_ONLY",
    "FORMAT_KINDS",
    "MAXCOMPUTE",
    "OSS_DELTA_NO_RLC",
    "PYICEBERG",
    "SPARK",
    "TABLE_FORMATS",
    "Committer",
    "EngineSpec",
    "TableKind",
    "committer",
    "committers",
    "conformance_committers",
    "describe_committers",
    "engine_spec",
    "engine_specs",
    "find_committer",
    "own_profiles",
    "table_kind",
    "table_kinds",
]
