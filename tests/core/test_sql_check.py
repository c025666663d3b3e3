"""A SQL job is exactly the declared write (issue 11, item 7): one write statement, of the
declared operation, on the declared table; a rendered value that adds a statement, hides one
behind a comment or quote, or points the write at another table is refused with a message that
names the statement and what differs."""

from __future__ import annotations

import pytest

from occflow.core.declaration import WriteDeclaration
from occflow.core.errors import InvalidDeclarationError
from occflow.core.operations import Operation
from occflow.core.sql import check_sql_write, job_text, read_sql_write, split_statements

# The issue's template: a partition value rendered into a string literal.
TEMPLATE = "DELETE FROM lake.db.events WHERE ds = '{ds}'"
INJECTION = "x'; DROP TABLE lake.db.other; --"


def declared(operation: str = "delete", table: str = "db.events") -> WriteDeclaration:
    return WriteDeclaration.create(table, operation, "iceberg-serializable", catalog="lake")


def check(sql: str | list[str], operation: str = "delete", table: str = "db.events") -> object:
    return check_sql_write(sql, declared(operation, table), sql_catalog="spark_catalog")


def test_the_issue_injection_is_two_statements_and_is_refused_naming_the_drop() -> None:
    sql = TEMPLATE.format(ds=INJECTION)
    assert len(split_statements(sql)) == 2
    with pytest.raises(InvalidDeclarationError, match=r"statement 2 of 2 \('DROP TABLE lake.db.other'\) is not a write"):
        check(sql)


def test_the_same_template_with_a_plain_value_is_the_declared_write() -> None:
    found = check(TEMPLATE.format(ds="2024-01-01"))
    assert found.operation is Operation.DELETE  # type: ignore[attr-defined]
    assert found.table == "lake.db.events"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        # a second statement, however it is spelled
        ("DELETE FROM lake.db.events WHERE ds = 'a'; DELETE FROM lake.db.events WHERE ds = 'b'", "2 write statements"),
        ("DELETE FROM lake.db.events WHERE ds = 'a';DROP TABLE lake.db.other", "DROP"),
        ("DELETE FROM lake.db.events WHERE ds = 'a' /* c */ ; /* ; */ TRUNCATE TABLE lake.db.other", "2 write statements"),
        ("DELETE FROM lake.db.events WHERE ds = 'a'; -- c\nCREATE TABLE lake.db.x AS SELECT 1", "CREATE"),
        ("DELETE FROM lake.db.events WHERE ds = 'a'\n;\nUSE lake.db", "USE"),
        ("DELETE FROM lake.db.events WHERE ds = 'a'; SET spark.sql.defaultCatalog = other", "is a SET"),
        ("SET spark.sql.shuffle.partitions = 1; DELETE FROM lake.db.events WHERE ds = 'a'", "is a SET"),
        ("DELETE FROM lake.db.events WHERE ds = 'a'; CALL lake.system.rollback_to_snapshot('db.other', 1)",
         "not a write occflow knows"),
        ("DELETE FROM lake.db.events WHERE ds = 'a'; MSCK REPAIR TABLE db.other", "MSCK REPAIR command"),
        # quotes and comments that do not close
        ("DELETE FROM lake.db.events WHERE ds = 'a", "unclosed quote"),
        ("DELETE FROM lake.db.events WHERE ds = 'a' /* never closed", "unclosed quote or comment"),
        # Spark substitutes ${...} into the text before parsing it
        ("DELETE FROM ${target} WHERE ds = 'a'", r"holds '\$\{'"),
        ("DELETE FROM lake.db.events WHERE ds = '${env:HOME}'", r"holds '\$\{'"),
        # the wrong table: another catalog, database or name, a CTE, a path, a run-time name
        ("DELETE FROM lake.db.other WHERE ds = 'a'", "writes lake.db.other"),
        ("DELETE FROM other.db.events WHERE ds = 'a'", "writes other.db.events"),
        ("DELETE FROM db.events WHERE ds = 'a'", r"writes spark_catalog.db.events \(a name without a catalog"),
        ("DELETE FROM delta.`/warehouse/db/events` WHERE ds = 'a'", "a path is not a table name"),
        ("DELETE FROM IDENTIFIER('lake.db.events') WHERE ds = 'a'", "IDENTIFIER"),
        # not a single write, or not a write at all
        ("SELECT * FROM lake.db.events", "not a write"),
        ("DROP TABLE lake.db.events", "not a write"),
        ("EXPLAIN DELETE FROM lake.db.events", "EXPLAIN command"),
        ("ds = 'x'", "not a write"),
        ("-- only a comment", "no statement"),
    ],
)
def test_hostile_sql_is_refused_with_the_reason(sql: str, why: str) -> None:
    with pytest.raises(InvalidDeclarationError, match=why):
        check(sql)


@pytest.mark.parametrize(
    ("sql", "operation", "why"),
    [
        ("UPDATE lake.db.events SET v = 1 WHERE ds = 'a'", "delete", "is a update but the task declares delete"),
        ("INSERT OVERWRITE lake.db.events SELECT * FROM lake.db.src", "insert_into", "is a insert_overwrite"),
        ("INSERT INTO lake.db.events REPLACE WHERE ds = 'a' SELECT * FROM s", "insert_into", "is a insert_overwrite"),
        ("WITH s AS (SELECT 1 AS id) INSERT INTO lake.db.other SELECT * FROM s", "insert_into", "writes lake.db.other"),
        ("MERGE INTO lake.db.other t USING lake.db.events s ON t.id = s.id WHEN MATCHED THEN DELETE", "merge",
         "writes lake.db.other"),
        ("INSERT OVERWRITE DIRECTORY '/tmp/out' SELECT * FROM lake.db.events", "insert_overwrite",
         "does not write a named table"),
        ("TRUNCATE TABLE lake.db.events, lake.db.other", "truncate", "more than one table"),
        ("ALTER TABLE lake.db.events RENAME TO lake.db.gone", "alter_metadata", "renames the table"),
        ("OPTIMIZE '/warehouse/db/events'", "optimize", "not a path"),
        ("CALL lake.system.rewrite_data_files(table => 'db.other')", "optimize", "writes lake.db.other"),
    ],
)
def test_the_wrong_operation_or_target_is_refused(sql: str, operation: str, why: str) -> None:
    with pytest.raises(InvalidDeclarationError, match=why):
        check(sql, operation)


@pytest.mark.parametrize(
    ("sql", "operation"),
    [
        ("INSERT INTO lake.db.events VALUES (1, 'a;b')", "insert_into"),
        ("insert into `LAKE`.`db`.Events select * from lake.db.src -- trailing; comment", "insert_into"),
        ("/* lead; */ INSERT OVERWRITE TABLE lake.db.events PARTITION (ds = 'a') SELECT 1", "insert_overwrite"),
        ("WITH s AS (SELECT 1 AS id) MERGE INTO lake.db.events t USING s ON t.id = s.id "
         "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *", "merge"),
        ("UPDATE lake.db.events SET v = 'x\\'; DROP TABLE y; --' WHERE ds = 'a'", "update"),
        ("DELETE FROM lake.db.events WHERE id IN (SELECT id FROM lake.db.other)", "delete"),
        ("TRUNCATE TABLE lake.db.events", "truncate"),
        ("ALTER TABLE lake.db.events ADD COLUMNS (note STRING)", "alter_metadata"),
        ("CALL lake.system.rewrite_data_files(table => 'db.events')", "optimize"),
        ("CALL lake.system.rewrite_data_files('db.events')", "optimize"),
    ],
)
def test_the_declared_write_is_accepted_however_it_is_spelled(sql: str, operation: str) -> None:
    assert check(sql, operation).operation.value == operation  # type: ignore[attr-defined]


def test_delta_commands_name_their_table() -> None:
    assert read_sql_write("OPTIMIZE db.events WHERE ds = 'a' ZORDER BY (id)").table == "db.events"
    assert read_sql_write("REORG TABLE `db`.`events` APPLY (PURGE)").operation is Operation.OPTIMIZE


def test_settings_need_the_dag_to_list_the_statements() -> None:
    listed = ["SET spark.sql.shuffle.partitions = 1", "DELETE FROM lake.db.events WHERE ds = 'a'"]
    assert check(listed).settings == ("spark.sql.shuffle.partitions",)  # type: ignore[attr-defined]
    text, allow = job_text(listed)
    assert allow and split_statements(text) == listed
    with pytest.raises(InvalidDeclarationError, match="is a SET"):
        check("; ".join(listed))
    with pytest.raises(InvalidDeclarationError, match="holds 2 statements"):
        check(["SET a = 1; DELETE FROM lake.db.events", "DELETE FROM lake.db.events"])
    with pytest.raises(InvalidDeclarationError, match="changes how the write's table name resolves"):
        check(["SET spark.sql.defaultCatalog = other", "DELETE FROM db.events"])
    with pytest.raises(InvalidDeclarationError, match="changes how the write's table name resolves"):
        check(["SET spark.sql.caseSensitive = true", "DELETE FROM lake.db.events"])
    with pytest.raises(InvalidDeclarationError, match="after the write"):
        check(["DELETE FROM lake.db.events", "SET a = 1"])
    with pytest.raises(InvalidDeclarationError, match="SET key = value"):
        check(["SET -v", "DELETE FROM lake.db.events"])


def test_without_known_catalogs_a_name_without_catalog_matches_any() -> None:
    # DAG parse time with a connection: the catalogs are read at run time and checked then.
    loose = WriteDeclaration.create("db.events", "delete", "iceberg-serializable")
    check_sql_write("DELETE FROM lake.db.events", loose, None, catalogs_known=False)
    with pytest.raises(InvalidDeclarationError, match="writes lake.db.other"):
        check_sql_write("DELETE FROM lake.db.other", loose, None, catalogs_known=False)


def partitioned(operation: str, partitions: object, reads_whole_table: bool = False) -> WriteDeclaration:
    return WriteDeclaration.create(
        "db.events", operation, "iceberg-serializable", partitions=partitions,  # type: ignore[arg-type]
        catalog="lake", reads_whole_table=reads_whole_table, allow_templates=True,
    )


@pytest.mark.parametrize(
    ("sql", "operation", "partitions", "why"),
    [
        # the SQL touches a partition the task does not declare
        ("DELETE FROM lake.db.events WHERE ds = '2024-01-02'", "delete", {"ds": "2024-01-01"}, "may touch ds=2024-01-02"),
        ("DELETE FROM lake.db.events WHERE ds >= '2024-01-01'", "delete", {"ds": "2024-01-01"}, "may touch ds>=2024-01-01"),
        ("DELETE FROM lake.db.events WHERE id = 3", "delete", {"ds": "2024-01-01"}, "reads the whole table"),
        ("MERGE INTO lake.db.events t USING lake.db.src s ON t.id = s.id AND t.ds = s.ds WHEN MATCHED THEN DELETE",
         "merge", {"ds": "2024-01-01"}, "MERGE ON names no partition column"),
        ("INSERT OVERWRITE lake.db.events SELECT * FROM lake.db.src", "insert_overwrite", {"ds": "2024-01-01"},
         "whole table|any partition"),
        # an INSERT reading its own target is a MERGE (spec 004, note (1))
        ("INSERT INTO lake.db.events SELECT * FROM lake.db.src s WHERE NOT EXISTS "
         "(SELECT 1 FROM lake.db.events e WHERE e.id = s.id)", "insert_into", None, "is a merge but the task declares insert_into"),
    ],
)
def test_a_declaration_narrower_than_its_sql_is_refused(sql: str, operation: str, partitions: object, why: str) -> None:
    with pytest.raises(InvalidDeclarationError, match=why):
        check_sql_write(sql, partitioned(operation, partitions), sql_catalog="spark_catalog")


@pytest.mark.parametrize(
    ("sql", "operation", "partitions"),
    [
        ("DELETE FROM lake.db.events WHERE ds = '2024-01-01' AND id = 3", "delete", {"ds": "2024-01-01"}),
        ("DELETE FROM lake.db.events WHERE ds IN ('2024-01-01', '2024-01-02')", "delete",
         [{"ds": "2024-01-01"}, {"ds": "2024-01-02"}]),
        ("MERGE INTO lake.db.events t USING lake.db.src s ON t.id = s.id AND t.ds = '2024-01-01' "
         "WHEN MATCHED THEN DELETE", "merge", {"ds": "2024-01-01"}),
        ("INSERT INTO lake.db.events PARTITION (ds = '2024-01-01') SELECT id FROM lake.db.src", "insert_into",
         {"ds": "2024-01-01"}),
        # wider than the SQL: accepted (admission keeps more apart)
        ("DELETE FROM lake.db.events WHERE ds = '2024-01-01' AND country = 'NL'", "delete", {"ds": "2024-01-01"}),
        ("INSERT INTO lake.db.events SELECT * FROM lake.db.events_staging", "insert_into", None),
        ("INSERT INTO lake.db.events SELECT * FROM lake.db.events", "merge", None),
    ],
)
def test_a_declaration_that_holds_its_sql_is_accepted(sql: str, operation: str, partitions: object) -> None:
    check_sql_write(sql, partitioned(operation, partitions), sql_catalog="spark_catalog")


def test_templated_values_and_unknown_catalogs_compare_partition_columns_only() -> None:
    sql = "DELETE FROM lake.db.events WHERE ds = '2024-01-02'"
    # values still Jinja: only the columns are compared now, the values after rendering
    check_sql_write(sql, partitioned("delete", {"ds": "{{ ds }}"}), sql_catalog="spark_catalog")
    # DAG parse time without the connection: the same
    check_sql_write(sql, partitioned("delete", {"ds": "2024-01-01"}), None, catalogs_known=False)
    with pytest.raises(InvalidDeclarationError, match=r"\(country, ds\)"):
        check_sql_write(sql, partitioned("delete", {"ds": "{{ ds }}", "country": "NL"}), sql_catalog="spark_catalog")
    with pytest.raises(InvalidDeclarationError, match="may touch ds=2024-01-02"):
        check_sql_write(sql, partitioned("delete", {"ds": "2024-01-01"}), sql_catalog="spark_catalog")
