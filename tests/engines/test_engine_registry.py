"""The engine registry: one spec per engine folder, every reference in it imports, and a new
engine is picked up everywhere by its folder and one entry in ``core.engines.ENGINES``."""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path

import pytest

from occflow.cli import main
from occflow.core import engines
from occflow.core.declaration import WriteDeclaration
from occflow.core.errors import InvalidDeclarationError
from occflow.core.tablefacts import TableFacts
from occflow.engines import registry
from occflow.engines.conformance import PairRunner

ENGINES_DIR = Path(registry.__file__).parent


# ------------------------------------------------------------------ (a) one spec per folder


def test_every_engine_folder_has_exactly_one_spec() -> None:
    folders = registry.engine_folders()
    assert {"deltars", "spark", "maxcompute"} <= set(folders)
    assert registry.unregistered_folders() == []
    # Every spec names a folder that exists: none points into the void.
    assert sorted(registry.specs_by_folder()) == folders


def test_a_folder_without_a_spec_is_named(tmp_path: Path) -> None:
    # The planted violation: a copy of the engine folders' layout with one more folder.
    for folder in [*registry.engine_folders(), "duckdb"]:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    assert registry.unregistered_folders(tmp_path) == ["duckdb"]


@pytest.mark.parametrize("spec", engines.engine_specs(), ids=lambda s: s.name)
def test_every_reference_of_a_spec_imports_from_its_own_folder(spec: engines.EngineSpec) -> None:
    target = registry.target_class(spec)
    assert target.__module__.startswith(f"{spec.package}.")
    assert callable(getattr(target, "run_attempt", None)), f"{target} is no WriteTarget"
    reader = registry.facts_reader(spec)
    assert reader.__module__.startswith(f"{spec.package}.")
    operator = registry.resolve(spec.operator)
    # The operator reports the engine by the spec's name (lint and the view read engine_name).
    assert operator.engine_name == spec.name
    assert spec.operator_name == operator.__name__
    for committer in spec.commits:
        if committer.conformance is None:
            continue
        assert committer.conformance.startswith(f"{spec.package}.")
        entry = registry.conformance_entry(committer.name)
        assert entry.name == committer.name
        assert callable(entry.runners) and callable(entry.meta)


def test_a_reference_that_does_not_import_is_named() -> None:
    broken = engines.EngineSpec(
        name="broken", package="occflow.engines.deltars", operator="occflow.operators.delta:NoSuchOperator",
        target=".no_such_module:Target", facts=".facts:no_such_reader",
        commits=(engines.Committer("broken", "delta", family="broken"),),
    )
    with pytest.raises(InvalidDeclarationError, match=r"'\.no_such_module:Target' \(in occflow\.engines\.deltars\)"):
        registry.target_class(broken)
    with pytest.raises(InvalidDeclarationError, match="'.facts:no_such_reader'"):
        registry.facts_reader(broken)


def test_a_spec_refuses_a_committer_of_an_unknown_format_or_two_of_one() -> None:
    with pytest.raises(InvalidDeclarationError, match="unknown table format 'hudi'"):
        engines.Committer("hudi-spark", "hudi", family="hudi")
    delta = engines.Committer("a", "delta", family="a")
    with pytest.raises(InvalidDeclarationError, match="must commit each of its table formats once"):
        engines.EngineSpec("x", "occflow.engines.x", "m:C", ".t:T", ".f:f", commits=(delta, delta))


def test_names_resolve_to_one_spec_and_unknown_names_list_the_known() -> None:
    assert engines.engine_spec("spark") is engines.SPARK
    assert engines.committer("SPARK-DELTA").name == "delta-spark"
    with pytest.raises(InvalidDeclarationError, match="unknown engine 'duckdb'; engines: delta-rs, spark, maxcompute, pyiceberg"):
        engines.engine_spec("duckdb")
    with pytest.raises(InvalidDeclarationError, match=r"unknown engine 'duckdb'; engines: delta-rs \(delta\)"):
        engines.committer("duckdb")
    with pytest.raises(InvalidDeclarationError, match="known engines: delta-rs, delta-spark, spark-iceberg"):
        registry.conformance_entry("databricks")  # a committer occflow runs no engine for


# ------------------------------------------------------------------ (c) a new engine is one entry

TOY_FILES = {
    "__init__.py": '"""A throwaway engine: the folder a new engine would be."""\n',
    "target.py": """
        class ToyTarget:
            engine_name = "toy"

            def run_attempt(self, declaration, attempt):
                raise NotImplementedError("the toy commits nothing")
        """,
    "facts.py": """
        from occflow.core.tablefacts import TableFacts

        def toy_table_facts(table):
            return TableFacts(table, "iceberg", "toy-iceberg")
        """,
    "conformance.py": """
        import contextlib
        from pathlib import Path

        from occflow.engines.conformance import Observation

        class ToyRunner:
            engine = "toy-iceberg"
            profile = "iceberg-serializable"
            compare_with = ()

            def __init__(self, workdir):
                self.log = Path(workdir) / "toy-pairs.txt"

            def run_pair(self, earlier, later):
                with self.log.open("a") as out:  # what ran, for the test to read back
                    out.write(f"{earlier.value}:{later.value}\\n")
                return Observation(later_committed=True)

        @contextlib.contextmanager
        def conformance_runners(workdir):
            yield [ToyRunner(workdir)]

        def conformance_meta():
            return {"toy": "0.0.1"}
        """,
    "operator.py": """
        from occflow.operators.base import OccflowWriteOperator

        class ToyWriteOperator(OccflowWriteOperator):
            engine_name = "toy"
            default_table_format = "toy-iceberg"

            def __init__(self, *, job, **kwargs):
                kwargs.setdefault("table_format", self.default_table_format)
                super().__init__(**kwargs)
                self.job = job
        """,
    "spec.py": """
        from occflow.core.engines import Committer, EngineSpec

        SPEC = EngineSpec(
            name="toy",
            package=__package__,
            operator=f"{__package__}.operator:ToyWriteOperator",
            target=".target:ToyTarget",
            facts=".facts:toy_table_facts",
            runs_functions=True,
            commits=(Committer("toy-iceberg", "iceberg", family="iceberg", aliases=("toyberg",),
                               conformance=f"{__package__}.conformance"),),
        )
        """,
}


@pytest.fixture
def toy_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> engines.EngineSpec:
    """A throwaway engine folder outside occflow, registered the one way there is: one more entry
    in ``core.engines.ENGINES``. No other file knows it."""
    package = f"toy_engine_{uuid.uuid4().hex[:8]}"
    (tmp_path / package).mkdir()
    for name, text in TOY_FILES.items():
        (tmp_path / package / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    spec: engines.EngineSpec = __import__(f"{package}.spec", fromlist=["SPEC"]).SPEC
    monkeypatch.setattr(engines, "ENGINES", (*engines.ENGINES, spec))  # the one line
    return spec


def test_a_new_engine_is_known_to_table_facts_and_declarations(toy_spec: engines.EngineSpec) -> None:
    facts = registry.facts_reader(toy_spec)("db.events")
    assert (facts.engine, facts.profile_name()) == ("toy-iceberg", "iceberg-serializable")
    assert TableFacts("t", "iceberg", "toyberg").engine == "toy-iceberg"  # its alias
    with pytest.raises(InvalidDeclarationError, match=r"engine 'toy-iceberg' does not write delta.*toy-iceberg \(iceberg\)"):
        TableFacts("t", "delta", "toy-iceberg")
    declared = WriteDeclaration.create("db.events", "merge", table_format="toy-iceberg")
    assert declared.profile.name == "iceberg-serializable"
    assert registry.target_class(toy_spec).__name__ == "ToyTarget"


def test_a_new_engine_is_an_engine_of_the_policy_command(toy_spec: engines.EngineSpec, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "iceberg", "merge", "--engine", "toy", "--format", "json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["profile"] == "iceberg-serializable"
    assert "table format iceberg written by toy (ToyWriteOperator): profile iceberg-serializable" in out.err
    assert main(["policy", "iceberg", "merge"]) == 0
    assert "ToyWriteOperator's, --engine toy" in capsys.readouterr().out
    assert main(["policy", "delta", "merge", "--engine", "toy"]) == 2
    assert "--engine toy (ToyWriteOperator) does not write delta tables; it writes iceberg" in capsys.readouterr().err


def test_a_new_engine_runs_its_own_conformance_runner(
    toy_spec: engines.EngineSpec, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workdir = tmp_path / "work"
    rc = main(["conformance", "--engine", "toy-iceberg", "--format", "json", "--workdir", str(workdir),
               "--pair", "merge:insert_into", "--pair", "delete:merge"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert report["engine"] == "toy-iceberg" and report["meta"] == {"toy": "0.0.1"}
    # The toy's own runner ran the pairs asked for, in order.
    assert (workdir / "toy-pairs.txt").read_text().split() == ["merge:insert_into", "delete:merge"]
    runner = __import__(f"{toy_spec.package}.conformance", fromlist=["ToyRunner"]).ToyRunner(tmp_path)
    assert isinstance(runner, PairRunner)


def test_a_new_engine_decorates_functions_and_gets_its_advice(toy_spec: engines.EngineSpec) -> None:
    from occflow.core.advice import ICEBERG, engine_family
    from occflow.decorators.occflow_write import occflow_write

    def upsert(spark, job):  # type: ignore[no-untyped-def]
        return None

    task = occflow_write(upsert, engine="toy", table="db.events", operation="merge", partitions={"ds": "2024-01-01"})
    made = task()
    assert type(made).__name__ == "ToyWriteOperator"
    assert (made.job, made.task_id) == (upsert, "upsert")
    # The operator's declaration reads the registry too: the toy's name is its table format.
    assert made.occflow_write.profile.name == "iceberg-serializable"
    assert engine_family("toy-iceberg") == ICEBERG
    with pytest.raises(InvalidDeclarationError, match=r"engine must be one of \('delta-rs', 'spark', 'pyiceberg', 'toy'\), got 'maxcompute'"):
        occflow_write(upsert, engine="maxcompute")


def test_without_its_entry_the_engine_is_unknown_everywhere() -> None:
    # The same lookups as above, before the one line: every one of them refuses the name.
    with pytest.raises(InvalidDeclarationError, match="engine 'toy-iceberg' does not write iceberg tables"):
        TableFacts("t", "iceberg", "toy-iceberg")
    with pytest.raises(InvalidDeclarationError, match="unknown table_format 'toy-iceberg'"):
        WriteDeclaration.create("db.events", "merge", table_format="toy-iceberg")
    with pytest.raises(InvalidDeclarationError, match="unknown conformance engine 'toy-iceberg'"):
        registry.conformance_entry("toy-iceberg")
    with pytest.raises(InvalidDeclarationError, match="unknown engine 'toy'"):
        engines.engine_spec("toy")


def test_an_operator_reference_that_is_no_occflow_operator_is_refused(
    toy_spec: engines.EngineSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    from occflow.decorators.occflow_write import occflow_write

    wrong = replace(toy_spec, operator=f"{toy_spec.package}.target:ToyTarget")  # a typo in the registry
    monkeypatch.setattr(engines, "ENGINES", (*engines.ENGINES[:-1], wrong))

    def upsert(spark, job):  # type: ignore[no-untyped-def]
        return None

    with pytest.raises(InvalidDeclarationError, match=r"engine toy: operator '.*target:ToyTarget' is not an OccflowWriteOperator"):
        occflow_write(upsert, engine="toy", table="db.events", operation="merge")()
