"""Admission control: leases on table footprints, granted by the tables' conflict matrices.

See docs/admission.md. ``LeaseStore.from_url(url)`` on SQLite (embedded default) or PostgreSQL.
"""

from __future__ import annotations

from .config import default_url, make_engine, resolve_store_url, store_url, url_from_connection_uri
from .model import (
    AdmissionPriorities,
    Holder,
    Lease,
    LeaseLostError,
    LeaseRequest,
    LeaseStoreError,
    footprints_overlap,
    operations_conflict,
    parse_partition_key,
)
from .store import Admission, AdmissionTimeout, Blocker, LeaseKeeper, LeaseStore

__all__ = [
    "Admission",
    "AdmissionPriorities",
    "AdmissionTimeout",
    "Blocker",
    "Holder",
    "Lease",
    "LeaseKeeper",
    "LeaseLostError",
    "LeaseRequest",
    "LeaseStore",
    "LeaseStoreError",
    "default_url",
    "footprints_overlap",
    "make_engine",
    "operations_conflict",
    "parse_partition_key",
    "resolve_store_url",
    "store_url",
    "url_from_connection_uri",
]
