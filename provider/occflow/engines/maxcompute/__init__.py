"""MaxCompute (remote, reached through a client such as PyODPS): the commit tag as job hints and
the exactly-once ledger over the project's jobs."""

from __future__ import annotations

from .ledger import MaxComputeJobs, MaxComputeLedger, maxcompute_hints

__all__ = ["MaxComputeJobs", "MaxComputeLedger", "maxcompute_hints"]
