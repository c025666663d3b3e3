"""The documentation site builds with MkDocs (theme material) in strict mode.

`mkdocs build --strict` turns every warning into a failure: a link to a page that does not
exist, a link to an anchor that no heading makes, a page in docs/ that the nav leaves out. The
second test shows the check can fail: the same build on a copy of docs/ with a broken link and
a broken anchor planted in it must abort and name both.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).with_name("mkdocs")


def _build(config: Path, site: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    started = time.monotonic()
    proc = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        capture_output=True, text=True, env=env, timeout=300,
    )
    return proc, time.monotonic() - started


def _problems(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(("WARNING", "ERROR"))]


@pytest.fixture(scope="module")
def mkdocs() -> Path:
    if not MKDOCS.exists():
        pytest.fail(f"mkdocs is not installed next to {sys.executable} (requirements.lock has it)")
    return MKDOCS


def test_site_builds_strict(mkdocs, tmp_path, capsys):
    site = tmp_path / "site"
    proc, seconds = _build(ROOT / "mkdocs.yml", site)
    with capsys.disabled():
        print(f"\n[docs] mkdocs build --strict: {seconds:.1f} s, exit {proc.returncode}")
    assert proc.returncode == 0, "the docs site does not build:\n" + "\n".join(
        _problems(proc.stdout + proc.stderr) or [proc.stdout + proc.stderr]
    )
    # Every page in docs/ became a page of the site (none was dropped silently).
    pages = sorted(p.relative_to(ROOT / "docs") for p in (ROOT / "docs").rglob("*.md") if "_hooks" not in p.parts)
    for page in pages:
        name = "index.html" if page.stem in ("index", "README") else f"{page.stem}/index.html"
        assert (site / page.parent / name).is_file(), f"docs/{page} has no page in the built site"


def test_strict_build_fails_on_a_broken_link_and_anchor(mkdocs, tmp_path):
    """The oracle for the check itself: plant a broken link and a broken anchor, the build fails."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    concepts = tmp_path / "docs" / "concepts.md"
    concepts.write_text(
        concepts.read_text()
        + "\n\nSee [nowhere](no-such-page.md) and [a section](policies.md#no-such-heading).\n"
    )
    proc, _ = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    out = "\n".join(_problems(proc.stdout + proc.stderr))
    assert proc.returncode != 0
    assert "no-such-page.md" in out
    assert "no-such-heading" in out


def test_nav_hook_drops_only_missing_pages(tmp_path):
    """docs/_hooks/nav_present.py: a nav entry whose page is not there yet is left out (so the
    strict build passes while another change writes it); present pages and URLs stay."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("nav_present", ROOT / "docs" / "_hooks" / "nav_present.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    (tmp_path / "a.md").write_text("# a\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.md").write_text("# b\n")
    nav = [
        {"Home": "a.md"},
        {"Section": [{"B": "sub/b.md"}, {"Later": "later.md"}, "https://example.com/"]},
        {"Gone": [{"X": "x.md"}, "y.md"]},
    ]
    config = {"nav": nav, "docs_dir": str(tmp_path)}
    assert hook.on_config(config)["nav"] == [
        {"Home": "a.md"},
        {"Section": [{"B": "sub/b.md"}, "https://example.com/"]},
    ]
