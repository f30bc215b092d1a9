"""The native crate's modules take names one way: no cycle between the files of native/src.

Each file is a module (``native/src/tasks/chain.rs`` is ``crate::tasks::chain``, a ``mod.rs``
its folder's module, ``lib.rs`` the crate). A file's references to other modules are its
``crate::...``, ``super::...`` and ``self::...`` paths, in ``use`` declarations and in code
alike, each naming the longest module it reaches (``super::chain::RawTask`` from
``tasks/timers.rs`` names ``crate::tasks::chain``; ``super::Target`` names ``crate::tasks``).
As in the Python package's check (test_layout.py), a module's references to its own children
are not counted: a module declares and re-exports them. Any other cycle between files fails
here with its edges named. Read from the sources: no build, no process.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.graphs import cycles as find_cycles

SRC = Path(__file__).resolve().parents[2] / "native" / "src"

#: Comments, and string and char literals (raw ones too), which may hold paths that are no
#: references; lifetimes ('a) are not char literals.
NOISE = re.compile(
    r"//[^\n]*"
    r"|/\*.*?\*/"
    r'|r(#*)".*?"\1'
    r'|b?"(?:\\.|[^"\\])*"'
    r"|b?'(?:\\.|[^'\\])'"
    r"|b?'\\[^']{1,10}'",
    re.DOTALL,
)
#: What the scan of a file steps through: an inline module's opening, braces, and paths of at
#: least two parts (not `pub(super)`, nor `self.field`).
TOKEN = re.compile(
    r"\bmod\s+(?P<mod>[A-Za-z_]\w*)\s*\{"
    r"|(?P<open>\{)|(?P<close>\})"
    r"|(?<![\w:])(?P<path>(?:crate|super|self)(?:\s*::\s*(?:[A-Za-z_]\w*|\*))+)"
)
#: A `use` tree's braces after a path: `use super::{chain::RawTask, objects::{Kind, Types}};`.
GROUP = re.compile(r"\s*::\s*\{")


def modules() -> dict[tuple[str, ...], Path]:
    """Every file of native/src by its module path: ``("crate", "tasks", "chain")``."""
    found: dict[tuple[str, ...], Path] = {}
    for path in SRC.rglob("*.rs"):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[-1] in ("mod", "lib"):
            parts = parts[:-1]
        found[("crate", *parts)] = path
    return found


def strip(text: str) -> str:
    """The source without comments and literals, its lines and braces where they were."""
    return NOISE.sub(lambda m: "\n" * m.group().count("\n") + " ", text)


def group_items(text: str, start: int) -> list[str]:
    """The paths of a `use` tree's braces opening at ``text[start]``, nested ones flattened:
    ``{chain::RawTask, objects::{Kind, Types}, self}`` gives ``chain::RawTask``,
    ``objects::Kind``, ``objects::Types``, ``self``."""
    depth, current = 0, ""
    items: list[str] = []
    prefix = [""]
    for char in text[start:]:
        if char == "{":
            depth += 1
            if depth > 1:
                prefix.append(prefix[-1] + current.strip())
                current = ""
        elif char in ",}":
            if current.strip():
                items.append(prefix[-1] + current.strip())
            current = ""
            if char == "}":
                depth -= 1
                if depth == 0:
                    break
                prefix.pop()
        else:
            current += char
    return ["".join(item.split()) for item in items]


def resolve(
    segments: list[str], here: tuple[str, ...], known: dict[tuple[str, ...], Path]
) -> tuple[str, ...] | None:
    """The longest module of native/src that the path ``segments``, met in module ``here``
    (a file's module and the inline modules around the path), reaches; None if none."""
    if not segments:
        return None
    if segments[0] == "crate":
        at: tuple[str, ...] = ("crate",)
    elif segments[0] in ("super", "self"):
        at = here
    else:
        return None
    rest = segments if segments[0] == "super" else segments[1:]
    while rest and rest[0] in ("super", "self"):
        if rest[0] == "super":
            at = at[:-1]
        rest = rest[1:]
    path = at
    best = path if path in known else None
    for name in rest:
        if name in ("self", "*"):
            continue
        path = (*path, name)
        if path in known:
            best = path
    while best is None and len(at) > 1:  # a path inside an inline module: its file's
        at = at[:-1]
        best = at if at in known else None
    return best


def references(
    module: tuple[str, ...], path: Path, known: dict[tuple[str, ...], Path]
) -> set[tuple[str, ...]]:
    """The modules of native/src that the file of ``module`` names."""
    text = strip(path.read_text(encoding="utf-8"))
    out: set[tuple[str, ...]] = set()
    inline: list[tuple[str, int]] = []  # inline modules open around the scan, with their depth
    depth = 0
    for match in TOKEN.finditer(text):
        if match.group("mod"):
            depth += 1
            inline.append((match.group("mod"), depth))
        elif match.group("open"):
            depth += 1
        elif match.group("close"):
            if inline and inline[-1][1] == depth:
                inline.pop()
            depth -= 1
        else:
            here = (*module, *(name for name, _ in inline))
            segments = re.split(r"\s*::\s*", match.group("path"))
            group = GROUP.match(text, match.end())
            items = group_items(text, group.end() - 1) if group else [""]
            for item in items:
                target = resolve([*segments, *filter(None, item.split("::"))], here, known)
                if target:
                    out.add(target)
    return out - {module}


def edges() -> dict[tuple[str, ...], set[tuple[str, ...]]]:
    """Each module's references, less those to its own children."""
    known = modules()
    return {
        module: {t for t in references(module, path, known) if t[: len(module)] != module}
        for module, path in known.items()
    }


def cycles(graph: dict[tuple[str, ...], set[tuple[str, ...]]]) -> list[list[str]]:
    """The cycles a walk of ``graph`` meets, each as the modules along it (``a::b``)."""
    return find_cycles(graph, "::".join)


def test_references_are_read() -> None:
    """The scan finds the references it is meant to: a sibling through ``super::``, a parent's
    item, a module through ``crate::`` in code, a use tree's braces; not a test module's
    ``use super::*`` (its own file), nor a path in a comment."""
    graph = edges()
    assert ("crate", "walker") in graph[("crate", "tasks")]
    assert ("crate", "tasks") in graph[("crate", "tasks", "chain")]  # super::Target
    assert ("crate", "tasks", "layout") in graph[("crate", "tasks", "chain")]
    assert ("crate", "walker", "objects") in graph[("crate", "tasks")]
    assert ("crate", "process", "procfs") in graph[("crate", "sampler", "runner")]
    assert ("crate", "walker", "gil") in graph[("crate", "walker", "debug_offsets")]
    assert ("crate", "tasks") not in graph[("crate", "tasks", "layout")]  # only `use super::*;`
    # children do not count for their parent: the crate's root names every module
    assert graph[("crate",)] <= {m for m in modules() if len(m) == 2} | {("crate",)}
    assert not graph[("crate",)] & {m for m in modules() if m[:2] == ("crate", "walker")}


def test_a_cycle_is_named_by_its_edges() -> None:
    graph: dict[tuple[str, ...], set[tuple[str, ...]]] = {
        ("crate", "a"): {("crate", "b")},
        ("crate", "b"): {("crate", "c")},
        ("crate", "c"): {("crate", "a")},
        ("crate", "d"): {("crate", "a")},
    }
    assert cycles(graph) == [["crate::a", "crate::b", "crate::c", "crate::a"]]


def test_no_cycles_between_files() -> None:
    found = cycles(edges())
    assert found == [], "cycles between native/src files: " + "; ".join(
        " -> ".join(c) for c in found
    )
