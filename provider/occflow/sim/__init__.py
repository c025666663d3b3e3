"""The simulator: how much work each policy wastes, and how close it gets to the optimum.

``simulate(load_workload(path), "occflow", seed=0)`` runs one policy on one workload; commits
are validated by each table's conflict matrix at partition granularity (``engine.py``).
``POLICY_NAMES`` are the policies compared (naive, table-pool, partition-lock, occflow-retry,
occflow, oracle); ``POLICY_ALIASES`` the old names still accepted.
"""

from __future__ import annotations

from .metrics import LowerBound, Metrics, lower_bound
from .policies import POLICY_ALIASES, POLICY_NAMES, SimPolicy, build_policy, parse_policies
from .runs import Attempt, JobOutcome, Run
from .simulator import simulate
from .workload import Job, Workload, WorkloadError, load_workload, parse_workload

__all__ = [
    "POLICY_ALIASES",
    "POLICY_NAMES",
    "Attempt",
    "Job",
    "JobOutcome",
    "LowerBound",
    "Metrics",
    "Run",
    "SimPolicy",
    "Workload",
    "WorkloadError",
    "build_policy",
    "load_workload",
    "lower_bound",
    "parse_policies",
    "parse_workload",
    "simulate",
]
