"""YAML for workload files, read strictly: a duplicate key or a runaway document is an error.

PyYAML's ``safe_load`` keeps the last of two equal keys, so a pasted ``count:`` line silently
changes an experiment; it composes nesting recursively, so a deep document ends in a
``RecursionError``; and it expands aliases, so a few lines can stand for billions of values.
This loader names the duplicate key and its line, and bounds nesting and the expanded size.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

#: Nesting deeper than this is no workload (a real one nests 5 levels); well under Python's
#: recursion limit, which PyYAML's composer would otherwise hit with a traceback.
MAX_NESTING = 32
#: Values in the document with every alias expanded: 100 tables x 1,000 partition keys fit.
MAX_NODES = 200_000
_MERGE_TAG = "tag:yaml.org,2002:merge"


class StrictYamlError(yaml.YAMLError):
    """Valid YAML that a workload file must not be; the message names the line."""


class _StrictLoader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                line = self.peek_event().start_mark.line + 1  # type: ignore[no-untyped-call]
                raise StrictYamlError(f"nested deeper than {MAX_NESTING} levels (line {line})")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:  # ``<<: *defaults``: later keys override on purpose
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # PyYAML's own error ("found unhashable key") follows
            line = key_node.start_mark.line + 1
            if key in first_line:
                raise StrictYamlError(f"duplicate key {key!r} on line {line} (first on line {first_line[key]})")
            first_line[key] = line
        return super().construct_mapping(node, deep)


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_expanded(root: Node) -> None:
    """Size and depth with aliases expanded, counted without expanding (a node graph walk)."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            kids = _children(node)
            size[key] = min(1 + sum(size[id(k)] for k in kids), MAX_NODES + 1)
            depth[key] = min(1 + max((depth[id(k)] for k in kids), default=0), MAX_NESTING + 1)
            continue
        if key in size:
            continue
        if key in open_nodes:
            raise StrictYamlError(f"an alias refers to a value it is inside of (line {node.start_mark.line + 1})")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((kid, False) for kid in _children(node) if id(kid) not in size)
    if size[id(root)] > MAX_NODES:
        raise StrictYamlError(f"more than {MAX_NODES} values once aliases are expanded")
    if depth[id(root)] > MAX_NESTING:
        raise StrictYamlError(f"nested deeper than {MAX_NESTING} levels once aliases are expanded")


def load(text: str) -> Any:
    """The one document in ``text``; ``StrictYamlError`` or PyYAML's own error if it is no good."""
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expanded(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def one_line(error: yaml.YAMLError) -> str:
    """PyYAML's multi-line message as one line: the problem and where it is."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem:
        mark = error.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        return f"{error.problem}{where}"
    return " ".join(str(error).split())
