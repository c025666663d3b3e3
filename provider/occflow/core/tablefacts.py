"""What a table is, as its engine reports it, and the profile (conflict matrix) that follows.

A task used to declare the matrix by hand (``profile`` / ``table_format``); the table already
says which one applies: Delta's ``delta.isolationLevel`` and deletion vectors (row-level
concurrency, spec 004), Iceberg's ``write.{delete,update,merge}.isolation-level``, MaxCompute's
``transactional``, and the engine that commits (delta-rs runs its own conflict checker, not
Databricks'). ``TableFacts`` holds those facts; ``profile_name`` derives the matrix with the
reasons (``why``), and ``check_declared_profile`` refuses a declared profile that contradicts
them, naming the fact. The engines read the facts (``engines/deltars/facts.py``,
``engines/spark/facts.py``); this module only reasons about them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .engines import TABLE_FORMATS, Committer, committers, describe_committers, find_committer, own_profiles
from .errors import InvalidDeclarationError
from .operations import Operation
from .partvalues import column_type
from .profiles import PROFILES, Profile, get_profile
from .profiles.delta_rlc import DBX_RLC_ZORDER, ZORDER_PROFILE
from .tablereach import OlderSpec as OlderSpec
from .tablereach import Reach as Reach
from .tablereach import physical_key_column as physical_key_column
from .tablereach import reach as table_reach


class _CommitterFormats(Mapping[str, str]):
    """Each committer's name and the table format it writes, read from the engine registry
    (``core.engines``) on every access, so an engine added there is known here at once."""

    def __getitem__(self, name: str) -> str:
        found = next((c for c in committers() if c.name == name), None)
        if found is None:
            raise KeyError(name)
        return found.table_format

    def __iter__(self) -> Iterator[str]:
        return iter([c.name for c in committers()])

    def __len__(self) -> int:
        return len(committers())


#: The engine that commits (``TableFacts.engine``) and the table format it writes, as the
#: registry has them; ``databricks``: Delta on Databricks Runtime (the only Delta engine with
#: row-level concurrency). ``core.sqlfilefinding`` reads it.
ENGINES: Mapping[str, str] = _CommitterFormats()

ISOLATION_LEVEL = "delta.isolationLevel"
DELETION_VECTORS = "delta.enableDeletionVectors"
ROW_TRACKING = "delta.enableRowTracking"
TRANSACTIONAL = "transactional"
_DELTA_LEVELS = {"serializable": "Serializable", "writeserializable": "WriteSerializable"}
_ICEBERG_LEVELS = ("serializable", "snapshot")
_ICEBERG_MODES = ("copy-on-write", "merge-on-read")
# The Iceberg operations whose isolation level and write mode the table sets (Spark's row-level
# DELETE / UPDATE / MERGE); every other write validates as the table's row-level writes do.
_ICEBERG_ROW_LEVEL = {Operation.DELETE: "delete", Operation.UPDATE: "update", Operation.MERGE: "merge"}
#: The properties each format's profile is read from (``TableFacts`` reads no other).
DECIDING_PROPERTIES: dict[str, tuple[str, ...]] = {
    "delta": (ISOLATION_LEVEL, DELETION_VECTORS, ROW_TRACKING),
    "iceberg": tuple(f"write.{kind}.{what}" for kind in _ICEBERG_ROW_LEVEL.values() for what in ("isolation-level", "mode")),
    "maxcompute": (TRANSACTIONAL,),
}
# How alike a key must be to one of those to be read as its misspelling (difflib's ratio, keys
# lower-cased): delta.enableDeletionVector is 0.98; delta.enableChangeDataFeed (a real property,
# 0.61) and write.delete.distribution-mode (0.72) are other properties, not typos.
_TYPO_RATIO = 0.8


@dataclass(frozen=True)
class TableFacts:
    """One table's facts as its engine reports them.

    ``partition_columns`` are identity partition columns (lower-cased): the ones an equality
    on a column pins to one partition. ``partition_transforms`` are the other partition fields
    (Iceberg's ``days(ts)``, ``bucket(16, id)``): recorded, not footprint columns.
    ``primary_key``: MaxCompute's (a Delta Table has one); ``None`` when not known.
    ``engine``: the committer (``core.engines``), by its name or an alias (kept as its name);
    ``None`` when not known.
    ``partition_column_types``: partition column (lower-cased) -> its type as the engine names it
    (``"int"``, ``"date"``, ``"decimal(10,2)"``), for ``core.partvalues`` to cast literals the way
    the engine does (issue 33: ``p = '07'`` on an INT column is ``p=7``). A partition column left
    out has a type occflow does not know: its type-dependent literals reach the whole table.
    ``older_specs``: Iceberg partition specs other than the current one that still have live data
    files; a row-level write whose condition does not keep out of their files rewrites them
    (``reach``). ``physical_columns``: partition column -> the physical column its values are
    stored under, where Delta column mapping makes them differ (a rename changes what a name
    means, never the physical column). ``runtime_filter_check``: whether a copy-on-write
    UPDATE / DELETE / MERGE through the session that read these facts has its scan checked against
    the table's current snapshot by Iceberg's runtime file filter, so that any commit through that
    session meanwhile fails it, whatever its partitions; ``None``: not read from a Spark session.
    """

    table: str
    table_format: str
    engine: str | None = None
    partition_columns: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    partition_transforms: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    primary_key: tuple[str, ...] | None = None
    partition_column_types: Mapping[str, str] = field(default_factory=dict)
    older_specs: tuple[OlderSpec, ...] = ()
    physical_columns: Mapping[str, str] = field(default_factory=dict)
    runtime_filter_check: bool | None = None

    def __post_init__(self) -> None:
        if self.table_format not in TABLE_FORMATS:
            raise InvalidDeclarationError(
                f"unknown table format {self.table_format!r} for {self.table}; known: {', '.join(TABLE_FORMATS)}"
            )
        if self.engine is not None:
            found = find_committer(self.engine)
            if found is None or found.table_format != self.table_format:
                raise InvalidDeclarationError(
                    f"engine {self.engine!r} does not write {self.table_format} tables; engines: {describe_committers()}"
                )
            object.__setattr__(self, "engine", found.name)
        object.__setattr__(self, "partition_columns", tuple(c.lower() for c in self.partition_columns))
        object.__setattr__(self, "properties", MappingProxyType({str(k): str(v) for k, v in self.properties.items()}))
        self._check_partition_column_types()
        physical = {str(c).lower(): str(p) for c, p in self.physical_columns.items()}
        strays = sorted(set(physical) - set(self.partition_columns))
        if strays:
            raise InvalidDeclarationError(
                f"table {self.table} has no partition column {strays[0]!r} to give a physical name to; its "
                f"partition columns are {', '.join(self.partition_columns) or '(none)'}"
            )
        object.__setattr__(self, "physical_columns", MappingProxyType(physical))
        if self.older_specs and self.table_format != "iceberg":
            raise InvalidDeclarationError(f"table {self.table} is a {self.table_format} table: only Iceberg tables keep older partition specs")
        # Read every property the profile depends on now: a value the format does not know is
        # an error when the facts are read, not when a profile is asked for.
        self._refuse_misspelt_properties()
        if self.table_format == "delta":
            _ = (self.delta_isolation_level, self.deletion_vectors, self.row_tracking)
        elif self.table_format == "iceberg":
            for op in _ICEBERG_ROW_LEVEL:
                _ = (self.iceberg_isolation_level(op), self.iceberg_write_mode(op))
        else:
            _ = self.transactional

    def _check_partition_column_types(self) -> None:
        """Keys lower-cased; each a partition column with a type ``core.partvalues`` reads, so a
        wrong fact is an error here, where the table is named, not in the middle of a derivation."""
        types = {str(c).lower(): str(t).strip().lower() for c, t in self.partition_column_types.items()}
        for name, spelled in types.items():
            if name not in self.partition_columns:
                raise InvalidDeclarationError(
                    f"table {self.table} has no partition column {name!r} to give a type to; its partition "
                    f"columns are {', '.join(self.partition_columns) or '(none)'}"
                )
            column_type(name, spelled)  # raises naming the type and the ones known
        object.__setattr__(self, "partition_column_types", MappingProxyType(types))

    def _refuse_misspelt_properties(self) -> None:
        """A property that is nearly one the profile is read from is its typo (issue 23:
        ``delta.enableDeletionVector=true`` silently chose the matrix without row-level
        concurrency). Other properties (a table has many) decide nothing and are kept."""
        deciding = DECIDING_PROPERTIES[self.table_format]
        lowered = {key.lower(): key for key in deciding}
        for key in self.properties:
            if key.lower() in lowered:
                continue
            near = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=_TYPO_RATIO)
            if near:
                raise InvalidDeclarationError(
                    f"table {self.table} has property {key!r}, which {self.table_format} tables do not know "
                    f"(did you mean {lowered[near[0]]!r}?); the properties occflow reads for a "
                    f"{self.table_format} table are {', '.join(deciding)}"
                )

    # ------------------------------------------------------------------ the facts

    @property
    def committer(self) -> Committer | None:
        """The engine that commits, as the registry describes it (``None``: not known)."""
        return find_committer(self.engine)

    def table_property(self, key: str) -> str | None:
        """A table property, its key matched without regard to case (engines differ)."""
        wanted = key.lower()
        return next((v for k, v in self.properties.items() if k.lower() == wanted), None)

    @property
    def delta_isolation_level(self) -> str:
        """``Serializable`` or ``WriteSerializable`` (Delta's default when unset)."""
        value = self.table_property(ISOLATION_LEVEL)
        if value is None:
            return "WriteSerializable"
        try:
            return _DELTA_LEVELS[value.strip().lower()]
        except KeyError:
            raise InvalidDeclarationError(
                f"table {self.table} has {ISOLATION_LEVEL}={value!r}; Delta knows Serializable and WriteSerializable"
            ) from None

    @property
    def deletion_vectors(self) -> bool:
        return self._flag(DELETION_VECTORS)

    @property
    def row_tracking(self) -> bool:
        return self._flag(ROW_TRACKING)

    @property
    def transactional(self) -> bool:
        return self._flag(TRANSACTIONAL)

    @property
    def row_level_concurrency(self) -> bool:
        """Spec 004: Databricks Runtime 14.2+ resolves conflicts row by row on Delta tables with
        deletion vectors and no partitions (not on open-source Delta, not on delta-rs)."""
        committer = self.committer
        return (
            self.table_format == "delta"
            and (committer is None or committer.row_level_concurrency)
            and self.deletion_vectors
            and not self.partition_columns
        )

    def iceberg_isolation_level(self, operation: Operation) -> str:
        """``write.<op>.isolation-level`` of a DELETE / UPDATE / MERGE (default serializable)."""
        return self._iceberg_choice(f"write.{_ICEBERG_ROW_LEVEL[operation]}.isolation-level", _ICEBERG_LEVELS)

    def iceberg_write_mode(self, operation: Operation) -> str:
        """``write.<op>.mode`` of a DELETE / UPDATE / MERGE (default copy-on-write)."""
        return self._iceberg_choice(f"write.{_ICEBERG_ROW_LEVEL[operation]}.mode", _ICEBERG_MODES)

    def _iceberg_choice(self, key: str, known: tuple[str, ...]) -> str:
        value = self.table_property(key)
        if value is None:
            return known[0]
        if value.strip().lower() not in known:
            raise InvalidDeclarationError(f"table {self.table} has {key}={value!r}; Iceberg knows {', '.join(known)}")
        return value.strip().lower()

    def _flag(self, key: str) -> bool:
        value = self.table_property(key)
        if value is None:
            return False
        if value.strip().lower() not in ("true", "false"):
            raise InvalidDeclarationError(f"table {self.table} has {key}={value!r}; expected true or false")
        return value.strip().lower() == "true"

    # ------------------------------------------------------------------ the profile

    def profile_name(self, operation: Operation | None = None, *, zorder: bool | None = None) -> str:
        """The profile whose matrix this table follows (for ``operation``, on Iceberg).

        ``zorder`` (``DerivedWrite.zorder``): whether the write is an ``OPTIMIZE ... ZORDER BY``,
        which follows the matrix without row-level concurrency; ``None`` (not told) for an
        OPTIMIZE is read as "may be": never the matrix that keeps fewer pairs apart."""
        return self._derive(operation, zorder)[0]

    def profile(self, operation: Operation | None = None, *, zorder: bool | None = None) -> Profile:
        return get_profile(self.profile_name(operation, zorder=zorder))

    def why(self, operation: Operation | None = None, *, zorder: bool | None = None) -> tuple[str, ...]:
        """The facts the profile follows from, one reason a line."""
        return self._derive(operation, zorder)[1]

    def _derive(self, operation: Operation | None, zorder: bool | None = None) -> tuple[str, tuple[str, ...]]:
        if self.table_format == "delta":
            name, why = self._delta()
            maybe = zorder is None and operation is Operation.OPTIMIZE
            if (zorder or maybe) and name in ZORDER_PROFILE:
                # Databricks' row-level table: OPTIMIZE ... ZORDER BY can conflict with UPDATE,
                # DELETE and MERGE (delta_rlc.ZORDER_CHANGES), which the plain matrix holds.
                plain = ZORDER_PROFILE[name]
                what = "an OPTIMIZE not known to be without ZORDER BY" if maybe else "OPTIMIZE ... ZORDER BY"
                return plain, (*why, f"{what} follows {plain!r}, not {name!r} ({DBX_RLC_ZORDER})")
            return name, why
        if self.table_format == "iceberg":
            return self._iceberg(operation)
        return self._maxcompute()

    def _delta(self) -> tuple[str, tuple[str, ...]]:
        level = self.delta_isolation_level
        set_or_default = "" if self.table_property(ISOLATION_LEVEL) is not None else " (unset: Delta's default)"
        committer = self.committer
        if committer is not None and committer.own_profile is not None:
            own = committer.own_profile
            return own, (
                f"{self.table} is written by {committer.name}, whose conflict checker is its own matrix (profile "
                f"{own!r}), not Databricks'",
                f"{ISOLATION_LEVEL} is {level}{set_or_default}: {committer.name} behaves the same at both levels",
            )
        name = "delta-serializable" if level == "Serializable" else "delta-write-serializable"
        why = [f"{ISOLATION_LEVEL} is {level}{set_or_default}"]
        if committer is not None and not committer.row_level_concurrency:
            why.append(f"committed by {committer.name}: {committer.no_rlc_reason or 'no row-level concurrency'}")
        elif not self.deletion_vectors:
            why.append(f"{DELETION_VECTORS} is not true: no row-level concurrency (spec 004)")
        elif self.partition_columns:
            why.append(
                f"partitioned by {', '.join(self.partition_columns)}: tables with partitions do not "
                "support row-level concurrency (spec 004)"
            )
        else:
            rlc = f"{name}-rlc"
            reason = (
                f"{DELETION_VECTORS} is true and the table has no partition columns: row-level "
                "concurrency (Databricks Runtime 14.2+, spec 004)"
            )
            if rlc not in PROFILES:
                why += [reason, f"occflow has no profile {rlc!r} yet: using {name!r}, which conflicts more"]
                return name, tuple(why)
            name = rlc
            why.append(reason)
        if self.row_tracking:
            why.append(f"{ROW_TRACKING} is true (row ids survive a rewrite; the matrix does not change)")
        return name, tuple(why)

    def _iceberg(self, operation: Operation | None) -> tuple[str, tuple[str, ...]]:
        if self.engine == "pyiceberg":
            # pyiceberg validates every write at one level, read from the update and delete
            # levels (engines/pyiceberg/facts.py: isolation_level), with its own measured matrix.
            chosen = {self._iceberg_choice(f"write.{k}.isolation-level", ("serializable", "snapshot"))
                      for k in ("update", "delete")}
            level = "snapshot" if chosen == {"snapshot"} else "serializable"
            return f"pyiceberg-{level}", (
                f"pyiceberg commits this table: write.update/delete.isolation-level give {level}",
            )
        why: list[str] = []
        if operation in _ICEBERG_ROW_LEVEL:
            kind = _ICEBERG_ROW_LEVEL[operation]
            level = self.iceberg_isolation_level(operation)
            why.append(f"write.{kind}.isolation-level is {level}{self._default_note(f'write.{kind}.isolation-level')}")
            why.append(f"write.{kind}.mode is {self.iceberg_write_mode(operation)}{self._default_note(f'write.{kind}.mode')}")
            if level == "snapshot" and self.runtime_filter_check and self.iceberg_write_mode(operation) == "copy-on-write":
                # The runtime file filter fails the write on any commit through its session, an
                # append included, which the snapshot matrix lets commit beside it (issue 33 item 3).
                level = "serializable"
                why.append("the session's runtime file filter fails it on any concurrent commit: held to serializable")
        else:
            levels = {op: self.iceberg_isolation_level(op) for op in _ICEBERG_ROW_LEVEL}
            distinct = sorted(set(levels.values()))
            level = distinct[0] if len(distinct) == 1 else "serializable"
            what = "the operation" if operation is None else operation.value
            if len(distinct) == 1:
                why.append(f"write.{{delete,update,merge}}.isolation-level are all {level}: {what} validates at that level")
            else:
                spelled = ", ".join(f"{_ICEBERG_ROW_LEVEL[op]}={lv}" for op, lv in levels.items())
                why.append(
                    f"the table's isolation levels differ ({spelled}): {what} is held to serializable, "
                    "the level that keeps more pairs apart"
                )
        for transform in self.partition_transforms:
            why.append(
                f"partition field {transform} is a transform, not an identity column: a condition on "
                "its source column does not name one partition"
            )
        return f"iceberg-{level}", tuple(why)

    def _maxcompute(self) -> tuple[str, tuple[str, ...]]:
        if not self.transactional:
            return "maxcompute-standard", (f"{self.table} is a standard table ({TRANSACTIONAL} is not true; spec 000)",)
        if self.primary_key == ():
            return "maxcompute-standard", (
                f"{TRANSACTIONAL}=true without a primary key: a transactional table, whose conflicts "
                "follow spec 000 (a Delta Table has a primary key)",
            )
        key = f" with primary key {', '.join(self.primary_key)}" if self.primary_key else ""
        return "maxcompute-transactional", (
            f"{TRANSACTIONAL}=true{key}: a Delta Table, MVCC + OCC (specs 001, 002)",
        )

    def _default_note(self, key: str) -> str:
        return "" if self.table_property(key) is not None else " (unset: Iceberg's default)"

    # ------------------------------------------------------------------ a declared profile

    def check_declared_profile(
        self, declared: str | Profile, operation: Operation | None = None, *, zorder: bool | None = None
    ) -> None:
        """Refuse a declared profile the table's facts contradict, naming the fact.

        Two allowances: the non-row-level matrix on a table that qualifies for row-level
        concurrency (a Databricks Runtime before 14.2 has none, and that matrix keeps more
        pairs apart, never fewer); and an Iceberg ``-validated`` profile, for writes that set the
        DataFrame ``isolation-level`` option (a property of the write, not of the table).
        """
        profile = get_profile(declared)
        expected = self.profile_name(operation, zorder=zorder)
        if profile.name in (expected, expected.removesuffix("-rlc"), f"{expected}-validated"):
            return
        contradiction = self._contradiction(profile, operation)
        if profile.name != expected and profile.name == self.profile_name(operation, zorder=False):
            contradiction = "OPTIMIZE ... ZORDER BY can conflict with UPDATE, DELETE and MERGE under row-level concurrency"
        raise InvalidDeclarationError(
            f"profile {profile.name!r} contradicts table {self.table}: {contradiction}; "
            f"its matrix is {expected!r} ({'; '.join(self.why(operation, zorder=zorder))}). Declare profile={expected!r} "
            "or leave the profile out"
        )

    def _contradiction(self, profile: Profile, operation: Operation | None) -> str:
        if profile.table_format != self.table_format:
            return f"the profile describes {profile.table_format} tables and {self.table} is a {self.table_format} table"
        if self.table_format == "delta":
            return self._delta_contradiction(profile)
        if self.table_format == "iceberg":
            if operation in _ICEBERG_ROW_LEVEL:
                key = f"write.{_ICEBERG_ROW_LEVEL[operation]}.isolation-level"
                return f"the table says {key}={self.iceberg_isolation_level(operation)}{self._default_note(key)}"
            return "the table's write.{delete,update,merge}.isolation-level say otherwise"
        if self.transactional:
            return f"the table is transactional ({TRANSACTIONAL}=true)"
        return f"the table is not transactional ({TRANSACTIONAL} is not true)"

    def _delta_contradiction(self, profile: Profile) -> str:
        committer = self.committer
        if committer is not None and committer.own_profile is not None:
            return f"the write is committed by {committer.name}, whose conflict checker is not Databricks'"
        if profile.name in own_profiles():
            owners = ", ".join(c.name for c in committers() if c.own_profile == profile.name)
            return f"the write is committed by {self.engine or 'Delta on Spark / Databricks'}, not {owners}"
        level = self.delta_isolation_level
        if profile.name.removesuffix("-rlc") != ("delta-serializable" if level == "Serializable" else "delta-write-serializable"):
            unset = " (unset: Delta's default)" if self.table_property(ISOLATION_LEVEL) is None else ""
            return f"the table says {ISOLATION_LEVEL}={level}{unset}"
        if committer is not None and not committer.row_level_concurrency:
            return committer.no_rlc_reason or f"{committer.name} has no row-level concurrency"
        if not self.deletion_vectors:
            return f"row-level concurrency needs deletion vectors and the table's {DELETION_VECTORS} is not true"
        return f"row-level concurrency needs a table without partitions and {self.table} is partitioned by {', '.join(self.partition_columns)}"

    # ------------------------------------------------------------------ a write's reach

    def reach(self, operation: Operation, partitions: tuple[Mapping[str, Any], ...] | None) -> Reach:
        """The partitions admission keys a write of ``operation`` by (``core.tablereach.reach``)."""
        row_level_mode = (
            self.iceberg_write_mode(operation) if self.table_format == "iceberg" and operation in _ICEBERG_ROW_LEVEL
            else None
        )
        return table_reach(operation, partitions, row_level_mode=row_level_mode,
                           runtime_filter_check=bool(self.runtime_filter_check), older_specs=self.older_specs,
                           physical_columns=self.physical_columns)

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "table_format": self.table_format,
            "engine": self.engine,
            "partition_columns": list(self.partition_columns),
            "partition_transforms": list(self.partition_transforms),
            "properties": dict(self.properties),
            "features": list(self.features),
            "primary_key": None if self.primary_key is None else list(self.primary_key),
            "partition_column_types": dict(self.partition_column_types),
            "older_specs": [spec.to_json() for spec in self.older_specs],
            "physical_columns": dict(self.physical_columns),
            "runtime_filter_check": self.runtime_filter_check,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TableFacts:
        """``to_json``'s form read back; keys added since (``partition_column_types``,
        ``older_specs``, ``physical_columns``, ``runtime_filter_check``) may be missing: facts
        written before them load as "not known"."""
        if not isinstance(data, Mapping):
            raise InvalidDeclarationError(f"table facts are a JSON object, got {type(data).__name__}")
        missing = [k for k in ("table", "table_format") if k not in data]
        if missing:
            raise InvalidDeclarationError(f"table facts need {' and '.join(missing)}; got keys {', '.join(map(str, data))}")
        key = data.get("primary_key")
        return cls(
            table=str(data["table"]),
            table_format=str(data["table_format"]),
            engine=None if data.get("engine") is None else str(data["engine"]),
            partition_columns=tuple(str(c) for c in data.get("partition_columns") or ()),
            properties={str(k): str(v) for k, v in (data.get("properties") or {}).items()},
            partition_transforms=tuple(str(t) for t in data.get("partition_transforms") or ()),
            features=tuple(str(f) for f in data.get("features") or ()),
            primary_key=None if key is None else tuple(str(k) for k in key),
            partition_column_types={str(k): str(v) for k, v in (data.get("partition_column_types") or {}).items()},
            older_specs=tuple(
                OlderSpec(
                    int(spec["spec_id"]),
                    tuple(spec.get("fields") or ()),
                    None if spec.get("partitions", ()) is None else tuple(spec.get("partitions") or ()),
                )
                for spec in data.get("older_specs") or ()
            ),
            physical_columns={str(k): str(v) for k, v in (data.get("physical_columns") or {}).items()},
            runtime_filter_check=None if data.get("runtime_filter_check") is None else bool(data["runtime_filter_check"]),
        )
