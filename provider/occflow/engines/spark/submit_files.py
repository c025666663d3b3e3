"""The files of the spark-submit channel, and what a driver is given in files instead of on its command line.

Every file a reader may meet half-written (state, outcome, application, lease window) is
written by ``write_atomically``.

A command line is readable by every user of the machine (``ps``, ``/proc/<pid>/cmdline``) and
lands in process listings and crash reports; a Spark config holds secrets (an S3 secret key, a
catalog token). So the driver's Spark conf goes to spark-submit as ``--properties-file`` and its
``SparkConfig`` to the driver as ``--config @FILE``, both files created with mode 0600 next to
the outcome file and removed once the driver is done (``discard``).

``--properties-file`` replaces Spark's ``spark-defaults.conf`` (Spark 3.5 reads one or the
other), so the file starts with that file's text when there is one and our conf follows it:
a later line wins in a properties file, as ``--conf`` won over the defaults. Spark trims the
values it reads from a properties file: a value with leading or trailing blanks loses them.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The two files of the driver writing ``<outcome>``: ``<outcome>`` + suffix.
PROPERTIES_SUFFIX = ".spark.properties"
CONFIG_SUFFIX = ".config"
PRIVATE_MODE = 0o600

#: Characters ``java.util.Properties.store`` escapes with a backslash.
_ESCAPED = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f",
            "=": "\\=", ":": "\\:", "#": "\\#", "!": "\\!"}


def write_atomically(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory and a rename: a
    reader of the channel (state file, outcome) sees the whole file or none."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def paths(outcome: str | Path) -> tuple[Path, Path]:
    """The properties file and the config file of the driver that writes ``outcome``."""
    return Path(str(outcome) + PROPERTIES_SUFFIX), Path(str(outcome) + CONFIG_SUFFIX)


def write_private(path: Path, text: str) -> None:
    """Create ``path`` readable and writable by its owner only (0600) and write ``text``. The file
    is created here (``O_EXCL``, no symlink followed): a file someone else made is never reused."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), PRIVATE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), PRIVATE_MODE)  # whatever the umask
        handle.write(text)


def _escaped(text: str, is_key: bool) -> str:
    out = []
    for i, char in enumerate(text):
        if char == " " and (is_key or i == 0):
            out.append("\\ ")
        elif char in _ESCAPED:
            out.append(_ESCAPED[char])
        elif " " <= char <= "~":
            out.append(char)
        else:  # as Properties.store: \\uXXXX per UTF-16 unit, so any reader's charset reads it right
            data = char.encode("utf-16-be")
            out.extend(f"\\u{int.from_bytes(data[j:j + 2], 'big'):04x}" for j in range(0, len(data), 2))
    return "".join(out)


def java_properties(conf: Mapping[str, str]) -> str:
    """``conf`` in the ``java.util.Properties`` text format, one ``key=value`` line per setting."""
    return "".join(f"{_escaped(str(k), True)}={_escaped(str(v), False)}\n" for k, v in conf.items())


def spark_defaults(spark_submit: str, env: Mapping[str, str]) -> str:
    """The text of the ``spark-defaults.conf`` spark-submit would read without
    ``--properties-file`` (``$SPARK_CONF_DIR``, else ``$SPARK_HOME/conf``), or ``""``."""
    home = env.get("SPARK_HOME") or str(Path(spark_submit).resolve().parent.parent)
    conf_dir = env.get("SPARK_CONF_DIR") or str(Path(home) / "conf")
    try:
        return (Path(conf_dir) / "spark-defaults.conf").read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return ""


def write(outcome: Path, conf: Mapping[str, str], config: Mapping[str, Any], spark_submit: str,
          env: Mapping[str, str]) -> tuple[Path, Path]:
    """Write the driver's properties file (Spark's defaults, then ``conf``) and config file."""
    properties, config_file = paths(outcome)
    defaults = spark_defaults(spark_submit, env)
    # Two line breaks: a defaults file ending in a continuation backslash does not swallow our first line.
    write_private(properties, (defaults + "\n\n" if defaults else "") + java_properties(conf))
    write_private(config_file, json.dumps(dict(config)))
    return properties, config_file


def discard(outcome: str | Path) -> None:
    """Remove the driver's files (it has read them; a finished driver needs them no more)."""
    for path in paths(outcome):
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)


__all__ = ["CONFIG_SUFFIX", "PROPERTIES_SUFFIX", "discard", "java_properties", "paths", "spark_defaults", "write", "write_atomically"]
