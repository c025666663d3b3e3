"""What admission keys one write by once the table itself is counted (issue 33): its older
Iceberg partition specs with live files, Delta column-mapping renames, and the session's runtime
file filter. ``TableFacts.reach`` calls ``reach`` with the facts it holds."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .footprint import overlapping_specs
from .operations import Operation
from .ranges import ValueRange, canonical_spec_value

# Writes that only add files under the table's current partition spec: they never rewrite a file
# of an older spec (Iceberg's MergeAppend; BaseReplacePartitions drops partitions of its own spec).
_CURRENT_SPEC_ONLY = frozenset({Operation.INSERT_INTO, Operation.INSERT_OVERWRITE})


@dataclass(frozen=True)
class OlderSpec:
    """An Iceberg partition spec other than the table's current one that still has live data
    files (issue 33). ``fields``: its partition fields, an identity field as its source column
    (lower-cased), a transform as ``days(ts)``. ``partitions``: the live partitions' identity
    values (column -> value as the engine prints it); ``None`` when they were not all listed
    (too many, or a NULL or a value occflow cannot key): then no condition is known to keep out."""

    spec_id: int
    fields: tuple[str, ...]
    partitions: tuple[Mapping[str, str], ...] | None = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(str(f).lower() for f in self.fields))
        if self.partitions is not None:
            parts = tuple(MappingProxyType({str(k).lower(): str(v) for k, v in p.items()}) for p in self.partitions)
            object.__setattr__(self, "partitions", parts)

    def live_specs(self) -> list[dict[str, str | ValueRange]] | None:
        """The live partitions with canonical values (``core.ranges``), or ``None`` when some
        live file has no identity value (an unpartitioned spec, or only transforms): every row."""
        if self.partitions is None or any(not p for p in self.partitions):
            return None
        return [{c: canonical_spec_value(c, v) for c, v in p.items()} for p in self.partitions]

    def to_json(self) -> dict[str, Any]:
        return {
            "spec_id": self.spec_id,
            "fields": list(self.fields),
            "partitions": None if self.partitions is None else [dict(p) for p in self.partitions],
        }


# Delta's generated physical names: ``col-`` and a UUID (what column mapping gives a column).
_GENERATED_PHYSICAL = re.compile(r"col-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", re.IGNORECASE)


def physical_key_column(physical: str) -> str:
    """A Delta physical column name as a footprint key's column, spelled so that no logical
    column's key can be it: a write keyed by logical names (one that does not read the table's
    column mapping) then shares no column with it, and ``core.footprint.specs_overlap`` calls two
    specs that share no column overlapping: never narrower. A generated name (``col-5f1c...``,
    a UUID) keeps its characters, ``-`` as ``_``; any other (a column that kept its name when
    mapping was turned on, then renamed) is ``_physical_<name>``: its bare name could be a
    logical column's, and meaning another column, two keys on it would compare values of both."""
    spelled = re.sub(r"[^A-Za-z0-9_]", "_", physical).lower()
    return spelled if _GENERATED_PHYSICAL.fullmatch(physical) else f"_physical_{spelled}"


@dataclass(frozen=True)
class Reach:
    """What admission keys one write by: its partitions (``None``: the whole table) once the
    table's older partition specs, renamed columns and the session's runtime filter are counted,
    and why it is wider than the SQL's own partitions (empty: it is not)."""

    partitions: tuple[Mapping[str, Any], ...] | None
    why: tuple[str, ...] = ()


def reach(
    operation: Operation,
    partitions: tuple[Mapping[str, Any], ...] | None,
    *,
    row_level_mode: str | None,
    runtime_filter_check: bool,
    older_specs: tuple[OlderSpec, ...],
    physical_columns: Mapping[str, str],
) -> Reach:
    """The partitions admission keys a write of ``operation`` by, given the partitions its SQL
    names under the current spec (``None``: the whole table).

    - Iceberg's runtime file filter (``runtime_filter_check``): a copy-on-write UPDATE / DELETE /
      MERGE fails on any commit made through its session between its scan and its filter
      (``SparkCopyOnWriteScan.filter``), so its reach is the whole table.
    - An older Iceberg spec with live files: a write other than an append or an overwrite
      rewrites every old-spec file its condition does not keep out of, and writes their
      surviving rows into the current spec's partitions, whatever their values: the whole
      table, unless every partition it names disagrees with every live old-spec partition on
      a column both constrain (then it reads no old-spec file).
    - Delta column mapping (``physical_columns``): each key names the physical column, so
      two writes keyed before and after a rename still compare the same stored values.
    """
    if partitions is None:
        return Reach(None)
    if row_level_mode == "copy-on-write" and runtime_filter_check:
        return Reach(None, (
            f"a copy-on-write {operation.value} through this session has its scan checked by Iceberg's "
            "runtime file filter (spark.sql.optimizer.runtime.rowLevelOperationGroupFilter.enabled is on "
            "and the catalog caches tables): any commit through the session while it runs fails it "
            "('Runtime file filtering is not possible'), whatever its partitions",
        ))
    if operation not in _CURRENT_SPEC_ONLY:
        named = [{str(c).lower(): canonical_spec_value(str(c), v) for c, v in p.items()} for p in partitions]
        for spec in older_specs:
            live = spec.live_specs()
            if live is None or overlapping_specs(named, live) is not None:
                shown = (
                    "its live partitions are not all known" if live is None
                    else f"{len(live)} live partition{'s' if len(live) != 1 else ''}"
                )
                return Reach(None, (
                    f"partition spec {spec.spec_id} ({', '.join(spec.fields) or 'unpartitioned'}) still has live "
                    f"files ({shown}) that the {operation.value}'s condition does not keep out of: it rewrites "
                    "them and writes their other rows into the current spec's partitions",
                ))
    if any(p.lower() != c for c, p in physical_columns.items()):
        # Only the renamed columns are keyed by physical name (a column whose physical name is its
        # own keeps it). Against a write keyed by logical names alone this is conservative:
        # ``physical_key_column`` shares no spelling with a logical column, and specs that share
        # no column overlap (``core.footprint.specs_overlap``), so the pair is kept apart.
        keyed = {c: physical_key_column(p) for c, p in physical_columns.items() if p.lower() != c}
        renamed = tuple(MappingProxyType({keyed.get(str(c).lower(), c): v for c, v in p.items()}) for p in partitions)
        named_as = ", ".join(f"{c} as {p}" for c, p in sorted(keyed.items()))
        return Reach(renamed, (f"column mapping: partitions keyed by their physical columns ({named_as})",))
    return Reach(partitions)
