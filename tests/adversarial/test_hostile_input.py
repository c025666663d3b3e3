"""Hostile and careless input against the lease store's API, on SQLite and PostgreSQL (issue 24).

Hundreds of generated inputs (identifiers, partition values, date spellings, TTLs, long names,
nested documents). For each the store either handles it safely or refuses it with an
``InvalidDeclarationError`` (a ``ValueError``) naming the field, and a refused call writes
nothing (the rows of every store table are counted before and after). Any other exception is a
failure. The date spellings of one day must conflict: one waits while the other holds.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
import sqlalchemy as sa

from occflow.core.errors import InvalidDeclarationError
from occflow.core.ranges import ValueRange
from occflow.leases import Holder, LeaseRequest, LeaseStore, LeaseStoreRefused, LeaseStoreUnavailable, schema

PROFILE = "iceberg-serializable"


def nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def nested_dict(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.fixture
def store(store_url: str) -> Iterator[LeaseStore]:
    s = LeaseStore.from_url(store_url, history=True)
    yield s
    s.dispose()


def counts(store: LeaseStore) -> dict[str, int]:
    with store.engine.connect() as conn:
        return {t.name: conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one()
                for t in schema.metadata.sorted_tables}


def base(**overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"table": "db.t", "operation": "merge", "profile": PROFILE,
                            "partitions": [{"ds": "2024-01-01"}], "holder": Holder("d", "t", "r", 1), "ttl": 30}
    args.update(overrides)
    return args


def holder(**fields: Any) -> Holder:
    return replace(Holder("d", "t", "r", 1), **fields)


TTL_REFUSED = [0, -1, -0.0, float("nan"), float("inf"), float("-inf"), 10 * 365 * 86400, 86400.5, True, False,
               "300", None, 10**5000, -(10**30), 1e308, decimal.Decimal("30"), [30], {"s": 30}, nested(5000)]
TEXT_REFUSED = ["\x00", "a\x00b", "line\nbreak", "tab\t", "\x7f", "\ud800", "x\udfff", nested(5000), None, 17, b"bytes"]
INT_REFUSED = [True, False, -1, 2**31, 10**5000, -(10**5000), 1.5, float("nan"), "1", None, nested(5000)]
PARTITION_VALUE_REFUSED = [
    "2024-02-30", "2024-13-01", "0000-00-00", "2024-01-01T05:00", "2024-01-01 23:59:59", "2024-1-1T00:00:01Z",
    dt.datetime(2024, 1, 1, 0, 0, 1), dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone.utc),
    "x" * 513, "1" * 5000, "a/b", "\x00", "\ud800", "", 10**5000, 10**700, float("nan"), float("inf"),
    decimal.Decimal("1e100000"), decimal.Decimal("-1e-100000"), decimal.Decimal("NaN"), nested(10000),
    nested_dict(10000), None, object(), b"2024-01-01", [1], {"x": 1}, {1, 2}, dt.time(0),
]
PARTITION_REFUSED = [
    [{"1ds": 1}], [{"d s": 1}], [{"": 1}], [{"ds\x00": 1}], [{"x" * 600: 1}], [{"ds": 1, "DS": 2}], [{}], [],
    ["ds"], ["ds=1/"], ["/"], ["ds>=b/ds<a"], ["ds=a\x00"], ["ds=\ud800"], [nested(10000)], nested(10000),
    [{f"c{i}": "v" * 500 for i in range(3)}],  # a key longer than the store's key column (1024)
    ["ds=2024-02-30"], ["ds>=2024-01-01/ds<2024-1-0"], [f"c={'x' * 600}"], [10**5000], [None], [b"ds=1"],
]
TABLE_REFUSED = [
    # A location is a lease's table only as the declaration makes it canonical (``s3://b/db/t``,
    # a delta-rs table's identity); any other spelling of one is refused like any path.
    "", "db.t\x00", "db.t\n", "/warehouse/db/t", "S3://b/db/t/", "s3a://b/db/t", "file:///x/../t", "../t",
    "db.t; DROP TABLE x", "db.t'--",
    "`a\tb`.t", "a.b.c.d.e", "db.tëst", "db.`t\ud800`", "a" * 600, "`" + "x" * 300 + "`.`" + "y" * 300 + "`",
    nested(10000), None, 5, b"db.t",
]


def hostile_cases() -> list[tuple[str, dict[str, Any], str]]:
    """(case id, create() arguments, a word the error must hold: the field it names)."""
    cases: list[tuple[str, dict[str, Any], str]] = []
    for i, ttl in enumerate(TTL_REFUSED):
        cases.append((f"ttl-{i}", base(ttl=ttl), "ttl"))
        cases.append((f"queue_ttl-{i}", base(queue_ttl=ttl), "queue_ttl"))
    for name in ("dag_id", "task_id", "run_id", "host"):
        for i, text in enumerate([*TEXT_REFUSED, "x" * 251, "é" * 251, "x" * 100_000]):
            cases.append((f"{name}-{i}", base(holder=holder(**{name: text})), f"holder {name}"))
    for name in ("try_number", "pid"):
        for i, number in enumerate(INT_REFUSED):
            cases.append((f"{name}-{i}", base(holder=holder(**{name: number})), f"holder {name}"))
    for i, value in enumerate(PARTITION_VALUE_REFUSED):
        cases.append((f"value-{i}", base(partitions=[{"ds": value}]), "partition"))
    for i, partitions in enumerate(PARTITION_REFUSED):
        cases.append((f"partitions-{i}", base(partitions=partitions), "partition"))
    for i, table in enumerate(TABLE_REFUSED):
        cases.append((f"table-{i}", base(table=table), "table"))
    for i, request_id in enumerate(["\x00", "x" * 65, "\ud800", 5]):
        cases.append((f"request_id-{i}", base(request_id=request_id), "request_id"))
    for i, operation in enumerate(["", "merge\x00", "x" * 10_000, nested(10000), None]):
        cases.append((f"operation-{i}", base(operation=operation), "operation"))
    for i, profile in enumerate(["", "x" * 10_000, nested(10000), None]):
        cases.append((f"profile-{i}", base(profile=profile), "profile"))
    # Generated: ordinary text with one forbidden character somewhere, or one character too long.
    rng = random.Random(24)
    forbidden = [chr(c) for c in range(0x20)] + ["\x7f", "\ud800", "\udbff", "\udc00"]
    for i in range(120):
        text = "".join(rng.choice("abcXYZ019_-.é🙂") for _ in range(rng.randint(0, 40)))
        cut = rng.randint(0, len(text))
        bad = text[:cut] + rng.choice(forbidden) + text[cut:]
        field = rng.choice(["dag_id", "task_id", "run_id", "host", "value"])
        if field == "value":
            cases.append((f"gen-value-{i}", base(partitions=[{"ds": bad}]), "partition"))
        else:
            cases.append((f"gen-{field}-{i}", base(holder=holder(**{field: bad})), f"holder {field}"))
    for i in range(30):
        field = rng.choice(["dag_id", "task_id", "run_id", "host"])
        cases.append((f"gen-long-{field}-{i}", base(holder=holder(**{field: "é" * rng.randint(251, 2000)})),
                      f"holder {field}"))
    return cases


def create(args: dict[str, Any]) -> LeaseRequest:
    args = dict(args)
    return LeaseRequest.create(args.pop("table"), args.pop("operation"), args.pop("profile"),
                               args.pop("partitions"), **args)


def refused(call: Callable[[], Any], field: str) -> str | None:
    """None if ``call`` raised an InvalidDeclarationError naming ``field``; else what went wrong."""
    try:
        call()
    except InvalidDeclarationError as exc:
        message = str(exc)
        if field.lower() not in message.lower():
            return f"refused without naming {field!r}: {message[:300]}"
        if len(message) > 5000:
            return f"a message of {len(message)} characters"
        return None
    except Exception as exc:  # noqa: BLE001 - any other type is the failure this suite looks for
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    return "accepted"


def test_hostile_requests_are_refused_by_name_and_write_nothing(store: LeaseStore) -> None:
    cases = hostile_cases()
    assert len(cases) > 250
    before = counts(store)
    wrong = {}
    for name, args, field in cases:
        problem = refused(lambda args=args: store.decide(create(args)), field)
        if problem is not None:
            wrong[name] = problem
    assert wrong == {}
    assert counts(store) == before


def test_requests_built_past_create_are_refused_by_the_store_and_write_nothing(store: LeaseStore) -> None:
    """A request made with the dataclass constructor skips ``create``'s checks: the store checks
    again before any SQL (a NaN TTL would otherwise be an outage on SQLite, an immortal lease on
    PostgreSQL)."""
    good = LeaseRequest.create("db.t", "merge", PROFILE, ["ds=1"], holder=Holder("d", "t", "r", 1), ttl=30)
    cases: list[tuple[LeaseRequest, str]] = []
    cases += [(replace(good, ttl=ttl), "ttl") for ttl in TTL_REFUSED if isinstance(ttl, (int, float))]
    cases += [(replace(good, queue_ttl=ttl), "queue_ttl") for ttl in (float("nan"), float("inf"), -5.0, 0.0)]
    cases += [(replace(good, holder=holder(dag_id="x" * 251)), "holder dag_id"),
              (replace(good, holder=holder(pid=2**40)), "holder pid"),
              (replace(good, holder=holder(run_id="\x00")), "holder run_id"),
              (replace(good, table="t" * 513), "table"),
              (replace(good, table="db.t\x00"), "table"),
              (replace(good, request_id="r" * 65), "request_id"),
              (replace(good, partitions=frozenset({"ds=" + "x" * 1100})), "partition"),
              (replace(good, partitions=frozenset({"ds=\x00"})), "partition key")]
    before = counts(store)
    wrong = {i: p for i, (request, field) in enumerate(cases)
             if (p := refused(lambda request=request: store.decide(request), field)) is not None}
    assert wrong == {}
    assert counts(store) == before


def test_a_value_the_database_refuses_is_not_an_outage(store: LeaseStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # Past every check (as if a check were missing), the database's own refusal must still not
    # read as an outage that triggers would ride out for 300 s.
    monkeypatch.setattr("occflow.leases.store.check_request_fits", lambda request: None)
    good = LeaseRequest.create("db.t", "merge", PROFILE, ["ds=1"], holder=Holder("d", "t", "r", 1), ttl=30)
    bad = replace(good, ttl=float("nan")) if store.dialect == "sqlite" else replace(good, holder=holder(dag_id="x" * 300))
    with pytest.raises(LeaseStoreRefused) as caught:
        store.decide(bad)
    assert not isinstance(caught.value, LeaseStoreUnavailable)
    assert "not an outage" in str(caught.value)
    assert store.leases() == []


def test_safe_inputs_at_the_limits_are_kept_as_given(store: LeaseStore) -> None:
    limits = [
        base(holder=holder(dag_id="d" * 250, task_id="é" * 250, run_id="🙂" * 250, host="h" * 250)),
        base(holder=holder(try_number=2**31 - 1, pid=2**31 - 1)),
        base(ttl=86400, queue_ttl=0.001),
        base(table="`" + "ü" * 200 + "`.`" + "t" * 200 + "`"),
        base(partitions=[{"ds": "v" * 512}]),
        base(partitions=[{"ds": "=x"}, {"ds": ">=y"}, {"ds": "a=b"}, {"ds": "🙂"}, {"ds": "'; DROP TABLE x; --"}]),
        base(partitions=[{"n": 10**500}, {"n": -(10**500)}, {"n": decimal.Decimal("1e-500")}]),
        base(request_id="r" * 64),
    ]
    for args in limits:
        request = create(args)
        lease = store.try_acquire(request)
        assert lease is not None, request.describe()
        assert {lease.lease_id} <= {le.lease_id for le in store.leases(request.table)}
        assert store.heartbeat(lease).lease_id == lease.lease_id
        assert store.release(lease)


@pytest.mark.parametrize("hostile", ["\x00", "\ud800", "x\n", nested(10000), 5])
def test_hostile_names_given_to_the_readers_are_refused_by_name(store: LeaseStore, hostile: Any) -> None:
    before = counts(store)
    for call, field in ((lambda: store.leases(hostile), "table"), (lambda: store.waiting(hostile), "table"),
                        (lambda: store.history_events(hostile), "table"), (lambda: store.release(hostile), "lease id")):
        assert refused(call, field) is None
    assert counts(store) == before


@pytest.mark.parametrize("harmless", ["x" * 100_000, "no-such-table", "🙂" * 1000, "'; DROP TABLE occflow_leases; --"])
def test_long_or_odd_names_given_to_the_readers_find_nothing(store: LeaseStore, harmless: str) -> None:
    assert store.leases(harmless) == [] and store.waiting(harmless) == []
    assert store.history_events(harmless) == [] and store.release(harmless) is False


def test_hostile_durations_elsewhere_in_the_api_are_refused_by_name(store: LeaseStore) -> None:
    request = create(base())
    lease = store.try_acquire(request)
    assert lease is not None
    before = counts(store)
    wrong = {}
    for i, bad in enumerate(TTL_REFUSED):
        if bad is None or (isinstance(bad, (int, float)) and not isinstance(bad, bool) and 0 < bad <= 86400):
            continue  # None: the lease's own TTL
        for name, call in (
            ("heartbeat ttl", lambda bad=bad: store.heartbeat(lease, ttl=bad)),
            ("poll", lambda bad=bad: store.acquire(request, timeout=0.1, poll=bad)),
            ("safety_poll", lambda bad=bad: store.wait_for_lease(request, 0.0, safety_poll=bad)),
        ):
            if (problem := refused(call, name)) is not None:
                wrong[f"{name}-{i}"] = problem
    assert wrong == {}
    assert counts(store) == before


@pytest.mark.parametrize("document", [
    "[]", '"text"', "null", "5", json.dumps(nested(800)), json.dumps(nested_dict(800)),
    json.dumps({"table": "db.t"}),
    json.dumps({"table": nested(800), "operation": "merge", "profile": PROFILE, "partitions": ["ds=1"],
                "holder": {}, "ttl": 30, "queue_ttl": 30, "request_id": "r"}),
    json.dumps({"table": "db.t", "operation": "merge", "profile": PROFILE, "partitions": nested(800),
                "holder": {}, "ttl": 30, "queue_ttl": 30, "request_id": "r"}),
    json.dumps({"table": "db.t", "operation": "merge", "profile": PROFILE, "partitions": ["ds=1"],
                "holder": nested_dict(800), "ttl": 30, "queue_ttl": 30, "request_id": "r"}),
    json.dumps({"table": "db.t", "operation": "merge", "profile": PROFILE, "partitions": ["ds=1"],
                "holder": {"dag_id": nested(800)}, "ttl": 30, "queue_ttl": 30, "request_id": "r"}),
    json.dumps({"table": "db.t", "operation": "merge", "profile": PROFILE, "partitions": ["ds=1"],
                "holder": {}, "ttl": "NaN", "queue_ttl": 30, "request_id": "r"}),
])
def test_a_deeply_nested_or_malformed_serialized_request_is_a_clear_error(store: LeaseStore, document: str) -> None:
    data = json.loads(document)
    before = counts(store)
    try:
        store.decide(LeaseRequest.from_dict(data))
    except InvalidDeclarationError as exc:
        assert len(str(exc)) < 5000
    else:
        pytest.fail("accepted")
    assert counts(store) == before


# ------------------------------------------------------------------------------ date spellings


def day_spellings(day: dt.date) -> list[Any]:
    """Every way a DAG may write one day that an engine casts to that day on a DATE column."""
    y, m, d = day.year, day.month, day.day
    texts = {f"{y}-{mm}-{dd}" for mm in (str(m), f"{m:02d}") for dd in (str(d), f"{d:02d}")}
    stamps = [f"{day.isoformat()}T00:00:00+00:00", f"{day.isoformat()} 00:00:00", f"{y}-{m}-{d}T00:00",
              f"{day.isoformat()}T00:00:00.000000Z", f" {day.isoformat()} "]
    midnight = dt.datetime(y, m, d)
    return [*sorted(texts), *stamps, day, midnight, midnight.replace(tzinfo=dt.timezone.utc)]


def random_days(n: int, seed: int = 24) -> list[dt.date]:
    rng = random.Random(seed)
    return [dt.date(2020, 1, 1) + dt.timedelta(days=rng.randrange(2000)) for _ in range(n)]


def merge(partitions: Any, task: str) -> LeaseRequest:
    return LeaseRequest.create("db.events", "merge", PROFILE, partitions, holder=Holder("d", task, "r", 1), ttl=30)


def assert_conflict(store: LeaseStore, held: Any, asked: Any) -> None:
    first = store.try_acquire(merge(held, "a"))
    assert first is not None, held
    second = merge(asked, "b")
    decided = store.decide(second)
    assert not decided.granted, f"{asked!r} was admitted beside a MERGE on {held!r}"
    assert [b.ident for b in decided.blockers] == [first.lease_id]
    store.release(first)
    lease = store.try_acquire(second)
    assert lease is not None
    store.release(lease)


def test_spellings_of_one_day_conflict_on_the_store(store: LeaseStore) -> None:
    pairs = 0
    for day in random_days(16):
        spellings = day_spellings(day)
        for held, asked in zip(spellings, spellings[1:] + spellings[:1], strict=True):
            assert_conflict(store, [{"ds": held}], [{"ds": asked}])
            pairs += 1
    # Keys typed as text are canonical too.
    assert_conflict(store, ["ds=2024-01-01"], ["ds=2024-1-1"])
    assert_conflict(store, ["country=NL/ds=2024-1-1"], [{"ds": dt.date(2024, 1, 1)}])
    assert pairs > 150


def test_a_day_inside_a_range_conflicts_however_either_is_spelled(store: LeaseStore) -> None:
    for day in random_days(6, seed=7):
        first = day.replace(day=1)
        after = (first + dt.timedelta(days=32)).replace(day=1)
        ranges: list[Any] = [
            [f"ds>={first.isoformat()}/ds<{after.isoformat()}"],
            [f"ds>={first.year}-{first.month}-1/ds<{after.year}-{after.month}-1"],
            [{"ds": ValueRange(first, True, after, False)}],
            [{"ds": ValueRange(dt.datetime.combine(first, dt.time(0)), True, f"{after.year}-{after.month}-1", False)}],
        ]
        for held in ranges:
            for asked in day_spellings(day)[::3]:
                assert_conflict(store, held, [{"ds": asked}])
                assert_conflict(store, [{"ds": asked}], held)
        # The day after the range is outside it, in date order (text order would say '2024-1-9' > '2024-1-10').
        for held in ranges:
            lease = store.try_acquire(merge(held, "a"))
            outside = store.try_acquire(merge([{"ds": f"{after.year}-{after.month}-{after.day}"}], "b"))
            assert lease is not None and outside is not None, (held, after)
            store.release(lease)
            store.release(outside)


def test_one_digit_days_compare_as_days_in_a_range(store: LeaseStore) -> None:
    # Text order: '2024-1-9' > '2024-1-10'. As days, the 9th is in [1st, 10th), the 10th is not.
    held = ["ds>=2024-1-1/ds<2024-1-10"]
    assert_conflict(store, held, [{"ds": "2024-1-9"}])
    lease = store.try_acquire(merge(held, "a"))
    assert store.try_acquire(merge([{"ds": "2024-1-10"}], "b")) is not None
    store.release(lease)


def test_different_days_and_texts_that_only_look_like_numbers_stay_apart(store: LeaseStore) -> None:
    held = store.try_acquire(merge([{"ds": "2024-01-01"}], "a"))
    assert held is not None
    for other in ["2024-01-02", "2024-1-2", dt.date(2023, 12, 31), "2024", "1", "01", "20240101", "2024-01", "24-1-1"]:
        lease = store.try_acquire(merge([{"ds": other}], f"b{other}"))
        assert lease is not None, other
        store.release(lease)
    store.release(held)
