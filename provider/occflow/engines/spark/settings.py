"""What every Spark setting is checked with: the error a bad setting raises and the coercion of
mapping / list settings. Shared by ``SparkConfig`` and the table formats' catalog settings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from ...core.errors import InvalidDeclarationError


class SparkConfigError(InvalidDeclarationError):
    """A Spark configuration (or an Airflow connection's extras) that cannot be used."""


def str_mapping(value: object, what: str) -> Mapping[str, str]:
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, Mapping):
        raise SparkConfigError(f"{what} must be a mapping of strings, got {type(value).__name__}")
    out: dict[str, str] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not key:
            raise SparkConfigError(f"{what}: keys must be non-empty strings, got {key!r}")
        if isinstance(val, bool):
            out[key] = "true" if val else "false"
        elif isinstance(val, (str, int, float)):
            out[key] = str(val)
        else:
            raise SparkConfigError(f"{what}[{key!r}] must be a string or number, got {type(val).__name__}")
    return MappingProxyType(out)


def str_tuple(value: object, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(p.strip() for p in value.split(",") if p.strip())
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise SparkConfigError(f"{what} must be a list of strings or a comma-separated string, got {value!r}")
