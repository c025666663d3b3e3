"""The simulator's engine against the matrices, cell by cell, and against a brute-force oracle.

The oracle below is written from the definition (docs/simulator.md, the engine's docstring): it
keeps every commit and checks an attempt against each commit made after its begin, asking
``Profile.cell`` directly. It shares no code with ``occflow.sim.engine`` (no failing-cell table,
no pruning, no version arithmetic).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

import pytest

from occflow.core.errors import UnknownOperationError
from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation
from occflow.core.profiles import PROFILES, Profile, get_profile, profile_names
from occflow.sim.engine import Footprint, Lost, TableLog

# Every profile of the registry; listed so that a new profile shows up here by name.
EXPECTED_PROFILES = {
    "maxcompute-standard", "maxcompute-transactional",
    "delta-serializable", "delta-write-serializable", "delta-serializable-rlc", "delta-write-serializable-rlc",
    "delta-rs",
    "iceberg-serializable", "iceberg-snapshot", "iceberg-serializable-validated", "iceberg-snapshot-validated",
}


def test_every_registered_profile_is_covered() -> None:
    assert set(profile_names()) >= EXPECTED_PROFILES


def pairs(profile: Profile) -> list[tuple[Operation, Operation]]:
    return list(itertools.product(profile.operations, repeat=2))


@pytest.mark.parametrize("name", profile_names())
def test_overlapping_attempts_on_one_partition_follow_every_cell(name: str) -> None:
    profile = get_profile(name)
    for earlier, later in pairs(profile):
        log = TableLog(profile)
        first, second = log.begin(), log.begin()  # both began on version 0: they overlap in time
        assert log.commit(first, earlier, frozenset({"p1"}), job=1) is None
        lost = log.commit(second, later, frozenset({"p1"}), job=2)
        cell = profile.cell(earlier, later)
        where = f"{name}: {earlier.value} then {later.value}"
        if cell.later_fails:
            assert lost == Lost(cell.exception, winner=1, version=1), where  # type: ignore[arg-type]
            assert log.version == 1, where
        else:
            assert lost is None, where
            assert log.version == 2, where


@pytest.mark.parametrize("name", profile_names())
def test_disjoint_partitions_both_commit_and_the_whole_table_overlaps_every_partition(name: str) -> None:
    profile = get_profile(name)
    for earlier, later in pairs(profile):
        log = TableLog(profile)
        a, b = log.begin(), log.begin()
        assert log.commit(a, earlier, frozenset({"p1", "p2"}), 1) is None
        assert log.commit(b, later, frozenset({"p3"}), 2) is None, (name, earlier, later)
        fails = profile.later_fails(earlier, later)
        for first_fp, second_fp in ((None, frozenset({"p7"})), (frozenset({"p7"}), None), (None, None)):
            log = TableLog(profile)
            a, b = log.begin(), log.begin()
            assert log.commit(a, earlier, first_fp, 1) is None
            lost = log.commit(b, later, second_fp, 2)
            assert (lost is not None) == fails, (name, earlier, later, first_fp, second_fp)


@pytest.mark.parametrize("name", profile_names())
def test_a_commit_before_an_attempt_began_never_fails_it(name: str) -> None:
    profile = get_profile(name)
    for earlier, later in pairs(profile):
        log = TableLog(profile)
        assert log.commit(log.begin(), earlier, None, 1) is None
        assert log.commit(log.begin(), later, None, 2) is None, (name, earlier, later)
        assert log.version == 2


def test_the_first_failing_commit_in_commit_order_is_the_winner() -> None:
    profile = get_profile("delta-serializable")
    assert profile.later_fails(Operation.DELETE, Operation.MERGE)
    assert profile.later_fails(Operation.UPDATE, Operation.MERGE)
    log = TableLog(profile)
    merge = log.begin()
    # Three commits after the MERGE began, one after another: another partition, then two that fail it.
    assert log.commit(log.begin(), Operation.UPDATE, frozenset({"p2"}), 10) is None
    assert log.commit(log.begin(), Operation.DELETE, frozenset({"p1", "p3"}), 11) is None
    assert log.commit(log.begin(), Operation.UPDATE, frozenset({"p1"}), 12) is None
    lost = log.commit(merge, Operation.MERGE, frozenset({"p1"}), 13)
    assert lost == Lost(profile.cell(Operation.DELETE, Operation.MERGE).exception, 11, 2)  # type: ignore[arg-type]


def test_log_is_pruned_to_what_live_attempts_can_still_lose_to() -> None:
    profile = get_profile("delta-write-serializable")
    log = TableLog(profile)
    for i in range(10_000):  # one job after another: nothing is live between them
        assert log.commit(log.begin(), Operation.MERGE, frozenset({f"p{i % 7}"}), i) is None
        assert log.retained == 0
    assert log.version == 10_000
    # A long attempt keeps what committed after it began; a sliding window of four keeps <= 4.
    long = log.begin()
    window = [log.begin() for _ in range(4)]
    for i in range(1000):
        assert log.commit(window.pop(0), Operation.INSERT_INTO, frozenset({"a"}), i) is None
        window.append(log.begin())
        assert log.retained == i + 1  # the long attempt's history
    assert log.commit(long, Operation.INSERT_INTO, frozenset({"b"}), -1) is None
    assert log.retained <= 4 and log.live == 4
    for token in window:
        log.commit(token, Operation.INSERT_INTO, frozenset({"a"}), 0)
    assert log.retained == 0 and log.live == 0


def test_bad_calls_are_errors() -> None:
    log = TableLog(get_profile("iceberg-serializable"))
    with pytest.raises(ValueError, match="no live attempt began at version 3"):
        log.commit(3, Operation.MERGE, None, 1)
    with pytest.raises(UnknownOperationError, match="upgrade_protocol.*iceberg-serializable"):
        log.commit(log.begin(), Operation.UPGRADE_PROTOCOL, None, 1)


# ----------------------------------------------------------------------------- the oracle


@dataclass
class Commit:
    job: int
    operation: Operation
    footprint: Footprint


def oracle(profile: Profile, history: list[tuple[str, int]], ops: dict[int, Operation],
           footprints: dict[int, Footprint]) -> dict[int, tuple[ConflictKind, int] | None]:
    """Keep every commit; an attempt fails on the first later commit that overlaps it and whose
    cell (that commit's operation first, the attempt's second) says the later one fails."""
    commits: list[Commit] = []
    seen: dict[int, int] = {}  # attempt -> how many commits existed when it began
    result: dict[int, tuple[ConflictKind, int] | None] = {}
    for event, job in history:
        if event == "begin":
            seen[job] = len(commits)
            continue
        mine = footprints[job]
        outcome = None
        for commit in commits[seen[job]:]:
            theirs = commit.footprint
            overlapping = mine is None or theirs is None or bool(set(mine) & set(theirs))
            cell = profile.cell(commit.operation, ops[job])
            if overlapping and cell.later_fails:
                assert cell.exception is not None
                outcome = (cell.exception, commit.job)
                break
        result[job] = outcome
        if outcome is None:
            commits.append(Commit(job, ops[job], mine))
    return result


def random_history(rng: random.Random) -> tuple[Profile, list[tuple[str, int]], dict[int, Operation],
                                               dict[int, Footprint]]:
    profile = PROFILES[rng.choice(sorted(PROFILES))]
    n = rng.randint(2, 6)
    ops = {j: rng.choice(profile.operations) for j in range(n)}
    footprints: dict[int, Footprint] = {
        j: None if rng.random() < 0.2 else frozenset(rng.sample(["p1", "p2", "p3"], rng.randint(1, 2)))
        for j in range(n)
    }
    pending = [[("begin", j), ("commit", j)] for j in range(n)]
    history = []
    while pending:  # a random interleaving, each attempt's begin before its commit
        events = rng.choice(pending)
        history.append(events.pop(0))
        if not events:
            pending.remove(events)
    return profile, history, ops, footprints


@pytest.mark.parametrize("seed", range(4))
def test_engine_agrees_with_a_brute_force_oracle_on_random_histories(seed: int) -> None:
    rng = random.Random(seed)
    failed = committed = 0
    for _ in range(1500):
        profile, history, ops, footprints = random_history(rng)
        log = TableLog(profile)
        tokens: dict[int, int] = {}
        got: dict[int, tuple[ConflictKind, int] | None] = {}
        for event, job in history:
            if event == "begin":
                tokens[job] = log.begin()
            else:
                lost = log.commit(tokens[job], ops[job], footprints[job], job)
                got[job] = None if lost is None else (lost.kind, lost.winner)
        expected = oracle(profile, history, ops, footprints)
        assert got == expected, (profile.name, history, ops, footprints)
        assert log.retained == 0 and log.live == 0  # nothing live: nothing kept
        failed += sum(v is not None for v in got.values())
        committed += sum(v is None for v in got.values())
    assert failed > 500 and committed > 500  # the histories exercise both outcomes
