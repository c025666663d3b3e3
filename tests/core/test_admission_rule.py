"""The admission rule's parts that the pair test (``test_admission_agreement.py``) does not reach:
the cycle check over commit gates, judged by brute force on every small gate graph, and the
queue's first-come-first-served hold check, given as a list (the store) or as an index (the
simulator), which must rule alike. Bad input gets an error that names it."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable

import pytest

from occflow.core.admission_rule import Claim, Pairing, Running, Waiting, closes_cycle, rule
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
