"""Fixtures: processes and load that never outlive the test that started them."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import faultkit, helpers
from tests.support.cgroups import limited  # noqa: F401  (a fixture: a cgroup with a CPU quota)
from tests.support.helpers import NO_TARGET, REPORTS, LoadDriver, Serve, Servers, Spawner


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--shard",
        metavar="I/N",
        help="run the I-th of N interleaved parts of the tests collected (make test-fast runs "
        "the unit tier as N such processes at once)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shard = config.getoption("--shard")
    if not shard:
        return
    index, count = (int(part) for part in shard.split("/"))
    if not 1 <= index <= count:
        raise pytest.UsageError(f"--shard {shard}: I must be between 1 and N")
    others = [item for n, item in enumerate(items) if n % count != index - 1]
    config.hook.pytest_deselected(items=others)
    items[:] = [item for n, item in enumerate(items) if n % count == index - 1]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A ``sidecar serve`` a test started itself never outlives it, even when the test fails
    before it stops it (servers of fixtures live as long as their fixture)."""
    before = len(helpers.STARTED)
    try:
        return (yield)
    finally:
        for server in helpers.STARTED[before:]:
            server.kill()
        del helpers.STARTED[before:]


@pytest.fixture
def spawn() -> Iterator[Spawner]:
    with contextlib.closing(Spawner()) as spawner:
        yield spawner


@pytest.fixture
def load() -> Iterator[LoadDriver]:
    with contextlib.closing(LoadDriver()) as driver:
        yield driver


@pytest.fixture
def sidecars() -> Iterator[Servers]:
    """Real `sidecar serve` processes for the fault suite, stopped when the test ends."""
    with contextlib.closing(Servers()) as started:
        yield started


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Serve]]:
    """Starts ``sidecar serve`` with 1 s windows, by default on ``tmp_path/sidecar.db``; none
    outlives the test."""

    with contextlib.closing(Servers()) as started:

        def start(
            *args: str,
            pids: tuple[int, ...] = (),
            db: Path | None = None,
            token: str | None = None,
            env: dict[str, str] | None = None,
        ) -> Serve:
            """Samples only the given PIDs (or what ``--match`` in args selects)."""
            selection = [arg for pid in pids for arg in ("--pid", str(pid))]
            if not selection and "--match" not in args:
                selection = list(NO_TARGET)  # nothing of this machine's other processes
            db = db or tmp_path / "sidecar.db"
            return started(db, "--window", "1", *selection, *args, token=token, env=env)

        yield start


@pytest.fixture(scope="session", autouse=True)
def _reports_dir() -> None:
    REPORTS.mkdir(parents=True, exist_ok=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The fault suite's summary line, when it ran (the whole report: tests/reports/faults.md)."""
    if not faultkit.RECORDED:
        return
    lines = faultkit.SUMMARY.read_text().splitlines()
    headline = next((line.strip("*") for line in lines if line.startswith("**")), "")
    terminalreporter.write_sep("-", "fault suite")
    terminalreporter.write_line(f"{headline} (tests/reports/faults.md)")
