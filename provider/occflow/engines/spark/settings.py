"""What every Spark setting is checked with: the error a bad setting raises, the pydantic base of
``SparkConfig`` and ``IcebergCatalogConfig``, the setting types they share (Spark values as text,
jar lists) and ``describe``, which turns pydantic's errors into one line per field that names
the field, the bad value and what is allowed: ``conf['spark.x'] must be a string, number or
boolean, got {'a': 1}``.
"""

from __future__ import annotations

import os
import reprlib
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
    StrictStr,
    StringConstraints,
    ValidationError,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from ...core.errors import InvalidDeclarationError

# Values quoted in a message are cut short: a bad value can be a whole mapping.
_SHOW = reprlib.Repr()
_SHOW.maxstring, _SHOW.maxother, _SHOW.maxlist, _SHOW.maxdict, _SHOW.maxlevel = 80, 80, 6, 4, 3
# The error type of our own checks that read "<field> <phrase>, got <value>".
_SETTING = "spark_setting"
# What a value of each of pydantic's error types should have been.
_PHRASES = {
    "string_type": "must be a string",
    "string_too_short": "must not be empty",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "dict_type": "must be a mapping",
    "mapping_type": "must be a mapping",
}


class SparkConfigError(InvalidDeclarationError):
    """A Spark configuration (or an Airflow connection's extras) that cannot be used.

    ``problems`` holds one line per bad field, so that settings nested in others (the Iceberg
    catalog in a ``SparkConfig``) report theirs under the outer field's name.
    """

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems: tuple[str, ...] = tuple(problems) or (message,)


def setting_problem(phrase: str) -> PydanticCustomError:
    """An error ``describe`` prints as ``<field> <phrase>, got <value>``."""
    return PydanticCustomError(_SETTING, phrase)


def _as_spark_value(value: object) -> object:
    # Spark settings are text; JSON extras give numbers and booleans too (Spark spells them lower case).
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if not isinstance(value, str):
        raise setting_problem("must be a string, number or boolean")
    return value


def no_settings() -> Mapping[str, Any]:
    """An empty, read-only mapping: the default of a settings mapping."""
    return MappingProxyType({})


def _none_as_empty(value: object) -> object:
    return {} if value is None else value


def _split_commas(value: object) -> object:
    # A jar list may be given as Spark's own comma-separated spelling.
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(p.strip() for p in value.split(",") if p.strip())
    if not isinstance(value, (list, tuple)):
        raise setting_problem("must be a list of strings or a comma-separated string")
    return value


def _fspath(value: object) -> object:
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def _plain(value: Mapping[str, Any]) -> dict[str, Any]:
    return dict(value)


#: Any mapping of settings, read-only once made and a plain dict in JSON.
ReadOnlyMapping = Annotated[Mapping[str, Any], AfterValidator(MappingProxyType), PlainSerializer(_plain)]
#: Spark settings (``conf``, catalog ``properties``): non-empty keys, values as Spark's text.
SparkValues = Annotated[
    Mapping[
        Annotated[StrictStr, StringConstraints(min_length=1)],
        Annotated[str, BeforeValidator(_as_spark_value)],
    ],
    BeforeValidator(_none_as_empty),
    AfterValidator(MappingProxyType),
    PlainSerializer(_plain),
]
#: A list of strings, or one comma-separated string.
StrList = Annotated[tuple[StrictStr, ...], BeforeValidator(_split_commas)]
#: A file system path, kept as text (it travels to spark-submit drivers as JSON).
PathText = Annotated[StrictStr, BeforeValidator(_fspath)]


class SparkSettings(BaseModel):
    """Frozen settings that refuse unknown keys and raise ``SparkConfigError`` naming each bad field."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    #: What the settings are called in an error: "unknown <settings_name> keys [...]".
    settings_name: ClassVar[str] = "Spark settings"

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            problems = describe(exc, self.settings_name, list(type(self).model_fields))
            message = (
                problems[0]
                if len(problems) == 1
                else "\n  ".join([f"invalid {self.settings_name}:", *problems])
            )
            raise SparkConfigError(message, problems) from None


def describe(exc: ValidationError, settings_name: str, known: Sequence[str]) -> list[str]:
    """One line per bad field of ``exc``; every unknown key together in one line."""
    unknown = sorted(
        str(e["loc"][0]) for e in exc.errors(include_url=False) if e["type"] == "extra_forbidden"
    )
    lines = [f"unknown {settings_name} keys {unknown}; known keys: {', '.join(known)}"] if unknown else []
    for error in exc.errors(include_url=False):
        if error["type"] != "extra_forbidden":
            lines.extend(_lines(error))
    return lines


def _lines(error: ErrorDetails) -> list[str]:
    path, got = _path(error["loc"]), _SHOW.repr(error.get("input"))
    kind, cause = error["type"], (error.get("ctx") or {}).get("error")
    if isinstance(cause, SparkConfigError):  # nested settings: their lines, under this field's name
        return [f"{path}: {line}" if path else line for line in cause.problems]
    if kind == "value_error":  # our field validators' sentences name the field themselves
        return [str(cause)]
    if kind == _SETTING:
        return [f"{path} {error['msg']}, got {got}"]
    if kind in _PHRASES:
        return [f"{path} {_PHRASES[kind]}, got {got}"]
    return [f"{path}: {error['msg']}, got {got}"]


def _path(loc: tuple[int | str, ...]) -> str:
    """``conf['spark.x']``, ``jars[0]``; a mapping's key as ``conf key 3``."""
    if len(loc) == 3 and loc[2] == "[key]":
        return f"{loc[0]} key {loc[1]!r}"
    return "".join([str(loc[0]), *(f"[{part!r}]" for part in loc[1:])]) if loc else ""
