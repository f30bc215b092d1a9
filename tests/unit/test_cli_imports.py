"""What the command line imports: the parser of every command (``sidecar --help``) imports
none of the modules that do a command's work, ``sidecar NAME ...`` builds NAME's parser alone,
and each command imports what it needs when it runs, no more. No timing here: which modules a
fresh interpreter holds after the step (``benchmarks/cli.py`` measures the time).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pytest

from sidecar.cli import build_parser
from sidecar.commands import COMMANDS
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
    for command in COMMANDS:
        assert heavy_in(modules_after(tmp_path, command, "--help"), HEAVY) == [], command


def test_the_version_is_read_from_the_metadata_when_asked_for(tmp_path: Path) -> None:
    """``--version`` alone reads the distribution's metadata."""
    modules = modules_after(tmp_path, "--version")
    assert "importlib.metadata" in modules


def test_dump_imports_what_a_read_needs(tmp_path: Path) -> None:
    """``dump`` gets as far as reading the target (here one that does not exist) with the
    reader's modules only, and its own options: no other command's module."""
    modules = modules_after(tmp_path, "dump", "--pid", NO_PID)
    assert "sidecar.sample.dump" in modules
    assert heavy_in(modules, (*NOT_FOR_A_READ, "sidecar.sample.record")) == []
    others = [f"sidecar.commands.{name}" for name in COMMANDS if name != "dump"]
    assert [name for name in others if name in modules] == []


def test_a_mistaken_command_meets_every_command_s_parser(tmp_path: Path) -> None:
    """Where the first word names no command, the parser of all of them answers (it lists
    them): each command's module is imported."""
    modules = modules_after(tmp_path, "dumb", "--pid", NO_PID)
    assert [name for name in COMMANDS if f"sidecar.commands.{name}" not in modules] == []


def test_tasks_imports_what_a_read_needs(tmp_path: Path) -> None:
    modules = modules_after(tmp_path, "tasks", "--pid", NO_PID)
    assert "sidecar.sample.tasks" in modules
    assert heavy_in(modules, (*NOT_FOR_A_READ, "sidecar.sample.record")) == []


def test_stats_of_a_pid_imports_no_analysis_before_it_samples(tmp_path: Path) -> None:
    """``stats --pid`` reads the target (``describe``) with what attaching needs: the
    recording's modules come once the sampler samples, the analysis and the profile formats
    once the samples are in."""
    modules = modules_after(tmp_path, "stats", "--pid", NO_PID)
    assert "sidecar.discover" in modules
    assert heavy_in(modules, (*NOT_FOR_A_READ, "sidecar.sample.record")) == []


def test_stats_of_a_file_imports_the_formats(tmp_path: Path) -> None:
    """The other way round: a profile file needs the readers (a guard that can fail)."""
    modules = modules_after(tmp_path, "stats", "/nonexistent/profile.folded")
    assert "sidecar.formats.inputs" in modules


def test_the_format_names_the_options_offer_are_the_formats_table() -> None:
    assert tuple(FORMATS) == NAMES


def test_a_command_s_parser_alone_reads_as_among_all(capsys: pytest.CaptureFixture[str]) -> None:
    """``sidecar NAME ...`` is parsed by NAME's parser alone: its help, its defaults and what
    it reads of a command line are those of the parser of every command."""

    def helped(parser: argparse.ArgumentParser, name: str) -> str:
        with pytest.raises(SystemExit):
            parser.parse_args([name, "--help"])
        return capsys.readouterr().out

    for name in COMMANDS:
        assert helped(build_parser(name), name) == helped(build_parser(), name), name
    for argv in (["dump", "--pid", "7", "--json"], ["stats", "-p", "7", "-d", "3"],
                 ["record", "--pid", "7", "-f", "folded", "-o", "x.txt"], ["top", "-p", "7"],
                 ["serve", "--pid", "7", "--pid", "8"], ["diff", "a.svg", "b.svg"]):  # fmt: skip
        assert build_parser(argv[0]).parse_args(argv) == build_parser().parse_args(argv), argv
