"""pyiceberg's conflict errors, raised by real races on a SQL catalog on SQLite, classified.

Two handles load one table at the same snapshot; one commits, then the other does. pyiceberg 0.12
validates a write against the commits it raced only when it retries a commit that lost the
catalog pointer, so the tables keep one commit retry (``commit.retry.num-retries=1``, no wait):
the second writer's first attempt fails the catalog's requirement, its retry re-reads the table
and raises the ``ValidationException`` that says what it lost to. With retries off
(``num-retries=0``) the writer gets the catalog's ``CommitFailedException`` instead. The
oracle is what pyiceberg itself raised and the kind the Iceberg matrix gives that case; the
exception is classified as raised (with its ``__context__`` chain), as the bare
"module.Class: message" line a log keeps, and through ``ConflictRetryPolicy``'s decision.
"""

from __future__ import annotations

import ast
import inspect
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("pyiceberg", reason="needs pyiceberg (pip install 'airflow-provider-occflow[iceberg]')")

import pyarrow as pa  # noqa: E402
import pyiceberg  # noqa: E402
from airflow.sdk.definitions.retry_policy import RetryAction  # noqa: E402
from pyiceberg.catalog.sql import SqlCatalog  # noqa: E402
from pyiceberg.exceptions import CommitFailedException, ValidationException  # noqa: E402
from pyiceberg.expressions import AlwaysTrue, EqualTo  # noqa: E402
from pyiceberg.schema import Schema  # noqa: E402
from pyiceberg.table import Table  # noqa: E402
from pyiceberg.types import LongType, NestedField, StringType  # noqa: E402
from sqlalchemy import event  # noqa: E402

from occflow.core.classifiers.markers import COMPILED, MARKERS, Evidence  # noqa: E402
from occflow.core.classify import classify  # noqa: E402
from occflow.core.kinds import ConflictKind  # noqa: E402
from occflow.policies import ConflictRetryPolicy  # noqa: E402

K = ConflictKind
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "p", StringType(), required=False),
)


def rows(*ids: int, p: str = "a") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "p": [p] * len(ids)})


@dataclass
class Lake:
    """A SQL catalog on SQLite in a tmp dir, and a counter for fresh table names."""

    root: Path
    catalog: SqlCatalog
    tables: int = 0

    def second_catalog(self) -> SqlCatalog:
        """Another process's view of the same catalog database (its own engine and connections)."""
        return SqlCatalog("lake", uri=f"sqlite:///{self.root}/catalog.db", warehouse=f"file://{self.root}/warehouse")

    def two_handles(self, retries: int = 1) -> tuple[Table, Table]:
        """A table with rows in p='a' and p='b', loaded twice at the same snapshot."""
        self.tables += 1
        name = f"ns.t{self.tables}"
        table = self.catalog.create_table(
            name,
            SCHEMA,
            properties={"commit.retry.num-retries": str(retries), "commit.retry.min-wait-ms": "0"},
        )
        table.append(pa.concat_tables([rows(1, 2, p="a"), rows(3, p="b")]))
        return self.catalog.load_table(name), self.catalog.load_table(name)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    root = tmp_path_factory.mktemp("pyiceberg")
    catalog = SqlCatalog("lake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    catalog.create_namespace("ns")
    yield Lake(root, catalog)
    catalog.engine.dispose()


Write = Callable[[Table], object]


def overwrite_a(table: Table) -> None:
    table.overwrite(rows(9), overwrite_filter=EqualTo("p", "a"))


def delete_a(table: Table) -> None:
    table.delete(EqualTo("p", "a"))


def append_a(table: Table) -> None:
    table.append(rows(7))


def replace_first_file(table: Table) -> None:
    """A file-level rewrite (what a compaction does): remove a data file by name, no filter."""
    data_file = next(iter(table.scan().plan_files())).file
    with table.transaction() as tx, tx.update_snapshot().overwrite() as rewrite:
        rewrite.delete_data_file(data_file)


def append_then_expire_start(table: Table) -> None:
    """A writer that commits and expires the snapshot the other handle started from."""
    start = table.current_snapshot()
    assert start is not None
    table.append(rows(5))
    table.maintenance.expire_snapshots().by_id(start.snapshot_id).commit()


@dataclass(frozen=True)
class Race:
    name: str
    first: Write
    second: Write
    raised: type[Exception]
    text: str  # a regular expression for the text pyiceberg raised
    kind: ConflictKind
    operation: str  # the second writer's operation, as the policy spells it
    # What ConflictRetryPolicy tells Airflow: a lost write re-runs from a fresh snapshot, but a
    # compaction that lost its files is skipped (a retry policy's skip is FAIL without retry).
    action: RetryAction = RetryAction.RETRY


RACES = [
    Race(
        "append_then_overwrite_with_filter",
        append_a,
        overwrite_a,
        ValidationException,
        r"Added data files were found matching the filter for snapshots ",
        K.VALIDATION_CONFLICT,
        "insert_overwrite",
    ),
    Race(
        "overwrite_then_overwrite",
        overwrite_a,
        overwrite_a,
        ValidationException,
        r"Added data files were found matching the filter for snapshots ",
        K.VALIDATION_CONFLICT,
        "insert_overwrite",
    ),
    Race(
        "delete_then_delete",
        delete_a,
        delete_a,
        ValidationException,
        r"Deleted data files were found matching the filter for snapshots ",
        K.VALIDATION_CONFLICT,
        "delete",
    ),
    Race(
        "delete_then_overwrite_with_filter",
        delete_a,
        overwrite_a,
        ValidationException,
        r"Deleted data files were found matching the filter for snapshots ",
        K.VALIDATION_CONFLICT,
        "insert_overwrite",
    ),
    Race(
        "delete_all_then_file_rewrite",
        lambda t: t.delete(AlwaysTrue()),
        replace_first_file,
        ValidationException,
        r"Data files were concurrently deleted: \['file://",
        K.VALIDATION_CONFLICT,
        "optimize",
        RetryAction.FAIL,
    ),
    Race(
        "expire_start_then_overwrite",
        append_then_expire_start,
        overwrite_a,
        ValidationException,
        r"Cannot find starting snapshot -?\d+$",
        K.VALIDATION_CONFLICT,
        "insert_overwrite",
    ),
    Race(
        "schema_change_then_schema_change",
        lambda t: t.update_schema().add_column("x", LongType()).commit(),
        lambda t: t.update_schema().add_column("y", LongType()).commit(),
        CommitFailedException,
        r"Requirement failed: current schema id has changed: expected 0, found 1",
        K.COMMIT_FAILED,
        "alter_metadata",
    ),
]


def run_race(lake: Lake, race: Race, retries: int = 1) -> Exception:
    first, second = lake.two_handles(retries)
    race.first(first)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Delete operation did not match any records" and the like
        with pytest.raises(Exception) as raised:
            race.second(second)
    return raised.value


def assert_classified(error: Exception, kind: ConflictKind) -> None:
    as_raised = classify(error)
    assert as_raised.kind is kind, as_raised.reason
    assert as_raised.engine == "iceberg"
    # What a log keeps of it: one "module.Class: message" line, no chain.
    line = f"{type(error).__module__}.{type(error).__qualname__}: {error}"
    assert classify(line).kind is kind, line


@pytest.mark.parametrize("race", RACES, ids=[r.name for r in RACES])
def test_the_losing_pyiceberg_writer_is_classified_to_the_iceberg_matrix_kind(lake: Lake, race: Race) -> None:
    error = run_race(lake, race)
    assert type(error) is race.raised, f"{type(error).__name__}: {error}"
    assert re.search(race.text, str(error)), str(error)
    assert_classified(error, race.kind)
    policy = ConflictRetryPolicy("iceberg-serializable", race.operation, read_task_log=False)
    decision = policy.evaluate(error, try_number=1, max_tries=policy.retries + 1)
    assert decision.action is race.action, decision.reason


def test_with_commit_retries_off_the_loser_gets_the_requirement_failure(lake: Lake) -> None:
    error = run_race(lake, RACES[0], retries=0)
    assert type(error) is CommitFailedException
    assert re.match(r"Requirement failed: branch main has changed: expected id -?\d+, found -?\d+$", str(error))
    assert_classified(error, K.COMMIT_FAILED)


def test_the_sql_catalog_refuses_a_commit_whose_metadata_pointer_moved(lake: Lake) -> None:
    """The other writer commits between this commit's read of the pointer and its UPDATE: the
    catalog's compare-and-swap finds no row (pyiceberg catalog/sql.py, SqlCatalog.commit_table)."""
    first, _ = lake.two_handles(retries=0)
    other = lake.second_catalog()
    second = other.load_table(first.name())
    interleaved: list[str] = []

    @event.listens_for(other.engine, "before_cursor_execute")
    def commit_the_other_writer_first(*args: object) -> None:
        statement = str(args[2])
        if statement.lstrip().upper().startswith("UPDATE ICEBERG_TABLES") and not interleaved:
            interleaved.append(statement)
            first.append(rows(6))

    try:
        with pytest.raises(CommitFailedException) as raised:
            second.append(rows(8))
    finally:
        other.engine.dispose()
    assert interleaved, "the catalog never ran its compare-and-swap UPDATE"
    assert str(raised.value) == f"Table has been updated by another process: {'.'.join(first.name())}"
    assert_classified(raised.value, K.COMMIT_FAILED)


def test_a_pyiceberg_write_that_commits_beside_a_schema_change_raises_nothing(lake: Lake) -> None:
    """The other half of the measurement: pyiceberg lets a write commit after a concurrent schema
    change (the Java engine's requirement on the schema id is not part of a pyiceberg append)."""
    first, second = lake.two_handles()
    first.update_schema().add_column("x", LongType()).commit()
    second.append(rows(4))
    assert [f.name for f in lake.catalog.load_table(first.name()).schema().fields] == ["id", "p", "x"]


def test_a_pyiceberg_error_that_is_not_a_race_is_not_a_conflict(lake: Lake) -> None:
    table, _ = lake.two_handles()
    with pytest.raises(ValueError) as mismatch:
        table.append(pa.table({"zz": pa.array([1], pa.int64())}))
    assert classify(mismatch.value).kind is K.NOT_A_CONFLICT
    policy = ConflictRetryPolicy("iceberg-serializable", "insert_into", read_task_log=False)
    assert policy.evaluate(mismatch.value, try_number=1, max_tries=5).action is RetryAction.FAIL


def _validation_texts() -> list[tuple[str, int, str]]:
    """Every ``raise ValidationException(f"...")`` in pyiceberg's validation module: the function,
    the line, and the text with every placeholder rendered as ``['1']``."""
    module = Path(inspect.getfile(pyiceberg)).parent / "table" / "update" / "validate.py"
    tree = ast.parse(module.read_text(encoding="utf-8"))
    found: list[tuple[str, int, str]] = []
    for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Raise)
                and isinstance(node.exc, ast.Call)
                and getattr(node.exc.func, "id", None) == "ValidationException"
            ):
                message = node.exc.args[0]
                parts = message.values if isinstance(message, ast.JoinedStr) else [message]
                text = "".join(str(p.value) if isinstance(p, ast.Constant) else "['1']" for p in parts)
                found.append((function.name, node.lineno, text))
    return found


# Texts in validate.py that are not a race: a snapshot without a summary, an empty history.
NOT_RACES = {"No summary found for snapshot ['1']!", "No matching snapshot found."}


def test_every_validation_text_in_installed_pyiceberg_is_marked_or_known_not_a_race() -> None:
    """Read from pyiceberg's own source, so a renamed text in a new release fails here."""
    texts = _validation_texts()
    assert len(texts) >= 7, texts
    message_markers = [COMPILED[m.value] for m in MARKERS if m.evidence is Evidence.MESSAGE and m.engine == "iceberg"]
    assert {text for _, _, text in texts} >= NOT_RACES, texts
    unmarked = [
        (function, line, text)
        for function, line, text in texts
        if text not in NOT_RACES and not any(p.search(text) for p in message_markers)
    ]
    assert not unmarked
    for text in NOT_RACES:
        assert not classify(f"pyiceberg.exceptions.ValidationException: {text}").is_conflict
