"""Import graphs, as the layering tests read them (tests/unit/test_layout.py for the Python
package, tests/unit/test_native_layout.py for native/src): the cycles a walk meets."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

Node = TypeVar("Node", bound=Hashable)


def cycles(graph: Mapping[Node, set[Node]], name: Callable[[Node], str] = str) -> list[list[str]]:
    """The cycles a walk of ``graph`` meets (in sorted order of its nodes), each as the names of
    the nodes along it, first and last the same; an edge of a node to itself is none."""
    state: dict[Node, int] = {}  # 1 on the path, 2 done
    found: list[list[str]] = []

    def visit(node: Node, path: list[Node]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, set()) - {node}):  # type: ignore[type-var]
            if state.get(nxt) == 1:
                found.append([name(m) for m in [*path[path.index(nxt) :], nxt]])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):  # type: ignore[type-var]
        if node not in state:
            visit(node, [node])
    return found
