"""Every Python code block in docs/ and README.md runs, so a wrong example fails the test command.

Each page's ```python blocks run in order, in one fresh subprocess of the project's Python, with
a temporary working directory, Airflow home, occflow home and lease store: a later block sees
what an earlier one on the same page defined, as a reader who pastes them one after another
would. A block that raises fails the test with the page, the block's first line and the
traceback, whose line numbers are the lines of the Markdown file.

Markers, HTML comments on the line right before a block (invisible on the site, visible in the
source):

- ``<!-- docs-test: skip reason="..." -->``: the block cannot run by nature (a signature, a
  fragment of a loop); the test prints every skip with its reason, and their number is capped.
- ``<!-- docs-test: setup ... -->``: Python run (hidden) right before the block, for names a
  fragment assumes (a ``run_id``, a stand-in for "your transformation"). Keep it short.
- ``<!-- docs-test: dag-file name="x.py" -->``: the block is a DAG file. It is written into the
  page's DAG folder under that name and imported from there (so ``dag.test()`` finds it), and
  its names are visible to the page's later blocks; the page gets a migrated Airflow metadata
  DB (``airflow db migrate``) first.

and anywhere on a page:

- ``<!-- docs-test: slow reason="..." -->``: the page starts Spark (or is slow for another
  reason); its run is marked ``slow`` so the default pass stays quick.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: A skip needs a reason and is rare; raising this cap is a decision, not a reflex.
MAX_SKIPS = 8
PAGE_TIMEOUT_SECONDS = 600

_FENCE_OPEN = re.compile(r"^(?P<indent>\s*)```python\s*$")
_FENCE_CLOSE = re.compile(r"^\s*```\s*$")
_SKIP = re.compile(r'^\s*<!--\s*docs-test:\s*skip\s+reason="(?P<reason>[^"]+)"\s*-->\s*$')
_SLOW = re.compile(r'<!--\s*docs-test:\s*slow\s+reason="(?P<reason>[^"]+)"\s*-->')
_SETUP_OPEN = re.compile(r"^\s*<!--\s*docs-test:\s*setup\s*$")
_DAG_FILE = re.compile(r'^\s*<!--\s*docs-test:\s*dag-file\s+name="(?P<name>[A-Za-z0-9_]+\.py)"\s*-->\s*$')
_MARKER = re.compile(r"<!--\s*docs-test:(?P<rest>.*)")


@dataclass
class Block:
    line: int  # the line of the block's first code line in the page (1-based)
    code: str
    setup: str = ""
    setup_line: int = 0
    skip: str | None = None
    dag_file: str | None = None


@dataclass
class Page:
    path: Path
    blocks: list[Block] = field(default_factory=list)
    slow: str | None = None

    @property
    def needs_airflow_db(self) -> bool:
        return any(b.dag_file and b.skip is None for b in self.blocks)

    @property
    def name(self) -> str:
        return str(self.path.relative_to(ROOT)) if self.path.is_relative_to(ROOT) else str(self.path)


def _previous_nonblank(lines: list[str], index: int) -> int:
    i = index - 1
    while i >= 0 and not lines[i].strip():
        i -= 1
    return i


def _dag_file_before(lines: list[str], open_index: int) -> str | None:
    i = _previous_nonblank(lines, open_index)
    found = _DAG_FILE.match(lines[i]) if i >= 0 else None
    return found.group("name") if found else None


def _marker_before(lines: list[str], open_index: int) -> tuple[str | None, str, int]:
    """(skip reason, setup code, setup's first line) from the comment right before a fence."""
    i = _previous_nonblank(lines, open_index)
    if i < 0:
        return None, "", 0
    skip = _SKIP.match(lines[i])
    if skip:
        return skip.group("reason"), "", 0
    if lines[i].strip() == "-->":
        j = i - 1
        while j >= 0 and not _SETUP_OPEN.match(lines[j]):
            if "-->" in lines[j] or "<!--" in lines[j]:
                return None, "", 0
            j -= 1
        if j >= 0:
            return None, "\n".join(lines[j + 1 : i]), j + 2
    return None, "", 0


def parse_page(path: Path) -> Page:
    """The page's python blocks with their markers; a malformed marker is an error."""
    lines = path.read_text().splitlines()
    page = Page(path)
    slow = _SLOW.search("\n".join(lines))
    page.slow = slow.group("reason") if slow else None
    for number, text in enumerate(lines, start=1):
        marker = _MARKER.search(text)
        if marker and not (_SKIP.match(text) or _SLOW.search(text) or _SETUP_OPEN.match(text) or _DAG_FILE.match(text)):
            raise AssertionError(f"{page.name}:{number}: malformed docs-test marker: {text.strip()}")
    i = 0
    while i < len(lines):
        opened = _FENCE_OPEN.match(lines[i])
        if not opened:
            i += 1
            continue
        indent = len(opened.group("indent"))
        end = i + 1
        while end < len(lines) and not _FENCE_CLOSE.match(lines[end]):
            end += 1
        if end == len(lines):
            raise AssertionError(f"{page.name}:{i + 1}: a ```python block is never closed")
        code = "\n".join(line[indent:] for line in lines[i + 1 : end])
        skip, setup, setup_line = _marker_before(lines, i)
        page.blocks.append(Block(i + 2, code, setup, setup_line, skip, _dag_file_before(lines, i)))
        i = end + 1
    return page


def _pages() -> list[Page]:
    paths = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
    return [p for p in (parse_page(path) for path in paths) if p.blocks]


PAGES = _pages()

# Runs in the subprocess: each block compiled with the Markdown file as its file name and its
# own line numbers, executed in one namespace per page.
_RUNNER = r"""
import importlib.util, json, os, sys, traceback
blocks = json.load(open(sys.argv[1]))
namespace = {"__name__": "__main__"}

def import_dag_file(name, code, line):
    # Padded so the file's line numbers are the page's; imported from the DAG folder.
    path = os.path.join(os.environ["AIRFLOW__CORE__DAGS_FOLDER"], name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n" * (line - 1) + code + "\n")
    spec = importlib.util.spec_from_file_location(name[:-3], path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    namespace.update({k: v for k, v in vars(module).items() if not k.startswith("__")})

for b in blocks:
    for code, line, what in ((b["setup"], b["setup_line"], "hidden setup of the block"), (b["code"], b["line"], "block")):
        if not code:
            continue
        try:
            if what == "block" and b.get("dag_file"):
                import_dag_file(b["dag_file"], code, line)
            else:
                exec(compile("\n" * (line - 1) + code, b["page"], "exec"), namespace)
        except BaseException:
            print(f"DOCS-EXAMPLE-FAILED {b['page']}:{b['line']} ({what})", flush=True)
            traceback.print_exc()
            sys.exit(1)
    print(f"DOCS-EXAMPLE-OK {b['page']}:{b['line']}", flush=True)
"""


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "OCCFLOW"))}
    home = tmp_path / "airflow"
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(tmp_path / "dags"),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
        OCCFLOW_HOME=str(tmp_path / "occflow"),
        OCCFLOW_LEASE_STORE_URL=f"sqlite:///{tmp_path / 'leases.db'}",
        PYTHONDONTWRITEBYTECODE="1",
        TMPDIR=str(tmp_path / "tmp"),  # the examples' tempfile.mkdtemp() land in the test's tmp
    )
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return env


def _param(page: Page) -> object:
    marks = [pytest.mark.slow] if page.slow else []
    return pytest.param(page, id=page.name, marks=marks)


@pytest.mark.parametrize("page", [_param(p) for p in PAGES])
def test_page_examples_run(page: Page, tmp_path, capsys):
    runnable = [b for b in page.blocks if b.skip is None]
    if not runnable:
        pytest.skip(f"{page.name}: every python block is marked docs-test: skip")
    blocks = [
        {"page": page.name, "line": b.line, "code": b.code, "setup": b.setup, "setup_line": b.setup_line,
         "dag_file": b.dag_file}
        for b in runnable
    ]
    spec = tmp_path / "blocks.json"
    spec.write_text(json.dumps(blocks))
    work = tmp_path / "work"
    work.mkdir()
    env = _env(tmp_path)
    started = time.monotonic()
    if page.needs_airflow_db:
        migrated = subprocess.run([str(Path(sys.executable).with_name("airflow")), "db", "migrate"],
                                  cwd=work, env=env, capture_output=True, text=True, timeout=300)
        if migrated.returncode != 0:
            pytest.fail(f"airflow db migrate failed:\n{migrated.stderr[-4000:]}", pytrace=False)
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER, str(spec)],
        cwd=work, env=env, capture_output=True, text=True, timeout=PAGE_TIMEOUT_SECONDS,
    )
    seconds = time.monotonic() - started
    with capsys.disabled():
        print(f"\n[docs] {page.name}: {len(runnable)} block(s) run, "
              f"{len(page.blocks) - len(runnable)} skipped, {seconds:.1f} s")
    if proc.returncode != 0:
        pytest.fail(f"a python block of {page.name} fails:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}",
                    pytrace=False)
    ran = [line for line in proc.stdout.splitlines() if line.startswith("DOCS-EXAMPLE-OK")]
    assert len(ran) == len(runnable), f"only {len(ran)} of {len(runnable)} blocks reported running"


def test_skips_are_few_and_say_why(capsys):
    skipped = [(p.name, b.line, b.skip) for p in PAGES for b in p.blocks if b.skip is not None]
    total = sum(len(p.blocks) for p in PAGES)
    with capsys.disabled():
        print(f"\n[docs] {total} python blocks in {len(PAGES)} pages; {len(skipped)} skipped:")
        for name, line, reason in skipped:
            print(f"[docs]   {name}:{line}: {reason}")
        for p in PAGES:
            if p.slow:
                print(f"[docs]   {p.name} runs in the slow pass: {p.slow}")
    assert len(skipped) <= MAX_SKIPS, f"{len(skipped)} skipped blocks (cap {MAX_SKIPS}): make them run"


def test_parser_reads_markers_and_lines(tmp_path):
    """The parser's own oracle, on a page written here."""
    page = tmp_path / "page.md"
    page.write_text(
        "# t\n\n"
        "```python\nx = 1\n```\n\n"
        '<!-- docs-test: skip reason="a signature" -->\n```python\ndef f(a, b): ...\n```\n'
        "<!-- docs-test: setup\ny = 2\n-->\n\n```python\nassert x + y == 3\n```\n"
        '<!-- docs-test: slow reason="starts Spark" -->\n'
        '<!-- docs-test: dag-file name="my_dag.py" -->\n```python\ndag = None\n```\n'
    )
    parsed = parse_page(page)
    assert [b.line for b in parsed.blocks] == [4, 9, 16, 21]
    assert [b.skip for b in parsed.blocks] == [None, "a signature", None, None]
    assert parsed.blocks[2].setup == "y = 2" and parsed.blocks[2].setup_line == 12
    assert [b.dag_file for b in parsed.blocks] == [None, None, None, "my_dag.py"]
    assert parsed.slow == "starts Spark" and parsed.needs_airflow_db
    page.write_text("# t\n<!-- docs-test: skipp -->\n```python\nx = 1\n```\n")
    with pytest.raises(AssertionError, match="malformed docs-test marker"):
        parse_page(page)


def test_a_wrong_example_fails(tmp_path):
    """The runner reports a failing block with its page and line (the check can fail)."""
    spec = tmp_path / "blocks.json"
    spec.write_text(json.dumps([
        {"page": "docs/x.md", "line": 3, "code": "a = 1", "setup": "", "setup_line": 0},
        {"page": "docs/x.md", "line": 10, "code": "\nassert a == 2, 'wrong'", "setup": "", "setup_line": 0},
    ]))
    proc = subprocess.run([sys.executable, "-c", _RUNNER, str(spec)], capture_output=True, text=True,
                          cwd=tmp_path, env=_env(tmp_path), timeout=60)
    assert proc.returncode == 1
    assert "DOCS-EXAMPLE-OK docs/x.md:3" in proc.stdout
    assert "DOCS-EXAMPLE-FAILED docs/x.md:10" in proc.stdout
    assert 'File "docs/x.md", line 11' in proc.stderr and "AssertionError: wrong" in proc.stderr
