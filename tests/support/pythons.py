"""The CPython interpreters of every version sidecar reads, for tests that run targets under each.

3.8 to 3.13 come from pyenv (the newest patch release of each); 3.14 and 3.15 from Debian's
packages, which tests/pythons.sh (``make pythons``, run by CI) unpacks into .cache/pythons.
``frameworks_site`` gives each of them aiohttp, Tornado and uvloop, for the demo services.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.procs import ROOT

VERSIONS = ("3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "3.14", "3.15")
PYENV_VERSIONS = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
CACHE = ROOT / ".cache" / "pythons"
SITES = ROOT / ".cache" / "sites"

#: Parametrizes a test over the versions: ``@each_version`` then ``python = interpreter(version)``.
each_version = pytest.mark.parametrize("version", VERSIONS)
#: The versions sidecar's own walker reads (3.11+); py-spy reads the others.
WALKED = [v for v in VERSIONS if tuple(map(int, v.split("."))) >= (3, 11)]


def _pyenv() -> dict[str, Path]:
    newest: dict[str, tuple[int, Path]] = {}
    if not PYENV_VERSIONS.is_dir():
        return {}
    for folder in PYENV_VERSIONS.iterdir():
        match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", folder.name)
        if not match:
            continue
        version = f"{match[1]}.{match[2]}"
        python = folder / "bin" / f"python{version}"
        patch = int(match[3])
        if python.is_file() and (version not in newest or newest[version][0] < patch):
            newest[version] = (patch, python)
    return {version: python for version, (_patch, python) in newest.items()}


def _cache() -> dict[str, Path]:
    found = {}
    for version in VERSIONS:
        folder = CACHE / version
        python = folder / "root" / "usr" / "bin" / f"python{version}-patched"
        if (folder / "ready").is_file() and python.is_file():
            found[version] = python
    return found


def find_pythons() -> dict[str, Path]:
    """``{"3.8": Path, ..., "3.15": Path}`` for the versions found on this machine."""
    found = {**_cache(), **_pyenv()}
    return {version: found[version] for version in VERSIONS if version in found}


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def interpreter(version: str) -> Path:
    """The interpreter of ``version``. Without it the test fails in CI (``CI=true``), where
    every version must be there, and is skipped elsewhere, with the reason either way."""
    python = find_pythons().get(version)
    if python is not None:
        return python
    where = (
        "run tests/pythons.sh (make pythons)"
        if version in ("3.14", "3.15")
        else f"install it with pyenv ({PYENV_VERSIONS})"
    )
    reason = f"no Python {version} on this machine: {where}"
    if in_ci():
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


#: What the demo services take from the runtime lock (requirements-demo.lock holds the rest).
_FROM_RUNTIME = ("idna", "typing_extensions", "uvloop")


def _pins() -> list[str]:
    """What the demo services need, and uvloop, at the locks' pins."""
    demo = (ROOT / "requirements-demo.lock").read_text().splitlines()
    runtime = (ROOT / "requirements.lock").read_text().splitlines()
    pins = [line for line in demo if line and not line.startswith("#")]
    return pins + [line for line in runtime if line.split("==")[0] in _FROM_RUNTIME]


def frameworks_site(version: str) -> Path:
    """A folder with aiohttp, Tornado and uvloop for Python ``version`` (for its
    ``PYTHONPATH``): the locks' pins, as wheels from PyPI for that version, installed into
    .cache/sites/VERSION the first time and kept."""
    site = SITES / version
    if (site / "ready").is_file():
        return site
    SITES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=SITES) as tmp:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "--no-deps", "--only-binary=:all:", "--implementation", "cp",
             "--python-version", version, "--target", tmp, *_pins()],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            pytest.fail(f"aiohttp and Tornado for Python {version}: {done.stderr.strip()}")
        shutil.rmtree(site, ignore_errors=True)
        Path(tmp).rename(site)
        (site / "ready").write_text(" ".join(_pins()) + "\n")
        Path(tmp).mkdir()  # for the context's own clean-up
    return site
