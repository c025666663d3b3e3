"""The text table ``occflow policy PROFILE OPERATION`` prints: formatting only.

``WritePolicy.table`` decides what is shown (kinds this operation meets first, each distinct
plan labelled once, why); this lays it out with tabulate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tabulate import tabulate

Row = tuple[str, str, str, str]  # kind, action, plan label, where the kind is expected from


def policy_table(
    header: str,
    met: Sequence[Row],
    others: Sequence[Row],
    plans: Mapping[str, str],
    why: Sequence[tuple[str, str]],
    overridden: bool,
) -> str:
    """Header, the kinds it meets, a blank row, the other kinds, then plans (text -> label), why."""
    gap: list[Row] = [("", "", "", "")] if met and others else []
    # The column names are a data row: tabulate pads a header row two characters wider.
    rows = [("kind", "action", "plan", "expected"), *met, *gap, *others]
    lines = [header, "", *tabulate(rows, tablefmt="plain", disable_numparse=True).splitlines(), "", "plans:"]
    lines += [f"  {label}: {text}" for text, label in plans.items()]
    lines += ["", "why:"]
    lines += [f"  {kind}: {reason}" for kind, reason in why]
    lines.append("  (other kinds: not expected here, handled by the same rules if an engine raises them)")
    if overridden:
        lines += ["", "* overridden by the user"]
    return "\n".join(line.rstrip() for line in lines)
