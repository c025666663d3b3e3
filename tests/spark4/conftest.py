"""The Spark 4 compatibility suite (issue 37, docs/spark-support.md): run from ``.venv-spark4``
(PySpark 4.1, the manifest's Spark 4.1 jars) by scripts/test.sh, marker ``spark4``.

Under the main environment's PySpark 3.5 nothing here is collected: the suite is the other line's.
scripts/test.sh also runs a few of the 3.5 suite's own tests from ``.venv-spark4`` (the node ids
in ``reused.txt``): the same test, the same oracle, on the other line.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# delta_spark_races (the Spark 3.5 races' harness, and its Gate) is imported, not copied.
sys.path.insert(0, str(HERE.parent / "engines"))


def _spark_major() -> int | None:
    try:
        import pyspark
    except ImportError:
        return None
    return int(str(pyspark.__version__).split(".")[0])


collect_ignore_glob = [] if (_spark_major() or 0) >= 4 else ["test_*.py"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).resolve().parent == HERE:
            item.add_marker(pytest.mark.spark4)
