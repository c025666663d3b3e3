"""How long to wait and when to give up: small frozen strategy objects, like tenacity's.

``Wait`` parts compose with ``+`` (``exponential + jitter``), ``Stop`` parts with ``|``
(attempts or total time). Each prints itself for ``occflow policy`` and round-trips through a
plain dict (``to_dict`` / ``wait_from_dict`` / ``stop_from_dict``) for serialised DAGs.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidDeclarationError

# --------------------------------------------------------------------------- how long to wait


class Wait:
    """How long to wait before the next attempt. Compose with ``+`` (``exponential + jitter``)."""

    def seconds(self, attempt: int, rng: random.Random | None = None) -> float:
        """The delay after ``attempt`` attempts (1 = the first attempt failed)."""
        raise NotImplementedError

    def bounds(self, attempt: int) -> tuple[float, float]:
        """The smallest and largest delay ``seconds(attempt)`` can return."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def __add__(self, other: Wait) -> WaitSum:
        mine = self.parts if isinstance(self, WaitSum) else (self,)
        theirs = other.parts if isinstance(other, WaitSum) else (other,)
        return WaitSum(mine + theirs)


@dataclass(frozen=True)
class WaitNone(Wait):
    def seconds(self, attempt: int, rng: random.Random | None = None) -> float:
        return 0.0

    def bounds(self, attempt: int) -> tuple[float, float]:
        return (0.0, 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "none"}

    def __str__(self) -> str:
        return "no wait"


@dataclass(frozen=True)
class WaitFixed(Wait):
    wait: float

    def seconds(self, attempt: int, rng: random.Random | None = None) -> float:
        return float(self.wait)

    def bounds(self, attempt: int) -> tuple[float, float]:
        return (float(self.wait), float(self.wait))

    def to_dict(self) -> dict[str, Any]:
        return {"type": "fixed", "wait": self.wait}

    def __str__(self) -> str:
        return _dur(self.wait)


@dataclass(frozen=True)
class WaitExponential(Wait):
    """``multiplier * exp_base ** (attempt - 1)`` clamped to ``[min, max]``, as tenacity's."""

    multiplier: float = 1.0
    max: float = 60.0
    exp_base: float = 2.0
    min: float = 0.0

    def seconds(self, attempt: int, rng: random.Random | None = None) -> float:
        return self.bounds(attempt)[0]

    def bounds(self, attempt: int) -> tuple[float, float]:
        try:
            raw = self.multiplier * self.exp_base ** max(attempt - 1, 0)
        except OverflowError:
            raw = math.inf
        value = max(self.min, min(raw, self.max))
        return (value, value)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "exponential",
            "multiplier": self.multiplier,
            "max": self.max,
            "exp_base": self.exp_base,
            "min": self.min,
        }

    def __str__(self) -> str:
        return f"{_dur(self.multiplier)}*{_num(self.exp_base)}^(n-1) max {_dur(self.max)}"


@dataclass(frozen=True)
class WaitRandom(Wait):
    """Uniform jitter in ``[min, max]``: spreads writers that lost together."""

    min: float = 0.0
    max: float = 1.0

    def __post_init__(self) -> None:
        if self.max < self.min:
            raise InvalidDeclarationError(f"random wait: max {self.max} < min {self.min}")

    def seconds(self, attempt: int, rng: random.Random | None = None) -> float:
        return (rng or random).uniform(self.min, self.max)

    def bounds(self, attempt: int) -> tuple[float, float]:
        return (float(self.min), float(self.max))

    def to_dict(self) -> dict[str, Any]:
        return {"type": "random", "min": self.min, "max": self.max}

    def __str__(self) -> str:
        return f"jitter {_num(self.min)}-{_dur(self.max)}"


@dataclass(frozen=True)
class WaitSum(Wait):
    parts: tuple[Wait, ...]

    def seconds(self, attempt: int, rng: random.Random | None = None) -> float:
        return sum(part.seconds(attempt, rng) for part in self.parts)

    def bounds(self, attempt: int) -> tuple[float, float]:
        lows, highs = zip(*(part.bounds(attempt) for part in self.parts), strict=True)
        return (sum(lows), sum(highs))

    def to_dict(self) -> dict[str, Any]:
        return {"type": "sum", "parts": [part.to_dict() for part in self.parts]}

    def __str__(self) -> str:
        return " + ".join(str(part) for part in self.parts)


# --------------------------------------------------------------------------- when to give up


class Stop:
    """When to give up the current action. Compose with ``|`` (attempts or total time)."""

    def should_stop(self, attempt: int, elapsed_seconds: float) -> bool:
        raise NotImplementedError

    def attempt_limit(self) -> int | None:
        """The number of attempts after which this stops, if it stops by counting attempts."""
        return None

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def __or__(self, other: Stop) -> StopAny:
        mine = self.parts if isinstance(self, StopAny) else (self,)
        theirs = other.parts if isinstance(other, StopAny) else (other,)
        return StopAny(mine + theirs)


@dataclass(frozen=True)
class StopNever(Stop):
    def should_stop(self, attempt: int, elapsed_seconds: float) -> bool:
        return False

    def to_dict(self) -> dict[str, Any]:
        return {"type": "never"}

    def __str__(self) -> str:
        return "never"


@dataclass(frozen=True)
class StopAfterAttempt(Stop):
    """Give up once ``attempts`` attempts have been made (tenacity's ``stop_after_attempt``)."""

    attempts: int

    def __post_init__(self) -> None:
        if not isinstance(self.attempts, int) or self.attempts < 1:
            raise InvalidDeclarationError(f"stop after attempt needs attempts >= 1, got {self.attempts!r}")

    def should_stop(self, attempt: int, elapsed_seconds: float) -> bool:
        return attempt >= self.attempts

    def attempt_limit(self) -> int | None:
        return self.attempts

    def to_dict(self) -> dict[str, Any]:
        return {"type": "after_attempt", "attempts": self.attempts}

    def __str__(self) -> str:
        return f"{self.attempts} tries"


@dataclass(frozen=True)
class StopAfterDelay(Stop):
    """Give up once ``seconds`` have passed since the first attempt started."""

    seconds: float

    def __post_init__(self) -> None:
        if self.seconds <= 0:
            raise InvalidDeclarationError(f"stop after delay needs seconds > 0, got {self.seconds!r}")

    def should_stop(self, attempt: int, elapsed_seconds: float) -> bool:
        return elapsed_seconds >= self.seconds

    def to_dict(self) -> dict[str, Any]:
        return {"type": "after_delay", "seconds": self.seconds}

    def __str__(self) -> str:
        return _dur(self.seconds)


@dataclass(frozen=True)
class StopAny(Stop):
    parts: tuple[Stop, ...]

    def should_stop(self, attempt: int, elapsed_seconds: float) -> bool:
        return any(part.should_stop(attempt, elapsed_seconds) for part in self.parts)

    def attempt_limit(self) -> int | None:
        limits = [limit for part in self.parts if (limit := part.attempt_limit()) is not None]
        return min(limits) if limits else None

    def to_dict(self) -> dict[str, Any]:
        return {"type": "any", "parts": [part.to_dict() for part in self.parts]}

    def __str__(self) -> str:
        return " or ".join(str(part) for part in self.parts)


# --------------------------------------------------------------------------- from plain data


def wait_from_dict(data: Mapping[str, Any]) -> Wait:
    kind = data.get("type")
    if kind == "none":
        return WaitNone()
    if kind == "fixed":
        return WaitFixed(float(data["wait"]))
    if kind == "exponential":
        return WaitExponential(
            multiplier=float(data.get("multiplier", 1.0)),
            max=float(data.get("max", 60.0)),
            exp_base=float(data.get("exp_base", 2.0)),
            min=float(data.get("min", 0.0)),
        )
    if kind == "random":
        return WaitRandom(float(data.get("min", 0.0)), float(data.get("max", 1.0)))
    if kind == "sum":
        return WaitSum(tuple(wait_from_dict(part) for part in data["parts"]))
    raise InvalidDeclarationError(
        f"unknown wait {dict(data)!r}; types: none, fixed, exponential, random, sum"
    )


def stop_from_dict(data: Mapping[str, Any]) -> Stop:
    kind = data.get("type")
    if kind == "never":
        return StopNever()
    if kind == "after_attempt":
        return StopAfterAttempt(int(data["attempts"]))
    if kind == "after_delay":
        return StopAfterDelay(float(data["seconds"]))
    if kind == "any":
        return StopAny(tuple(stop_from_dict(part) for part in data["parts"]))
    raise InvalidDeclarationError(
        f"unknown stop {dict(data)!r}; types: never, after_attempt, after_delay, any"
    )


def _num(value: float) -> str:
    return f"{value:g}"


def _dur(seconds: float) -> str:
    """``90`` -> ``90s``, ``600`` -> ``10m``, ``14400`` -> ``4h``: short enough for one table row."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{_num(seconds / size)}{unit}"
    return f"{_num(seconds)}s"
