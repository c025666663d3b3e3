"""Admission control: leases on table footprints, granted by the tables' conflict matrices.

See docs/admission.md. ``LeaseStore.from_url(url)`` on SQLite (embedded default) or PostgreSQL;
``TaskAdmission`` is a task's way in (operators, sensors and triggers use it).
"""

from __future__ import annotations

from ..core.admission_rule import Claim
from ..core.footprint import footprints_overlap, parse_partition_key
from ..core.profiles import operations_conflict
from .admission import TaskAdmission, cached_store, holder_of
from .config import default_url, make_engine, resolve_store_url, store_url, url_from_connection_uri
from .keeper import LeaseKeeper
from .model import (
    Admission,
    AdmissionPriorities,
    AdmissionTimeout,
    Blocker,
    GateTimeout,
    Holder,
    Lease,
    LeaseLostError,
    LeaseRequest,
    LeaseStoreError,
    LeaseStoreRefused,
    LeaseStoreUnavailable,
    NotAdmittedError,
    checked_seconds,
)
from .store import LeaseStore
from .wakeup import Watch

__all__ = [
    "Admission",
    "AdmissionPriorities",
    "AdmissionTimeout",
    "Blocker",
    "Claim",
    "GateTimeout",
    "Holder",
    "Lease",
    "LeaseKeeper",
    "LeaseLostError",
    "LeaseRequest",
    "LeaseStore",
    "LeaseStoreError",
    "LeaseStoreRefused",
    "LeaseStoreUnavailable",
    "NotAdmittedError",
    "TaskAdmission",
    "Watch",
    "cached_store",
    "checked_seconds",
    "default_url",
    "footprints_overlap",
    "holder_of",
    "make_engine",
    "operations_conflict",
    "parse_partition_key",
    "resolve_store_url",
    "store_url",
    "url_from_connection_uri",
]
