"""DAG linting and pool planning from the writes DAGs declare.

``scan_dag_folder`` reads the declared writes out of a DAG folder (Airflow's DagBag);
``collisions`` finds the pairs that can run together and would conflict, or corrupt the data, by
the matrix (``occflow lint``); ``plan_pools`` derives plain Airflow pools that keep them apart
(``occflow pools``).
Footprint overlap is ``occflow.core.footprint``'s rule, with a Jinja template matching any value.
"""

from __future__ import annotations

from .dagscan import DagFolderError, ScannedFolder, scan_dag_folder
from .planning import Collision, DeclaredTask, Evidence, FindingKind, PlannedPool, collisions, plan_pools

__all__ = [
    "Collision",
    "DagFolderError",
    "DeclaredTask",
    "Evidence",
    "FindingKind",
    "PlannedPool",
    "ScannedFolder",
    "collisions",
    "plan_pools",
    "scan_dag_folder",
]
