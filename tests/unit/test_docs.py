"""The documentation against the code, without starting anything.

README.md and docs/*.md: every relative link points at a file (and heading) that exists; every
``sidecar …`` command line of a console or shell block is accepted by the real CLI parser; each
option docs/cli.md names under a command exists in that command's parser, and each of the
parser's options is named there; the routes of docs/http-api.md are exactly the app's.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

# What the docs are checked against: the only two imports of the package here.
from sidecar.cli import build_parser
from sidecar.serve.api import OTHER_METHODS, create_app

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CLI_DOC = ROOT / "docs" / "cli.md"
API_DOC = ROOT / "docs" / "http-api.md"

FENCE = re.compile(r"^(```+|~~~+)\s*([\w-]*)[^\n]*\n(.*?)^\1\s*$", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SHELL_LANGUAGES = {"console", "shell-session", "shell", "sh", "bash"}
#: Where a command line stops being sidecar's: pipes, lists, redirections.
SHELL_OPERATORS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "2>&1"}


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _without_code_blocks(text: str) -> str:
    """The text with fenced blocks blanked (their lines kept, for line numbers)."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def _without_code(text: str) -> str:
    """The text with fenced blocks and inline code blanked."""
    return re.sub(r"`[^`\n]*`", "", _without_code_blocks(text))


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"`|\*\*|__", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: Counter[str] = Counter()
    anchors = set()
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    for match in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.MULTILINE):
        slug = _slug(match[1])
        anchors.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return anchors


def _links() -> list[tuple[Path, int, str]]:
    found = []
    for doc in DOCS:
        text = _without_code(doc.read_text(encoding="utf-8"))
        for match in LINK.finditer(text):
            target = match[1]
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            found.append((doc, text.count("\n", 0, match.start()) + 1, target))
    return found


def test_relative_links_point_at_existing_files_and_headings() -> None:
    links = _links()
    assert len(links) > 20, "the link scan found almost nothing: is the pattern broken?"
    broken = []
    for doc, line, target in links:
        path_part, _, anchor = target.partition("#")
        path = (doc.parent / path_part).resolve() if path_part else doc
        where = f"{_rel(doc)}:{line}: {target}"
        if not path.exists():
            broken.append(f"{where}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{where}: no heading with that anchor in {_rel(path)}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def _command_lines() -> list[tuple[str, str]]:
    """(where, command line) of every command line in a console or shell block."""
    lines = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in FENCE.finditer(text):
            if block[2] not in SHELL_LANGUAGES:
                continue
            first = text.count("\n", 0, block.start(3)) + 1
            prompted = block[2] in {"console", "shell-session"}
            pending, start = "", 0
            for number, raw in enumerate(block[3].splitlines(), start=first):
                if pending:
                    line = pending + " " + raw.strip()
                elif prompted:
                    if not raw.startswith("$ "):
                        continue  # output
                    line, start = raw[2:], number
                else:
                    line, start = raw, number
                if line.rstrip().endswith("\\"):
                    pending = line.rstrip()[:-1]
                    continue
                pending = ""
                lines.append((f"{_rel(doc)}:{start}", line))
    return lines


def _sidecar_argv(line: str) -> list[str] | None:
    """The arguments of a ``sidecar`` command line; None for any other program."""
    words = shlex.split(line, comments=True)
    for index, word in enumerate(words):
        if word in SHELL_OPERATORS:
            words = words[:index]
            break
    if not words or words[0] != "sidecar":
        return None
    return words[1:]


SIDECAR_LINES = [
    (where, line) for where, line in _command_lines() if _sidecar_argv(line) is not None
]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("the CLI parser has no subcommands")


@pytest.mark.parametrize(("where", "line"), SIDECAR_LINES, ids=[w for w, _ in SIDECAR_LINES])
def test_documented_command_line_parses(where: str, line: str) -> None:
    argv = _sidecar_argv(line)
    assert argv is not None
    try:
        build_parser().parse_args(argv)
    except SystemExit as exit_:
        pytest.fail(f"{where}: the CLI refuses `{line}` (exit {exit_.code}); see stderr above")


def test_readme_shows_every_command() -> None:
    """One example per command on the front page, and none of a command that does not exist."""
    shown = {
        argv[0]
        for where, line in SIDECAR_LINES
        if where.startswith("README.md:") and (argv := _sidecar_argv(line))
    }
    assert shown == set(_subparsers(build_parser()))


def _cli_sections() -> dict[str | None, str]:
    """docs/cli.md's text per command (``## sidecar CMD``); None: before the first."""
    text = _without_code_blocks(CLI_DOC.read_text(encoding="utf-8"))
    sections: dict[str | None, str] = {}
    current: str | None = None
    for line in text.splitlines():
        heading = re.match(r"^##\s+`?sidecar\s+([\w-]+)`?\s*$", line)
        if heading:
            current = heading[1]
        elif re.match(r"^##\s", line):
            current = None
        sections[current] = sections.get(current, "") + line + "\n"
    return sections


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for flag in parser._option_string_actions if flag not in {"-h", "--help"}}


def test_options_in_cli_doc_exist_and_every_option_is_documented() -> None:
    parser = build_parser()
    commands = _subparsers(parser)
    sections = _cli_sections()
    assert set(commands) <= set(sections), "docs/cli.md needs a `## sidecar CMD` per command"
    problems = []
    for command, text in sections.items():
        real = _options(commands[command]) if command else _options(parser)
        named = set(re.findall(r"`(--?[A-Za-z][\w-]*)", text))
        title = f"sidecar {command}" if command else "sidecar"
        problems += [f"{title}: `{flag}` is not an option" for flag in sorted(named - real)]
        if command:
            problems += [f"{title}: {flag} is not documented" for flag in sorted(real - named)]
    assert not problems, "docs/cli.md against the parsers:\n" + "\n".join(problems)


def _app_routes() -> set[str]:
    # create_app registers routes only; a stub Service with no token and no reader suffices
    # because no request is served.
    app = create_app(SimpleNamespace(config=SimpleNamespace(token=None), reader=None))  # type: ignore[arg-type]
    routes = set()
    for route in app.routes:
        path = getattr(route, "path", None)
        if path is None:
            continue
        methods = getattr(route, "methods", None) or {"GET"}  # a mount (the UI) answers GET
        # every other method of a path is answered 405 (the error table says so), not served
        served = [m for m in methods if m not in OTHER_METHODS]
        routes |= {f"{method} {path or '/'}" for method in served}
    return routes


def _documented_routes() -> set[str]:
    text = API_DOC.read_text(encoding="utf-8")
    return {
        f"{m[1]} {m[2]}"
        for m in re.finditer(
            r"^\|\s*`(GET|POST|PUT|PATCH|DELETE)\s+(/[^`?\s]*)[^`]*`\s*\|", text, re.MULTILINE
        )
    }


def test_http_api_doc_lists_exactly_the_apps_routes() -> None:
    documented, real = _documented_routes(), _app_routes()
    assert documented == real, (
        f"in docs/http-api.md, not in the app: {sorted(documented - real)}; "
        f"in the app, not in docs/http-api.md: {sorted(real - documented)}"
    )
