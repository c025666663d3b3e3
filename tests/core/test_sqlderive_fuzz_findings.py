"""What the differential oracle found (issue 23): statements whose derived footprint was narrower
than what a real engine touched, each as the minimal statement the fuzzer shrank it to
(``tests/engines/test_derivation_fuzz.py``, ``bench/fuzz_derivation.py``)."""

from __future__ import annotations

import pytest

from occflow.core.sqlderive import derive_write

COLUMNS = ["ds", "region"]


@pytest.mark.parametrize(
    "sql",
    [
        # Seed 1, Iceberg copy-on-write: ON pins region=us, the clause region=ap; Spark joined the
        # whole target and rewrote the files of every partition (ds=2024-01-0x/region=eu too).
        "MERGE INTO lake.db.fz_cow t USING (SELECT * FROM VALUES (3, '2024-01-01', 'eu', 7) "
        "AS src(id, ds, region, v)) s ON t.region = 'us' "
        "WHEN NOT MATCHED BY SOURCE AND t.region IN ('ap') THEN UPDATE SET t.v = t.v + 1",
        # Seed 1: a NOT MATCHED BY SOURCE DELETE pinned on ds rewrote ds=2024-01-02/region=us.
        "MERGE INTO lake.db.fz_cow t USING (SELECT * FROM VALUES (2, '2024-01-02', 'us', 3) "
        "AS src(id, ds, region, v)) s ON t.region IN ('ap', 'eu') "
        "WHEN NOT MATCHED BY SOURCE AND t.ds IN ('2024-01-03', '2024-01-01') THEN DELETE",
        # The same with ON and the clause on one partition: still every file of the table.
        "MERGE INTO db.t t USING s ON t.id = s.id AND t.ds = 'A' "
        "WHEN NOT MATCHED BY SOURCE AND t.ds = 'A' THEN DELETE",
    ],
)
def test_a_merge_with_a_not_matched_by_source_clause_is_the_whole_table_whatever_its_condition(sql: str) -> None:
    derived = derive_write(sql, COLUMNS)
    assert derived.partitions is None, derived.to_json()
    assert any("WHEN NOT MATCHED BY SOURCE" in w and "copy-on-write Iceberg" in w for w in derived.why)


def test_a_merge_without_a_not_matched_by_source_clause_keeps_its_partitions() -> None:
    sql = (
        "MERGE INTO db.t t USING s ON t.id = s.id AND t.region = 'us' "
        "WHEN MATCHED AND t.v > 1 THEN DELETE WHEN MATCHED THEN UPDATE SET t.v = s.v "
        "WHEN NOT MATCHED THEN INSERT (id, ds, region, v) VALUES (s.id, '2024-01-04', 'us', s.v)"
    )
    assert derive_write(sql, COLUMNS).partition_keys() == {"region=us", "ds=2024-01-04/region=us"}
