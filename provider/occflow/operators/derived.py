"""The declaration an SQL write operator settles on from what its SQL and its table say.

Shared by ``SparkWriteOperator`` (and spark-submit) and ``MaxComputeWriteOperator``: each derives
the operation, partitions and profile its own way (Spark SQL / MaxCompute SQL, the table's
facts); what is kept, checked and logged from that is the same.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..core.declaration import WriteDeclaration
from ..core.profiles.model import Profile
from ..core.sqlderive import DerivedWrite, check_derived_against
from ..core.tablefacts import TableFacts


def why_of(derived: DerivedWrite, facts: TableFacts | None) -> list[str]:
    """What the SQL and the table said, one reason each (the log line of ``settle``)."""
    where = "whole table" if derived.partitions is None else ", ".join(sorted(derived.partition_keys() or ()))
    found = [f"{derived.operation.value} on {derived.table} [{where}]", *derived.why]
    return found + ([] if facts is None else list(facts.why(derived.operation, zorder=derived.zorder)))


@dataclass(frozen=True)
class Settled:
    """The declaration an SQL write settled on, and what the SQL and the table said (the log)."""

    declaration: WriteDeclaration
    why: tuple[str, ...]


def settle(
    declaration: WriteDeclaration,
    derived: DerivedWrite,
    profile: Profile,
    facts: TableFacts | None,
    *,
    derive_partitions: bool,
) -> Settled:
    """The declaration with ``profile`` and, when ``derive_partitions``, the SQL's partitions
    (else the declared ones, checked against the SQL); the operator's retry policy follows
    ``profile`` from then on."""
    if derive_partitions:
        partitions, reads_whole = derived.partitions, derived.reads_target and derived.partitions is None
    else:
        check_derived_against(derived, declaration)
        partitions, reads_whole = declaration.partitions, declaration.reads_whole_table
    settled = replace(
        declaration,
        profile=profile,
        engine_profile=profile.name,
        partitions=partitions,
        reads_whole_table=reads_whole,
        # Derived partitions are keys already (a STRING value quoted as its spelling): never
        # re-keyed as declared text.
        string_columns=frozenset() if derive_partitions else declaration.string_columns,
    )
    return Settled(settled, tuple(why_of(derived, facts)))
