"""An Iceberg ``-validated`` profile is a property of the write (the DataFrame ``isolation-level``
option), not of the table: the table's facts accept it at the table's own isolation level only."""

from __future__ import annotations

import pytest

from occflow.core.errors import InvalidDeclarationError
from occflow.core.operations import Operation
from occflow.core.tablefacts import TableFacts


@pytest.mark.parametrize("level", ["serializable", "snapshot"])
def test_the_validated_variant_of_the_tables_own_profile_is_accepted(level: str) -> None:
    facts = TableFacts("lake.db.t", "iceberg", "spark-iceberg", ("ds",), {"write.merge.isolation-level": level})
    facts.check_declared_profile(f"iceberg-{level}-validated", Operation.MERGE)
    other = "snapshot" if level == "serializable" else "serializable"
    with pytest.raises(InvalidDeclarationError, match=f"iceberg-{other}-validated.*contradicts table lake.db.t"):
        facts.check_declared_profile(f"iceberg-{other}-validated", Operation.MERGE)


def test_a_validated_iceberg_profile_on_a_delta_table_is_refused() -> None:
    facts = TableFacts("db.t", "delta", "delta-rs", ("ds",))
    with pytest.raises(InvalidDeclarationError, match="describes iceberg tables"):
        facts.check_declared_profile("iceberg-serializable-validated")
