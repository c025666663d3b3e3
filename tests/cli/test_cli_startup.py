"""``occflow`` imports only the chosen subcommand's module (issue 26: every call imported all of
them, SQLAlchemy, the simulator and sqlglot, about 2 s of CPU before ``explain`` started)."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from occflow.cli import SUBCOMMANDS, build_parser, main

# What each run may not import: the heavy dependencies of the subcommands it did not choose.
PROBE = """
import json, sys
from occflow.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
mods = sorted(m for m in sys.modules if m.split(".")[0] in {heavy} or m.startswith("occflow.cli."))
print(json.dumps({{"code": code, "modules": mods}}), file=sys.stderr)
"""
HEAVY = ("sqlalchemy", "airflow", "pyspark", "deltalake", "pydantic", "sqlglot", "pendulum", "matplotlib", "numpy")


def _imported(*argv: str) -> tuple[int, set[str], str]:
    done = subprocess.run([sys.executable, "-c", PROBE.format(heavy=set(HEAVY)), *argv],
                          capture_output=True, text=True, timeout=120)
    found = json.loads(done.stderr.strip().splitlines()[-1])
    return found["code"], set(found["modules"]), done.stdout


def test_help_lists_every_subcommand_and_imports_none() -> None:
    code, modules, out = _imported("--help")
    assert code == 0
    assert modules == set(), modules
    for name, command in SUBCOMMANDS.items():
        assert f"    {name}" in out and command.help.split()[0] in out


def test_explain_imports_its_module_and_sqlglot_only() -> None:
    code, modules, out = _imported("explain", "DELETE FROM db.t WHERE ds = 'a'", "--table-format", "delta",
                                   "--partition-columns", "ds")
    assert code == 0 and "operation:    delete" in out
    tops = {m.split(".")[0] for m in modules if not m.startswith("occflow.")}
    assert tops == {"sqlglot"}, tops
    assert {m for m in modules if m.startswith("occflow.cli.")} == {"occflow.cli.explain"}


@pytest.mark.parametrize("argv", [["policy", "delta", "merge"], ["matrix", "delta-rs"], ["profiles"]])
def test_policy_and_matrix_import_no_heavy_dependency(argv) -> None:
    code, modules, _ = _imported(*argv)
    assert code == 0
    assert {m.split(".")[0] for m in modules if not m.startswith("occflow.")} == set()


def test_every_subcommand_registers_with_the_help_the_listing_gives() -> None:
    """The listing (``SUBCOMMANDS``) and the modules agree: a command a module adds is listed,
    with the same help, and registering every module gives every listed command."""
    parser = argparse.ArgumentParser(prog="occflow")
    sub = parser.add_subparsers(dest="command")
    for module in dict.fromkeys(c.module for c in SUBCOMMANDS.values()):
        importlib.import_module(f"occflow.cli.{module}").register(sub)
    helps = {action.dest: action.help for action in sub._choices_actions}
    assert helps == {name: command.help for name, command in SUBCOMMANDS.items()}


@pytest.mark.parametrize("name", list(SUBCOMMANDS))
def test_a_chosen_subcommand_parses_its_own_options(name) -> None:
    parser = build_parser([name])
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert action.choices[name].add_help  # the module's parser, not the listing's stub
    assert set(action.choices) == set(SUBCOMMANDS)


def test_an_unknown_subcommand_names_the_choices(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["explian"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'explian'" in err and "'explain'" in err
