"""Workloads for the simulator: tables, write jobs and their distributions, from YAML.

A workload file reads like this (docs/simulator.md has the full reference)::

    name: merge-heavy
    slots: 8
    tables:
      - name: orders
        profile: delta-write-serializable
        partitions: 16            # or a list of partition keys
    jobs:
      - table: orders
        operation: merge
        partitions: {random: 1}   # or a list, or "all"
        duration: {lognormal: {median: 120, sigma: 0.4}}
        arrival: {uniform: [0, 1800]}
        count: 200
    policies:                     # optional: tune the baselines
      naive: {retries: 3, retry_delay: 60}

Every value a user writes is checked here, and a wrong one is an error naming the file, the job
index and the field, so that a typo never turns into a silently different experiment.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..core.errors import InvalidDeclarationError
from ..core.operations import Operation
from ..core.profiles import Profile, get_profile


class WorkloadError(InvalidDeclarationError):
    """A workload file that cannot be simulated; the message names the file and the field."""


# --------------------------------------------------------------------------- distributions


@dataclass(frozen=True)
class Fixed:
    value: float

    def sample(self, rng: random.Random) -> float:
        return self.value

    def describe(self) -> str:
        return f"{self.value:g}s"


@dataclass(frozen=True)
class Uniform:
    low: float
    high: float

    def sample(self, rng: random.Random) -> float:
        return rng.uniform(self.low, self.high)

    def describe(self) -> str:
        return f"uniform {self.low:g}-{self.high:g}s"


@dataclass(frozen=True)
class LogNormal:
    """Job durations are skewed: most runs are near the median, a few take much longer."""

    median: float
    sigma: float

    def sample(self, rng: random.Random) -> float:
        return rng.lognormvariate(math.log(self.median), self.sigma)

    def describe(self) -> str:
        return f"lognormal median {self.median:g}s sigma {self.sigma:g}"


@dataclass(frozen=True)
class Every:
    """Arrivals at a fixed period: ``start``, ``start + every``, ... (a schedule)."""

    every: float
    start: float = 0.0

    def sample_at(self, index: int) -> float:
        return self.start + index * self.every

    def describe(self) -> str:
        return f"every {self.every:g}s from {self.start:g}s"


Distribution = Fixed | Uniform | LogNormal
Arrival = Fixed | Uniform | LogNormal | Every


# --------------------------------------------------------------------------- the workload


@dataclass(frozen=True)
class TableSpec:
    name: str
    profile: Profile
    partitions: tuple[str, ...]


@dataclass(frozen=True)
class RandomPartitions:
    """``count`` distinct partitions of the table (or of ``among``), drawn per job."""

    count: int
    among: tuple[str, ...] | None = None


@dataclass(frozen=True)
class JobSpec:
    """One entry of ``jobs:``; ``count`` jobs are drawn from it."""

    index: int
    name: str
    table: str
    operation: Operation
    partitions: tuple[str, ...] | RandomPartitions | None  # None: the whole table
    duration: Distribution
    arrival: Arrival
    count: int = 1
    reads_whole_table: bool = False
    protocol_change: bool = False


@dataclass(frozen=True)
class Job:
    """One write job of a run, with its sampled duration and arrival time."""

    index: int
    name: str
    table: str
    operation: Operation
    partitions: tuple[str, ...] | None  # None: the whole table
    duration: float
    arrival: float
    reads_whole_table: bool = False
    protocol_change: bool = False


@dataclass(frozen=True)
class NaiveSettings:
    """Airflow's own retries: ``retries`` more tries, ``retry_delay`` seconds apart."""

    retries: int = 3
    retry_delay: float = 60.0


@dataclass(frozen=True)
class Workload:
    name: str
    slots: int
    tables: tuple[TableSpec, ...]
    specs: tuple[JobSpec, ...]
    naive: NaiveSettings = field(default_factory=NaiveSettings)
    source: str = "<workload>"
    description: str = ""

    def table(self, name: str) -> TableSpec:
        for table in self.tables:
            if table.name == name:
                return table
        raise KeyError(name)

    @property
    def job_count(self) -> int:
        return sum(spec.count for spec in self.specs)

    def jobs(self, seed: int = 0) -> tuple[Job, ...]:
        """The jobs of one run: the same seed draws the same jobs, whatever the policy."""
        rng = random.Random(f"workload:{seed}")
        jobs: list[Job] = []
        for spec in self.specs:
            table = self.table(spec.table)
            for i in range(spec.count):
                if isinstance(spec.partitions, RandomPartitions):
                    parts: tuple[str, ...] | None = tuple(
                        sorted(rng.sample(spec.partitions.among or table.partitions, spec.partitions.count))
                    )
                else:
                    parts = spec.partitions
                arrival = spec.arrival.sample_at(i) if isinstance(spec.arrival, Every) else spec.arrival.sample(rng)
                jobs.append(
                    Job(
                        index=len(jobs),
                        name=spec.name if spec.count == 1 else f"{spec.name}-{i}",
                        table=spec.table,
                        operation=spec.operation,
                        partitions=parts,
                        duration=max(spec.duration.sample(rng), 1e-3),
                        arrival=max(arrival, 0.0),
                        reads_whole_table=spec.reads_whole_table,
                        protocol_change=spec.protocol_change,
                    )
                )
        return tuple(jobs)


# --------------------------------------------------------------------------- parsing


class _Where:
    """Where in the file a value sits, for error messages: ``file: jobs[3].duration``."""

    def __init__(self, source: str, path: str = "") -> None:
        self.source, self.path = source, path

    def at(self, key: str | int) -> _Where:
        if isinstance(key, int):
            return _Where(self.source, f"{self.path}[{key}]")
        return _Where(self.source, f"{self.path}.{key}" if self.path else key)

    def error(self, message: str) -> WorkloadError:
        return WorkloadError(f"{self.source}: {self.path or 'workload'}: {message}")


def _mapping(value: Any, where: _Where) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise where.error(f"expected a mapping, got {type(value).__name__} {value!r}")
    return value


def _number(value: Any, where: _Where, *, positive: bool = False, minimum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise where.error(f"expected a number, got {value!r}")
    if positive and value <= 0:
        raise where.error(f"must be > 0, got {value!r}")
    if minimum is not None and value < minimum:
        raise where.error(f"must be >= {minimum:g}, got {value!r}")
    return float(value)


def _integer(value: Any, where: _Where, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise where.error(f"expected an integer, got {value!r}")
    if value < minimum:
        raise where.error(f"must be >= {minimum}, got {value!r}")
    return value


def _keys(data: Mapping[str, Any], where: _Where, required: Sequence[str], optional: Sequence[str]) -> None:
    missing = [k for k in required if k not in data]
    if missing:
        raise where.at(missing[0]).error("is required")
    unknown = [k for k in data if k not in required and k not in optional]
    if unknown:
        raise where.at(str(unknown[0])).error(
            f"unknown field; expected one of: {', '.join([*required, *optional])}"
        )


def _distribution(value: Any, where: _Where, *, allow_every: bool = False) -> Arrival:
    """``120``, ``{fixed: 120}``, ``{uniform: [60, 180]}``, ``{lognormal: {median, sigma}}``."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return Fixed(_number(value, where, minimum=0))
    data = _mapping(value, where)
    if allow_every and "every" in data:  # {every: 300, start: 60}: a schedule
        _keys(data, where, ["every"], ["start"])
        return Every(
            _number(data["every"], where.at("every"), positive=True),
            _number(data.get("start", 0), where.at("start"), minimum=0),
        )
    kinds = ["fixed", "uniform", "lognormal", *(["every"] if allow_every else [])]
    if len(data) != 1 or next(iter(data)) not in kinds:
        raise where.error(f"expected a number or one of {{{', '.join(kinds)}: ...}}, got {dict(data)!r}")
    kind, arg = next(iter(data.items()))
    inner = where.at(kind)
    if kind == "fixed":
        return Fixed(_number(arg, inner, minimum=0))
    if kind == "uniform":
        if not isinstance(arg, Sequence) or isinstance(arg, str) or len(arg) != 2:
            raise inner.error(f"expected [low, high], got {arg!r}")
        low, high = _number(arg[0], inner.at(0), minimum=0), _number(arg[1], inner.at(1), minimum=0)
        if high < low:
            raise inner.error(f"high {high:g} < low {low:g}")
        return Uniform(low, high)
    if kind == "lognormal":
        params = _mapping(arg, inner)
        _keys(params, inner, ["median", "sigma"], [])
        return LogNormal(
            _number(params["median"], inner.at("median"), positive=True),
            _number(params["sigma"], inner.at("sigma"), minimum=0),
        )
    raise AssertionError(kind)  # unreachable: "every" is handled above


def _table(value: Any, where: _Where) -> TableSpec:
    data = _mapping(value, where)
    _keys(data, where, ["name", "profile", "partitions"], [])
    name = data["name"]
    if not isinstance(name, str) or not name:
        raise where.at("name").error(f"expected a table name, got {name!r}")
    try:
        profile = get_profile(data["profile"])
    except InvalidDeclarationError as exc:
        raise where.at("profile").error(str(exc)) from None
    raw = data["partitions"]
    parts_where = where.at("partitions")
    if isinstance(raw, int) and not isinstance(raw, bool):
        count = _integer(raw, parts_where, 1)
        # An unpartitioned table is one partition, "" (the reference engine's convention).
        partitions: tuple[str, ...] = ("",) if count == 1 else tuple(f"p{i:03d}" for i in range(count))
    elif isinstance(raw, list) and raw:
        for i, key in enumerate(raw):
            if not isinstance(key, str):
                raise parts_where.at(i).error(f"expected a partition key (a string), got {key!r}")
        if len(set(raw)) != len(raw):
            raise parts_where.error("partition keys repeat")
        partitions = tuple(raw)
    else:
        raise parts_where.error(f"expected a number of partitions or a non-empty list of keys, got {raw!r}")
    return TableSpec(name, profile, partitions)


def _job(value: Any, index: int, where: _Where, tables: Mapping[str, TableSpec]) -> JobSpec:
    data = _mapping(value, where)
    _keys(
        data,
        where,
        ["table", "operation", "duration"],
        ["name", "partitions", "arrival", "count", "reads_whole_table", "protocol_change"],
    )
    table_name = data["table"]
    if table_name not in tables:
        raise where.at("table").error(f"unknown table {table_name!r}; tables: {', '.join(tables)}")
    table = tables[table_name]
    try:
        operation = table.profile.operation(data["operation"])
    except InvalidDeclarationError as exc:
        raise where.at("operation").error(str(exc)) from None
    raw = data.get("partitions", "all")
    parts_where = where.at("partitions")
    partitions: tuple[str, ...] | RandomPartitions | None
    if raw == "all":
        partitions = None
    elif isinstance(raw, Mapping):
        _keys(raw, parts_where, ["random"], ["from"])
        count = _integer(raw["random"], parts_where.at("random"), 1)
        among = raw.get("from")
        if among is not None:
            if not isinstance(among, list) or not among:
                raise parts_where.at("from").error(f"expected a non-empty list of partition keys, got {among!r}")
            unknown = [p for p in among if p not in table.partitions]
            if unknown:
                raise parts_where.at("from").error(f"{unknown[0]!r} is not a partition of table {table.name}")
            among = tuple(dict.fromkeys(among))
        pool = among or table.partitions
        if count > len(pool):
            raise parts_where.at("random").error(
                f"cannot draw {count} distinct partitions from {len(pool)} (table {table.name})"
            )
        partitions = RandomPartitions(count, among)
    elif isinstance(raw, list) and raw:
        unknown = [p for p in raw if p not in table.partitions]
        if unknown:
            raise parts_where.error(f"{unknown[0]!r} is not a partition of table {table.name}")
        partitions = tuple(dict.fromkeys(raw))
    else:
        raise parts_where.error(f'expected "all", a list of partition keys or {{random: N}}, got {raw!r}')
    flags = {}
    for flag in ("reads_whole_table", "protocol_change"):
        if not isinstance(data.get(flag, False), bool):
            raise where.at(flag).error(f"expected true or false, got {data[flag]!r}")
        flags[flag] = bool(data.get(flag, False))
    name = data.get("name", f"{operation.value}-{index}")
    if not isinstance(name, str) or not name:
        raise where.at("name").error(f"expected a job name, got {name!r}")
    return JobSpec(
        index=index,
        name=name,
        table=table_name,
        operation=operation,
        partitions=partitions,
        duration=_duration(data["duration"], where.at("duration")),
        arrival=_distribution(data.get("arrival", 0), where.at("arrival"), allow_every=True),
        count=_integer(data.get("count", 1), where.at("count"), 1),
        **flags,
    )


def _duration(value: Any, where: _Where) -> Distribution:
    dist = _distribution(value, where)
    assert not isinstance(dist, Every)
    if isinstance(dist, Fixed) and dist.value <= 0:
        raise where.error(f"a job takes some time: must be > 0, got {dist.value:g}")
    return dist


def parse_workload(data: Any, source: str = "<workload>") -> Workload:
    """A ``Workload`` from the parsed YAML; every error names ``source`` and the field."""
    where = _Where(source)
    doc = _mapping(data, where)
    _keys(doc, where, ["slots", "tables", "jobs"], ["name", "description", "policies"])
    slots = _integer(doc["slots"], where.at("slots"), 1)
    raw_tables = doc["tables"]
    if not isinstance(raw_tables, list) or not raw_tables:
        raise where.at("tables").error("expected a non-empty list of tables")
    tables: dict[str, TableSpec] = {}
    for i, raw in enumerate(raw_tables):
        table = _table(raw, where.at("tables").at(i))
        if table.name in tables:
            raise where.at("tables").at(i).at("name").error(f"table {table.name!r} is declared twice")
        tables[table.name] = table
    raw_jobs = doc["jobs"]
    if not isinstance(raw_jobs, list) or not raw_jobs:
        raise where.at("jobs").error("expected a non-empty list of jobs")
    specs = tuple(_job(raw, i, where.at("jobs").at(i), tables) for i, raw in enumerate(raw_jobs))
    naive = NaiveSettings()
    if "policies" in doc:
        pol_where = where.at("policies")
        policies = _mapping(doc["policies"], pol_where)
        _keys(policies, pol_where, [], ["naive"])
        if "naive" in policies:
            nw = pol_where.at("naive")
            raw_naive = _mapping(policies["naive"], nw)
            _keys(raw_naive, nw, [], ["retries", "retry_delay"])
            naive = NaiveSettings(
                retries=_integer(raw_naive.get("retries", naive.retries), nw.at("retries"), 0),
                retry_delay=_number(raw_naive.get("retry_delay", naive.retry_delay), nw.at("retry_delay"), minimum=0),
            )
    name = doc.get("name", Path(source).stem)
    description = doc.get("description", "")
    if not isinstance(name, str) or not isinstance(description, str):
        raise where.at("name" if not isinstance(name, str) else "description").error("expected text")
    return Workload(
        name=name,
        slots=slots,
        tables=tuple(tables.values()),
        specs=specs,
        naive=naive,
        source=source,
        description=description.strip(),
    )


def load_workload(path: str | Path) -> Workload:
    """Read and check a workload YAML file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read the workload file ({exc.strerror or exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise WorkloadError(f"{path}: not valid YAML: {exc}") from None
    return parse_workload(data, str(path))
