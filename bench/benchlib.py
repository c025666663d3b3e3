"""What the benchmark scripts share: the machine the figures come from, its load, a summary."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any


def machine() -> dict[str, object]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version()}


def moment() -> dict[str, str]:
    """Now, with the machine's load (``uptime``): stamped at a benchmark's start and end."""
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return {"uptime": uptime, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def spread(values: list[float | None]) -> dict[str, Any]:
    """Median, min and max of the values that are not None (``{"n": 0}`` for none)."""
    kept = sorted(v for v in values if v is not None)
    if not kept:
        return {"n": 0}
    return {"n": len(kept), "median": round(statistics.median(kept), 3), "min": round(kept[0], 3),
            "max": round(kept[-1], 3)}
