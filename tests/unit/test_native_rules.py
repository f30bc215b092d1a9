"""The native core's own rules: its top-level modules depend on each other in one direction
(no cycle), the PyO3 boundary stays in one module, and the rules it shares with the Python side
(synthetic leaves, task leaves, the SVG reader's stand-ins) are the Python definitions.

The module graph is read from the source (``crate::`` and ``super::`` paths, comments
stripped): Rust accepts cycles between modules, so only this check keeps them out.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from sidecar import _native
from sidecar.formats.svg import PRUNED_FRAME, SEMICOLON_STANDIN
from sidecar.rules.frames import BLOCKED_LEAF, CPU_WAIT_LEAF, GIL_LEAF, IDLE_LEAF

# The Python definitions of the shared rules: imported here only, to check the native ones.
from sidecar.rules.loops import CALLBACK_RUNNERS, LOOP_ENTRIES, LOOP_PASSES, SELECTOR_WAITS
from sidecar.rules.tasks import TASK_LEAVES

#: native/src, found from here up (the test may live in a tier's folder of tests/)
SRC = next(
    parent / "native" / "src"
    for parent in Path(__file__).resolve().parents
    if (parent / "native" / "src").is_dir()
)

#: The intended direction, top to bottom: a module may use only modules of the layers below
#: its own (native/src/lib.rs says the same in words). `lib` is the crate root (lib.rs), which
#: registers the boundary.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"lib"}),
    frozenset({"python"}),
    frozenset({"formats", "sampler"}),
    frozenset({"tasks"}),
    frozenset({"walker"}),
    frozenset({"process"}),
    frozenset({"stack"}),
    frozenset({"rules", "budget"}),
)

#: The files that may hold the PyO3 attributes (#[pyfunction], #[pyclass], #[pymethods]), and
#: the folder and file that may use pyo3 at all.
BOUNDARY_FILES = {"python/sampler.rs", "python/formats.rs", "python/dump.rs"}
PYO3_ALLOWED = ("python/", "lib.rs")


def _strip_comments(text: str) -> str:
    """Rust source without its comments (line, doc and block comments)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _module_path(path: Path, src: Path) -> list[str]:
    """The module path of a source file: lib.rs is [], a/mod.rs is [a], a/b.rs is [a, b]."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts in (["lib"], ["main"]):
        return []
    if parts[-1] == "mod":
        parts.pop()
    return parts


def _group_heads(body: str) -> Iterator[str]:
    """The first segment of each path in a `{a::x, b::{y, z}, c}` group (the braces' inside)."""
    depth, start = 0, 0
    for index, char in enumerate(body + ","):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        elif char == "," and depth == 0:
            item = body[start:index].strip()
            start = index + 1
            head = re.match(r"(\w+)", item)
            if head and head.group(1) not in ("self", "super", "crate"):
                yield head.group(1)


def _group_at(text: str, open_brace: int) -> str:
    """The inside of the braces opening at `open_brace`."""
    depth = 0
    for index in range(open_brace, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return text[open_brace + 1 : index]
    return text[open_brace + 1 :]


def _inline_modules(code: str) -> list[tuple[int, int]]:
    """The spans of the inline modules of a file (`mod tests { ... }`)."""
    spans = []
    for match in re.finditer(r"\bmod\s+\w+\s*\{", code):
        open_brace = match.end() - 1
        spans.append((open_brace, open_brace + len(_group_at(code, open_brace)) + 1))
    return spans


def _crate_paths(text: str, module: list[str]) -> Iterator[str]:
    """The top-level module (or a name of the crate root) each path in `text` names when it
    leaves the file's own top-level module: `crate::x`, or `super::` enough times."""
    code = _strip_comments(text)
    inline = _inline_modules(code)
    for match in re.finditer(r"(?<![\w$])(crate::|(?:super::)+)", code):
        prefix, after = match.group(1), match.end()
        if prefix != "crate::":
            depth = len(module) + sum(start < match.start() < end for start, end in inline)
            if prefix.count("super::") < depth:
                continue  # stays inside the file's top-level module
        if code.startswith("{", after):
            yield from _group_heads(_group_at(code, after))
        else:
            head = re.match(r"\w+", code[after:])
            if head:
                yield head.group(0)


def module_graph(src: Path) -> dict[str, set[str]]:
    """Top-level module -> the top-level modules it uses, from every .rs file under `src`."""
    files = sorted(src.rglob("*.rs"))
    tops = {_module_path(path, src)[0] for path in files if _module_path(path, src)}
    graph: dict[str, set[str]] = {top: set() for top in tops | {"lib"}}
    for path in files:
        module = _module_path(path, src)
        own = module[0] if module else "lib"
        text = path.read_text(encoding="utf-8")
        heads = list(_crate_paths(text, module))
        if not module:  # the crate root names its modules without `crate::`
            heads += re.findall(r"(?<![\w:$])(\w+)::", _strip_comments(text))
        for head in heads:
            if not module and head not in tops:
                continue  # an outside crate's path (pyo3::...)
            target = head if head in tops else "lib"
            if target != own:
                graph[own].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a list of nodes (the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for succ in sorted(graph.get(node, ())):
            if state.get(succ) == 1:
                return [*path[path.index(succ) :], succ]
            if succ not in state:
                found = visit(succ)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_module_graph_is_read_from_the_source() -> None:
    graph = module_graph(SRC)
    # a few edges the code has: if none were found the parser would be broken, not the code
    assert "walker" in graph["tasks"], graph
    assert "tasks" in graph["sampler"], graph
    assert "process" in graph["walker"], graph
    assert "rules" in graph["formats"], graph


def test_the_top_level_modules_of_native_src_have_no_cycle() -> None:
    graph = module_graph(SRC)
    cycle = find_cycle(graph)
    assert cycle is None, "native/src has an import cycle: " + " -> ".join(cycle or [])


def test_every_top_level_module_uses_only_the_layers_below_it() -> None:
    graph = module_graph(SRC)
    layer_of = {module: index for index, layer in enumerate(LAYERS) for module in layer}
    unplaced = sorted(set(graph) - set(layer_of))
    assert not unplaced, f"place these modules of native/src in LAYERS: {unplaced}"
    upward = sorted(
        f"{module} -> {used}"
        for module, uses in graph.items()
        for used in uses
        if layer_of[used] <= layer_of[module]
    )
    assert not upward, f"uses against the direction of LAYERS: {upward}"


def test_a_cycle_is_found(tmp_path: Path) -> None:
    """The check can fail: a crate whose walker uses the sampler, which uses the walker."""
    (tmp_path / "walker").mkdir()
    (tmp_path / "sampler").mkdir()
    (tmp_path / "lib.rs").write_text("mod sampler;\nmod walker;\nmod process;\n")
    (tmp_path / "process.rs").write_text("pub fn read() {}\n")
    (tmp_path / "walker" / "mod.rs").write_text(
        "mod frames;\nuse crate::process::read;\n// crate::sampler in a comment is no use\n"
    )
    (tmp_path / "walker" / "frames.rs").write_text(
        "use crate::{process, sampler::windows::{Window, Stats}};\n"
    )
    (tmp_path / "sampler" / "mod.rs").write_text("pub mod windows;\nuse super::walker::Walker;\n")
    (tmp_path / "sampler" / "windows.rs").write_text("use super::super::process::read;\n")
    graph = module_graph(tmp_path)
    assert graph["walker"] == {"process", "sampler"}
    assert graph["sampler"] == {"walker", "process"}
    assert find_cycle(graph) in (
        ["sampler", "walker", "sampler"],
        ["walker", "sampler", "walker"],
    )
    (tmp_path / "walker" / "frames.rs").write_text("use crate::process;\n")
    assert find_cycle(module_graph(tmp_path)) is None


def test_the_pyo3_attributes_are_in_the_boundary_only() -> None:
    attributes = re.compile(r"#\[\s*(pyfunction|pyclass|pymethods)\b")
    holders = {
        path.relative_to(SRC).as_posix()
        for path in SRC.rglob("*.rs")
        if attributes.search(_strip_comments(path.read_text(encoding="utf-8")))
    }
    assert holders == BOUNDARY_FILES
    users = sorted(
        path.relative_to(SRC).as_posix()
        for path in SRC.rglob("*.rs")
        if re.search(r"\bpyo3\b", _strip_comments(path.read_text(encoding="utf-8")))
    )
    assert all(user.startswith(PYO3_ALLOWED) for user in users), users


def test_the_synthetic_leaves_are_the_python_ones() -> None:
    assert _native.IDLE_LEAF == IDLE_LEAF
    assert _native.BLOCKED_LEAF == BLOCKED_LEAF
    assert _native.GIL_LEAF == GIL_LEAF
    assert _native.CPU_WAIT_LEAF == CPU_WAIT_LEAF


def test_the_task_leaves_are_the_python_ones() -> None:
    assert tuple(_native.TASK_LEAVES) == tuple(TASK_LEAVES)


def test_the_svg_readers_stand_ins_are_the_python_ones() -> None:
    assert _native.PRUNED_FRAME == PRUNED_FRAME
    assert _native.SEMICOLON_STANDIN == SEMICOLON_STANDIN


def test_the_known_waits_are_data_and_the_selectors_one_is_an_idle_poll() -> None:
    waits = _native.KNOWN_WAITS
    assert waits, waits
    for function, how, text in waits:
        assert how in ("endswith", "contains"), waits
        assert function and text and "." not in function, waits
    # A thread in the selector's select is idle to the sampler (not on CPU) and to the
    # classifier (a loop thread's poll), or a loop's idle samples would read "blocked".
    selector = [(function, text) for function, how, text in waits if text == "selectors.py"]
    assert selector, waits
    assert set(selector) <= set(SELECTOR_WAITS), (selector, SELECTOR_WAITS)


def test_the_loop_tables_are_data_the_python_side_reads() -> None:
    """The sampler finds stalls with them, the classifier loop threads with the entries: one
    definition (native/src/rules.rs), read by sidecar.rules.loops."""
    for native, python in (
        (_native.LOOP_ENTRIES, LOOP_ENTRIES),
        (_native.CALLBACK_RUNNERS, CALLBACK_RUNNERS),
        (_native.LOOP_PASSES, LOOP_PASSES),
    ):
        assert native and tuple(map(tuple, native)) == python, (native, python)
        assert all(function and "." not in function for function, _ in python), python
    assert ("run_forever", "asyncio/base_events.py") in LOOP_ENTRIES
    assert ("run", "uvloop/__init__.py") in LOOP_ENTRIES
