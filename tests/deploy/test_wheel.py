"""The wheel as a user installs it: ``maturin build``, then pip into a fresh virtualenv in a
temporary directory outside the checkout, with the runtime lock only. The installed ``sidecar``
reports its version, serves the UI shipped inside the package, and samples a real target."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path

import pytest

from tests.support.helpers import ROOT, Spawner, free_port, wait_until

pytestmark = pytest.mark.slow
MATURIN = Path(sys.executable).with_name("maturin")


def run(*argv: str | Path, cwd: Path, timeout: float = 600) -> str:
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{argv}: {done.stderr[-2000:]}"
    return done.stdout


def fetch(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.headers.get("content-type", ""), response.read()


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin directory of a fresh virtualenv with the wheel and the runtime lock."""
    home = tmp_path_factory.mktemp("user")
    assert not home.resolve().is_relative_to(ROOT)
    wheels = home / "wheels"
    run(MATURIN, "build", "--release", "--quiet", "--out", wheels, cwd=ROOT)
    (wheel,) = wheels.glob("sidecar-*.whl")
    run(sys.base_prefix + "/bin/python3", "-m", "venv", home / "venv", cwd=home)
    pip = home / "venv" / "bin" / "pip"
    run(pip, "install", "-q", "-r", ROOT / "requirements.lock", wheel, cwd=home)
    return home / "venv" / "bin"


def test_installed_wheel_is_the_package_alone(installed: Path) -> None:
    home = installed.parent.parent
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert run(installed / "sidecar", "--version", cwd=home).strip() == f"sidecar {version}"
    probe = (
        "import importlib.util, json, sidecar; "
        "print(json.dumps([sidecar.__file__, importlib.util.find_spec('targets') is None]))"
    )
    where, no_targets = json.loads(run(installed / "python", "-c", probe, cwd=home))
    assert Path(where).is_relative_to(home), where  # the installed copy, not the checkout
    assert no_targets, "the demo targets must not be a top-level package of the wheel"
    # only what the runtime lock holds: no test, lint or build tool came along
    listed = run(installed / "pip", "list", "--format=freeze", cwd=home).lower()
    for tool in ("pytest", "mypy", "ruff", "maturin", "playwright", "aiohttp", "tornado"):
        assert f"\n{tool}==" not in "\n" + listed, tool


def test_installed_wheel_serves_the_ui_and_samples_a_target(
    installed: Path, spawn: Spawner, tmp_path: Path
) -> None:
    target = spawn.target("aiohttp_app", "--port", "0")
    folded = tmp_path / "out.folded"
    run(
        installed / "sidecar",
        "record",
        "--pid",
        str(target.pid),
        "--duration",
        "2",
        "--format",
        "folded",
        "-o",
        folded,
        cwd=tmp_path,
    )
    lines = folded.read_text().splitlines()
    assert lines and any("aiohttp_app.py" in line for line in lines), lines[:5]

    port = free_port()
    serve = subprocess.Popen(
        [
            str(installed / "sidecar"),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--db",
            str(tmp_path / "sidecar.db"),
            "--window",
            "1",
            "--pid",
            str(target.pid),
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    spawn.procs.append(serve)  # type: ignore[arg-type]
    base = f"http://127.0.0.1:{port}"

    def sampled() -> bool:
        try:
            rows = json.loads(fetch(base + "/api/targets")[2])
        except OSError:
            return False
        return any(row["pid"] == target.pid and row["samples"] > 0 for row in rows)

    assert wait_until(sampled, timeout=30), "the installed sidecar stored no samples"
    shipped = ROOT / "sidecar" / "serve" / "web"
    status, kind, body = fetch(base + "/")
    assert status == 200 and kind.startswith("text/html")
    assert body == (shipped / "index.html").read_bytes()
    status, kind, body = fetch(base + "/js/main.js")
    assert status == 200 and body == (shipped / "js" / "main.js").read_bytes()
