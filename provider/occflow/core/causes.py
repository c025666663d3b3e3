"""The one walk over an exception's causes that every part of occflow uses.

An engine error arrives wrapped: a Py4J error around a Spark ``AnalysisException``, a task
failure ``raise ... from`` the engine's error, an ``ExceptionGroup`` from a task group, a
``raise X from None`` that hides its context. A conflict anywhere in that graph is evidence, so
the walk follows ``__cause__``, ``__context__`` (suppressed or not) and the members of exception
groups, visits each exception once (chains can loop), outermost first, and stops after
``limit`` exceptions so a pathological chain cannot stall a task.
"""

from __future__ import annotations

from collections.abc import Iterator

#: Exceptions visited at most: deep enough for any real wrapper stack (Airflow + Py4J + Spark
#: stay well under 32), small enough that a self-feeding chain costs nothing.
MAX_CAUSES = 256


def _members(error: BaseException) -> tuple[BaseException, ...]:
    # ExceptionGroup on 3.11+; a duck-typed ``exceptions`` tuple on older backports.
    members = getattr(error, "exceptions", None)
    if isinstance(members, tuple) and all(isinstance(m, BaseException) for m in members):
        return members
    return ()


def causes(error: BaseException, limit: int = MAX_CAUSES) -> Iterator[BaseException]:
    """``error`` and every exception behind it, depth first, outermost first, each once."""
    seen: set[int] = set()
    stack: list[BaseException] = [error]
    while stack and len(seen) < limit:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        behind: list[BaseException] = list(_members(current))
        if current.__cause__ is not None:
            behind.append(current.__cause__)
        if current.__context__ is not None and current.__context__ is not current.__cause__:
            behind.append(current.__context__)
        # Reversed so the first member / the cause is visited next.
        stack.extend(reversed(behind))


def explicit_chain(error: BaseException, limit: int = MAX_CAUSES) -> Iterator[BaseException]:
    """The chain Python's own traceback prints: ``__cause__``, else an unsuppressed
    ``__context__``; no group members. Kept for callers that report the chain as a user saw it."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(seen) < limit:
        seen.add(id(current))
        yield current
        nxt = current.__cause__
        if nxt is None and not current.__suppress_context__:
            nxt = current.__context__
        current = nxt
