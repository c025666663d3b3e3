"""Smoke test of bench/real_bench.py on real delta-rs: both policies, same jobs, same run.

The Iceberg-on-Spark variant of the benchmark takes minutes and is run by hand (its figures are
in bench/results/real_bench.json); this runs the delta-rs variant small.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "real_bench.py"


@pytest.mark.slow
def test_real_bench_runs_both_policies_on_real_delta_rs_and_occflow_loses_no_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("deltalake", reason="the delta-rs variant needs the deltalake package (extra 'delta')")
    # as when it runs as a script: its own directory (bench/benchlib.py) is importable
    monkeypatch.syspath_prepend(str(BENCH.parent))
    spec = importlib.util.spec_from_file_location("real_bench", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules["real_bench"] = bench  # its dataclasses look their module up
    spec.loader.exec_module(bench)
    out = tmp_path / "real.json"
    report = bench.main(["--variant", "delta", "--jobs", "6", "--partitions", "2", "--rows", "3000",
                         "--seed-rows", "6000", "--retry-delay", "0.2", "--out", str(out)])
    assert json.loads(out.read_text()) == report
    (variant,) = report["variants"]
    by = {p["policy"]: p for p in variant["policies"]}
    assert set(by) == {"naive", "occflow"}
    for row in by.values():
        assert row["table_check"].startswith("rows ") and "MISMATCH" not in row["table_check"]
        # Every committed job has exactly one committed attempt; every other attempt lost.
        assert row["attempts"] == row["jobs_committed"] + row["failed_attempts"]
    occflow = by["occflow"]
    # Admission by the matrix: two merges on one partition never run together, so none loses.
    assert occflow["jobs_committed"] == 6
    assert occflow["failed_attempts"] == 0 and occflow["wasted_executor_seconds"] == 0
    assert set(variant["ratios"]) >= {"wasted_executor_seconds_saved", "wall_seconds_naive_over_occflow"}
