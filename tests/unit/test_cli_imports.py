"""What the command line imports: building the parser (every command's options, ``sidecar
--help``) imports none of the modules that do a command's work, and each command imports what
it needs when it runs, no more. No timing here: which modules are in ``sys.modules`` of a fresh
interpreter after the step (``benchmarks/cli.py`` measures the time).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from sidecar.formats import NAMES
from sidecar.formats.export import FORMATS
from tests.support.procs import PYTHON, ROOT

#: What a command's options never need: the service and its web stack (uvicorn, starlette,
#: fastapi, prometheus_client), the store (sqlite3), top's terminal UI (textual, rich), schema
#: validation, the distribution's metadata (``--version`` alone), the stages that sample,
#: classify, analyze and read or write profiles, and the standard library's heavier parts.
HEAVY = (
    "uvicorn", "starlette", "fastapi", "prometheus_client", "jsonschema", "pydantic",
    "textual", "rich", "sqlite3", "asyncio", "importlib.metadata", "email", "http", "xml",
    "ssl", "urllib.request", "concurrent.futures", "subprocess", "logging", "tempfile",
    "sidecar.store", "sidecar.serve", "sidecar.analyze", "sidecar.sample", "sidecar.classify",
    "sidecar.discover", "sidecar.rules", "sidecar.profile", "sidecar.formats.export",
    "sidecar.formats.inputs", "sidecar.formats.svg", "sidecar.commands.top_app",
)  # fmt: skip

#: Never needed by ``dump`` and ``tasks``, nor by ``stats --pid`` before it samples.
NOT_FOR_A_READ = (
    "uvicorn", "starlette", "fastapi", "prometheus_client", "textual", "rich", "sqlite3",
    "asyncio", "importlib.metadata", "email", "http", "xml", "concurrent.futures",
    "sidecar.store", "sidecar.serve", "sidecar.analyze", "sidecar.formats.export",
    "sidecar.formats.inputs", "sidecar.commands.top_app",
)  # fmt: skip

#: A PID no process has: the command fails where it first reads the target, after the
#: imports that precede that read.
NO_PID = "999999999"


def modules_after(tmp_path: Path, *argv: str) -> set[str]:
    """The modules a fresh interpreter holds once ``sidecar ARGV`` has run in it (from the
    checkout's root, as ``python -m sidecar`` runs it), however it ended."""
    listing = tmp_path / "modules.json"
    code = (
        "import atexit, json, sys\n"
        f"write = lambda: open({str(listing)!r}, 'w').write(json.dumps(list(sys.modules)))\n"
        "atexit.register(write)\n"
        "from sidecar.cli import main\n"
        f"sys.exit(main({list(argv)!r}))\n"
    )
    done = subprocess.run([PYTHON, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert listing.exists(), done.stderr
    modules: list[str] = json.loads(listing.read_text())
    return set(modules)


def heavy_in(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """The ``names`` (packages or modules) of which ``modules`` holds any."""
    return [n for n in names if any(m == n or m.startswith(n + ".") for m in modules)]


def test_the_parser_imports_no_command_s_work(tmp_path: Path) -> None:
    """Every command's options (the whole parser), ``--help`` printed: nothing heavy."""
    modules = modules_after(tmp_path, "--help")
    assert "sidecar.commands.dump" in modules and "sidecar.commands.serve" in modules
    assert heavy_in(modules, HEAVY) == []


def test_a_command_s_help_imports_no_command_s_work(tmp_path: Path) -> None:
    for command in ("record", "stats", "serve", "top", "dump", "diff"):
        assert heavy_in(modules_after(tmp_path, command, "--help"), HEAVY) == [], command


def test_the_version_is_read_from_the_metadata_when_asked_for(tmp_path: Path) -> None:
    """``--version`` alone reads the distribution's metadata."""
    modules = modules_after(tmp_path, "--version")
    assert "importlib.metadata" in modules


def test_dump_imports_what_a_read_needs(tmp_path: Path) -> None:
    """``dump`` gets as far as reading the target (here one that does not exist) with the
    reader's modules only."""
    modules = modules_after(tmp_path, "dump", "--pid", NO_PID)
    assert "sidecar.sample.dump" in modules
    assert heavy_in(modules, (*NOT_FOR_A_READ, "sidecar.sample.record")) == []


def test_tasks_imports_what_a_read_needs(tmp_path: Path) -> None:
    modules = modules_after(tmp_path, "tasks", "--pid", NO_PID)
    assert "sidecar.sample.tasks" in modules
    assert heavy_in(modules, (*NOT_FOR_A_READ, "sidecar.sample.record")) == []


def test_stats_of_a_pid_imports_no_analysis_before_it_samples(tmp_path: Path) -> None:
    """``stats --pid`` reads the target (``describe``) with what attaching needs: the analysis
    and the profile formats come once the samples are in."""
    modules = modules_after(tmp_path, "stats", "--pid", NO_PID)
    assert "sidecar.discover" in modules
    assert heavy_in(modules, NOT_FOR_A_READ) == []


def test_stats_of_a_file_imports_the_formats(tmp_path: Path) -> None:
    """The other way round: a profile file needs the readers (a guard that can fail)."""
    modules = modules_after(tmp_path, "stats", "/nonexistent/profile.folded")
    assert "sidecar.formats.inputs" in modules


def test_the_format_names_the_options_offer_are_the_formats_table() -> None:
    assert tuple(FORMATS) == NAMES
