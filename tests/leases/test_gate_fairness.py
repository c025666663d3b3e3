"""Order-aware admission stays first come, first served: a newcomer that must commit first may
hold a running writer's commit only if no request waiting ahead of it waits for that writer.

delta-rs on the real stores: a schema change (H) is running and gated; a second schema change
(W) waits for it, since two metadata changes fail in both commit orders; then an append to
partition a (N) asks. Append then schema change is clean, the other order is not, so N could run
beside H and hold H's commit, but that would make W, which asked first, wait for H longer. (N
and W are ordered by a gate when W is granted, so W, waiting, does not block N by itself.) The
cells the scene relies on are read from the profile here, not from admission's code.
"""

from __future__ import annotations

from occflow.core.profiles import get_profile
from occflow.leases import LeaseRequest, LeaseStore

PROFILE = "delta-rs"
TABLE = "db.fair"


def _ask(store: LeaseStore, operation: str, partitions: list[dict[str, str]] | None) -> object:
    request = LeaseRequest.create(TABLE, operation, PROFILE, partitions, whole_table=partitions is None,
                                  commit_gate=True)
    return request, store.decide(request)


def test_the_cells_make_the_scene() -> None:
    p = get_profile(PROFILE)
    ops = {o.value: o for o in p.operations}
    alter, append = ops["alter_metadata"], ops["insert_into"]
    assert p.commit_is_clean(append, alter) and not p.commit_is_clean(alter, append)  # N may go first
    assert not p.commit_is_clean(alter, alter)  # W waits for H in either order


def test_a_newcomer_does_not_hold_a_writer_that_an_earlier_request_waits_for(store_url: str) -> None:
    store = LeaseStore.from_url(store_url)
    try:
        _, held = _ask(store, "alter_metadata", None)
        assert held.lease is not None
        waiting_request, waiting = _ask(store, "alter_metadata", None)
        assert waiting.lease is None and [b.operation for b in waiting.blockers] == ["alter_metadata"]
        newcomer_request, newcomer = _ask(store, "insert_into", [{"ds": "a"}])
        assert newcomer.lease is None, "the append held the schema change that the DELETE waits for"
        assert [b.operation for b in newcomer.blockers] == ["alter_metadata"]
        assert store.gate(held.lease) == []  # nothing holds the schema change's commit
        store.release(held.lease)
        assert store.decide(waiting_request).lease is not None  # W first, as it asked first
        assert store.decide(newcomer_request).lease is not None  # N beside W, ordered by a gate
    finally:
        store.dispose()


def test_without_an_earlier_waiter_the_newcomer_holds_the_writers_commit(store_url: str) -> None:
    """Control: the same newcomer with no one waiting ahead is granted beside the schema change,
    whose commit then waits for the append's lease (the gate the rule above refuses)."""
    store = LeaseStore.from_url(store_url)
    try:
        _, held = _ask(store, "alter_metadata", None)
        _, newcomer = _ask(store, "insert_into", [{"ds": "a"}])
        assert newcomer.lease is not None
        assert [lease.lease_id for lease in store.gate(held.lease)] == [newcomer.lease.lease_id]
    finally:
        store.dispose()
