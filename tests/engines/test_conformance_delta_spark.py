"""Delta conformance on real delta-spark: a bounded subset of the committed report, re-measured.

The full run (81 pairs x 8 table layouts) is ``occflow conformance --engine delta-spark
--write-docs``; its page, docs/conformance/delta-spark.md, is committed. Here one layout and a
handful of pairs (both ways of pinning the later job's snapshot, agreements and explained
divergences) run again on real delta-spark, in a process of their own (this test process's JVM
holds the Iceberg extensions), and must match the committed page cell by cell and the profile (or
one of the explained divergences). A change in delta-spark, in the runner or in a profile cell
shows up here.

VACUUM's 19 pairs were measured apart from the full run, on ``VACUUM_LAYOUTS`` (one per isolation
level; the page's "VACUUM pairs" sections, until the next full run puts them in each layout's
"every cell observed"): CI re-measures five of them, both orders and the ALTER and upgrade rows, at
the one layout below, which is one of them (all 19 at both isolation levels would add about 40 s
to a CI budget that is spent).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from occflow.core.operations import Operation
from occflow.core.profiles import get_profile
from occflow.engines.conformance import Observation
from occflow.engines.spark.delta_conformance import (
    EXPLAINED_PREFIX,
    LAYOUTS,
    UNEXPLAINED,
    Layout,
    explain,
    parse_layout,
)
from occflow.engines.spark.delta_spark import JARS_ENV, DeltaFormat
from occflow.engines.spark.settings import SparkConfigError

PAGE = Path(__file__).resolve().parents[2] / "docs" / "conformance" / "delta-spark.md"
#: The layouts VACUUM's pairs were measured on (the others' committed cells predate VACUUM).
VACUUM_LAYOUTS = (Layout("WriteSerializable", True, True), Layout("Serializable", False, False))
LAYOUT = "WriteSerializable,partitioned,dv"
SUBSET = [
    "update:delete",  # both rewrite p: ConcurrentAppend (gated later job)
    "insert_into:insert_into",  # blind appends never conflict
    "insert_into:update",  # WriteSerializable and a blind append
    "truncate:merge",  # TRUNCATE adds nothing: ConcurrentDeleteRead
    "update:optimize",  # OPTIMIZE on a pinned snapshot loses to the rewrite of its files
    "optimize:optimize",
    "alter_metadata:insert_into",  # a metadata change fails every later write
    "update:alter_metadata",  # ALTER reads nothing
    "upgrade_protocol:update",  # the protocol change
    "update:vacuum",  # VACUUM's START starts at the latest version: it commits after a rewrite
    "vacuum:merge",  # its empty commits fail nothing (the harm is in the files)
    "vacuum:optimize",  # a pinned OPTIMIZE after the VACUUM's two commits
    "alter_metadata:vacuum",  # no MetadataChanged for a VACUUM (delta-rs fails here)
    "upgrade_protocol:vacuum",
]


def _delta_jars() -> bool:
    try:
        return bool(DeltaFormat().jars())
    except SparkConfigError:
        return False


def _committed_cells(label: str) -> dict[tuple[str, str], str]:
    """``(earlier, later) -> observed`` of one runner on the committed page: its every-cell
    section, and its VACUUM pairs' section when they were measured apart."""
    text = PAGE.read_text()
    starts = [text.index(f"## {label}: every cell observed")]
    if f"## {label}: VACUUM pairs, every cell observed" in text:
        starts.append(text.index(f"## {label}: VACUUM pairs, every cell observed"))
    cells = {}
    for start in starts:
        end = text.find("\n## ", start + 1)
        for line in text[start : end if end != -1 else len(text)].splitlines():
            m = re.match(r"\| (\w+) \| (\w+) \| ([^|]+?) \|", line)
            if m and m.group(1) != "earlier":
                cells[(m.group(1), m.group(2))] = m.group(3).strip()
    return cells


def test_the_committed_report_covers_every_cell_and_explains_every_divergence() -> None:
    text = PAGE.read_text()
    assert UNEXPLAINED not in text, "the committed report lists a divergence nobody explained"
    for layout in LAYOUTS:
        profile = get_profile("delta-serializable" if layout.isolation == "Serializable" else "delta-write-serializable")
        cells = _committed_cells(layout.label)
        ops = [op for op in profile.operations if layout in VACUUM_LAYOUTS or op is not Operation.VACUUM]
        assert set(cells) == {(a.value, b.value) for a in ops for b in ops}, layout.label
        assert not [pair for pair, seen in cells.items() if seen.startswith("INVALID")], layout.label


def test_explain_names_unlisted_divergences() -> None:
    layout = Layout("Serializable", True, False)
    agrees = Observation(later_committed=True)
    assert explain(layout, "delta-serializable", Operation.INSERT_INTO, Operation.INSERT_INTO, agrees) == ""
    # Serializable: an append fails a later UPDATE; a commit there is a divergence nobody listed.
    assert explain(layout, "delta-serializable", Operation.INSERT_INTO, Operation.UPDATE, agrees) == UNEXPLAINED
    assert parse_layout(LAYOUT) == Layout("WriteSerializable", True, True)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.skipif(not _delta_jars(), reason=f"delta-spark jars not available: set {JARS_ENV} or bootstrap")
def test_a_subset_measured_again_matches_the_committed_report_and_the_profile(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "occflow.engines.spark.delta_conformance", "--layout", LAYOUT]
    for pair in SUBSET:
        cmd += ["--pair", pair]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-4000:]
    # VacuumCommand prints "Deleted N files ..." on the JVM's stdout, which is the runner's: the
    # report is the JSON printed after the run.
    report = json.loads(done.stdout[done.stdout.index("{") :])
    (run,) = report["runs"]
    layout = parse_layout(LAYOUT)
    assert run["runner"] == layout.label
    (comparison,) = run["comparisons"]
    rows = {(r["earlier"], r["later"]): r for r in comparison["rows"]}
    assert set(rows) == {tuple(p.split(":")) for p in SUBSET}
    committed = _committed_cells(layout.label)
    for pair, row in rows.items():
        observed = "ok" if not row["observed_fails"] else f"fails ({row['observed_kind']})"
        assert "experiment invalid" not in row["note"], row
        assert observed == committed[pair], f"{pair}: now {observed}, committed {committed[pair]}: {row}"
        assert row["agrees"] or row["note"].startswith(EXPLAINED_PREFIX), f"{pair}: unexplained divergence {row}"
