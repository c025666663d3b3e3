"""One configuration path: no component of the package finds the lease store its own way.

Every component (writes, triggers and sensors through ``TaskAdmission``, the view through
``plugins.app.lease_store``, the ``occflow leases`` CLI) must reach the store through
``leases.config.resolve_store_url``. A module that reads ``OCCFLOW_LEASE_STORE_URL`` or
``OCCFLOW_LEASE_STORE_CONN_ID`` itself, or calls the resolution's parts (``store_url``, which
knows no connection id, or ``default_url``), is a second path that can disagree with the first:
the writes read only the URL setting until the connection id was added to them (issue 32).

The check reads the package's syntax trees; a planted violation of each kind proves it can fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "provider" / "occflow"
SETTINGS = {"OCCFLOW_LEASE_STORE_URL", "OCCFLOW_LEASE_STORE_CONN_ID", "URL_ENV", "CONN_ID_ENV"}
PARTS = {"store_url", "default_url"}
#: The resolution itself, and the per-process cache whose key is the settings it resolves.
ALLOWED = {"leases/config.py", "leases/admission.py"}


def second_paths(source: str) -> list[str]:
    """Where ``source`` reads a store setting or calls a part of the resolution itself."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in PARTS:
                found.append(f"line {node.lineno}: calls {name}()")
            elif name in ("get", "getenv", "pop", "setdefault") and any(_names_setting(a) for a in node.args[:1]):
                found.append(f"line {node.lineno}: reads {ast.unparse(node.args[0])}")
        elif isinstance(node, ast.Subscript) and _names_setting(node.slice):
            found.append(f"line {node.lineno}: reads {ast.unparse(node.slice)}")
    return found


def _names_setting(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in SETTINGS
    return isinstance(node, ast.Name | ast.Attribute) and (getattr(node, "id", None) or node.attr) in SETTINGS


def test_every_component_resolves_the_store_through_one_function():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where not in ALLOWED and (found := second_paths(path.read_text())):
            offenders[where] = found
    assert not offenders, f"lease store resolved outside leases.config.resolve_store_url: {offenders}"


def test_the_components_call_the_one_function():
    # The check above would pass on a package that never resolves the store: each component's
    # entry point must name the function (or TaskAdmission, which calls it).
    calls = {
        "leases/admission.py": "resolve_store_url(",
        "plugins/app.py": "resolve_store_url(",
        "cli/leases.py": "resolve_store_url(",
        "triggers/lease.py": "TaskAdmission(",
        "sensors/conflict_free.py": "TaskAdmission(",
        "operators/admission.py": "TaskAdmission(",
    }
    missing = [f for f, call in calls.items() if call not in (PACKAGE / f).read_text()]
    assert not missing, missing


@pytest.mark.parametrize("planted", [
    "import os\nurl = os.environ.get('OCCFLOW_LEASE_STORE_URL')\n",
    "import os\nurl = os.environ['OCCFLOW_LEASE_STORE_CONN_ID']\n",
    "from occflow.leases.config import URL_ENV\nimport os\nurl = os.getenv(URL_ENV)\n",
    "from occflow.leases import store_url\nurl = store_url()\n",
    "from occflow.leases import config\nurl = config.default_url()\n",
])
def test_a_planted_second_path_is_caught(planted):
    assert second_paths(planted)


def test_naming_the_settings_in_a_message_is_not_a_second_path():
    assert not second_paths('HELP = "default: $OCCFLOW_LEASE_STORE_URL"\nprint(HELP)\nresolve_store_url(None)\n')
