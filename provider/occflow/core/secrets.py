"""Which settings hold secrets: one rule for every place that writes settings down or prints them.

A setting's name says whether its value is a secret: ``spark.hadoop.fs.s3a.secret.key``, a
catalog's ``token`` or ``credential``, ``spark.ssl.keyPassword``, an Azure account ``key``. The
rule is deliberately wide (a value hidden for nothing costs a ``***``, a printed secret costs a
rotation): a name with ``secret``, ``passw``, ``token`` or ``credential`` in it, or with a word
that is or ends in ``key`` (``key``, ``accessKey``, ``access-key-id``; not ``keystore``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

#: Parts of a name that make its value a secret wherever they appear in it.
SECRET_PARTS = ("secret", "passw", "token", "credential")
#: What a shown secret becomes.
HIDDEN = "***"

_WORDS = re.compile(r"[a-z0-9]+")
#: ``name=value``, ``name: value``, ``"name": "value"``: how settings appear in command lines,
#: properties files, JSON and error messages.
_SETTING = re.compile(
    r"""(?P<name>[A-Za-z0-9_.\-]+)(?P<sep>["']?\s*[=:]\s*)(?P<value>"(?:[^"\\]|\\.)*"|'[^']*'|[^\s,;&}\]"']+)"""
)


def is_secret_name(name: str) -> bool:
    """Whether a setting called ``name`` holds a secret (``spark.hadoop.fs.s3a.secret.key``: yes)."""
    lowered = name.lower()
    return any(part in lowered for part in SECRET_PARTS) or any(
        word.endswith("key") for word in _WORDS.findall(lowered)
    )


def secret_values(settings: Mapping[str, Any]) -> Iterator[str]:
    """The values of the secret settings in ``settings``, nested mappings included (a Spark
    config's ``conf`` and ``catalog``): what a log masker must hide."""
    for name, value in settings.items():
        if isinstance(value, Mapping):
            yield from secret_values(value)
        elif value is not None and value != "" and is_secret_name(str(name)):
            yield str(value)


def redact_settings(text: str) -> str:
    """``text`` with the value of every secret setting written in it (``name=value``,
    ``name: value``, ``"name": "value"``) replaced by ``***``; everything else as it was."""

    def hide(found: re.Match[str]) -> str:
        if not is_secret_name(found["name"]):
            return found[0]
        quote = found["value"][0] if found["value"][:1] in ("'", '"') else ""
        return f"{found['name']}{found['sep']}{quote}{HIDDEN}{quote}"

    return _SETTING.sub(hide, text)


__all__ = ["HIDDEN", "SECRET_PARTS", "is_secret_name", "redact_settings", "secret_values"]
