"""``[core] hostname_callable`` of the deployed mode's Celery workers: the worker's own name.

Both workers run on one machine, so ``socket.getfqdn()`` would give them the same host name; each
worker process gets ``OCCFLOW_DEPLOYED_HOSTNAME`` and its tasks report it as their host name.
"""

from __future__ import annotations

import os
import socket


def hostname() -> str:
    return os.environ.get("OCCFLOW_DEPLOYED_HOSTNAME") or socket.getfqdn()
