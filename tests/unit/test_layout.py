"""The package's stages import one way: a stage uses the stages before it, never one after.

The order is the data flow of the design: the rules, the Profile, the formats that read and
write it, classification, discovery, sampling, the store, analysis, the service, the CLI. A
module of a later stage may import any earlier one; an import the other way (or a cycle
between modules) fails here with the offending edges named.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.graphs import cycles

PACKAGE = Path(__file__).resolve().parents[2] / "sidecar"

#: Stages in data-flow order; a module belongs to the first stage whose prefix it has.
STAGES: tuple[tuple[str, ...], ...] = (
    ("sidecar", "sidecar._native", "sidecar.access", "sidecar.errors", "sidecar.defaults"),
    ("sidecar.rules",),
    ("sidecar.profile",),
    ("sidecar.formats",),
    ("sidecar.classify",),
    ("sidecar.discover",),
    ("sidecar.sample",),
    ("sidecar.store",),
    ("sidecar.analyze",),
    ("sidecar.serve",),
    ("sidecar.output", "sidecar.commands", "sidecar.cli", "sidecar.__main__"),
)


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts).removesuffix(".__init__")
        found[name] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules ``path`` imports (``from sidecar.x import y`` names the module
    ``sidecar.x.y`` when that is a module, else ``sidecar.x``), type-checking imports too."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "sidecar":
                continue
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                out.add(child if child in known else node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "sidecar")
    return out


def stage_of(module: str) -> int:
    best = (-1, -1)  # (prefix length, stage)
    for number, prefixes in enumerate(STAGES):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                best = max(best, (len(prefix), number))
    assert best[1] >= 0, f"{module} belongs to no stage: add it to STAGES"
    return best[1]


def test_every_module_has_a_stage() -> None:
    for module in modules():
        stage_of(module)


def test_stages_import_one_way() -> None:
    known = modules()
    backward = []
    for module, path in sorted(known.items()):
        for target in sorted(imports(path, known)):
            if stage_of(target) > stage_of(module):
                backward.append(f"{module} -> {target}")
    assert backward == [], "imports against the data flow:\n" + "\n".join(backward)


def test_no_import_cycles_between_modules() -> None:
    known = modules()
    edges = {m: imports(p, known) & known.keys() for m, p in known.items()}
    # a package imports its children to re-export them; that is not a cycle of stages
    edges = {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in edges.items()}
    found = cycles(edges)
    assert found == [], "import cycles: " + "; ".join(" -> ".join(c) for c in found)
