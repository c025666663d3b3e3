"""DAG linting and pool planning from the writes DAGs declare.

``scan_dag_folder`` reads the declared writes out of a DAG folder (Airflow's DagBag);
``collisions`` finds the pairs of declared writes that can run together and would conflict, or
corrupt the data, by the matrix; ``findings`` folds them into one per table and pair of tasks and
classifies each as ``corrupts_data``, ``conflict`` or ``serialized`` (admission keeps them apart);
``lint`` applies suppressions (pragmas, config) and the baseline (``occflow lint``, docs/lint.md);
``plan_pools`` derives plain Airflow pools that keep the collisions apart (``occflow pools``).
Footprint overlap is ``occflow.core.footprint``'s rule, with a Jinja template matching any value.
"""

from __future__ import annotations

from .baseline import Baseline, read_baseline, write_baseline
from .config import LintConfig, LintConfigError, load_config
from .dagscan import DagFolderError, ScannedFolder, scan_dag_folder
from .findings import Finding, Suppression, findings
from .planning import Collision, DeclaredTask, Evidence, FindingKind, PlannedPool, collisions, plan_pools
from .pragmas import LintSuppressionError
from .report import LintReport, lint

__all__ = [
    "Baseline",
    "Collision",
    "DagFolderError",
    "DeclaredTask",
    "Evidence",
    "Finding",
    "FindingKind",
    "LintConfig",
    "LintConfigError",
    "LintReport",
    "LintSuppressionError",
    "PlannedPool",
    "ScannedFolder",
    "Suppression",
    "collisions",
    "findings",
    "lint",
    "load_config",
    "plan_pools",
    "read_baseline",
    "scan_dag_folder",
    "write_baseline",
]
