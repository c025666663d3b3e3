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
      naive: {retries: 3, retry_delay: 60}             # default: Airflow's, 0 retries, 300 s
      airflow: {admission_latency: 0.5, requeue_delay: 5}

Every value a user writes is checked, and a wrong one is an error naming the file, the field's
path and what was expected, so that a typo never turns into a silently different experiment:
``workload_file.py`` holds the file's shape (pydantic models with the bounds), this module what
the values mean together and the workload they make. ``strict_yaml.py`` reads the YAML (a
duplicate key is an error, not a silent override).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..core.errors import InvalidDeclarationError
from ..core.operations import Operation
from ..core.profiles import Profile, get_profile
from . import strict_yaml
from .workload_file import (
    ArrivalModel,
    DistributionModel,
    JobModel,
    RandomPartitionsModel,
    TableModel,
    WorkloadFile,
    describe,
)

#: A workload file is a few kilobytes; a bigger one is a mistake (a data file passed by accident).
MAX_FILE_BYTES = 1_000_000


class WorkloadError(InvalidDeclarationError):
    """A workload file that cannot be simulated; the message names the file and the field."""


# --------------------------------------------------------------------------- distributions


@dataclass(frozen=True)
class Fixed:
    value: float

    def sample(self, rng: random.Random) -> float:
        return self.value

    def sampler(self, rng: random.Random) -> Callable[[], float]:
        """``sample`` bound to ``rng``, drawing the same values (used per job in bulk)."""
        value = self.value
        return lambda: value

    def describe(self) -> str:
        return f"{self.value:g}s"

    def typical(self) -> float:
        """The median: what past runs of a job drawn from it say it takes (its estimate)."""
        return self.value


@dataclass(frozen=True)
class Uniform:
    low: float
    high: float

    def sample(self, rng: random.Random) -> float:
        return rng.uniform(self.low, self.high)

    def sampler(self, rng: random.Random) -> Callable[[], float]:
        low, width, draw = self.low, self.high - self.low, rng.random
        return lambda: low + width * draw()  # ``Random.uniform``'s formula

    def describe(self) -> str:
        return f"uniform {self.low:g}-{self.high:g}s"

    def typical(self) -> float:
        return (self.low + self.high) / 2


@dataclass(frozen=True)
class LogNormal:
    """Job durations are skewed: most runs are near the median, a few take much longer."""

    median: float
    sigma: float

    def sample(self, rng: random.Random) -> float:
        return rng.lognormvariate(math.log(self.median), self.sigma)

    def sampler(self, rng: random.Random) -> Callable[[], float]:
        mu, sigma, normal, exp = math.log(self.median), self.sigma, rng.normalvariate, math.exp
        return lambda: exp(normal(mu, sigma))  # ``Random.lognormvariate``'s formula

    def describe(self) -> str:
        return f"lognormal median {self.median:g}s sigma {self.sigma:g}"

    def typical(self) -> float:
        return self.median


@dataclass(frozen=True)
class Every:
    """Arrivals at a fixed period: ``start``, ``start + every``, ... (a schedule)."""

    every: float
    start: float = 0.0

    def sample_at(self, index: int) -> float:
        return self.start + index * self.every

    def sampler(self, rng: random.Random) -> Callable[[], float]:
        """The arrivals in turn: ``sample_at(0)``, ``sample_at(1)``, ... (``rng`` draws nothing)."""
        indexes = itertools.count()
        return lambda: self.sample_at(next(indexes))

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


@dataclass(frozen=True, slots=True)
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
    #: Seconds admission expects it to take (the median of its spec's durations, as past runs of
    #: the same task would say); None: unknown (``Durations.default_seconds``).
    estimate: float | None = None


@dataclass(frozen=True)
class NaiveSettings:
    """Airflow's own retries: ``retries`` more tries, ``retry_delay`` seconds apart.

    The defaults are Airflow's (``[core] default_task_retries = 0``, ``default_task_retry_delay =
    300``): a task that fails is not retried. The shipped workloads set their own values, as a
    user who runs concurrent writes would."""

    retries: int = 0
    retry_delay: float = 300.0


#: Seconds from a lease's release to the start of the attempt of a job that waited for it
#: (the lease store's grant, the deferred task's trigger firing, Airflow re-queueing the task).
#: Measured by bench/admission_latency.py in a real Airflow 3.3 run with the lease store on
#: PostgreSQL, a deferring write (the operators' default): median 5.8 s release -> write start
#: (2.4-11.4 s; the grant itself takes 0.03 s). With admission_wait_seconds > 0 a write waiting
#: in its worker starts 0.1 s after the release: set ``policies.airflow.admission_latency``.
ADMISSION_LATENCY = 5.8
#: Seconds from a release to the start of a write that waits for its lease in its worker
#: (``admission_wait_seconds`` > 0): every makespan ratio is reported at this latency and at the
#: workload's deferral latency (``ADMISSION_LATENCY`` unless the file sets its own).
IN_WORKER_LATENCY = 0.1
#: Seconds Airflow's scheduler adds to a retry delay before an up_for_retry task runs again
#: (not measured apart: the same queue-and-start path as a resumed deferral, without the trigger).
REQUEUE_DELAY = 5.0


@dataclass(frozen=True)
class AirflowSettings:
    """How long Airflow itself takes to start a task that waited (``policies.airflow`` in a file)."""

    admission_latency: float = ADMISSION_LATENCY
    requeue_delay: float = REQUEUE_DELAY


def at_latency(workload: Workload, admission_latency: float) -> Workload:
    """``workload`` with another release-to-start latency (the same jobs for a seed)."""
    return replace(workload, airflow=replace(workload.airflow, admission_latency=admission_latency))


@dataclass(frozen=True)
class Workload:
    name: str
    slots: int
    tables: tuple[TableSpec, ...]
    specs: tuple[JobSpec, ...]
    naive: NaiveSettings = field(default_factory=NaiveSettings)
    airflow: AirflowSettings = field(default_factory=AirflowSettings)
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
            _draw(spec, self.table(spec.table), rng, jobs)
        return tuple(jobs)


def _draw(spec: JobSpec, table: TableSpec, rng: random.Random, jobs: list[Job]) -> None:
    """Append ``spec``'s jobs to ``jobs``. Per job, ``rng`` draws its partitions, then its
    arrival, then its duration; what does not change from job to job is looked up once."""
    partitions = spec.partitions
    among = (partitions.among or table.partitions) if isinstance(partitions, RandomPartitions) else ()
    # One partition: ``rng.choice`` makes the draw ``rng.sample`` makes for one (same values).
    choose = rng.choice if isinstance(partitions, RandomPartitions) and partitions.count == 1 else None
    draw_arrival = spec.arrival.sampler(rng)
    draw_duration = spec.duration.sampler(rng)
    name, many, first = spec.name, spec.count != 1, len(jobs)
    whole, protocol = spec.reads_whole_table, spec.protocol_change
    estimate = spec.duration.typical()
    for i in range(spec.count):
        if choose is not None:
            parts: tuple[str, ...] | None = (choose(among),)
        elif isinstance(partitions, RandomPartitions):
            parts = tuple(sorted(rng.sample(among, partitions.count)))
        else:
            parts = partitions
        arrival = draw_arrival()
        duration = draw_duration()
        jobs.append(Job(
            first + i, f"{name}-{i}" if many else name, spec.table, spec.operation, parts,
            1e-3 if duration < 1e-3 else duration, 0.0 if arrival < 0.0 else arrival, whole, protocol, estimate,
        ))


# --------------------------------------------------------------------------- parsing


def _error(source: str, path: str, message: str) -> WorkloadError:
    return WorkloadError(f"{source}: {path}: {message}")


def _distribution(model: DistributionModel) -> Arrival:
    if model.fixed is not None:
        return Fixed(model.fixed)
    if model.uniform is not None:
        return Uniform(model.uniform[0], model.uniform[1])
    if model.lognormal is not None:
        return LogNormal(model.lognormal.median, model.lognormal.sigma)
    assert isinstance(model, ArrivalModel) and model.every is not None  # the model holds one kind
    return Every(model.every, model.start or 0.0)


def _tables(models: list[TableModel], source: str) -> dict[str, TableSpec]:
    tables: dict[str, TableSpec] = {}
    for i, model in enumerate(models):
        where = f"tables[{i}]"
        if model.name in tables:
            raise _error(source, f"{where}.name", f"table {model.name!r} is declared twice")
        try:
            profile = get_profile(model.profile)
        except InvalidDeclarationError as exc:
            raise _error(source, f"{where}.profile", str(exc)) from None
        tables[model.name] = TableSpec(model.name, profile, tuple(model.partitions))
    return tables


def _partitions(
    raw: str | list[str] | RandomPartitionsModel, table: TableSpec, where: str, source: str
) -> tuple[str, ...] | RandomPartitions | None:
    """A job's partitions, each one a partition of its table."""
    if raw == "all":
        return None
    keys = raw.among if isinstance(raw, RandomPartitionsModel) else raw
    at = f"{where}.from" if isinstance(raw, RandomPartitionsModel) else where
    unknown = [key for key in keys or () if key not in table.partitions]
    if unknown:
        raise _error(source, at, f"{unknown[0]!r} is not a partition of table {table.name}")
    distinct = tuple(dict.fromkeys(keys)) if keys else None
    if not isinstance(raw, RandomPartitionsModel):
        return distinct
    pool = distinct or table.partitions
    if raw.random > len(pool):
        raise _error(
            source, f"{where}.random", f"cannot draw {raw.random} distinct partitions from {len(pool)} (table {table.name})"
        )
    return RandomPartitions(raw.random, distinct)


def _job(model: JobModel, index: int, tables: Mapping[str, TableSpec], source: str) -> JobSpec:
    where = f"jobs[{index}]"
    if model.table not in tables:
        raise _error(source, f"{where}.table", f"unknown table {model.table!r}; tables: {', '.join(tables)}")
    table = tables[model.table]
    try:
        operation = table.profile.operation(model.operation)
    except InvalidDeclarationError as exc:
        raise _error(source, f"{where}.operation", str(exc)) from None
    duration = _distribution(model.duration)
    assert not isinstance(duration, Every)  # a duration model has no ``every``
    return JobSpec(
        index=index,
        name=model.name or f"{operation.value}-{index}",
        table=table.name,
        operation=operation,
        partitions=_partitions(model.partitions, table, f"{where}.partitions", source),
        duration=duration,
        arrival=_distribution(model.arrival),
        count=model.count,
        # An operation whose commit reads every file on this engine (delta-rs appends and
        # OPTIMIZE) conflicts across partitions: its footprint is the whole table.
        reads_whole_table=model.reads_whole_table or operation in table.profile.reads_whole_table,
        protocol_change=model.protocol_change,
    )


def parse_workload(data: Any, source: str = "<workload>") -> Workload:
    """A ``Workload`` from the parsed YAML; every error names ``source`` and the field."""
    if data is None:
        raise WorkloadError(f"{source}: the workload is empty; expected a mapping with slots, tables and jobs")
    try:
        doc = WorkloadFile.model_validate(data)
    except ValidationError as exc:
        raise WorkloadError(f"{source}: {describe(exc)}") from None
    tables = _tables(doc.tables, source)
    naive = doc.policies.naive.model_dump(exclude_none=True)
    airflow = doc.policies.airflow.model_dump(exclude_none=True)
    return Workload(
        name=doc.name if doc.name is not None else Path(source).stem,
        slots=doc.slots,
        tables=tuple(tables.values()),
        specs=tuple(_job(job, i, tables, source) for i, job in enumerate(doc.jobs)),
        naive=NaiveSettings(**naive),
        airflow=AirflowSettings(**airflow),
        source=source,
        description=doc.description.strip(),
    )


def load_workload(path: str | Path) -> Workload:
    """Read and check a workload YAML file."""
    path = Path(path)
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read the workload file ({exc.strerror or exc})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise WorkloadError(f"{path}: larger than {MAX_FILE_BYTES} bytes; a workload file is a few kilobytes")
    try:
        data = strict_yaml.load(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except strict_yaml.StrictYamlError as exc:
        raise WorkloadError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise WorkloadError(f"{path}: not valid YAML: {strict_yaml.one_line(exc)}") from None
    return parse_workload(data, str(path))
