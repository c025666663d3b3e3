"""The supply chain of the install (docs/getting-started.md#supply-chain), checked on the files.

- Every entry of the three locks (requirements.lock, requirements-build.lock,
  requirements-uv.lock) is an exact ``==`` pin with at least one sha256 hash, and nothing else
  (no URL, path, editable or option line that would slip past hash-checking mode).
- scripts/bootstrap.sh installs each of them in hash-checking mode, and builds with the hashed
  build backend.
- pyproject.toml's ``[build-system] requires`` are exact pins, the ones requirements-build.lock
  holds.
- The distributions installed in this interpreter's environment are the lock's versions, uv
  included; and bootstrap recorded the Debian packages' versions.

Fast and offline: it reads files and ``importlib.metadata``.
"""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
LOCKS = ("requirements.lock", "requirements-build.lock", "requirements-uv.lock", "requirements-spark4.lock")
BOOTSTRAP = ROOT / "scripts" / "bootstrap.sh"

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.!+_-]+)$")
_HASH = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _entries(text: str) -> list[str]:
    """The lock's logical lines: comments dropped, backslash continuations joined."""
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        if current.strip():
            logical.append(current.strip())
        current = ""
    if current.strip():
        logical.append(current.strip())
    return logical


def lock_problems(text: str) -> tuple[dict[str, str], list[str]]:
    """The pins of a lock ({canonical name: version}) and every entry that breaks the rules."""
    pins: dict[str, str] = {}
    problems: list[str] = []
    for entry in _entries(text):
        requirement, *options = entry.split()
        pin = _PIN.match(requirement)
        if pin is None:
            problems.append(f"not an exact `name==version` pin: {entry[:80]}")
            continue
        name = _canonical(pin.group(1))
        if not options:
            problems.append(f"{requirement} has no --hash=sha256:...")
        for option in options:
            if not _HASH.match(option):
                problems.append(f"{requirement}: {option[:80]} is not a sha256 hash")
        if name in pins:
            problems.append(f"{name} is pinned twice")
        pins[name] = pin.group(2)
    if not pins:
        problems.append("no pinned requirement at all")
    return pins, problems


def _lock(name: str) -> dict[str, str]:
    pins, problems = lock_problems((ROOT / name).read_text())
    assert not problems, f"{name}:\n" + "\n".join(problems)
    return pins


def _commands(script: str) -> list[list[str]]:
    """A shell script's commands (continuations joined, comments dropped), as words."""
    commands = []
    for line in script.replace("\\\n", " ").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            try:
                commands.append(shlex.split(line, comments=True))
            except ValueError:  # a quote left open on this line: its words will do
                commands.append(line.split())
    return commands


def _installs(commands: list[list[str]], program: str) -> list[list[str]]:
    """The `PROGRAM pip install ...` (uv) or `PROGRAM install ...` (pip) commands."""
    head = ["pip", "install"] if program == "uv" else ["install"]
    return [c for c in commands if c and Path(c[0]).name == program and c[1 : 1 + len(head)] == head]


def bootstrap_problems(script: str) -> list[str]:
    """Every way the bootstrap script's installs leave hash-checking mode."""
    commands = _commands(script)
    main, pip = _installs(commands, "uv"), _installs(commands, "pip")
    from_lock = [c for c in main if "requirements.lock" in c]
    editable = [c for c in main if "-e" in c]
    problems = []
    if not from_lock:
        problems.append("requirements.lock is not installed with `uv pip install`")
    if not editable:
        problems.append("occflow itself is not installed (`uv pip install --no-deps -e .`)")
    if not pip or not all("requirements-uv.lock" in c for c in pip):
        problems.append("uv is not installed with pip from requirements-uv.lock")
    for command in pip + [c for c in main if c not in editable]:
        if "--require-hashes" not in command:
            problems.append(f"installs without --require-hashes: {shlex.join(command)}")
    for command in from_lock + editable:
        # the build backend (occflow's own, and the lock's sdist-only packages'): pinned and hashed
        if "requirements-build.lock" not in command or "--require-build-hashes" not in command:
            problems.append(f"builds without requirements-build.lock's hashes: {shlex.join(command)}")
    for command in editable:
        if "--no-deps" not in command:  # its dependencies come from the hashed lock only
            problems.append(f"the editable install resolves dependencies: {shlex.join(command)}")
    return problems


@pytest.mark.parametrize("name", LOCKS)
def test_every_lock_entry_is_an_exact_pin_with_sha256_hashes(name: str) -> None:
    _lock(name)


def test_the_lock_checker_catches_a_missing_hash_a_range_and_a_url() -> None:
    good = "a2wsgi==1.10.10 \\\n    --hash=sha256:" + "a" * 64 + "\n    # via apache-airflow-core\n"
    assert lock_problems(good) == ({"a2wsgi": "1.10.10"}, [])
    for bad in (
        "a2wsgi==1.10.10\n    # via apache-airflow-core\n",  # no hash
        "a2wsgi>=1.10 \\\n    --hash=sha256:" + "a" * 64 + "\n",  # not an exact pin
        "a2wsgi==1.10.10 \\\n    --hash=md5:" + "a" * 32 + "\n",  # not sha256
        good + "-e ./vendored\n",  # an editable slips past hash-checking
        good + "https://example.invalid/x-1.0.tar.gz\n",
    ):
        assert lock_problems(bad)[1], bad


def test_bootstrap_installs_every_lock_in_hash_checking_mode() -> None:
    assert bootstrap_problems(BOOTSTRAP.read_text()) == []


@pytest.mark.parametrize(
    "weakened",
    [
        "--require-hashes",
        "--require-build-hashes",
        "--no-deps",
        "--build-constraints requirements-build.lock",
    ],
)
def test_the_bootstrap_checker_catches_a_dropped_option(weakened: str) -> None:
    script = BOOTSTRAP.read_text()
    assert weakened in script
    assert bootstrap_problems(script.replace(f" {weakened}", "")), f"dropping {weakened} went unnoticed"


def test_the_build_backend_is_pinned_exactly_and_locked() -> None:
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    assert requires
    build_lock = _lock("requirements-build.lock")
    for requirement in requires:
        pin = _PIN.match(requirement.replace(" ", ""))
        assert pin, f"[build-system] requires {requirement!r}: not an exact `name==version` pin"
        assert build_lock.get(_canonical(pin.group(1))) == pin.group(2), (
            f"{requirement} is not what requirements-build.lock pins: run `bash scripts/lock.sh`"
        )


def _bootstrapped_venv() -> Path:
    venv = ROOT / ".venv"
    if Path(sys.prefix).resolve() != venv.resolve():
        pytest.skip(f"not running in the bootstrapped {venv} (sys.prefix is {sys.prefix})")
    return venv


def test_the_installed_distributions_are_the_locked_versions() -> None:
    _bootstrapped_venv()
    installed: dict[str, set[str]] = {}
    for dist in importlib.metadata.distributions():
        installed.setdefault(_canonical(dist.metadata["Name"]), set()).add(dist.version)
    expected = {**_lock("requirements.lock"), **_lock("requirements-uv.lock")}
    wrong = {
        name: (version, sorted(installed.get(name, set())))
        for name, version in expected.items()
        if installed.get(name) != {version}
    }
    assert not wrong, (
        f"installed versions differ from the locks (locked, installed): {wrong}; run bash scripts/bootstrap.sh"
    )


def test_bootstrap_recorded_the_debian_packages_versions() -> None:
    venv = _bootstrapped_venv()
    recorded_file = venv / "occflow-debian-versions.txt"
    assert recorded_file.exists(), f"{recorded_file} is missing: run bash scripts/bootstrap.sh"
    recorded = dict(line.split("=", 1) for line in recorded_file.read_text().splitlines() if line)
    wanted = [
        line.strip()
        for line in (ROOT / "scripts" / "apt-packages.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert sorted(p.split(":")[0] for p in recorded) == sorted(wanted)
    assert all(recorded.values()), recorded
