"""The shape of a workload file, as pydantic models: types, ranges, the short forms.

These models check every value on its own (a count is a whole number in range, a duration a
finite number of seconds, no unknown field). What values mean together (a job's table exists,
its operation is in the table's profile, its partitions are the table's) is checked where the
workload is built, in ``workload.py``. ``describe`` turns pydantic's errors into one line that
names the field as the file spells it: ``jobs[3].duration.lognormal.sigma: is required``.
"""

from __future__ import annotations

import re
import reprlib
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Strict,
    StrictBool,
    StrictInt,
    StrictStr,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

# Bounds that keep a typo (``count: 10000000``, ``median: 1.0e12``) from becoming a run that
# never ends or a machine out of memory. Each is far above any experiment in bench/workloads.
MAX_JOBS = 100_000  # in one entry and in the whole workload
MAX_SECONDS = 31_536_000.0  # 365 days of simulated time, for any duration, arrival or delay
MAX_SIGMA = 5.0  # a lognormal sigma of 5 already spreads durations over 10 orders of magnitude
MAX_SLOTS = 10_000
MAX_PARTITIONS = 100_000
MAX_RETRIES = 1_000
#: The bounds above hold one by one; their product must hold too: the partition keys all the
#: jobs name together (count x keys per job), which is what the simulation keeps in memory.
MAX_FOOTPRINT_KEYS = 2_000_000
# How many of pydantic's errors one message lists; the rest are counted.
MAX_REPORTED = 3

# Values quoted in a message are cut short: a bad value can be a 100,000-key list.
_EXPONENT = re.compile(r"[-+]?[0-9]+(?:\.[0-9]*)?[eE][-+]?[0-9]+")
_SHOW = reprlib.Repr()
_SHOW.maxstring, _SHOW.maxother, _SHOW.maxlist, _SHOW.maxdict, _SHOW.maxlevel = 60, 60, 6, 4, 3
# Tags of the job-partitions union; ``describe`` leaves them out of a field's path.
_AS_LIST, _AS_RANDOM, _AS_ALL = "as a list", "as {random: N}", "as all"
_UNION_TAGS = frozenset({_AS_LIST, _AS_RANDOM, _AS_ALL})


def _problem(message: str) -> PydanticCustomError:
    return PydanticCustomError("workload", message)


def _got(value: Any) -> str:
    """``value`` as a message quotes it; YAML 1.1 reads ``1e12`` (no dot) as text, so say so."""
    shown = _SHOW.repr(value)
    if isinstance(value, str) and _EXPONENT.fullmatch(value.strip()):
        return f"{shown} (text to YAML; write the number as {float(value):.1e})"
    return shown


def _no_fraction(bound: float) -> str:
    return f"{bound:.0f}" if float(bound).is_integer() else f"{bound:g}"


Seconds = Annotated[float, Strict(), Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]
PositiveSeconds = Annotated[float, Strict(), Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False)]
Count = Annotated[StrictInt, Field(ge=1, le=MAX_JOBS)]
Name = Annotated[StrictStr, Field(min_length=1)]


class _Model(BaseModel):
    """A mapping in the file: unknown fields are an error that lists the known ones."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def _long_form(cls, data: Any) -> Any:
        """The mapping a short form stands for (``120`` for ``{fixed: 120}``); as is by default."""
        return data

    @model_validator(mode="before")
    @classmethod
    def _known_fields_only(cls, data: Any) -> Any:
        data = cls._long_form(data)
        if not isinstance(data, Mapping):
            raise _problem(f"expected a mapping, got {type(data).__name__} {_SHOW.repr(data)}")
        known = [field.alias or name for name, field in cls.model_fields.items()]
        unknown = [key for key in data if key not in known]
        if unknown:
            raise PydanticCustomError(
                "unknown_field", f"unknown field; expected one of: {', '.join(known)}", {"field": str(unknown[0])}
            )
        return data


class LogNormalModel(_Model):
    median: PositiveSeconds
    sigma: Annotated[float, Strict(), Field(ge=0, le=MAX_SIGMA, allow_inf_nan=False)]


def _pair(value: Any) -> Any:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise _problem(f"expected [low, high], got {_SHOW.repr(value)}")
    return list(value)


class DistributionModel(_Model):
    """``120``, ``{fixed: 120}``, ``{uniform: [60, 180]}`` or ``{lognormal: {median, sigma}}``."""

    KINDS: ClassVar[tuple[str, ...]] = ("fixed", "uniform", "lognormal")

    fixed: Seconds | None = None
    uniform: Annotated[list[Seconds], BeforeValidator(_pair)] | None = None
    lognormal: LogNormalModel | None = None

    @classmethod
    def _long_form(cls, data: Any) -> Any:
        if isinstance(data, int | float) and not isinstance(data, bool):
            return {"fixed": data}
        if not isinstance(data, Mapping) or len(data) != 1 or next(iter(data)) not in cls.KINDS:
            kinds = ", ".join(cls.KINDS)
            raise _problem(f"expected a number or one of {{{kinds}: ...}}, got {_got(data)}")
        if next(iter(data.values())) is None:
            raise _problem(f"{next(iter(data))} needs a value")
        return data

    @field_validator("uniform")
    @classmethod
    def _low_before_high(cls, value: list[float] | None) -> list[float] | None:
        if value is not None and value[1] < value[0]:
            raise _problem(f"high {value[1]:g} < low {value[0]:g}")
        return value


class ArrivalModel(DistributionModel):
    """A distribution, or a schedule: ``{every: 300, start: 60}``."""

    KINDS: ClassVar[tuple[str, ...]] = ("fixed", "uniform", "lognormal", "every")

    every: PositiveSeconds | None = None
    start: Seconds | None = None

    @classmethod
    def _long_form(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "every" in data:
            unknown = [key for key in data if key not in ("every", "start")]
            if unknown:
                raise PydanticCustomError(
                    "unknown_field", "unknown field; expected one of: every, start", {"field": str(unknown[0])}
                )
            return data
        return super()._long_form(data)


class RandomPartitionsModel(_Model):
    """``{random: 2}`` or ``{random: 1, from: [d21, d22]}``: drawn per job."""

    random: Annotated[StrictInt, Field(ge=1, le=MAX_PARTITIONS)]
    among: Annotated[list[StrictStr], Field(min_length=1)] | None = Field(default=None, alias="from")


def _partitions_form(value: Any) -> str | None:
    if isinstance(value, str):
        return _AS_ALL if value == "all" else None
    if isinstance(value, list):
        return _AS_LIST
    return _AS_RANDOM if isinstance(value, Mapping) else None


JobPartitions = Annotated[
    Annotated[Literal["all"], Tag(_AS_ALL)]
    | Annotated[list[StrictStr], Field(min_length=1), Tag(_AS_LIST)]
    | Annotated[RandomPartitionsModel, Tag(_AS_RANDOM)],
    Discriminator(
        _partitions_form,
        custom_error_type="expected",
        custom_error_message='expected "all", a list of partition keys or {random: N}',
    ),
]


class JobModel(_Model):
    table: Name
    operation: StrictStr
    duration: DistributionModel
    name: Name | None = None
    partitions: JobPartitions = "all"
    arrival: ArrivalModel = Field(default_factory=lambda: ArrivalModel(fixed=0.0))
    count: Count = 1
    reads_whole_table: StrictBool = False
    protocol_change: StrictBool = False

    @field_validator("duration")
    @classmethod
    def _takes_time(cls, value: DistributionModel) -> DistributionModel:
        if value.fixed is not None and value.fixed <= 0:
            raise _problem(f"a job takes some time: must be > 0, got {value.fixed:g}")
        return value


def _partition_keys(value: Any) -> Any:
    """``16`` stands for keys p000..p015; ``1`` for the one partition of an unpartitioned table."""
    if isinstance(value, list):
        return value
    if not isinstance(value, int) or isinstance(value, bool):
        raise _problem(f"expected a number of partitions or a non-empty list of keys, got {_got(value)}")
    if not 1 <= value <= MAX_PARTITIONS:
        raise _problem(f"must be between 1 and {MAX_PARTITIONS}, got {value}")
    # An unpartitioned table is one partition, "" (the reference engine's convention).
    return [""] if value == 1 else [f"p{i:03d}" for i in range(value)]


def _distinct(keys: list[str]) -> list[str]:
    if len(set(keys)) != len(keys):
        raise _problem("partition keys repeat")
    return keys


class TableModel(_Model):
    name: Name
    profile: StrictStr
    partitions: Annotated[
        list[StrictStr],
        BeforeValidator(_partition_keys),
        Field(min_length=1, max_length=MAX_PARTITIONS),
    ]

    @field_validator("partitions")
    @classmethod
    def _keys_distinct(cls, value: list[str]) -> list[str]:
        return _distinct(value)


class NaiveModel(_Model):
    """Airflow's own retries; a field left out keeps the simulator's default."""

    retries: Annotated[StrictInt, Field(ge=0, le=MAX_RETRIES)] | None = None
    retry_delay: Seconds | None = None


class AirflowModel(_Model):
    """Airflow's own latencies; a field left out keeps the simulator's default."""

    admission_latency: Seconds | None = None
    requeue_delay: Seconds | None = None


class PoliciesModel(_Model):
    naive: NaiveModel = Field(default_factory=NaiveModel)
    airflow: AirflowModel = Field(default_factory=AirflowModel)


def _keys_per_job(partitions: Any) -> int:
    """How many partition keys one job of an entry names (``all``: the whole table, none)."""
    if isinstance(partitions, RandomPartitionsModel):
        return partitions.random
    if isinstance(partitions, list):
        return len(partitions)
    return 0


class WorkloadFile(_Model):
    slots: Annotated[StrictInt, Field(ge=1, le=MAX_SLOTS)]
    tables: Annotated[list[TableModel], Field(min_length=1)]
    jobs: Annotated[list[JobModel], Field(min_length=1)]
    name: StrictStr | None = None
    description: StrictStr = ""
    policies: PoliciesModel = Field(default_factory=PoliciesModel)

    @field_validator("jobs")
    @classmethod
    def _bounded(cls, jobs: list[JobModel]) -> list[JobModel]:
        total = sum(job.count for job in jobs)
        if total > MAX_JOBS:
            raise _problem(f"{total} jobs in all; a workload holds at most {MAX_JOBS}")
        return jobs

    @model_validator(mode="after")
    def _product_bounded(self) -> WorkloadFile:
        keys = sum(job.count * _keys_per_job(job.partitions) for job in self.jobs)
        if keys > MAX_FOOTPRINT_KEYS:
            raise _problem(
                f"the jobs name {keys} partition keys together (count x partitions per job); a workload "
                f"holds at most {MAX_FOOTPRINT_KEYS}: fewer jobs, or fewer partitions per job"
            )
        return self


# --------------------------------------------------------------------------- error messages

_EXPECTED = {
    "int_type": "an integer",
    "float_type": "a number",
    "finite_number": "a finite number",
    "bool_type": "true or false",
    "string_type": "text",
    "list_type": "a list",
    "model_type": "a mapping",
    "dict_type": "a mapping",
    "literal_error": '"all"',
}
_BOUNDS = {"greater_than_equal": ("ge", ">="), "greater_than": ("gt", ">"), "less_than_equal": ("le", "<=")}


def _path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part not in _UNION_TAGS:
            path += f".{part}" if path else part
    return path or "workload"


def _message(error: ErrorDetails) -> str:
    kind, got, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    if kind == "missing":
        return "is required"
    if kind in _BOUNDS:
        key, op = _BOUNDS[kind]
        return f"must be {op} {_no_fraction(ctx[key])}, got {_got(got)}"
    if kind == "too_short":
        return f"expected a non-empty list, got {_got(got)}"
    if kind == "too_long":
        return f"expected at most {ctx['max_length']} items, got {ctx['actual_length']}"
    if kind == "string_too_short":
        return "must not be empty"
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {_got(got)}"
    if kind == "expected":
        return f"{error['msg']}, got {_got(got)}"
    return error["msg"]  # our own PydanticCustomError messages, and anything else as pydantic says it


def describe(exc: ValidationError) -> str:
    """``path: what was wrong`` for the first errors, on one line."""
    problems = []
    for error in exc.errors(include_url=False)[:MAX_REPORTED]:
        loc = tuple(error["loc"])
        if error["type"] == "unknown_field":
            loc = (*loc, str((error.get("ctx") or {})["field"]))
        problems.append(f"{_path(loc)}: {_message(error)}")
    more = exc.error_count() - MAX_REPORTED
    return "; ".join(problems) + (f" (and {more} more)" if more > 0 else "")
