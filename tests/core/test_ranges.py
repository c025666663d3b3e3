"""Value ranges (core.ranges): overlap, intersection and containment agree with brute force over
concrete values; a range travels inside a partition key and back unchanged; no ordinary value,
however it is spelled, reads as a range."""

from __future__ import annotations

import itertools
import random
from decimal import Decimal

import pytest

from occflow.core.declaration import partition_key
from occflow.core.errors import InvalidFootprintError
from occflow.core.footprint import footprints_overlap, parse_partition_key
from occflow.core.ranges import ValueRange, compare, value_within, values_overlap

# Dense enough that two ranges with bounds among BOUNDS share a value iff they share one of these.
NUMBERS = [str(Decimal(i) / 2) for i in range(-6, 18)]
NUMBER_BOUNDS = [str(i) for i in range(-2, 8)]
TEXTS = ["Z", "a", "aa", "ab", "b", "ba", "bz", "c", "ca", "d", "da", "e", "ea", "f"]
TEXT_BOUNDS = ["a", "b", "c", "d", "e"]


def _in(value: str, r: ValueRange) -> bool:
    """Membership by the definition, independent of ValueRange.contains."""
    key = (lambda v: Decimal(v)) if value[0].isdigit() or value[0] == "-" else (lambda v: v)
    if r.lower is not None:
        low, v = key(r.lower), key(value)
        if v < low or (v == low and not r.lower_inclusive):
            return False
    if r.upper is not None:
        high, v = key(r.upper), key(value)
        if v > high or (v == high and not r.upper_inclusive):
            return False
    return True


def _member(spec_value: object, value: str) -> bool:
    return _in(value, spec_value) if isinstance(spec_value, ValueRange) else spec_value == value


def _random_range(rng: random.Random, bounds: list[str]) -> ValueRange:
    lower = rng.choice([None, *bounds])
    upper = rng.choice([None, *bounds]) if lower is not None else rng.choice(bounds)
    return ValueRange(lower, rng.random() < 0.5, upper, rng.random() < 0.5)


@pytest.mark.parametrize(("universe", "bounds"), [(NUMBERS, NUMBER_BOUNDS), (TEXTS, TEXT_BOUNDS)])
def test_overlap_intersection_and_containment_agree_with_brute_force(universe: list[str], bounds: list[str]) -> None:
    rng = random.Random(12)
    for _ in range(1500):
        a, b = _random_range(rng, bounds), _random_range(rng, bounds)
        in_a = {v for v in universe if _in(v, a)}
        in_b = {v for v in universe if _in(v, b)}
        assert {v for v in universe if a.contains(v)} == in_a, a
        assert a.is_empty() == (not in_a), a
        assert a.overlaps(b) == bool(in_a & in_b), (a, b)
        both = a.intersection(b)
        assert (both is None) == (not in_a & in_b), (a, b, both)
        if both is not None:
            assert {v for v in universe if both.contains(v)} == in_a & in_b, (a, b, both)
        if in_a:
            assert a.within(b) == (in_a <= in_b), (a, b)


def test_numbers_compare_as_numbers_and_dates_as_text() -> None:
    assert compare("9", "10") == -1 and compare("10.0", "10") == 0 and compare("-2.5", "-3") == 1
    assert compare("2024-01-09", "2024-01-10") == -1
    assert compare("9", "2024-01-10") is None  # a number and a text: no order, the careful answer
    march = ValueRange("2024-03-01", True, "2024-04-01", False)
    assert march.contains("2024-03-31") and not march.contains("2024-04-01")
    assert ValueRange(upper=10, upper_inclusive=False).contains(9)  # 9 < 10 as numbers, not as text
    assert ValueRange(5, False).contains("abc")  # does not compare: may hold it


def test_a_range_round_trips_through_a_partition_key() -> None:
    rng = random.Random(3)
    for _ in range(500):
        r = _random_range(rng, NUMBER_BOUNDS + ["2024-01-01", "2024-02-01", "NL"])
        if r.is_empty():
            with pytest.raises(InvalidFootprintError, match="holds no value"):
                parse_partition_key(partition_key({"ds": r}))
            continue
        spec = {"ds": r, "Country": "NL"}
        key = partition_key(spec)
        parsed = parse_partition_key(key)
        assert partition_key(parsed) == key  # what leases store is canonical
        degenerate = r.lower is not None and r.lower == r.upper
        assert parsed["ds"] == (r.lower if degenerate else r), key
    assert partition_key({"ds": ValueRange("2024-01-01", True, "2024-02-01", False)}) == "ds>=2024-01-01/ds<2024-02-01"
    assert partition_key({"n": ValueRange(1.0, True, 1, True)}) == "n=1"


@pytest.mark.parametrize("value", [">=2024-01-01", "<x", "<=5", ">x", "=x", "a=b", "~[1,2)", "ds<x", ">=", "<"])
def test_a_value_that_looks_like_a_range_stays_a_value(value: str) -> None:
    key = partition_key({"ds": value})
    assert key == f"ds={value}"
    assert parse_partition_key(key) == {"ds": value}
    # It is the one value: it overlaps itself and nothing else, however range-like it reads.
    assert footprints_overlap(frozenset({key}), frozenset({key}))
    assert not footprints_overlap(frozenset({key}), frozenset({"ds=2024-01-01"}))


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("ds>=a/ds>=b", "twice"),
        ("ds=a/ds<b", "twice"),
        ("ds=a/ds=b", "twice"),
        ("ds>b/ds<a", "holds no value"),
        ("ds>=", "malformed"),
        ("ds", "malformed"),
        ("d s>=1", "malformed"),
        ("ds!=1", "malformed"),
    ],
)
def test_malformed_range_keys_are_refused(key: str, why: str) -> None:
    with pytest.raises(InvalidFootprintError, match=why):
        parse_partition_key(key)


def test_a_bound_may_not_start_with_equals_nor_be_missing() -> None:
    with pytest.raises(InvalidFootprintError, match="may not start with '='"):
        ValueRange("=x", False)
    with pytest.raises(InvalidFootprintError, match="needs a lower or an upper bound"):
        ValueRange()
    with pytest.raises(InvalidFootprintError, match="without '/'"):
        ValueRange("a/b")


def test_footprints_of_scalars_and_ranges_overlap_by_brute_force() -> None:
    """footprints_overlap on keys mixing values and ranges == some concrete value lies in both."""
    rng = random.Random(7)
    for _ in range(600):
        def footprint() -> tuple[frozenset[str], set[tuple[str, str]]]:
            keys, members = set(), set()
            for _ in range(rng.randint(1, 3)):
                spec: dict[str, object] = {}
                if rng.random() < 0.7:
                    spec["n"] = _random_range(rng, NUMBER_BOUNDS) if rng.random() < 0.5 else rng.choice(NUMBER_BOUNDS)
                if rng.random() < 0.7 or not spec:
                    spec["c"] = _random_range(rng, TEXT_BOUNDS) if rng.random() < 0.5 else rng.choice(TEXT_BOUNDS)
                if any(isinstance(v, ValueRange) and v.is_empty() for v in spec.values()):
                    continue
                keys.add(partition_key(spec))
                for n, c in itertools.product(NUMBERS, TEXTS):
                    if all(_member(spec[k], v) for k, v in (("n", n), ("c", c)) if k in spec):
                        members.add((n, c))
            return frozenset(keys), members

        (a, rows_a), (b, rows_b) = footprint(), footprint()
        if a and b:
            assert footprints_overlap(a, b) == bool(rows_a & rows_b), (a, b)


def test_value_against_value_or_range() -> None:
    r = ValueRange("b", True, "d", False)
    assert values_overlap("c", r) and values_overlap(r, "b") and not values_overlap("d", r)
    assert value_within("c", r) and not value_within("d", r) and not value_within(r, "c")
    assert value_within(ValueRange("b", False, "c", True), r) and not value_within(r, "b")


def test_existing_keys_keep_their_meaning() -> None:
    assert footprints_overlap(frozenset({"ds=1"}), frozenset({"ds=1/country=NL"}))
    assert not footprints_overlap(frozenset({"ds=1"}), frozenset({"ds=2"}))
    assert footprints_overlap(frozenset({"ds=1"}), frozenset({"country=NL"}))
    assert footprints_overlap(None, frozenset({"ds=1"}))
    assert parse_partition_key("ds=2024-01-01/country=NL") == {"ds": "2024-01-01", "country": "NL"}


def test_days_compare_as_days_whatever_their_spelling() -> None:
    assert compare("2024-01-09", "2024-01-10") == -1
    assert compare("2024-1-9", "2024-1-10") == -1  # text order would say 1
    january = ValueRange("2024-1-1", True, "2024-2-1", False)
    assert (january.lower, january.upper) == ("2024-01-01", "2024-02-01")
    assert january.contains("2024-1-15") and january.contains("2024-01-31") and not january.contains("2024-2-1")
    assert parse_partition_key("ds>=2024-1-1/ds<2024-1-10") == {"ds": ValueRange("2024-01-01", True, "2024-01-10", False)}
    assert parse_partition_key("ds=2024-1-9") == {"ds": "2024-01-09"}
    assert footprints_overlap(frozenset({"ds>=2024-1-1/ds<2024-1-10"}), frozenset({"ds=2024-1-9"}))
    assert not footprints_overlap(frozenset({"ds>=2024-1-1/ds<2024-1-10"}), frozenset({"ds=2024-1-10"}))
