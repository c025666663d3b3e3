"""The admission rule's parts that the pair test (``test_admission_agreement.py``) does not reach:
the cycle check over commit gates, judged by brute force on every small gate graph, and the
queue's first-come-first-served hold check, given as a list (the store) or as an index (the
simulator), which must rule alike. Bad input gets an error that names it."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable

import pytest

from occflow.core.admission_rule import Claim, Durations, Pairing, Running, Waiting, closes_cycle, rule
from occflow.core.errors import InvalidFootprintError, UnknownOperationError, UnknownProfileError
from occflow.core.profiles import PROFILES, Profile

NODES = ("a", "b", "c", "d")


def _has_cycle(edges: set[tuple[str, str]]) -> bool:
    """Brute force: some ordering of the nodes puts every edge's target before its source iff
    the graph is acyclic (a topological order exists)."""
    nodes = sorted({n for e in edges for n in e})
    for order in itertools.permutations(nodes):
        place = {n: i for i, n in enumerate(order)}
        if all(place[awaited] < place[waiter] for waiter, awaited in edges):
            return False
    return bool(edges)


def _graphs() -> list[set[tuple[str, str]]]:
    pairs = [(x, y) for x in NODES for y in NODES if x != y]
    rng = random.Random(32)
    return [set(rng.sample(pairs, rng.randint(0, 5))) for _ in range(300)]


def test_a_hold_is_refused_exactly_when_it_would_close_a_cycle_of_gates() -> None:
    checked = 0
    for edges in _graphs():
        if _has_cycle(edges):
            continue  # the store keeps its gates acyclic: only acyclic tables are asked
        gates: dict[str, set[str]] = {}
        for waiter, awaited in edges:
            gates.setdefault(waiter, set()).add(awaited)
        for awaits, holds in itertools.product(itertools.combinations(NODES, 1), itertools.combinations(NODES, 1)):
            if set(awaits) & set(holds):
                continue
            # The newcomer "n" waits for ``awaits``; ``holds`` wait for it.
            added = edges | {("n", a) for a in awaits} | {(h, "n") for h in holds}
            assert closes_cycle(gates, awaits, holds) is _has_cycle(added), (edges, awaits, holds)
            checked += 1
    assert checked > 500


def test_a_ruling_that_would_close_a_cycle_blocks_on_the_leases_it_would_hold() -> None:
    # Every newcomer that may commit after one running write and before another, on one partition.
    found = 0
    for profile in PROFILES.values():
        for n, a, b in itertools.product(profile.operations, repeat=3):
            newcomer, first, then = (Claim(profile, op, frozenset({"ds=1"})) for op in (n, a, b))
            if newcomer.pairing(first) is not Pairing.AFTER or newcomer.pairing(then) is not Pairing.BEFORE:
                continue
            running = [Running("first", first, True), Running("then", then, True)]
            ruling = rule(newcomer, running, commit_gate=True)
            assert (ruling.awaits, ruling.holds, ruling.verdict.value) == (("first",), ("then",), "awaits_and_holds")
            assert rule(newcomer, running, commit_gate=True, gates={}) == ruling  # no gates: no cycle
            # "first" already waits for "then": the newcomer between them would close the loop.
            cyclic = rule(newcomer, running, commit_gate=True, gates={"first": {"then"}})
            assert [b.key for b in cyclic.blocked_by] == ["then"] and cyclic.verdict.value == "blocked"
            # The other way round is a chain, not a loop.
            assert rule(newcomer, running, commit_gate=True, gates={"then": {"first"}}) == ruling
            found += 1
    assert found > 0


def _random_claim(rng: random.Random, profile: Profile) -> Claim:
    return Claim(profile, rng.choice(profile.operations), frozenset({rng.choice(["ds=1", "ds=2"])}))


def _index(running: list[Running[str]], ahead: list[Waiting[str]]) -> Callable[[str], bool]:
    """What the simulator's queue index answers: does a request ahead wait for this lease in
    both commit orders?"""
    leases = {r.key: r.claim for r in running}
    return lambda key: any(w.claim.pairing(leases[key]) is Pairing.APART for w in ahead)


def test_the_queue_as_a_list_and_as_an_index_rule_alike() -> None:
    rng = random.Random(7)
    checked = 0
    for name, profile in PROFILES.items():
        for _ in range(60):
            newcomer = _random_claim(rng, profile)
            running = [Running(f"r{i}", _random_claim(rng, profile), rng.random() < 0.8, rng.random() < 0.3)
                       for i in range(3)]
            # Requests ahead the newcomer could be ordered with (one it pairs APART with blocks it
            # in both forms; the index keeps only the question about the leases).
            ahead = [Waiting(f"w{i}", _random_claim(rng, profile), True) for i in range(2)]
            ahead = [w for w in ahead if newcomer.pairing(w.claim) is not Pairing.APART]
            listed = rule(newcomer, running, ahead, commit_gate=True)
            indexed = rule(newcomer, running, ahead, commit_gate=True, waited_for=_index(running, ahead))
            assert (listed.awaits, listed.holds, [b.key for b in listed.blocked_by]) == (
                indexed.awaits, indexed.holds, [b.key for b in indexed.blocked_by]), name
            checked += bool(listed.holds) + bool(listed.blocked_by)
    assert checked > 50


def test_a_claim_names_what_is_wrong_with_its_input() -> None:
    with pytest.raises(UnknownProfileError, match="known profiles"):
        Claim("no-such-profile", "merge", None)  # type: ignore[arg-type]
    with pytest.raises(UnknownOperationError, match="known operations"):
        Claim(PROFILES["delta-rs"], "mergee", None)  # type: ignore[arg-type]
    with pytest.raises(InvalidFootprintError, match="not the string 'ds=1'"):
        Claim(PROFILES["delta-rs"], "merge", "ds=1")  # type: ignore[arg-type]
    # Names as a user writes them are read.
    assert Claim("delta-rs", "MERGE", ["ds=1"]) == Claim.of("delta-rs", "merge", frozenset({"ds=1"}))  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- durations (issue 38)

ICEBERG = PROFILES["iceberg-serializable"]
MERGE_P0 = Claim(ICEBERG, "merge", frozenset({"ds=1"}))  # type: ignore[arg-type]
INSERT_P0 = Claim(ICEBERG, "insert_into", frozenset({"ds=1"}))  # type: ignore[arg-type]


def _held_by_hand(pairing: Pairing, own: float, remaining: float) -> float:
    """How long a gate holds a commit, worked out from the timeline: an ``AFTER`` newcomer
    finishes after ``own`` and waits for the running write's ``remaining``; a ``BEFORE``
    newcomer holds the running write from its ``remaining`` until its own ``own``."""
    return remaining - own if pairing is Pairing.AFTER else own - remaining


def test_a_gate_is_refused_exactly_when_it_would_hold_a_commit_more_than_k_times_its_writers_length() -> None:
    # Iceberg serializable: an INSERT beside a running MERGE awaits it; a MERGE beside a running INSERT holds it.
    assert INSERT_P0.pairing(MERGE_P0) is Pairing.AFTER and MERGE_P0.pairing(INSERT_P0) is Pairing.BEFORE
    checked = {True: 0, False: 0}
    for k, own, remaining, length in itertools.product((0.5, 1.0, 3.0), (1.0, 4.0, 9.0, 30.0), (0.0, 2.0, 8.0, 20.0),
                                                       (8.0, 20.0)):
        durations = Durations(gate_factor=k)
        for newcomer, running in ((INSERT_P0, MERGE_P0), (MERGE_P0, INSERT_P0)):
            pairing = newcomer.pairing(running)
            held = _held_by_hand(pairing, own, remaining)
            writer = own if pairing is Pairing.AFTER else length  # whose commit is held
            ruling = rule(newcomer, [Running("r", running, True, False, remaining, length)], commit_gate=True,
                          durations=durations, estimate=own)
            refused = held > k * writer
            assert ruling.granted is not refused, (pairing, k, own, remaining, length, ruling)
            if refused:
                assert "more than" in ruling.blocked_by[0].why
            checked[refused] += 1
            # Duration-blind, or no slot wanted by anyone else, or the remaining time unknown: granted.
            assert rule(newcomer, [Running("r", running, True, False, remaining, length)], commit_gate=True).granted
            assert rule(newcomer, [Running("r", running, True, False, remaining, length)], commit_gate=True,
                        durations=durations, estimate=own, slot_wanted=False).granted
            assert rule(newcomer, [Running("r", running, True)], commit_gate=True, durations=durations,
                        estimate=own).granted
    assert min(checked.values()) > 20


def test_a_request_ahead_by_its_head_start_does_not_keep_out_a_newcomer_no_running_write_blocks() -> None:
    durations = Durations()
    optimize = Claim(PROFILES["delta-write-serializable"], "optimize", frozenset({"ds=1"}))  # type: ignore[arg-type]
    merge = Claim(PROFILES["delta-write-serializable"], "merge", frozenset({"ds=1"}))  # type: ignore[arg-type]
    assert optimize.pairing(merge) is Pairing.APART
    later = Waiting("merge", merge, True, arrival=50.0, estimate=10.0)
    earlier = Waiting("merge", merge, True, arrival=5.0, estimate=10.0)
    # The compaction arrived at 10: a merge that arrived later, ahead only by its head start, lets it go.
    assert rule(optimize, [], [later], commit_gate=True, durations=durations, estimate=10.0, arrival=10.0).granted
    # One that arrived first still blocks it; so does any, duration-blind.
    assert not rule(optimize, [], [earlier], commit_gate=True, durations=durations, estimate=10.0, arrival=10.0).granted
    assert not rule(optimize, [], [later], commit_gate=True).granted
    # A running write that blocks it keeps the queue as it is: the later merge stays ahead.
    running = [Running("m", merge, True)]
    blocked = rule(optimize, running, [later], commit_gate=True, durations=durations, estimate=10.0, arrival=10.0)
    assert [b.key for b in blocked.blocked_by] == ["m", "merge"]


def test_of_two_requests_that_arrived_together_the_shorter_goes_first() -> None:
    durations = Durations(same_arrival=1.0)
    merge = Claim(PROFILES["delta-write-serializable"], "merge", frozenset({"ds=1"}))  # type: ignore[arg-type]
    longer = Waiting("long", merge, True, arrival=100.0, estimate=300.0)
    for arrival, estimate, goes in ((100.5, 30.0, True), (100.5, 600.0, False), (102.0, 30.0, False),
                                    (100.5, 300.0, False)):
        ruling = rule(merge, [], [longer], commit_gate=True, durations=durations, estimate=estimate, arrival=arrival)
        assert ruling.granted is goes, (arrival, estimate)
        assert durations.goes_first(arrival, estimate, 100.0, 300.0) is goes


def test_durations_name_what_is_wrong_with_them() -> None:
    for name, bad in (("gate_factor", -1.0), ("same_arrival", float("nan")), ("default_seconds", float("inf")),
                      ("gate_factor", True), ("default_seconds", "60")):
        with pytest.raises(ValueError, match=f"Durations.{name} must be a finite number"):
            Durations(**{name: bad})  # type: ignore[arg-type]
    assert Durations(default_seconds=42.0).seconds(None) == 42.0 and Durations().seconds(3.0) == 3.0
    assert "1x its writer's length" in Durations().describe()
