"""The lock files: the runtime lock is exactly what the package needs, pinned as the development
lock pins it, and the development lock holds every dependency of what it pins; the demo lock
(the demo image's) is exactly what the demo services need on top of the runtime lock.

Dependencies are read from the metadata of the distributions installed here (``make install``
installs both lock files), so a dependency added to pyproject.toml or pulled in by an upgrade
and not locked fails here.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "requirements.lock"
DEV = ROOT / "requirements-dev.lock"
DEMO = ROOT / "requirements-demo.lock"
#: What the demo services (targets/, the demo image) import beyond the package's dependencies.
DEMO_ROOTS = {"aiohttp", "tornado"}
#: The installer itself: every virtualenv has it; lock files leave it out.
INSTALLER = {"pip", "setuptools"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        assert match, f"{path.name}:{number}: not a pin (NAME==VERSION): {raw!r}"
        name = canonical(match[1])
        assert name not in out, f"{path.name}:{number}: {match[1]} pinned twice"
        out[name] = match[2]
    return out


def requirements_of(
    name: str, extras: frozenset[str] = frozenset()
) -> set[tuple[str, frozenset[str]]]:
    """What an installed distribution requires, on this platform, with the ``extras`` asked of
    it (pip installs an extra's requirements too: textual asks for ``markdown-it-py[linkify]``):
    (name, the extras asked of it) each."""
    found = set()
    for text in importlib.metadata.distribution(name).requires or []:
        req = Requirement(text)
        if req.marker is None or any(
            req.marker.evaluate({"extra": extra}) for extra in ("", *extras)
        ):
            found.add((canonical(req.name), frozenset(req.extras)))
    return {(dep, asked) for dep, asked in found if dep not in INSTALLER}


def closure(roots: set[str]) -> set[str]:
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(root, frozenset[str]()) for root in roots]
    while todo:
        item = todo.pop()
        if item not in seen:
            seen.add(item)
            todo += requirements_of(*item)
    return {name for name, _ in seen}


def test_runtime_lock_is_the_closure_of_the_package_dependencies() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    roots = {canonical(Requirement(text).name) for text in project["dependencies"]}
    needed = closure(roots)
    locked = set(pins(RUNTIME))
    assert not needed - locked, f"requirements.lock lacks {sorted(needed - locked)}"
    assert not locked - needed, (
        f"requirements.lock has what nothing needs: {sorted(locked - needed)}"
    )


def test_runtime_lock_is_part_of_the_dev_lock_at_the_same_pins() -> None:
    runtime, dev = pins(RUNTIME), pins(DEV)
    assert not set(runtime) - set(dev), (
        f"missing in requirements-dev.lock: {set(runtime) - set(dev)}"
    )
    differ = {name: (v, dev[name]) for name, v in runtime.items() if dev[name] != v}
    assert not differ, f"pinned differently (runtime, dev): {differ}"


def test_dev_lock_is_closed_and_installed_as_pinned() -> None:
    dev = pins(DEV)
    for name, version in dev.items():
        installed = importlib.metadata.version(name)
        assert installed == version, f"{name} {installed} installed, {version} locked"
    missing = closure(set(dev)) - set(dev)
    assert not missing, f"requirements-dev.lock lacks dependencies {sorted(missing)}"


def test_demo_lock_is_what_the_demo_services_add_to_the_runtime_lock() -> None:
    runtime, demo, dev = pins(RUNTIME), pins(DEMO), pins(DEV)
    assert not set(demo) & set(runtime), "requirements-demo.lock repeats requirements.lock"
    needed = closure(DEMO_ROOTS) - set(runtime)
    assert not needed - set(demo), f"requirements-demo.lock lacks {sorted(needed - set(demo))}"
    assert not set(demo) - needed, (
        f"requirements-demo.lock has what nothing needs: {sorted(set(demo) - needed)}"
    )
    differ = {name: (v, dev.get(name)) for name, v in demo.items() if dev.get(name) != v}
    assert not differ, f"pinned differently (demo, dev): {differ}"
